"""Emulated ("fake-quant") Microscaling numerics, bit-exact to OCP MX v1.0.

What is emulated
----------------
An MX tensor stores, for each block of ``k`` consecutive values along one axis, a shared scale X and
k narrow elements P_i; it represents v_i ≈ P_i · X. We compute exactly the values such hardware would
produce and return them dequantized, in the input's dtype, so an ordinary PyTorch model trains on
them. Nothing is packed; the GEMMs that consume these tensors run in fp32 (see ``quant.ops``).

Algorithm, per block (all arithmetic fp32; bf16/fp16 inputs are upcast exactly first)
----------------------------------------------------------------------------------
1. amax = max |v_i|.  A block holding NaN or ±Inf comes back entirely NaN (the rule microxcaling
   follows; OCP leaves it open). Our choice makes a diverging tensor impossible to miss and never
   turns an Inf into a finite number.
2. The scale S:
   * E8M0, rule ``floor`` (OCP §6.3): X = 2**(floor(log2 amax) − emax_elem). floor(log2) is read
     exactly from amax's exponent bits. Computing it with float ``log2`` (microxcaling, Brevitas)
     returns the next binade when amax is just below 2**k, because log2 rounds up to the integer k.
   * E8M0, rule ``ceil``: the smallest power of two with 2**k · max_elem ≥ amax, decided exactly by
     comparing amax's mantissa with max_elem's mantissa (no division, so no rounding).
   * Both are clamped to E8M0's range [2**-127, 2**127]. An all-zero block gets 2**-127.
   * UE4M3 / UE5M3: s = amax / max_elem (one fp32 division) rounded to nearest-even onto the scale
     grid, subnormals kept, saturating at its max. A scale that rounds to 0 zeroes its whole block
     (its elements would all be far below the smallest element anyway).
   * fp32: s = amax / max_elem, unrounded.
   * Optional two-level (NVFP4) scaling: a per-tensor fp32 g = amax_tensor / (max_elem · max_scale)
     is divided out before the block scale is rounded, s_q = Q(s / g), and the effective scale is
     S = g · s_q. Only for the small float scale formats: E8M0 spans 2**±127 and needs none.
3. Elements: y = v · (1/S) with 1/S formed once in fp32 — the convention of torchao and of Transformer
   Engine's reference, so our NVFP4 codes match theirs bit for bit; for power-of-two S it is exact.
   y is rounded onto the element grid (even / away / stochastic), subnormals kept, and saturated to
   ±max_elem. The result is P · S.

Grid rounding is exact: with e = max(floor(log2 |y|), emin) the grid step is q = 2**(e − mbits), a
power of two built from bits, so |y| / q is exact and only the final integer rounding decides. For
round-to-nearest-even the hardware does that rounding for us: M = 2**(e − mbits + 23) has an fp32
ulp of exactly q and M > |y|, so the fp32 sum |y| + M is |y| rounded to a multiple of q, ties to
even, and (|y| + M) − M recovers it exactly: two adds instead of divide, round and multiply.

Dims not divisible by the block size: the trailing partial block is treated as a block of its own,
shorter length (zero padding cannot change its max), as microxcaling does.

Speed
-----
The eager path below allocates ~10 full-size temporaries; on CPU allocation dominates. Two fast
paths compute the same values bit for bit (tested): ``quant.native``, a C loop built on first use,
for CPU fp32/bf16 tensors with round-to-nearest-even (block formats at about memcpy speed for fp32,
and the element-wise roundings), and the same Python functions compiled with ``torch.compile``
(one reduction + one pointwise loop; CUDA, fp16 tensors, stochastic rounding). ``set_backend``
chooses; "auto" takes the first that applies.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from quant import native
from quant.formats import F32_MAX, ElemFormat, Grid, Rounding, ScaleKind, ScaleRule
from quant.spec import QuantSpec

# ---------------------------------------------------------------------------------------------
# Bit-level helpers (exact; all fp32)


def _exponent(a: torch.Tensor) -> torch.Tensor:
    """floor(log2 a) for normal fp32 a >= 0, read from the exponent bits; -127 for 0/subnormals."""
    return ((a.view(torch.int32) >> 23) & 0xFF) - 127


def _pow2(k: torch.Tensor) -> torch.Tensor:
    """2**k as fp32 for integer k in [-149, 127], built from bits (subnormals included)."""
    normal = (k + 127).clamp(min=1) << 23
    subnormal = torch.ones_like(k) << (k + 149).clamp(0, 22)
    return torch.where(k >= -126, normal, subnormal).view(torch.float32)


def _round_to_grid(y: torch.Tensor, grid: Grid, rounding: Rounding, u: torch.Tensor | None) -> torch.Tensor:
    """Round fp32 ``y`` onto ``grid`` (subnormals kept), saturating to ±grid.max. NaN stays NaN."""
    a = y.abs()
    if rounding is Rounding.EVEN and grid.normal_steps:
        # The hot path (every MX element and scale grid), the add trick of the module docstring:
        # k is log2 of the grid step, a < 2**(k + mbits + 1) <= M = 2**(k + 23). Exponents above
        # emax + 1 are clamped there: such |y| saturate anyway, and M stays finite.
        k = _exponent(a).clamp(grid.emin, grid.emax + 1) - grid.mbits
        m = ((k + (23 + 127)) << 23).view(torch.float32)
        return torch.copysign(torch.clamp((a + m) - m, max=grid.max), y)
    k = _exponent(a).clamp(grid.emin, 127) - grid.mbits  # log2 of the grid step at |y|
    # Normal steps come from one shift; bf16's reach fp32 subnormals.
    q = ((k + 127) << 23).view(torch.float32) if grid.normal_steps else _pow2(k)
    t = a / q  # exact: q is a power of two
    if rounding is Rounding.EVEN:
        r = torch.round(t)  # torch.round is round-half-to-even
    else:
        fl = torch.floor(t)
        frac = t - fl  # exact (Sterbenz)
        bump = frac >= 0.5 if rounding is Rounding.AWAY else u < frac
        r = fl + bump
    return torch.copysign(torch.clamp(r * q, max=grid.max), y)


def _pow2_scale(amax: torch.Tensor, elem: ElemFormat, spec: QuantSpec) -> torch.Tensor:
    """The E8M0 exponent E (int32) of each block."""
    # fp32-subnormal maxima have no implicit leading 1: lift them by 2**64 (exact) before reading bits.
    sub = amax < 2.0**-126
    a = torch.where(sub, amax * 2.0**64, amax)
    e = _exponent(a) - sub.to(torch.int32) * 64 - elem.emax
    if spec.scale_rule is ScaleRule.CEIL:
        # 2**e · max_elem >= amax  <=>  mantissa(amax) <= mantissa(max_elem); else one binade up.
        mant = ((a.view(torch.int32) & 0x007FFFFF) | 0x3F800000).view(torch.float32)
        e = e + (mant > elem.max / 2.0**elem.emax).to(torch.int32)
    lo, hi = spec.scale.exp_range
    return e.clamp(lo, hi)


def _div(a: torch.Tensor, c: float) -> torch.Tensor:
    """a / c correctly rounded to fp32 (one IEEE fp32 division), on every device and backend.

    The CPU divides a tensor by a constant exactly; nothing else here does. CUDA divides a tensor by a Python
    scalar as a · fl(1/c), and Inductor lowers any division by a compile-time constant (the spec's
    max_elem is one) to the same multiply on every device but the CPU. In fp32 that is an ulp off
    wherever 1/c is inexact (1/6, 1/448): the float scales of the compiled quantizer differed from
    eager's in 5 of 32 cases on an H200 (2026-12-04). So the division happens in fp64 and is rounded
    once to fp32, and whichever of the two forms a backend picks gives the fp32 quotient exactly:
    for c = m · 2**k ≥ 1 (m odd), q = a/c is either an exact fp32 midpoint (only when m = 1: then
    every form is exact) or at least 2**-25/m from every midpoint, relatively (a midpoint has 25
    significant bits; q − M is a multiple of min(ulp(a), ulp(q) · 2**k) over 2c). fp64's a / c and
    a · fl(1/c) are within 2**-52 of q, relatively: the same side of every midpoint for m < 2**27,
    hence the same fp32 rounding. Every max_elem and max_elem · max_scale of the format table
    qualifies; tests/quant/test_mx.py checks each over every fp32 mantissa of three binades."""
    return (a.double() / c).to(a.dtype)


def _block_scales(amax: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, 1/S) per block, fp32, from the block maxima ``amax`` (all of them: one tensor)."""
    elem, kind = spec.elem, spec.scale.kind
    if kind is ScaleKind.POW2:
        # int32 exponent: scale and its inverse are exact powers of two (2**-127 is subnormal).
        e = _pow2_scale(amax, elem, spec)
        return _pow2(e), _pow2(-e)
    s = _div(amax, elem.max)
    g = None
    if spec.global_scale:
        g = _div(amax.amax(), elem.max * spec.scale.max)  # the tensor max is the max of block maxima
        g = torch.where((g > 0) & torch.isfinite(g), g, torch.ones_like(g))
        s = s / g
    if kind is ScaleKind.FLOAT:
        s = _round_to_grid(s, spec.scale.grid, Rounding.EVEN, None)
    inv = (1.0 / s) if g is None else (1.0 / g) / s
    inv = torch.where(s > 0, inv.clamp(max=F32_MAX), 0.0)  # a zero scale zeroes its block
    return (s if g is None else g * s), inv


