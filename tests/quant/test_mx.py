"""Semantics of ``quant.quantize``: E8M0 floor/ceil scales, UE4M3/UE5M3 scales, the NVFP4 global
scale, stochastic rounding, the NaN/Inf rule, shapes and axes, and ``clip_fraction``.

Expected values come from an exact reference written here with ``fractions.Fraction``: element
grids are enumerated code by code from (ebits, mbits, bias), every fp32 operation the algorithm
documents (one division amax / max_elem, the reciprocal 1/s, the product x · (1/s)) is rounded
to fp32 exactly, and power-of-two scales are found by exact comparisons, never by ``log2``.
"""

from __future__ import annotations

import bisect
import math
import random
from fractions import Fraction as Fr

import pytest
import torch
from grid_reference import round_on_grid

import quant

# ---------------------------------------------------------------------------------------------
# Exact reference

TWO = Fr(2)
# name: (ebits, mbits, bias, kind) — kind says which codes are not finite numbers.
_FP = {
    "fp8_e4m3": (4, 3, 7, "nan_top_code"),
    "fp8_e5m2": (5, 2, 15, "ieee"),
    "fp6_e3m2": (3, 2, 3, "none"),
    "fp6_e2m3": (2, 3, 1, "none"),
    "fp4_e2m1": (2, 1, 1, "none"),
    "ue4m3": (4, 3, 7, "nan_top_code"),
    "ue5m3": (5, 3, 15, "ieee"),
}
BLOCK_FORMATS = ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "int8"]


def _enumerate(name: str) -> list[Fr]:
    if name == "int8":
        return [Fr(k, 64) for k in range(128)]
    ebits, mbits, bias, kind = _FP[name]
    out = []
    for e in range(2**ebits):
        for m in range(2**mbits):
            top_e = e == 2**ebits - 1
            if (kind == "ieee" and top_e) or (kind == "nan_top_code" and top_e and m == 2**mbits - 1):
                continue
            frac = Fr(m, 2**mbits)
            out.append(frac * TWO ** (1 - bias) if e == 0 else (1 + frac) * TWO ** (e - bias))
    return out


GRID = {name: _enumerate(name) for name in [*_FP, "int8"]}
MAX = {name: g[-1] for name, g in GRID.items()}
SCALE_MAX = {"ue4m3": Fr(448), "ue5m3": Fr(61440)}
F32_MAX = (2 - TWO**-23) * TWO**127


