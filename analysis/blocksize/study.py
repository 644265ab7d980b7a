"""The block-size study as one run record: ``run_study`` (theory, Monte Carlo and real weights over
scales × block sizes × σ, then crossovers, tables, figures and ``summary.json``), ``report_section``
(its Markdown for ``python -m analysis report``) and ``main`` (``python -m analysis.blocksize``).

The record is written with the training runs' record helpers (``records.run``: ``prepare``,
``append_metrics``, ``write_summary``, ``environment``), imported inside ``run_study`` only, so that
importing ``analysis`` (or ``analysis.blocksize``) never imports training code. Figures are drawn by
``analysis.plots`` and the report's tables by ``analysis.report.md_table``, both imported on use.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.blocksize.montecarlo import monte_carlo, torch_threads
from analysis.blocksize.theory import (
    DEFAULT_BLOCK_SIZES,
    DEFAULT_N,
    DEFAULT_SIGMAS,
    STUDY_SCALES,
    crossover_sigma,
    mse_terms,
    relative_mse,
    variant,
    worse_fraction,
)
from analysis.blocksize.weights import (
    MINILM_PACKAGE,
    RescaledWeights,
    WeightsUnavailable,
    load_minilm,
    weight_crossover,
    weight_errors,
)

CROSSOVER_PAIRS = ((4, 8), (8, 16), (16, 32), (32, 64), (64, 128), (128, 256))
TABLE = "blocksize.parquet"


@dataclass
class StudyConfig:
    """config.yaml of a block-size study run."""

    kind: str = "block_size_study"
    elem: str = "fp4_e2m1"
    sigmas: list[float] = dataclasses.field(default_factory=lambda: list(DEFAULT_SIGMAS))
    block_sizes: list[int] = dataclasses.field(default_factory=lambda: list(DEFAULT_BLOCK_SIZES))
    scales: list[str] = dataclasses.field(default_factory=lambda: list(STUDY_SCALES))
    n_samples: int = DEFAULT_N
    seed: int = 0
    weights: bool = True
    weight_model: str = MINILM_PACKAGE
    layer_rows: int | None = None
    """Rows per layer for the per-layer table (None: whole layers)."""
    weight_rows: int = 64
    """Rows per layer for the rescaled real-weight curves and crossovers."""


def _write_table(df, run_dir: Path, stem: str) -> list[str]:
    names = [f"{stem}.csv"]
    df.to_csv(run_dir / names[0], index=False)
    try:
        df.to_parquet(run_dir / f"{stem}.parquet", index=False)
        names.insert(0, f"{stem}.parquet")
    except (ImportError, ValueError):  # no parquet engine: the CSV is the table
        pass
    return names


def run_study(
    out_dir: str | Path,
    *,
    sigmas: Sequence[float] = DEFAULT_SIGMAS,
    block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES,
    scales: Sequence[str] = STUDY_SCALES,
    n_samples: int = DEFAULT_N,
    weights: bool = True,
    elem: str = "fp4_e2m1",
    seed: int = 0,
    layer_rows: int | None = None,
    weight_rows: int = 64,
    overwrite: bool = False,
    threads: int | None = 1,
    log=print,
) -> dict:
    """Run the block-size study and write its run record into ``out_dir``:

    * ``config.yaml`` (``StudyConfig``), ``metrics.jsonl`` — one line per (scale, block_size, sigma):
      theory, Monte Carlo, their relative deviation, the three theory terms and, with ``weights``, the
      pooled relative error of the MiniLM layers rescaled to σ;
    * ``blocksize.parquet`` / ``.csv`` (the same table), ``layers.*`` (per-layer relative error of the
      real weights at their own σ), ``crossovers.*`` (σ below which the smaller block is worse);
    * figures ``blocksize_curves.png``, ``blocksize_sigma.png`` and ``blocksize_layers.png``;
    * ``summary.json`` with ``"status": "done"``, ``"kind": "block_size_study"``, ``"table"``,
      ``"tables"``, ``"figures"``, the headline numbers and timings.

    Returns the summary. ``weights=True`` needs the MiniLM package (see ``INSTALL_HINT``) and fails
    before writing anything when it is missing. A finished record is refused unless ``overwrite``.
    ``threads``: torch intra-op threads while it runs (see ``torch_threads``; None keeps the setting).
    """
    with torch_threads(threads):
        import pandas as pd
        import torch

        # The run record's owner (records.run): one record format for every run, so the report reads
        # the study like a training run.
        from records import run as record

        t_start = time.perf_counter()
        names = [variant(s).name for s in scales]
        cfg = StudyConfig(
            elem=elem,
            sigmas=[float(s) for s in sigmas],
            block_sizes=[int(b) for b in block_sizes],
            scales=names,
            n_samples=int(n_samples),
            seed=int(seed),
            weights=bool(weights),
            layer_rows=layer_rows,
            weight_rows=int(weight_rows),
        )
        W = load_minilm() if weights else None  # fail fast, before the record exists
        run_dir = Path(out_dir)
        record.prepare(run_dir, cfg, overwrite=overwrite)
        (run_dir / "metrics.jsonl").unlink(missing_ok=True)  # a rerun of an unfinished record starts over
        summary: dict = {"status": "running", "kind": "block_size_study", "table": TABLE}
        record.write_summary(run_dir, summary)
        timings: dict[str, float] = {}
        try:
            # 1. Theory and Monte Carlo on the grid (the same standard normals for every σ and block).
            t0 = time.perf_counter()
            rw = RescaledWeights(W, weight_rows) if W is not None else None
            rows = []
            t_theory = t_mc = t_w = 0.0
            for sc in names:
                for b in cfg.block_sizes:
                    for s in cfg.sigmas:
                        t1 = time.perf_counter()
                        terms = mse_terms(s, b, sc, elem=elem, numel=cfg.n_samples)
                        t2 = time.perf_counter()
                        mc = monte_carlo(s, b, sc, elem=elem, n=cfg.n_samples, seed=cfg.seed)
                        t3 = time.perf_counter()
                        wt = rw.rel_err(s, b, sc, elem=elem) if rw is not None else None
                        t_theory, t_mc, t_w = (
                            t_theory + t2 - t1,
                            t_mc + t3 - t2,
                            t_w + time.perf_counter() - t3,
                        )
                        row = {
                            "scale": sc,
                            "block_size": b,
                            "sigma": s,
                            "theory": terms["total"],
                            "monte_carlo": mc,
                            "rel_dev": terms["total"] / mc - 1,
                            "term_nonmax": terms["nonmax"],
                            "term_max": terms["max"],
                            "term_underflow": terms["underflow"],
                            "weights_rescaled": wt,
                        }
                        record.append_metrics(run_dir, row)
                        rows.append(row)
                log(f"[blocksize] {sc}: {len(cfg.block_sizes) * len(cfg.sigmas)} points")
            timings |= {"theory_s": t_theory, "monte_carlo_s": t_mc, "weights_rescaled_s": t_w}
            grid = pd.DataFrame(rows)
            tables = {"grid": _write_table(grid, run_dir, "blocksize")}
            timings["grid_s"] = time.perf_counter() - t0

            # 2. Crossovers: theory for every pair, real weights (rescaled) for the float scales.
            t0 = time.perf_counter()
            cross = []
            for sc in names:
                for a, b in CROSSOVER_PAIRS:
                    if a not in cfg.block_sizes or b not in cfg.block_sizes:
                        continue
                    th = crossover_sigma(a, b, sc, elem=elem)
                    wt = None
                    if (
                        rw is not None
                        and variant(sc).scale in ("ue4m3", "ue5m3")
                        and not variant(sc).global_scale
                    ):
                        wt = weight_crossover(rw, a, b, sc, elem=elem) if b <= 64 else None
                    wf = worse_fraction(a, b, sc, elem=elem) if variant(sc).scale == "e8m0" else None
                    cross.append(
                        {
                            "scale": sc,
                            "small": a,
                            "large": b,
                            "theory_sigma": th,
                            "weights_sigma": wt,
                            "worse_fraction_octave": wf,
                        }
                    )
            cols = ["scale", "small", "large", "theory_sigma", "weights_sigma", "worse_fraction_octave"]
            cross_df = pd.DataFrame(cross, columns=cols)  # typed columns even when no pair was compared
            tables["crossovers"] = _write_table(cross_df, run_dir, "crossovers")
            timings["crossovers_s"] = time.perf_counter() - t0

            # 3. Real weights at their own magnitude, per layer.
            layers_df = None
            if W is not None:
                t0 = time.perf_counter()
                layers_df = pd.DataFrame(weight_errors(W, cfg.block_sizes, names, elem=elem, rows=layer_rows))
                layers_df["shape"] = layers_df["shape"].map(lambda s: "x".join(map(str, s)))
                tables["layers"] = _write_table(layers_df, run_dir, "layers")
                timings["weights_layers_s"] = time.perf_counter() - t0

            # 4. Figures.
            t0 = time.perf_counter()
            figures = plot_study(run_dir, grid, cross_df, layers_df, elem=elem)
            timings["figures_s"] = time.perf_counter() - t0

            band = grid[(grid.sigma >= 0.005) & (grid.sigma <= 0.05)]
            summary = {
                "status": "done",
                "kind": "block_size_study",
                "table": tables["grid"][0],
                "tables": tables,
                "figures": figures,
                "n_points": len(grid),
                "max_abs_rel_dev": float(grid.rel_dev.abs().max()),
                "max_abs_rel_dev_sigma_0.005_0.05": float(band.rel_dev.abs().max()) if len(band) else None,
                "crossovers": {
                    f"{r.scale}:{r.small}v{r.large}": {
                        "theory": _num(r.theory_sigma),
                        "weights": _num(r.weights_sigma),
                    }
                    | (
                        {"worse_fraction_octave": _num(r.worse_fraction_octave)}
                        if _num(r.worse_fraction_octave) is not None
                        else {}
                    )
                    for r in cross_df.itertuples()
                },
                "weights": _weights_summary(layers_df, rw) if W is not None else None,
                "torch_threads": torch.get_num_threads(),
                "timings": timings,
                "wall_time": time.perf_counter() - t_start,
            }
            summary.update(record.environment())
            record.write_summary(run_dir, summary)
            log(f"[blocksize] done in {summary['wall_time']:.1f}s: {run_dir}")
            return summary
        except BaseException as exc:
            summary = {
                "status": "failed" if isinstance(exc, Exception) else "interrupted",
                "kind": "block_size_study",
            }
            summary |= {"error": f"{type(exc).__name__}: {exc}", "wall_time": time.perf_counter() - t_start}
            record.write_summary(run_dir, summary)
            raise


def _num(x) -> float | str | None:
    """JSON-safe: None/NaN → null (finer is better), inf → "inf" (finer is worse at every σ)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return "inf" if math.isinf(x) else float(x)