def _fake_quant_blocks(x: torch.Tensor, spec: QuantSpec, u: torch.Tensor | None) -> torch.Tensor:
    """Fake-quantize ``x`` of shape (pre, nblocks, block, post) along dim 2. Returns x.dtype."""
    xf = x.float()
    amax = xf.abs().amax(dim=2, keepdim=True)  # (pre, nb, 1, post); NaN propagates
    scale, inv = _block_scales(amax, spec)
    out = _round_to_grid(xf * inv, spec.elem.grid, spec.rounding, u) * scale
    # With the ceil rule a block max near the fp32 max can round up past it: keep such values finite.
    out = torch.where(torch.isfinite(amax), out.clamp(-F32_MAX, F32_MAX), float("nan"))
    return out.to(x.dtype)


def _fake_quant_elementwise(x: torch.Tensor, spec: QuantSpec, u: torch.Tensor | None) -> torch.Tensor:
    xf = x.float()
    out = _round_to_grid(xf, spec.elem.grid, spec.rounding, u)
    return torch.where(torch.isinf(xf), xf, out).to(x.dtype)  # ±Inf is not an overflow


# ---------------------------------------------------------------------------------------------
# Backend selection: eager reference or torch.compile'd fast path (bit-identical).

COMPILE_MIN_NUMEL = 1 << 16
_BACKENDS = ("auto", "eager", "compiled", "native")
_backend = os.environ.get("MXSWEEP_QUANT_BACKEND", "auto")


