"""Closed-form quantization MSE of Gaussian blocks, and the crossovers it predicts.

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

Crossovers: ``crossover_sigma`` (the σ below which the smaller of two block sizes is worse),
``worse_fraction`` (E8M0, periodic in log2 σ) and ``theory_curve`` (``relative_mse`` on a grid).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from quant.formats import ElemKind, Grid, ScaleKind, elem_format, scale_format

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


@functools.cache  # pure, ~50 ms, and a report asks for the same few formats many times
def format_error(name: str, octave_points: int = 16, *, scale_rule: str | None = None) -> float:
    """The relative MSE that format ``name`` gives a Gaussian tensor of unknown scale: an element format
    (blocks of 32, E8M0 floor: the OCP MX default) or a recipe (``mxfp6_e2m3``, ``nvfp4`` …: its own
    block size and scale). ``relative_mse`` averaged over σ = 2**u for ``octave_points`` u evenly spaced
    in [0, 1): an E8M0 scale makes it periodic in log2 σ with period 1, and a per-tensor global scale
    makes it independent of σ, so one octave is every σ. (A float block scale without a global one is
    not periodic: there this is the error at σ in [1, 2).) ``scale_rule`` (``floor``/``ceil``) replaces
    the E8M0 rule, as ``precision.scale_rule`` does in a run. Element-wise formats (bf16, fp32) have no
    blocks and raise ``ValueError``."""
    from quant.formats import RECIPES

    r = RECIPES.get(name)
    elem, block, scale, rule, glob = (
        (r.elem, r.block_size, r.scale, r.scale_rule.value, r.global_scale)
        if r
        else (name, 32, "e8m0", "floor", False)
    )
    if block is None:
        raise ValueError(f"{name!r} is element-wise (no blocks): no block-quantization error to compute")
    rule = (scale_rule or rule) if scale == "e8m0" else None
    sigmas = 2.0 ** (np.arange(int(octave_points)) / int(octave_points))
    errors = [relative_mse(s, block, scale, global_scale=glob, elem=elem, scale_rule=rule) for s in sigmas]
    return float(np.mean(errors))


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