def _weights_summary(layers_df, rw: RescaledWeights) -> dict:
    """Headline numbers of the real-weight part: pooled relative error per (scale, block size)."""
    out: dict = {"model": MINILM_PACKAGE, "n_layers": int(layers_df.layer.nunique())}
    out["rescaled_numel"] = rw.numel
    out["sigma_range"] = [float(layers_df.sigma.min()), float(layers_df.sigma.max())]
    med = layers_df.groupby(["scale", "block_size"]).rel_err.median()
    out["median_rel_err"] = {f"{s}:{b}": float(v) for (s, b), v in med.items()}
    # Per scale, the layers whose own (native-σ) error is not monotone in block size: some smaller
    # block is worse than the next larger one.
    inv: dict[str, list[str]] = {}
    for (sc, layer), g in layers_df.groupby(["scale", "layer"], sort=False):
        e = g.sort_values("block_size").rel_err.to_numpy()
        if (np.diff(e) < 0).any():
            inv.setdefault(sc, []).append(layer)
    out["non_monotone_layers"] = {sc: inv.get(sc, []) for sc in dict.fromkeys(layers_df.scale)}
    return out


# ---------------------------------------------------------------------------------------------
# Figures (drawn by analysis.plots)


def plot_study(run_dir: str | Path, grid, cross_df, layers_df, *, elem: str = "fp4_e2m1") -> list[str]:
    """Save the study's figures into ``run_dir`` and return their file names: ``blocksize_curves.png``
    (relative MSE against block size), ``blocksize_sigma.png`` (against σ for UE4M3/UE5M3 without a
    global scale; the theory on a fine σ grid is computed here) and, with real weights,
    ``blocksize_layers.png``."""
    import pandas as pd

    from analysis import plots

    run_dir = Path(run_dir)
    figs: list[str] = []

    def save(fig, name: str) -> None:
        plots.save(fig, run_dir / name)
        figs.append(name)

    save(plots.blocksize_curves(grid, elem=elem), "blocksize_curves.png")
    float_scales = [s for s in ("ue4m3", "ue5m3") if s in set(grid.scale)]
    if float_scales:
        blocks = sorted(set(grid.block_size))
        fine = pd.DataFrame(
            [
                {"scale": sc, "block_size": b, "sigma": s, "theory": relative_mse(s, b, sc, elem=elem)}
                for sc in float_scales
                for b in blocks
                for s in np.geomspace(3e-4 if sc == "ue4m3" else 3e-4 / 256, 0.2, 90)
            ]
        )
        save(plots.blocksize_sigma(fine, grid, cross_df, elem=elem), "blocksize_sigma.png")
    if layers_df is not None and len(layers_df):
        save(plots.blocksize_layers(layers_df), "blocksize_layers.png")
    return figs