def set_backend(name: str) -> None:
    """``eager`` (the reference), ``compiled`` (torch.compile, one graph per QuantSpec), ``native``
    (the C kernel of ``quant.native`` where it applies, eager elsewhere: no compile time) or
    ``auto`` (native, then compiled for tensors of at least ``COMPILE_MIN_NUMEL`` elements, then
    eager)."""
    global _backend
    if name not in _BACKENDS:
        raise ValueError(f"unknown quant backend {name!r}; choose one of {_BACKENDS}")
    _backend = name


def get_backend() -> str:
    return _backend


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """``set_backend(name)`` for the duration of a ``with`` block, then the previous backend."""
    old = _backend
    set_backend(name)
    try:
        yield
    finally:
        set_backend(old)


@functools.cache
def _compiled(fn):
    # One compiled function serves every QuantSpec (each spec and dtype is its own graph, guarded as a
    # constant); dynamo's default of 8 graphs per function would silently send the 9th back to eager.
    cfg = torch._dynamo.config
    cfg.recompile_limit = max(cfg.recompile_limit, 256)
    cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 1024)
    # dynamic=True would also make every int and float the spec holds (emin, mbits, the E8M0 exponent
    # range, max_elem) a graph input: Inductor then passes them as int64 kernel arguments, the shifts
    # that build fp32 bits promote to int64, and Triton refuses the bitcast to fp32 (no CUDA kernel
    # compiled at all). Specialized, they are constants of the spec's own graph (guarded), and only the
    # shapes stay symbolic. mxsweep compiles nothing else; these were torch's defaults before 2.6.
    cfg.specialize_int = True
    cfg.specialize_float = True
    return torch.compile(fn, dynamic=True, options=_inductor_options())