def floor_log2(a: Fr) -> int:
    """floor(log2 a) for a > 0, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e if a >= TWO**e else e - 1


def emax(name: str) -> int:
    return floor_log2(MAX[name])


def f32(v: Fr) -> Fr:
    """Round to the nearest fp32 value, ties to even (subnormals kept, no overflow expected)."""
    if v == 0:
        return Fr(0)
    a = abs(v)
    q = TWO ** (max(floor_log2(a), -126) - 23)
    r = round(a / q) * q  # Fraction.__round__ is round-half-even
    assert r <= F32_MAX
    return r if v > 0 else -r


def grid_round(v: Fr, name: str, mode: str = "even") -> Fr:
    return round_on_grid(v, GRID[name], mode)


def pow2_exponent(amax: Fr, name: str, rule: str) -> int:
    """The E8M0 exponent: OCP floor rule, or the smallest k with 2**k · max >= amax; clamped."""
    if amax == 0:
        return -127
    if rule == "floor":
        k = floor_log2(amax) - emax(name)
    else:
        k = floor_log2(amax) - emax(name) - 1
        while TWO**k * MAX[name] < amax:
            k += 1
    return min(max(k, -127), 127)


def ref_block(vals, name: str, scale: str = "e8m0", rule: str = "floor", mode: str = "even", g=None):
    """One block, quantized and dequantized, as a list of floats. ``g``: NVFP4 global scale."""
    if not all(math.isfinite(v) for v in vals):
        return [math.nan] * len(vals)
    xs = [Fr(v) for v in vals]
    amax = max(abs(v) for v in xs)
    if scale == "e8m0":
        X = TWO ** pow2_exponent(amax, name, rule)
        return [float(f32(grid_round(v / X, name, mode) * X)) for v in xs]
    assert scale in ("ue4m3", "ue5m3")
    s = f32(amax / MAX[name])
    if g is not None:
        s = f32(s / g)
    sq = grid_round(s, scale)
    if sq == 0:
        return [0.0] * len(vals)
    inv = f32(1 / sq) if g is None else f32(f32(1 / g) / sq)
    S = sq if g is None else f32(g * sq)
    return [float(f32(grid_round(f32(v * inv), name, mode) * S)) for v in xs]


def ref_quantize(x: torch.Tensor, name: str, block: int = 32, **kw) -> torch.Tensor:
    """Reference over the last dim of a 2-D tensor, a ragged tail being its own block."""
    rows = []
    for row in x.tolist():
        out = []
        for i in range(0, len(row), block):
            out += ref_block(row[i : i + block], name, **kw)
        rows.append(out)
    return torch.tensor(rows, dtype=torch.float32)


def ref_global_scale(x: torch.Tensor, name: str, scale: str) -> Fr:
    amax_t = Fr(float(x.abs().max()))
    g = f32(amax_t / (MAX[name] * SCALE_MAX[scale]))
    return g if g > 0 else Fr(1)


def assert_same(y: torch.Tensor, want: torch.Tensor, x: torch.Tensor | None = None):
    """Bit-equal values (NaN where NaN); reports the first mismatches."""
    same = (y == want) | (y.isnan() & want.isnan())
    if not bool(same.all()):
        idx = (~same).nonzero()[:5]
        lines = [
            f"at {tuple(i.tolist())}: got {y[tuple(i)].item()!r} want {want[tuple(i)].item()!r}"
            + (f" (x={x[tuple(i)].item()!r})" if x is not None else "")
            for i in idx
        ]
        raise AssertionError(f"{int((~same).sum())} mismatches:\n" + "\n".join(lines))


def spread(rows: int, cols: int, seed: int, lo: int = -20, hi: int = 20) -> torch.Tensor:
    """randn rows with per-row magnitudes 2**U[lo, hi], plus a few uniform and heavy-tailed rows."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.randint(lo, hi + 1, (rows, 1), generator=g).float())
    x = torch.randn(rows, cols, generator=g) * mag
    k = max(rows // 8, 1)
    x[:k] = (torch.rand(k, cols, generator=g) * 2 - 1) * mag[:k]
    x[k : 2 * k] = torch.randn(k, cols, generator=g) ** 3 * mag[k : 2 * k]
    return x


# ---------------------------------------------------------------------------------------------
# E8M0: floor rule exactness, clamping, ceil rule


@pytest.mark.parametrize("name", BLOCK_FORMATS)
def test_floor_scale_just_below_a_power_of_two(name):
    """amax = nextbelow(2**k) has floor(log2 amax) = k - 1, so X = 2**(k-1-emax). A float log2
    rounds to exactly k and picks X = 2**(k-emax): the amax would then come back as 2**k."""
    em = emax(name)
    mx = float(MAX[name])
    ks = list(range(-100, 101))
    p = torch.exp2(torch.tensor(ks, dtype=torch.float32))
    below = torch.nextafter(p, torch.zeros_like(p))
    g = torch.Generator().manual_seed(11)
    x = torch.rand(len(ks), 32, generator=g) * below[:, None]
    x[:, 7] = below
    x[:, 3] = -below * 0.75
    y = quant.quantize(x, name)
    want_max = torch.tensor([mx * 2.0 ** (k - 1 - em) for k in ks])
    assert torch.equal(y[:, 7], want_max)  # saturated: mantissa 1.99999988 > max's mantissa
    assert_same(y, ref_quantize(x, name), x)
    # an exact power of two is its own block max: X = 2**(k-emax), exactly representable
    xp = x.clone()
    xp[:, 7] = p
    assert torch.equal(quant.quantize(xp, name)[:, 7], p)


@pytest.mark.parametrize("name", BLOCK_FORMATS)
@pytest.mark.parametrize("rule", ["floor", "ceil"])
@pytest.mark.parametrize("mode", ["even", "away"])
def test_e8m0_matches_exact_reference(name, rule, mode):
    x = spread(96, 64, seed=12, lo=-60, hi=60)
    assert_same(
        quant.quantize(x, name, scale_rule=rule, rounding=mode),
        ref_quantize(x, name, rule=rule, mode=mode),
        x,
    )


@pytest.mark.parametrize("name", BLOCK_FORMATS)
@pytest.mark.parametrize("rule", ["floor", "ceil"])
def test_e8m0_scale_is_clamped_to_its_range(name, rule):
    # Tiny blocks: the ideal X is below 2**-127, so X = 2**-127 and small elements vanish.
    assert_same(
        quant.quantize(torch.tensor([[2.0**-125, 2.0**-140]]), "fp8_e4m3", scale_rule=rule),
        torch.tensor([[2.0**-125, 0.0]]),
    )
    tiny = spread(16, 32, seed=13, lo=-135, hi=-118)
    y = quant.quantize(tiny, name, scale_rule=rule)
    assert_same(y, ref_quantize(tiny, name, rule=rule), tiny)
    # every non-zero output is a multiple of the smallest element step times 2**-127
    step = float(GRID[name][1]) * 2.0**-127
    nz = y[y != 0].double()
    assert torch.equal(torch.round(nz / step) * step, nz)


def test_e8m0_scale_clamped_at_two_to_the_127():
    # int8 has emax 0: a block max of fp32 max needs X = 2**128 under ceil; it is clamped to
    # 2**127 and the element saturates at 127/64 (a NaN/Inf scale would be the unclamped bug).
    big = torch.finfo(torch.float32).max
    for rule in ("floor", "ceil"):
        y = quant.quantize(torch.tensor([big, -big, 2.0**126]), "int8", scale_rule=rule)
        assert y.tolist() == [127 / 64 * 2.0**127, -127 / 64 * 2.0**127, 2.0**126], rule
    # floor never rounds a block max up past max_elem · X <= amax: no overflow near fp32 max
    for name in BLOCK_FORMATS:
        y = quant.quantize(torch.tensor([big, -big]), name)
        assert torch.isfinite(y).all() and y[0] == -y[1] == float(MAX[name]) * 2.0 ** (127 - emax(name))


@pytest.mark.parametrize("name", ["fp4_e2m1", "fp6_e3m2", "fp8_e5m2"])
def test_ceil_rule_never_turns_finite_into_inf(name):
    big = torch.finfo(torch.float32).max
    y = quant.quantize(torch.tensor([big, -big, 1.0]), name, scale_rule="ceil")
    assert torch.isfinite(y).all(), y.tolist()


@pytest.mark.parametrize("name", BLOCK_FORMATS)
@pytest.mark.parametrize("scale", ["e8m0", "ue4m3", "ue5m3", "fp32"])
@pytest.mark.parametrize("rule", ["floor", "ceil"])
def test_all_zero_block_stays_zero(name, scale, rule):
    x = torch.zeros(3, 64)
    x[1, :32] = -0.0
    x[2, 32:] = torch.randn(32) * 100  # large enough for e5m2 under ue4m3 (amax / 57344)
    y = quant.quantize(x, name, scale=scale, scale_rule=rule)
    assert torch.equal(y[:, :32], torch.zeros(3, 32)) and not y.isnan().any()
    assert torch.equal(y[:2], torch.zeros(2, 64))
    assert (y[2, 32:] != 0).any()


@pytest.mark.parametrize("name", BLOCK_FORMATS)
def test_ceil_scale_is_the_smallest_power_of_two_at_least_amax_over_max(name):
    """Per block [amax, p1, p2] with probes p1 = X·s, p2 = 1.5·X·s (s the smallest subnormal):
    under X both come back as the reference says; under 2X p1 ties to 0, under X/2 p2 is exact."""
    rnd = random.Random(14)
    mx, sub = MAX[name], GRID[name][1]
    amaxes = [float(torch.tensor(rnd.uniform(1, 2) * 2.0 ** rnd.randint(-70, 70))) for _ in range(400)]
    # amax = max_elem · 2**j exactly (X = 2**j, not 2**(j+1)) and its fp32 neighbours
    exact = torch.tensor([float(mx) * 2.0**j for j in range(-60, 61, 3)])
    for t in (exact, torch.nextafter(exact, exact * 2), torch.nextafter(exact, exact * 0)):
        amaxes += t.tolist()
    rows, expect = [], []
    for amax in amaxes:  # fp32 values
        A = Fr(amax)
        k = 0  # the smallest k with 2**k >= A / mx, searched exactly with Fractions
        while TWO**k < A / mx:
            k += 1
        while TWO ** (k - 1) >= A / mx:
            k -= 1
        X = TWO**k
        assert X * mx >= A > X * mx / 2
        p1, p2 = X * sub, X * sub * Fr(3, 2)
        rows.append([amax, float(p1), float(p2)])
        expect.append([float(grid_round(A / X, name) * X), float(p1), float(2 * p1)])
    x = torch.tensor(rows)
    assert torch.equal(torch.tensor(rows, dtype=torch.float64), x.double())  # probes exact in fp32
    assert_same(quant.quantize(x, name, scale_rule="ceil"), torch.tensor(expect), x)


ELEM_MBITS = {"fp8_e4m3": 3, "fp8_e5m2": 2, "fp6_e3m2": 2, "fp6_e2m3": 3, "fp4_e2m1": 1, "int8": 6}


@pytest.mark.parametrize("name", BLOCK_FORMATS)
def test_ceil_never_saturates_the_block_max(name):
    """Under ceil the block max is only rounded (error <= half an element step); under floor a
    block max whose mantissa exceeds max_elem's is clamped, by more than that."""
    x = spread(256, 32, seed=15)
    i = x.abs().argmax(dim=1, keepdim=True)
    amax = x.gather(1, i).abs().double()
    # half an element step at the amax; int8's uniform step is relative to X, up to 2**(fl+1)
    half_step = torch.exp2(torch.floor(torch.log2(amax)) - ELEM_MBITS[name] - 1)
    half_step = half_step * (2 if name == "int8" else 1)
    y = quant.quantize(x, name, scale_rule="ceil")
    err = (y.gather(1, i).abs().double() - amax).abs()
    assert (err <= half_step).all()
    if name != "int8":  # 127/64 leaves int8 almost nothing to clamp
        yf = quant.quantize(x, name, scale_rule="floor")
        errf = (yf.gather(1, i).abs().double() - amax).abs()
        assert (errf > half_step).sum() >= 5, "floor must saturate some of these blocks"


def test_ceil_scale_exact_for_subnormal_block_max():
    amax = torch.tensor([1.975 * 2.0**-127])  # fp32 subnormal; 1.975 · 2**-127 <= 127/64 · 2**-127
    a = Fr(float(amax))
    assert TWO**-127 * MAX["int8"] >= a  # so the smallest admissible X is 2**-127
    x = torch.cat([amax, torch.tensor([2.0**-133])])  # probe: one int8 step (2**-6) at X = 2**-127
    y = quant.quantize(x, "int8", scale_rule="ceil")
    assert y.tolist() == ref_block(x.tolist(), "int8", rule="ceil")
    assert y[1].item() == 2.0**-133


# ---------------------------------------------------------------------------------------------
# UE4M3 / UE5M3 block scales (NVFP4) and the global scale


def test_ue4m3_scale_is_round_to_nearest_even_of_amax_over_6():
    # amax/6 = 1.0625 lies halfway between 1.0 and 1.125: RNE picks 1.0 (even), X·6 = 6.
    # amax/6 = 1.1875 lies halfway between 1.125 and 1.25: RNE picks 1.25, X·6 = 7.5.
    x = torch.tensor([[6.375] + [0.0] * 15, [7.125] + [0.0] * 15, [6 * 1.124] + [0.0] * 15])
    y = quant.quantize(x, "fp4_e2m1", block_size=16, scale="ue4m3")
    assert y[:, 0].tolist() == [6.0, 7.5, float(torch.tensor(6 * 1.125))]


@pytest.mark.parametrize("scale", ["ue4m3", "ue5m3"])
@pytest.mark.parametrize("name", ["fp4_e2m1", "fp6_e2m3", "fp8_e4m3"])
def test_float_scale_matches_exact_reference(scale, name):
    # magnitudes span overflow of the scale, normal and subnormal scales and zero scales
    lo = -30 if scale == "ue5m3" else -22
    x = spread(192, 48, seed=16, lo=lo, hi=20)
    # blocks whose amax / max_elem is exactly halfway between two scale values (RNE ties)
    g = GRID[scale]
    mids = [(g[i] + g[i + 1]) / 2 for i in range(0, len(g) - 1, 3)]
    mids = [m for m in mids if f32(m * MAX[name]) == m * MAX[name]][:96]
    assert len(mids) >= 20
    a = torch.tensor([[float(m * MAX[name])] for m in mids])
    gen = torch.Generator().manual_seed(36)
    x[: len(mids), :16] = (torch.rand(len(mids), 16, generator=gen) * 2 - 1) * a
    x[: len(mids), 0] = a[:, 0]
    y = quant.quantize(x, name, block_size=16, scale=scale)
    assert_same(y, ref_quantize(x, name, block=16, scale=scale), x)
    assert (y.view(-1, 16) == 0).all(dim=1).any(), "some blocks must have a zero scale"


def test_float_scale_saturates_at_its_max():
    x = torch.tensor([[6 * 448 * 2.0, 1.0] + [0.0] * 14, [6 * 61440 * 4.0, 3.0] + [0.0] * 14])
    y4 = quant.quantize(x[:1], "fp4_e2m1", block_size=16, scale="ue4m3")
    assert y4[0, :2].tolist() == [6 * 448.0, 0.0]  # s = 448: 1/448 rounds to 0
    y5 = quant.quantize(x[1:], "fp4_e2m1", block_size=16, scale="ue5m3")
    assert y5[0, :2].tolist() == [6 * 61440.0, 0.0]


def test_block_with_zero_ue4m3_scale_is_zeroed():
    t = 6 * 2.0**-10  # amax/6 = 2**-10 is half the smallest UE4M3 subnormal: ties to 0
    amaxes = torch.tensor([t, t * 0.75, t * 0.01])
    amaxes = torch.cat([amaxes, torch.nextafter(torch.tensor([t]), torch.tensor([0.0]))])
    x = torch.rand(amaxes.numel(), 16) * amaxes[:, None]
    x[:, 5] = -amaxes
    y = quant.quantize(x, "fp4_e2m1", block_size=16, scale="ue4m3")
    assert torch.equal(y, torch.zeros_like(y))
    # just above the tie the scale rounds up to 2**-9 and the max comes back as 3 · 2**-9
    up = torch.nextafter(torch.tensor([t]), torch.tensor([1.0]))
    yu = quant.quantize(torch.cat([up, torch.zeros(15)]), "fp4_e2m1", block_size=16, scale="ue4m3")
    assert yu[0].item() == 3 * 2.0**-9
    # UE5M3 reaches 2**8 further down: the same blocks are not zero there
    y5 = quant.quantize(x, "fp4_e2m1", block_size=16, scale="ue5m3")
    assert (y5 != 0).any(dim=1).all()


def test_ue5m3_is_ue4m3_shifted_by_256():
    """UE5M3 (bias 15) is UE4M3's grid times 2**-8 below 448 · 2**-8: a block quantized with
    UE5M3, times 256, equals the block times 256 quantized with UE4M3 — also for blocks 256×
    too small for UE4M3, whose scale would round to zero there."""
    x = spread(256, 64, seed=17, lo=-24, hi=-4)
    s = x.view(-1, 16).abs().amax(1) * 256 / 6
    assert (s <= 448).all()
    x256 = x * 256
    assert torch.equal(x256 / 256, x)
    y5 = quant.quantize(x, "fp4_e2m1", block_size=16, scale="ue5m3")
    y4 = quant.quantize(x256, "fp4_e2m1", block_size=16, scale="ue4m3")
    assert torch.equal(y5 * 256, y4)
    bmax = x.view(-1, 16).abs().amax(1)
    small = ((bmax < 6 * 2.0**-10) & (bmax > 6 * 2.0**-17)).nonzero().flatten()
    assert small.numel() > 10, "some blocks must be too small for UE4M3 itself"
    y4_direct = quant.quantize(x, "fp4_e2m1", block_size=16, scale="ue4m3").view(-1, 16)
    assert (y4_direct[small] == 0).all()
    assert (y5.view(-1, 16)[small] != 0).any(dim=1).all()


@pytest.mark.parametrize("scale", ["ue4m3", "ue5m3"])
def test_global_scale_matches_exact_reference(scale):
    x = spread(64, 48, seed=18, lo=-12, hi=12) * 1e-3
    y = quant.quantize(x, "fp4_e2m1", block_size=16, scale=scale, global_scale=True)
    g = ref_global_scale(x, "fp4_e2m1", scale)
    assert_same(y, ref_quantize(x, "fp4_e2m1", block=16, scale=scale, g=g), x)
    assert torch.equal(
        quant.quantize(x, "nvfp4"),
        quant.quantize(x, "fp4_e2m1", block_size=16, scale="ue4m3", global_scale=True),
    )


@pytest.mark.parametrize("scale", ["ue4m3", "ue5m3"])
@pytest.mark.parametrize("global_scale", [False, True])
def test_elements_are_multiplied_by_the_fp32_reciprocal_of_the_scale(scale, global_scale):
    """y = x · fp32(1/S) (two-level: x · fp32(fp32(1/g) / s)), not x / S: elements placed at
    fp4 midpoints times S land a rounding error of that reciprocal away from the tie, so the
    convention decides their codes. The expected values come from the exact reference."""
    gen = torch.Generator().manual_seed(37)
    rows = 256
    amax = (torch.rand(rows, generator=gen) + 1) * torch.exp2(
        torch.randint(-6, 6, (rows,), generator=gen).float()
    )
    amax[0] = 2.0**7  # the tensor max (fixes g); every block max is below it
    g = ref_global_scale(amax[:, None], "fp4_e2m1", scale) if global_scale else None
    mids = [Fr(1, 4), Fr(3, 4), Fr(5, 4), Fr(7, 4), Fr(5, 2), Fr(7, 2), Fr(5)]
    x = []
    for a in amax.tolist():
        s = f32(Fr(a) / 6) if g is None else f32(f32(Fr(a) / 6) / g)
        sq = grid_round(s, scale)
        S = sq if g is None else f32(g * sq)
        body = [float(f32(m * S)) * (-1) ** i for i, m in enumerate(mids * 3)][:15]
        x.append([a, *body])
    x = torch.tensor(x)
    kw = {"block_size": 16, "scale": scale, "global_scale": global_scale}
    y = quant.quantize(x, "fp4_e2m1", **kw)
    want = ref_quantize(x, "fp4_e2m1", block=16, scale=scale, g=g)
    assert_same(y, want, x)
    # the reciprocal's rounding must matter here, or this test would prove nothing
    div = torch.tensor([[float(v) for v in _ref_block_divide(row, scale, g)] for row in x.tolist()])
    assert not torch.equal(div, want)


def _ref_block_divide(vals, scale, g):
    """The reference but with y = x / S exactly (the convention the implementation must not use)."""
    xs = [Fr(v) for v in vals]
    s = f32(max(abs(v) for v in xs) / 6)
    s = s if g is None else f32(s / g)
    sq = grid_round(s, scale)
    S = sq if g is None else f32(g * sq)
    return [f32(grid_round(v / S, "fp4_e2m1") * S) for v in xs]


def test_global_scale_puts_the_largest_block_at_the_top_of_the_scale_grid():
    # the block holding the tensor amax gets s = amax_b / 6 / g ≈ 448: it rounds to UE4M3's max
    x = spread(8, 64, seed=19, lo=-30, hi=-26)
    y = quant.quantize(x, "nvfp4")
    i = x.abs().argmax()
    assert abs(y.flatten()[i].item()) == pytest.approx(abs(x.flatten()[i].item()), rel=2**-20)


def test_global_scale_needs_a_float_scale_format():
    with pytest.raises(ValueError, match="global_scale"):
        quant.quantize(torch.ones(32), "fp8_e4m3", scale="e8m0", global_scale=True)


# ---------------------------------------------------------------------------------------------
# Stochastic rounding


def _neighbours(v: Fr, name: str) -> tuple[Fr, Fr]:
    g = GRID[name]
    a = abs(v)
    i = bisect.bisect_right(g, a) - 1
    lo, hi = (g[i], g[i]) if g[i] == a else (g[i], g[i + 1])
    return (lo, hi) if v >= 0 else (-hi, -lo)


@pytest.mark.parametrize("name, pin_exp", [("fp4_e2m1", -3), ("fp8_e4m3", 0), ("int8", 4), ("fp6_e3m2", 7)])
def test_stochastic_rounding_is_unbiased_and_picks_a_neighbour(name, pin_exp):
    R = 4000
    rnd = random.Random(20)
    X = 2.0**pin_exp  # the block scale, fixed by a pinning element max · X
    vals = [rnd.uniform(-1, 1) * float(MAX[name]) * X for _ in range(31)]
    vals = [float(torch.tensor(v)) for v in vals]  # fp32 values
    row = torch.tensor([float(MAX[name]) * X, *vals])
    x = row.repeat(R, 1)
    gen = torch.Generator().manual_seed(21)
    y = quant.quantize(x, name, rounding="stochastic", generator=gen)
    assert (y[:, 0] == row[0]).all()
    zs = []
    for j, v in enumerate(vals, start=1):
        lo, hi = (b * Fr(X) for b in _neighbours(Fr(v) / Fr(X), name))
        col = y[:, j].double()
        assert ((col == float(lo)) | (col == float(hi))).all(), (v, set(col.tolist()))
        if lo == hi:
            continue
        p = float((Fr(v) - lo) / (hi - lo))  # probability of rounding up
        sigma = math.sqrt(p * (1 - p) / R) * float(hi - lo)
        zs.append((col.mean().item() - v) / sigma)
    assert len(zs) >= 25
    # Each mean is within 3σ of x (a seeded draw; allowing one 3σ excursion in ~30 and none past
    # 4.5σ keeps the test robust to a change in how the uniforms are drawn), and no overall bias.
    assert sum(abs(z) > 3 for z in zs) <= 1 and max(abs(z) for z in zs) < 4.5, zs
    assert abs(sum(zs) / math.sqrt(len(zs))) < 3.5, zs


def test_stochastic_rounding_bf16_elementwise():
    R = 2000
    g = torch.Generator().manual_seed(22)
    vals = torch.randn(64, generator=g) * torch.exp2(torch.randint(-30, 30, (64,), generator=g).float())
    x = vals.repeat(R, 1)
    y = quant.quantize(x, "bf16", rounding="stochastic", generator=torch.Generator().manual_seed(23))
    down = (vals.view(torch.int32) & ~0xFFFF).view(torch.float32)  # truncation toward zero
    up = ((vals.view(torch.int32) & ~0xFFFF) + 0x10000).view(torch.float32)
    assert ((y == down) | (y == up)).all()
    p = ((vals - down) / (up - down)).double()
    sigma = (p * (1 - p) / R).sqrt() * (up - down).double().abs()
    assert (sigma > 0).sum() >= 60
    z = ((y.double().mean(0) - vals.double()) / sigma)[sigma > 0]
    assert (z.abs() > 3).sum() <= 2 and z.abs().max() < 4.5, z


def test_stochastic_rounding_reproducible_with_generator():
    x = spread(64, 64, seed=24)
    for name in ("fp4_e2m1", "fp8_e5m2", "nvfp4", "bf16"):
        a = quant.quantize(x, name, rounding="stochastic", generator=torch.Generator().manual_seed(5))
        b = quant.quantize(x, name, rounding="stochastic", generator=torch.Generator().manual_seed(5))
        c = quant.quantize(x, name, rounding="stochastic", generator=torch.Generator().manual_seed(6))
        assert torch.equal(a, b), name
        assert not torch.equal(a, c), name
        assert not torch.equal(a, quant.quantize(x, name)), name


# ---------------------------------------------------------------------------------------------
# NaN / Inf


@pytest.mark.parametrize("name", BLOCK_FORMATS)
@pytest.mark.parametrize(
    "scale, rule",
    [("e8m0", "floor"), ("e8m0", "ceil"), ("ue4m3", "floor"), ("ue5m3", "floor"), ("fp32", "floor")],
)
def test_nan_or_inf_poisons_exactly_its_block(name, scale, rule):
    x = spread(4, 96, seed=25, lo=-4, hi=4)
    bad = x.clone()
    bad[0, 5] = float("nan")
    bad[1, 40] = float("inf")
    bad[2, 95] = float("-inf")
    bad[3, 33] = float("inf")
    bad[3, 34] = float("nan")
    kw = {"block_size": 16 if scale.startswith("ue") else 32, "scale": scale, "scale_rule": rule}
    y = quant.quantize(bad, name, **kw)
    clean = quant.quantize(x, name, **kw)
    b = kw["block_size"]
    poisoned = torch.zeros_like(x, dtype=torch.bool)
    for r, c in [(0, 5), (1, 40), (2, 95), (3, 33)]:
        poisoned[r, c // b * b : c // b * b + b] = True
    assert y[poisoned].isnan().all()
    assert not y[~poisoned].isnan().any()
    assert torch.equal(y[~poisoned], clean[~poisoned])


def test_nan_block_under_global_scale_and_elementwise():
    x = spread(4, 64, seed=26, lo=-4, hi=4)
    x[1, 20] = float("nan")
    y = quant.quantize(x, "nvfp4")
    assert y[1, 16:32].isnan().all()
    assert torch.isfinite(y[:, :16]).all() and torch.isfinite(y[[0, 2, 3]]).all()
    x[2, 3] = float("-inf")
    yb = quant.quantize(x, "bf16")
    assert yb[1, 20].isnan() and yb[2, 3] == float("-inf")
    assert torch.isfinite(yb).sum() == x.numel() - 2


# ---------------------------------------------------------------------------------------------
# Shapes, axes, dtypes

SHAPE_CASES = [
    ("fp8_e4m3", {}),
    ("fp4_e2m1", {"block_size": 16, "scale": "ue4m3"}),
    ("int8", {"scale_rule": "ceil"}),
]


@pytest.mark.parametrize("name, kw", SHAPE_CASES)
def test_ragged_last_block_is_its_own_block(name, kw):
    x = spread(12, 50, seed=27)
    b = kw.get("block_size", 32)
    y = quant.quantize(x, name, **kw)
    full = (50 // b) * b
    parts = [quant.quantize(x[:, :full], name, **kw)]
    parts.append(quant.quantize(x[:, full:].contiguous(), name, **{**kw, "block_size": 50 - full}))
    assert torch.equal(y, torch.cat(parts, dim=1))
    assert_same(
        y, ref_quantize(x, name, block=b, scale=kw.get("scale", "e8m0"), rule=kw.get("scale_rule", "floor"))
    )


@pytest.mark.parametrize("name, kw", SHAPE_CASES)
def test_axis_zero_is_the_transpose(name, kw):
    x = spread(50, 24, seed=28)  # blocks along dim 0 are ragged too
    y0 = quant.quantize(x, name, axis=0, **kw)
    assert torch.equal(y0, quant.quantize(x.t().contiguous(), name, axis=-1, **kw).t())
    assert torch.equal(y0, quant.quantize(x, name, axis=-2, **kw))
    assert not torch.equal(y0, quant.quantize(x, name, **kw))


@pytest.mark.parametrize("name, kw", SHAPE_CASES)
def test_three_d_inputs(name, kw):
    x = spread(6 * 5, 40, seed=29).view(6, 5, 40)
    y = quant.quantize(x, name, **kw)
    assert y.shape == x.shape
    assert torch.equal(y, quant.quantize(x.reshape(30, 40), name, **kw).view(6, 5, 40))
    x2 = spread(6 * 40, 5, seed=30).view(6, 40, 5)
    for axis in (1, -2):
        ya = quant.quantize(x2, name, axis=axis, **kw)
        want = quant.quantize(x2.movedim(1, -1).contiguous(), name, **kw).movedim(-1, 1)
        assert torch.equal(ya, want)
    y0 = quant.quantize(x2, name, axis=0, **kw)
    assert torch.equal(y0, quant.quantize(x2.movedim(0, -1).contiguous(), name, **kw).movedim(-1, 0))


@pytest.mark.parametrize("name, kw", SHAPE_CASES)
def test_non_contiguous_inputs(name, kw):
    W = spread(48, 64, seed=31)
    Wt = W.t()
    assert not Wt.is_contiguous()
    assert torch.equal(quant.quantize(Wt, name, **kw), quant.quantize(Wt.contiguous(), name, **kw))
    assert torch.equal(quant.quantize(Wt, name, axis=0, **kw), quant.quantize(W, name, **kw).t())
    s = W[:, ::2]
    assert torch.equal(quant.quantize(s, name, **kw), quant.quantize(s.contiguous(), name, **kw))
    assert torch.equal(
        quant.quantize(s, name, axis=0, **kw), quant.quantize(s.contiguous(), name, axis=0, **kw)
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", [*BLOCK_FORMATS, "nvfp4", "bf16", "fp16"])
def test_input_dtype_is_preserved(dtype, name):
    x = spread(16, 64, seed=32, lo=-4, hi=4).to(dtype)
    y = quant.quantize(x, name)
    assert y.dtype == dtype and y.shape == x.shape
    want = quant.quantize(x.float(), name).to(dtype)
    assert torch.equal(y, want)
    if dtype == torch.bfloat16 and name in BLOCK_FORMATS[:5]:
        # the dequantized values (<= 4 significant bits) are exact in bf16
        assert torch.equal(y.float(), quant.quantize(x.float(), name))


def test_scalar_and_empty_inputs():
    y = quant.quantize(torch.tensor(0.3), "fp8_e4m3")
    assert y.shape == () and y.item() == ref_block([float(torch.tensor(0.3))], "fp8_e4m3")[0] == 0.3125
    for shape in [(0, 32), (3, 0), (0,)]:
        e = torch.zeros(shape)
        assert quant.quantize(e, "fp8_e4m3").shape == e.shape
        assert quant.quantize(e, "fp8_e4m3", axis=0).shape == e.shape


def test_rejects_bad_arguments():
    with pytest.raises(TypeError):
        quant.quantize(torch.ones(4, dtype=torch.int32), "fp8_e4m3")
    with pytest.raises(ValueError):
        quant.quantize(torch.ones(4), "fp8_e4m3", block_size=0)
    with pytest.raises(ValueError):
        quant.quantize(torch.ones(4), "fp8_e4m3", rounding="up")
    with pytest.raises(ValueError):
        quant.quantize(torch.ones(4), "fp8_e4m3", scale_rule="round")
    with pytest.raises(ValueError):
        quant.set_backend("jit")


def test_out_of_range_axis_raises():
    with pytest.raises(IndexError):
        quant.quantize(torch.ones(4, 32), "fp8_e4m3", axis=2)


# ---------------------------------------------------------------------------------------------
# clip_fraction


def test_clip_fraction_layernorm_block():
    g = torch.Generator().manual_seed(33)
    x = 0.875 + torch.rand(32, generator=g) * 0.125
    x = x.clamp(
        torch.nextafter(torch.tensor(0.875), torch.tensor(1.0)),
        torch.nextafter(torch.tensor(1.0), torch.tensor(0.0)),
    )
    assert ((x > 0.875) & (x < 1.0)).all()
    assert quant.clip_fraction(x, "fp8_e4m3") == 1.0
    assert torch.equal(quant.quantize(x, "fp8_e4m3"), torch.full_like(x, 0.875))


def test_clip_fraction_worked_example():
    x = torch.tensor([0.8974, 0.8963, 0.8836, 0.8847, 0.9037])
    assert quant.quantize(x, "fp8_e4m3").tolist() == [0.875] * 5
    assert quant.clip_fraction(x, "fp8_e4m3") == 1.0


def test_clip_fraction_of_exact_values_is_zero():
    # x / X exactly max_elem is not clipped
    assert quant.clip_fraction(torch.tensor([0.875, 0.5, 0.1]), "fp8_e4m3") == 0.0
    assert quant.clip_fraction(torch.tensor([1.5, -1.5, 0.25]), "fp4_e2m1") == 0.0
    assert quant.clip_fraction(torch.tensor([127 / 64, 1.0]), "int8") == 0.0
    assert quant.clip_fraction(torch.tensor([1.5, 1.7]), "fp4_e2m1") == 0.5
    assert quant.clip_fraction(torch.ones(4, 32), "fp8_e4m3") == 0.0
    assert quant.clip_fraction(torch.ones(4, 32), "fp4_e2m1") == 0.0
    assert quant.clip_fraction(torch.zeros(4, 32), "fp8_e4m3") == 0.0
    assert quant.clip_fraction(torch.randn(4, 32), "bf16") == 0.0


def test_clip_fraction_lognormal_gamma():
    g = torch.Generator().manual_seed(34)
    gamma = 0.95 * torch.exp(0.01 * torch.randn(4096, generator=g))
    assert quant.clip_fraction(gamma, "fp8_e4m3") > 0.95


@pytest.mark.parametrize("name", BLOCK_FORMATS)
@pytest.mark.parametrize("scale", ["e8m0", "ue4m3"])
def test_clip_fraction_matches_reference_count(name, scale):
    x = spread(64, 40, seed=35, lo=-6, hi=6)
    x[3, 2] = float("nan")  # these blocks (32 or 16 elements) are not counted
    x[5, 20] = float("inf")
    b = 32 if scale == "e8m0" else 16
    clipped = 0
    for row in x.tolist():
        for i in range(0, len(row), b):
            if not all(math.isfinite(v) for v in row[i : i + b]):
                continue
            blk = [Fr(v) for v in row[i : i + b]]
            amax = max(abs(v) for v in blk)
            if scale == "e8m0":
                inv = TWO ** -pow2_exponent(amax, name, "floor")
            else:
                sq = grid_round(f32(amax / MAX[name]), scale)
                inv = f32(1 / sq) if sq else Fr(0)
            clipped += sum(abs(f32(v * inv)) > MAX[name] for v in blk)
    got = quant.clip_fraction(x, name, block_size=b, scale=scale)
    assert got == clipped / x.numel()
    assert got > 0 or (name, scale) == ("int8", "e8m0")


def _float_scale_divisors() -> list[float]:
    """Every constant ``quant.mx._div`` divides a block max by: max_elem of each block element format,
    and max_elem · max_scale for each float scale format (the NVFP4-style global scale)."""
    from quant.formats import ELEM_FORMATS, SCALE_FORMATS, ScaleKind

    elems = [f.max for f in ELEM_FORMATS.values() if f.max < 1e6]  # bf16/fp16/fp32 are casts, not blocks
    scales = [f.max for f in SCALE_FORMATS.values() if f.kind is ScaleKind.FLOAT]
    return sorted(set(elems) | {e * s for e in elems for s in scales})


def test_scale_division_is_the_fp32_quotient_in_either_form_a_backend_picks():
    """Inductor lowers a division by a compile-time constant to a multiply by its reciprocal on every
    device but the CPU (and CUDA's eager path does the same with a Python scalar): in fp32 the
    compiled float scales were an ulp off on an H200 (5 of 32 cases, 2026-12-04). ``_div`` divides in
    fp64 and rounds once; for every divisor the format table can produce, both fp64 forms must give
    the correctly rounded fp32 quotient for every fp32 mantissa (one full binade, a binade whose
    quotients are fp32 subnormals, and the largest binade), while the old fp32 reciprocal does not."""
    mant = torch.arange(1 << 23, dtype=torch.int32)
    binades = [127, 127 - 135, 127 + 127]  # biased exponents: [1, 2), [2**-135, 2**-134), [2**127, 2**128)
    a = torch.cat(
        [((b << 23) | mant[:: 1 if i == 0 else 7]).view(torch.float32) for i, b in enumerate(binades)]
    )
    wrong_in_fp32 = 0
    for c in _float_scale_divisors():
        odd = int(math.frexp(c)[0] * (1 << 53))  # c's odd part m: _div's argument needs m < 2**27
        while odd % 2 == 0:
            odd //= 2
        assert odd < 2**27, c
        exact = a / torch.tensor(c, dtype=torch.float32)  # a tensor divisor: IEEE division on the CPU
        assert torch.equal(quant.mx._div(a, c).view(torch.int32), exact.view(torch.int32)), c
        recip = (a.double() * (1.0 / c)).float()  # what CUDA and Inductor compute for a / c in fp64
        assert torch.equal(recip.view(torch.int32), exact.view(torch.int32)), c
        wrong_in_fp32 += int((a * torch.tensor(1.0 / c, dtype=torch.float32) != exact).sum())
    assert wrong_in_fp32 > 0  # the fp32 reciprocal, the defect: these checks can tell the forms apart


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "fmt,kw",
    [
        ("fp8_e4m3", {"scale": "fp32"}),
        ("fp4_e2m1", {"scale": "ue4m3"}),
        ("nvfp4", {}),
        ("fp8_e5m2", {"scale": "ue4m3", "global_scale": True}),
    ],
)
@pytest.mark.parametrize("backend", ["eager", "compiled"])
def test_float_scales_on_cuda_match_the_cpu(fmt, kw, backend):
    """CUDA divides by a Python scalar as a · fl(1/c), and Inductor divides by a constant that way on
    every device but the CPU: amax / max_elem was an ulp off in about half the blocks (scale fp32:
    62,212 of 131,072 elements differed eager on an H200; the compiled kernel still failed 5 of 32
    cases once eager was fixed). Both backends on CUDA must give the CPU's eager bits."""
    x = torch.randn(256, 512, generator=torch.Generator().manual_seed(3)) * 0.37
    with quant.mx.use_backend("eager"):
        cpu = quant.quantize(x, fmt, **kw)
    with quant.mx.use_backend(backend):
        gpu = quant.quantize(x.cuda(), fmt, **kw).cpu()
    assert torch.equal(cpu.view(torch.int32), gpu.view(torch.int32))