# ---------------------------------------------------------------------------------------------
# Report section (analysis.report calls this for records of kind "block_size_study")


def report_section(run_dir: str | Path, summary: dict, out_dir: str | Path) -> list[str]:
    """Markdown lines for the report: headline agreement, crossovers, real weights, figures (links
    relative to ``out_dir``)."""
    import os

    import pandas as pd

    from analysis.report import md_table

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if summary.get("status") != "done":
        status, error = summary.get("status"), summary.get("error", "")
        return [f"The block-size study did not finish (status {status}): {error}"]
    tables = summary.get("tables", {})

    def read(name: str):
        for f in tables.get(name, []):
            if (run_dir / f).exists():
                return pd.read_parquet(run_dir / f) if f.endswith(".parquet") else pd.read_csv(run_dir / f)
        return None

    lines = [
        "FP4 E2M1 elements; relative MSE = E[(Q(x) − x)²]/σ² for Gaussian N(0, σ²) blocks (closed form of "
        "the note's §2, truncating the non-max elements at the block max) against Monte Carlo with "
        "`quant.quantize`, and all-MiniLM-L6-v2 weights. E8M0 is reported with both the floor (OCP) and "
        "the ceil rule.",
        "",
        f"- Theory vs Monte Carlo: max |relative deviation| {summary.get('max_abs_rel_dev', math.nan):.2%}"
        f" over {summary.get('n_points')} points.",
    ]
    grid = read("grid")
    cross = read("crossovers")
    if grid is not None:
        for s in sorted({min(grid.sigma, key=lambda x: abs(x - t)) for t in (0.005, 0.05)}):
            g = grid[grid.sigma == s]
            piv = g.pivot_table(index="scale", columns="block_size", values="theory", sort=False)
            mc = g.pivot_table(index="scale", columns="block_size", values="monte_carlo", sort=False)
            fmt = lambda c: c.map(lambda v: f"{v:.4g}")  # noqa: E731
            tab = piv.apply(fmt) + " / " + mc.apply(fmt)
            lines += [
                "",
                f"**σ = {s:g}: relative MSE, theory / Monte Carlo**",
                "",
                md_table(tab.reset_index()),
            ]
    if cross is not None:
        c = cross[cross.scale.isin(["ue4m3", "ue5m3"])][
            ["scale", "small", "large", "theory_sigma", "weights_sigma"]
        ]
        lines += [
            "",
            "**Crossover σ below which the smaller block is worse** (theory; MiniLM layers rescaled to σ). "
            "A global scale, exact scales and E8M0-ceil have none; E8M0-floor has the smaller of 4/8/16/32 "
            "worse at every σ.",
            "",
            md_table(c),
        ]
    layers = read("layers")
    if layers is not None:
        med = layers.pivot_table(
            index="scale", columns="block_size", values="rel_err", aggfunc="median", sort=False
        )
        lines += [
            "",
            "**MiniLM, median per-layer ||Q(W) − W||²/||W||² at the layers' own σ**",
            "",
            md_table(med.reset_index()),
        ]
        inv = (summary.get("weights") or {}).get("non_monotone_layers", {})
        for sc, names in inv.items():
            if names and sc != "e8m0_floor":
                lines += [
                    "",
                    f"Layers where a smaller block is worse under {sc}: "
                    + ", ".join(f"`{n}`" for n in names),
                ]
    for f in summary.get("figures", []):
        lines += ["", f"![{f}]({os.path.relpath(run_dir / f, out_dir)})"]
    return lines