def _inductor_options() -> dict[str, bool]:
    """Inductor settings the compiled quantizer needs to give eager's bits on CUDA: Triton lowers an
    fp32 ``x / y`` to the approximate ``div.full`` unless told to round (``div_rn``), so the float
    scales (amax / max_elem, the NVFP4 global scale) came out an ulp off (5 of 32 compiled cases on an
    H200, 2026-12-04). The option's name moved between torch releases; an unknown one is left out."""
    cfg = torch._inductor.config
    if hasattr(getattr(cfg, "eager_numerics", None), "division_rounding"):
        return {"eager_numerics.division_rounding": True}
    if hasattr(cfg, "emulate_divison_rounding"):  # sic: its spelling up to torch 2.10
        return {"emulate_divison_rounding": True}
    return {}


@functools.cache
def _can_compile() -> bool:
    return shutil.which(os.environ.get("CXX", "g++")) is not None


def _native(x: torch.Tensor, spec: QuantSpec) -> bool:
    """Whether the backend in force sends this input to the C kernel."""
    return _backend in ("auto", "native") and native.supports(x, spec)


def _run(fn, x: torch.Tensor, spec: QuantSpec, u: torch.Tensor | None) -> torch.Tensor:
    if _native(x, spec):
        return (native.fake_quant_blocks if fn is _fake_quant_blocks else native.fake_quant_elementwise)(
            x, spec
        )
    use = _backend == "compiled" or (
        _backend != "eager" and x.numel() >= COMPILE_MIN_NUMEL and (x.device.type != "cpu" or _can_compile())
    )
    return _compiled(fn)(x, spec, u) if use else fn(x, spec, u)


# ---------------------------------------------------------------------------------------------
# Public API


def _uniform(x: torch.Tensor, spec: QuantSpec, generator: torch.Generator | None):
    if spec.rounding is not Rounding.STOCHASTIC:
        return None
    # Draw on the generator's own device (convert() seeds a CPU one) so CUDA tensors work too and the
    # stream is the same whatever device the tensor lives on.
    device = x.device if generator is None else generator.device
    return torch.rand(x.shape, generator=generator, device=device, dtype=torch.float32).to(x.device)


