"""The one table of number formats: element formats, block-scale formats and named recipes.

Bit-counting convention (stated once, used everywhere): ``ebits`` and ``mbits`` count the *stored*
exponent and mantissa bits. The sign bit and the implicit leading 1 are never counted. So fp8_e4m3
is ``ebits=4, mbits=3`` (torchao's convention; microxcaling's "mbits=5" counts sign and implicit bit).

Every format is described by the grid it rounds to, which three numbers fix:

* ``emin``  – exponent of the smallest normal value. Below 2**emin the grid is uniform with step
  2**(emin - mbits) (subnormals, kept). For MXINT8 the whole grid is uniform: emin = 0, mbits = 6.
* ``mbits`` – mantissa bits, so a binade [2**e, 2**(e+1)) holds 2**mbits grid points.
* ``max``   – largest finite magnitude. Rounding *saturates* here: OCP MX conversion clamps.

``emax`` (the OCP ``emax_elem``) is floor(log2(max)): the exponent the E8M0 shared scale is
computed against, X = 2**(floor(log2 amax) - emax).

OCP MX v1.0 element formats (§5.3):

    name       ebits mbits bias emin emax   max      min subnormal
    fp8_e4m3     4     3     7   -6    8    448      2**-9
    fp8_e5m2     5     2    15  -14   15    57344    2**-16
    fp6_e3m2     3     2     3   -2    4    28       2**-4
    fp6_e2m3     2     3     1    0    2    7.5      2**-3
    fp4_e2m1     2     1     1    0    2    6        2**-1
    int8         -     6     -    0    0    127/64   2**-6   (MXINT8: two's complement k/64; we use
                                                            the symmetric range ±127/64, so q(-x) =
                                                            -q(x); the code -128 = -2.0 is never made)

Element-wise formats (no block scale): bf16, fp16 and fp32. ``fp32`` is the identity.

Scale formats: ``e8m0`` (power of two, 2**-127 .. 2**127, OCP MX), ``ue4m3`` (unsigned E4M3, NVFP4:
bias 7, max 448, smallest subnormal 2**-9), ``ue5m3`` (unsigned, 5 exponent + 3 mantissa bits,
bias 15, smallest subnormal 2**-17, max 61440 = 1.875 * 2**15: exponent field 31 is reserved as in
IEEE formats, which is what the "Is finer better?" code and its follow-up use; intel/auto-round's
114688 reserves only the all-ones code. For weights and activations amax/6 never gets near either
value, so the choice does not move results) and ``fp32`` (the exact amax/max "ideal scale").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from records.precision import ALIASES

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Grid:
    """A sign-symmetric floating-point grid: see the module docstring for the three numbers."""

    emin: int
    mbits: int
    max: float

    # Plain properties, not functools.cached_property: its lock is a context manager dynamo cannot
    # trace, so every read inside quant.mx's compiled function was a graph break (9 graphs per spec,
    # some frames falling back to eager). Two float ops per read cost nothing beside a quantize call.
    @property
    def emax(self) -> int:
        """Exponent of the largest binade (OCP ``emax_elem``)."""
        return math.floor(math.log2(self.max))

    @property
    def normal_steps(self) -> bool:
        """Every step 2**(e - mbits), e in [emin, emax + 1], is a normal fp32 power of two with room
        above it for 2**(e - mbits + 23): what ``quant.mx``'s add-trick rounding and the C kernel
        need. True for every MX element and scale grid and fp16; false for bf16 and fp32, whose
        steps reach into fp32 subnormals."""
        return self.emin - self.mbits >= -126 and self.emax - self.mbits <= 103

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.mbits)


def _float_grid(ebits: int, mbits: int, max_: float) -> Grid:
    bias = 2 ** (ebits - 1) - 1
    return Grid(emin=1 - bias, mbits=mbits, max=max_)


class ElemKind(Enum):
    """How an element format is applied."""

    BLOCK = "block"
    """Needs a shared block scale (the MX element formats)."""
    ELEMENTWISE = "elementwise"
    """Rounded value by value, no scale (bf16, fp16)."""
    IDENTITY = "identity"
    """No rounding at all (fp32)."""


@dataclass(frozen=True)
class ElemFormat:
    """An element format: its name, its bit widths and the grid it rounds to."""

    name: str
    bits: int
    ebits: int
    mbits: int
    grid: Grid
    kind: ElemKind = ElemKind.BLOCK
    torch_dtype_name: str | None = None
    """The name of the native torch dtype with exactly this grid, when there is one (the table itself
    is torch-free, so configs and sweep planning load without torch)."""

    @property
    def torch_dtype(self) -> torch.dtype | None:
        """That dtype (used only in tests, against torch's own casts)."""
        import torch

        return getattr(torch, self.torch_dtype_name) if self.torch_dtype_name else None

    @property
    def max(self) -> float:
        return self.grid.max

    @property
    def emax(self) -> int:
        return self.grid.emax


def _fp(name: str, ebits: int, mbits: int, max_: float, dtype: str | None = None):
    return ElemFormat(
        name, 1 + ebits + mbits, ebits, mbits, _float_grid(ebits, mbits, max_), torch_dtype_name=dtype
    )


def _ieee_max(ebits: int, mbits: int) -> float:
    """The largest finite value of an IEEE-style format (the top exponent is Inf/NaN):
    (2 − 2**−mbits) · 2**bias, bias = 2**(ebits−1) − 1 (bf16 ≈ 3.39e38, fp32 ≈ 3.40e38)."""
    return (2.0 - 2.0**-mbits) * 2.0 ** (2 ** (ebits - 1) - 1)


F32_MAX = _ieee_max(8, 23)
"""The largest finite fp32 (``torch.finfo(torch.float32).max``)."""


ELEM_FORMATS: dict[str, ElemFormat] = {
    f.name: f
    for f in (
        _fp("fp8_e4m3", 4, 3, 448.0, "float8_e4m3fn"),
        _fp("fp8_e5m2", 5, 2, 57344.0, "float8_e5m2"),
        _fp("fp6_e3m2", 3, 2, 28.0),
        _fp("fp6_e2m3", 2, 3, 7.5),
        _fp("fp4_e2m1", 2, 1, 6.0),
        ElemFormat("int8", 8, 0, 6, Grid(emin=0, mbits=6, max=127 / 64)),
        ElemFormat(
            "bf16",
            16,
            8,
            7,
            _float_grid(8, 7, _ieee_max(8, 7)),
            ElemKind.ELEMENTWISE,
            "bfloat16",
        ),
        ElemFormat("fp16", 16, 5, 10, _float_grid(5, 10, 65504.0), ElemKind.ELEMENTWISE, "float16"),
        ElemFormat(
            "fp32",
            32,
            8,
            23,
            _float_grid(8, 23, F32_MAX),
            ElemKind.IDENTITY,
            "float32",
        ),
    )
}


class ScaleKind(Enum):
    POW2 = "pow2"
    """A power of two chosen from amax's exponent bits (E8M0); exact, no rounding."""
    FLOAT = "float"
    """amax / max_elem rounded to nearest-even onto a small float grid (UE4M3, UE5M3)."""
    EXACT = "exact"
    """amax / max_elem in fp32, unrounded (the "ideal scale" baseline)."""


@dataclass(frozen=True)
class ScaleFormat:
    """A block-scale format. ``grid`` is set for FLOAT scales; POW2 scales use ``exp_range``."""

    name: str
    kind: ScaleKind
    grid: Grid | None = None
    exp_range: tuple[int, int] = (-127, 127)

    @property
    def max(self) -> float:
        if self.grid is not None:
            return self.grid.max
        if self.kind is ScaleKind.POW2:
            return 2.0 ** self.exp_range[1]
        return F32_MAX


SCALE_FORMATS: dict[str, ScaleFormat] = {
    s.name: s
    for s in (
        ScaleFormat("e8m0", ScaleKind.POW2),
        ScaleFormat("ue4m3", ScaleKind.FLOAT, _float_grid(4, 3, 448.0)),
        ScaleFormat("ue5m3", ScaleKind.FLOAT, _float_grid(5, 3, 61440.0)),
        ScaleFormat("fp32", ScaleKind.EXACT),
    )
}


class ScaleRule(Enum):
    """How a power-of-two (E8M0) scale is chosen from the block's amax."""

    FLOOR = "floor"
    """OCP MX v1.0 §6.3: X = 2**(floor(log2 amax) - emax_elem). Exact from amax's exponent bits.
    Cheap and spec-conformant, but a block max whose mantissa exceeds the element max's mantissa
    (1.75 for e4m3, 1.5 for e2m1) saturates: this is the clamping behind the LayerNorm mechanism."""
    CEIL = "ceil"
    """The smallest power of two >= amax / max_elem (exact, computed without a float division).
    Never clips the block max; costs up to one binade of resolution (NVIDIA's RCEIL, done exactly)."""


class Rounding(Enum):
    """How a value between two grid points is rounded."""

    EVEN = "even"
    """Round to nearest, ties to even (IEEE default, OCP sample conversion)."""
    AWAY = "away"
    """Round to nearest, ties away from zero (microxcaling's default "nearest")."""
    STOCHASTIC = "stochastic"
    """Up with probability equal to the distance from the lower neighbour: unbiased, E[q(x)] = x.
    Driven by a torch.Generator so runs are reproducible."""


@dataclass(frozen=True)
class Recipe:
    """A named bundle: element format, block size and scale, usable wherever a format is asked."""

    name: str
    elem: str
    block_size: int | None = 32
    scale: str = "e8m0"
    scale_rule: ScaleRule = ScaleRule.FLOOR
    global_scale: bool = False


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("mxfp8_e4m3", "fp8_e4m3"),
        Recipe("mxfp8_e5m2", "fp8_e5m2"),
        Recipe("mxfp6_e3m2", "fp6_e3m2"),
        Recipe("mxfp6_e2m3", "fp6_e2m3"),
        Recipe("mxfp4_e2m1", "fp4_e2m1"),
        Recipe("mxint8", "int8"),
        Recipe("nvfp4", "fp4_e2m1", block_size=16, scale="ue4m3", global_scale=True),
        Recipe("nvfp4_ue5m3", "fp4_e2m1", block_size=16, scale="ue5m3"),
        Recipe("bf16", "bf16", block_size=None),
        Recipe("fp32", "fp32", block_size=None),
    )
}
# Short names (``precision.w=mxfp8``): the same recipe under a second name; records.precision owns the
# list, so a run's label is the same whichever name it was configured with.
RECIPES.update({alias: dataclasses.replace(RECIPES[target], name=alias) for alias, target in ALIASES.items()})


def _lookup(table: dict, name: str, what: str):
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; choose one of: {', '.join(sorted(table))}") from None


def elem_format(name: str | ElemFormat) -> ElemFormat:
    """Look up an element format by name (a clear error lists the valid names)."""
    return name if isinstance(name, ElemFormat) else _lookup(ELEM_FORMATS, name, "element format")


def scale_format(name: str | ScaleFormat) -> ScaleFormat:
    return name if isinstance(name, ScaleFormat) else _lookup(SCALE_FORMATS, name, "scale format")


def recipe(name: str) -> Recipe:
    return _lookup(RECIPES, name, "recipe")


def precision_names() -> list[str]:
    """Every name accepted where a precision is configured: element formats and recipes."""
    return sorted(set(ELEM_FORMATS) | set(RECIPES))