# ---------------------------------------------------------------------------------------------
# CLI

QUICK = dict(
    sigmas=(0.002, 0.005, 0.01, 0.02, 0.05),
    block_sizes=(4, 8, 16, 32, 64, 256),
    n_samples=1 << 16,
    layer_rows=32,
    weight_rows=16,
)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m analysis.blocksize",
        description="Block-size study: closed-form MSE vs Monte Carlo vs all-MiniLM-L6-v2, as a run record.",
    )
    p.add_argument("--out", required=True, help="run directory to write (config.yaml, metrics.jsonl, …)")
    p.add_argument("--quick", action="store_true", help="small grid and samples (seconds, for smoke tests)")
    p.add_argument("--no-weights", action="store_true", help="skip the real-weight part")
    p.add_argument("--overwrite", action="store_true", help="replace a finished record in --out")
    p.add_argument("--n-samples", type=int, default=None, help=f"Monte Carlo samples (default {DEFAULT_N})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: leave torch's default)")
    a = p.parse_args(argv)
    kw: dict = dict(QUICK) if a.quick else {}
    if a.n_samples is not None:
        kw["n_samples"] = a.n_samples
    try:
        s = run_study(
            a.out,
            weights=not a.no_weights,
            overwrite=a.overwrite,
            seed=a.seed,
            threads=a.threads or None,
            **kw,
        )
    except (WeightsUnavailable, FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: s[k] for k in ("status", "table", "figures", "max_abs_rel_dev", "wall_time")}))
    return 0