def _as_blocks(x: torch.Tensor, axis: int, block: int):
    """View x as (pre, nblocks, block, post) along ``axis`` (padding a ragged tail with zeros).

    Returns the 4-D tensor and a function mapping a result of that shape back to x's shape.
    """
    if x.dim() and not -x.dim() <= axis < x.dim():
        raise IndexError(f"axis {axis} is out of range for a tensor with {x.dim()} dims")
    axis = axis % x.dim() if x.dim() else 0
    if not x.is_contiguous() and x.movedim(axis, -1).is_contiguous():
        # e.g. W.t() blocked along its rows: block W along its last dim instead, without a copy.
        x4, undo = _as_blocks(x.movedim(axis, -1), -1, block)
        return x4, lambda out: undo(out).movedim(-1, axis)
    x = x.contiguous()
    shape = x.shape
    n = shape[axis] if x.dim() else 1
    pre = int(torch.Size(shape[:axis]).numel())
    post = int(torch.Size(shape[axis + 1 :]).numel())
    x3 = x.reshape(pre, n, post)
    pad = (-n) % block
    if pad:
        x3 = F.pad(x3, (0, 0, 0, pad))
    x4 = x3.reshape(pre, (n + pad) // block, block, post)

    def undo(out: torch.Tensor) -> torch.Tensor:
        return out.reshape(pre, n + pad, post)[:, :n].reshape(shape)

    return x4, undo


def quantize_spec(
    x: torch.Tensor,
    spec: QuantSpec,
    *,
    axis: int = -1,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Fake-quantize ``x`` with a prepared :class:`QuantSpec` (blocks along ``axis``)."""
    if spec.is_identity:
        return x
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"quantize expects a float32/bfloat16/float16 tensor, got {x.dtype}")
    if spec.block_size is None:
        return _run(_fake_quant_elementwise, x, spec, _uniform(x, spec, generator))
    if _native(x, spec):
        out = native.fake_quant_along(x, spec, axis)  # x's own layout: no views or copies
        if out is not None:
            return out
    x4, undo = _as_blocks(x, axis, spec.block_size)
    return undo(_run(_fake_quant_blocks, x4, spec, _uniform(x4, spec, generator)))


def quantize(
    x: torch.Tensor,
    fmt: str,
    *,
    block_size: int = 32,
    scale: str = "e8m0",
    scale_rule: str = "floor",
    axis: int = -1,
    rounding: str = "even",
    global_scale: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Fake-quantize ``x`` to element format ``fmt`` in blocks of ``block_size`` along ``axis``.

    Returns a tensor of x's shape and dtype holding exactly the values an MX encoder would
    produce (see the module docstring for the algorithm). ``fmt`` is an element format name
    (``fp8_e4m3``, ``fp4_e2m1``, ``int8``, ``bf16`` …); a recipe name (``nvfp4``, ``mxfp6_e2m3``)
    brings its own block size and scale.
    """
    spec = QuantSpec.make(
        fmt,
        block_size=block_size,
        scale=scale,
        scale_rule=scale_rule,
        rounding=rounding,
        global_scale=global_scale,
    )
    return quantize_spec(x, spec, axis=axis, generator=generator)


def clip_fraction(
    x: torch.Tensor,
    fmt: str,
    *,
    block_size: int = 32,
    scale: str = "e8m0",
    scale_rule: str = "floor",
    axis: int = -1,
) -> float:
    """Fraction of elements that saturate, |x / X| > max_elem: the LayerNorm-clamping diagnostic.

    A 32-block of values in (0.875, 1.0) has X = 2**-9 under fp8_e4m3 (OCP ``floor`` rule), so every
    x / X is in (448, 512) and clamps to 448 · X = 0.875: the fraction is 1.0. Under ``ceil`` X =
    2**-8 and nothing clips. Blocks holding NaN/Inf are not counted. Element-wise formats (bf16 …)
    never clip below their max and report 0 for finite x. ``spec_clip_fraction`` takes a QuantSpec.
    """
    spec = QuantSpec.make(fmt, block_size=block_size, scale=scale, scale_rule=scale_rule)
    return spec_clip_fraction(x, spec, axis=axis)


def spec_clip_fraction(x: torch.Tensor, spec: QuantSpec, *, axis: int = -1) -> float:
    """``clip_fraction`` under a ready ``QuantSpec`` (e.g. ``QuantPolicy.norm_spec()``)."""
    if spec.block_size is None:
        return 0.0 if x.numel() == 0 else float((x.float().abs() > spec.elem.max).float().mean())
    x4, _ = _as_blocks(x.detach(), axis, spec.block_size)
    xf = x4.float()
    amax = xf.abs().amax(dim=2, keepdim=True)
    _, inv = _block_scales(amax, spec)
    clipped = ((xf * inv).abs() > spec.elem.max) & torch.isfinite(amax)
    n = x.numel()
    return float(clipped.sum()) / n if n else 0.0
