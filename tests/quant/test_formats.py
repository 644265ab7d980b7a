"""The format table against OCP MX v1.0, and exhaustive per-format grid tests of ``quantize``.

Every expected value here is computed independently of ``quant``: each element grid is enumerated
code by code from (ebits, mbits, bias) in pure Python (OCP MX v1.0 §5.3 tables), rounding is a
plain nearest / ties-to-even (or ties-away) search over that enumerated list, and bf16/fp16/fp8
are checked against torch's native casts. Blocks are "pinned": their first element is the format's
max, so the E8M0 scale is 2**(floor(log2 max) - emax) = 1 and the elements are compared unscaled.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from grid_reference import round_on_grid

import quant
from quant import ELEM_FORMATS, RECIPES, SCALE_FORMATS

# ---------------------------------------------------------------------------------------------
# Independent reference: OCP MX v1.0 element formats, enumerated code by code.

# name: (ebits, mbits, bias, emin, emax, max, min subnormal), transcribed from OCP MX v1.0 §5.3.
OCP_ELEM = {
    "fp8_e4m3": (4, 3, 7, -6, 8, 448.0, 2.0**-9),
    "fp8_e5m2": (5, 2, 15, -14, 15, 57344.0, 2.0**-16),
    "fp6_e3m2": (3, 2, 3, -2, 4, 28.0, 2.0**-4),
    "fp6_e2m3": (2, 3, 1, 0, 2, 7.5, 2.0**-3),
    "fp4_e2m1": (2, 1, 1, 0, 2, 6.0, 2.0**-1),
}
BLOCK_FORMATS = [*OCP_ELEM, "int8"]


def _reserved(name: str, e: int, m: int, ebits: int, mbits: int) -> bool:
    """Codes that are not finite numbers: E4M3 keeps only S.1111.111 for NaN, E5M2 (IEEE-like)
    reserves the whole top exponent for Inf/NaN, the FP6/FP4 formats have no special codes.
    The unsigned scale formats follow the same rules (UE5M3 reserves its top exponent)."""
    top_e, top_m = 2**ebits - 1, 2**mbits - 1
    if name in ("fp8_e4m3", "ue4m3"):
        return e == top_e and m == top_m
    if name in ("fp8_e5m2", "ue5m3"):
        return e == top_e
    return False


def enumerate_fp_grid(name: str, ebits: int, mbits: int, bias: int) -> list[Fraction]:
    """All non-negative finite values, in code order (which is increasing value order)."""
    out = []
    for e in range(2**ebits):
        for m in range(2**mbits):
            if _reserved(name, e, m, ebits, mbits):
                continue
            if e == 0:
                out.append(Fraction(m, 2**mbits) * Fraction(2) ** (1 - bias))
            else:
                out.append((1 + Fraction(m, 2**mbits)) * Fraction(2) ** (e - bias))
    return out


def ocp_grid(name: str) -> list[Fraction]:
    if name == "int8":
        # MXINT8: two's complement k/64 (one implicit scale of 2**-6); symmetric ±127/64.
        return [Fraction(k, 64) for k in range(128)]
    ebits, mbits, bias = OCP_ELEM[name][:3]
    return enumerate_fp_grid(name, ebits, mbits, bias)


GRIDS = {name: ocp_grid(name) for name in BLOCK_FORMATS}
GRID_FLOATS = {name: [float(v) for v in g] for name, g in GRIDS.items()}


def emax_of(name: str) -> int:
    return 0 if name == "int8" else OCP_ELEM[name][4]


def max_of(name: str) -> float:
    return 127 / 64 if name == "int8" else OCP_ELEM[name][5]


def ref_round(v: float, name: str, mode: str = "even") -> float:
    return round_on_grid(v, GRID_FLOATS[name], mode)


def signed_grid(name: str) -> list[float]:
    g = GRID_FLOATS[name]
    return [-v for v in reversed(g[1:])] + g


def pinned(values, name: str, block: int = 32) -> torch.Tensor:
    """Rows of ``block``: element 0 is max (so the E8M0 scale is exactly 1), then the values."""
    vals = torch.as_tensor(values, dtype=torch.float32).flatten()
    per = block - 1
    rows = -(-vals.numel() // per)
    body = torch.zeros(rows * per)
    body[: vals.numel()] = vals
    x = torch.cat([torch.full((rows, 1), max_of(name)), body.view(rows, per)], dim=1)
    return x


def unpinned(y: torch.Tensor, n: int) -> torch.Tensor:
    return y[:, 1:].reshape(-1)[:n]


def q_pinned(values, name: str, **kw) -> torch.Tensor:
    vals = torch.as_tensor(values, dtype=torch.float32).flatten()
    x = pinned(vals, name)
    y = quant.quantize(x, name, **kw)
    assert torch.equal(y[:, 0], x[:, 0]), "the pinning element (max) must be exact"
    return unpinned(y, vals.numel())


# ---------------------------------------------------------------------------------------------
# The table


@pytest.mark.parametrize("name", list(OCP_ELEM))
def test_fp_element_format_matches_ocp(name):
    ebits, mbits, bias, emin, emax, max_, min_sub = OCP_ELEM[name]
    f = ELEM_FORMATS[name]
    assert (f.bits, f.ebits, f.mbits) == (1 + ebits + mbits, ebits, mbits)
    assert f.max == max_
    assert f.emax == emax
    assert f.grid.emin == emin == 1 - bias
    assert f.grid.mbits == mbits
    assert f.grid.min_subnormal == min_sub
    # The enumerated grid agrees with the table: its max, smallest subnormal and emax.
    g = GRIDS[name]
    assert float(g[-1]) == max_ and float(g[1]) == min_sub and g[0] == 0
    assert math.floor(math.log2(max_)) == emax
    assert len(g) == 2 ** (ebits + mbits) - {"fp8_e4m3": 1, "fp8_e5m2": 2**mbits}.get(name, 0)


def test_int8_format_matches_ocp():
    f = ELEM_FORMATS["int8"]
    assert f.bits == 8
    assert f.max == 127 / 64 == float(GRIDS["int8"][-1])
    assert f.emax == 0
    assert f.grid.mbits == 6 and f.grid.emin == 0
    assert f.grid.min_subnormal == 2.0**-6


def test_elementwise_formats():
    bf16, fp16, fp32 = ELEM_FORMATS["bf16"], ELEM_FORMATS["fp16"], ELEM_FORMATS["fp32"]
    assert (bf16.ebits, bf16.mbits, bf16.bits) == (8, 7, 16)
    assert (fp16.ebits, fp16.mbits, fp16.bits) == (5, 10, 16)
    assert (fp32.ebits, fp32.mbits, fp32.bits) == (8, 23, 32)
    assert bf16.max == (2 - 2**-7) * 2.0**127
    assert fp16.max == 65504.0
    assert fp32.max == (2 - 2**-23) * 2.0**127
    assert bf16.grid.emin == -126 and fp16.grid.emin == -14 and fp32.grid.emin == -126
    for name in ("bf16", "fp16", "fp32"):
        spec = quant.QuantSpec.make(name)
        assert spec.block_size is None and not spec.global_scale
    assert quant.QuantSpec.make("fp32").is_identity
    assert not quant.QuantSpec.make("bf16").is_identity


@pytest.mark.parametrize(
    "name, ebits, mbits, bias, max_, min_sub",
    [("ue4m3", 4, 3, 7, 448.0, 2.0**-9), ("ue5m3", 5, 3, 15, 61440.0, 2.0**-17)],
)
def test_float_scale_formats(name, ebits, mbits, bias, max_, min_sub):
    s = SCALE_FORMATS[name]
    assert s.kind.value == "float"
    assert s.max == max_
    assert s.grid.min_subnormal == min_sub
    assert s.grid.mbits == mbits and s.grid.emin == 1 - bias
    g = enumerate_fp_grid(name, ebits, mbits, bias)
    assert float(g[-1]) == max_ and float(g[1]) == min_sub


def test_e8m0_and_fp32_scale_formats():
    e8 = SCALE_FORMATS["e8m0"]
    assert e8.kind.value == "pow2"
    assert e8.exp_range == (-127, 127)
    assert e8.max == 2.0**127
    assert SCALE_FORMATS["fp32"].kind.value == "exact"
    assert set(SCALE_FORMATS) == {"e8m0", "ue4m3", "ue5m3", "fp32"}


def test_recipes():
    nv = RECIPES["nvfp4"]
    assert (nv.elem, nv.block_size, nv.scale, nv.global_scale) == ("fp4_e2m1", 16, "ue4m3", True)
    nv5 = RECIPES["nvfp4_ue5m3"]
    assert (nv5.elem, nv5.block_size, nv5.scale, nv5.global_scale) == ("fp4_e2m1", 16, "ue5m3", False)
    for elem in BLOCK_FORMATS:
        r = RECIPES["mxint8" if elem == "int8" else "mx" + elem]
        assert (r.elem, r.block_size, r.scale, r.global_scale) == (elem, 32, "e8m0", False)
        assert r.scale_rule.value == "floor"
    assert RECIPES["bf16"].block_size is None and RECIPES["fp32"].block_size is None
    assert set(quant.precision_names()) == set(ELEM_FORMATS) | set(RECIPES)


def _spread(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.randint(-8, 9, (shape[0], 1), generator=g).float())
    return torch.randn(*shape, generator=g) * mag


def test_recipe_names_bring_their_own_block_and_scale():
    x = _spread(8, 64)
    nv = quant.quantize(x, "nvfp4", block_size=32, scale="e8m0")  # recipe overrides these
    assert torch.equal(nv, quant.quantize(x, "fp4_e2m1", block_size=16, scale="ue4m3", global_scale=True))
    assert torch.equal(
        quant.quantize(x, "nvfp4_ue5m3"), quant.quantize(x, "fp4_e2m1", block_size=16, scale="ue5m3")
    )
    for elem in BLOCK_FORMATS:
        r = "mxint8" if elem == "int8" else "mx" + elem
        assert torch.equal(quant.quantize(x, r, block_size=8), quant.quantize(x, elem, block_size=32))
    assert torch.equal(quant.quantize(x, "bf16"), x.bfloat16().float())


@pytest.mark.parametrize(
    "lookup, table",
    [(quant.elem_format, ELEM_FORMATS), (quant.scale_format, SCALE_FORMATS), (quant.recipe, RECIPES)],
)
def test_unknown_names_raise_with_the_valid_names(lookup, table):
    with pytest.raises(ValueError) as err:
        lookup("fp7_e9m9")
    msg = str(err.value)
    assert "fp7_e9m9" in msg
    for name in table:
        assert name in msg


def test_quantize_unknown_scale_lists_scale_names():
    with pytest.raises(ValueError) as err:
        quant.quantize(torch.ones(4), "fp8_e4m3", scale="e9m0")
    assert all(name in str(err.value) for name in SCALE_FORMATS)


def test_quantize_unknown_format_lists_every_valid_precision():
    with pytest.raises(ValueError) as err:
        quant.quantize(torch.ones(4), "fp8e4m3")
    missing = [n for n in quant.precision_names() if n not in str(err.value)]
    assert not missing, f"error message does not list {missing}"


# ---------------------------------------------------------------------------------------------
# Exhaustive per-format grid tests (E8M0 scale pinned to 1)


@pytest.mark.parametrize("name", BLOCK_FORMATS)
def test_every_grid_value_round_trips(name):
    vals = signed_grid(name)
    assert len(vals) == 2 * len(GRIDS[name]) - 1
    for rounding in ("even", "away", "stochastic"):
        kw = {"generator": torch.Generator().manual_seed(1)} if rounding == "stochastic" else {}
        y = q_pinned(vals, name, rounding=rounding, **kw)
        assert y.tolist() == vals, rounding


def _midpoints(name: str) -> list[float]:
    g = GRID_FLOATS[name]
    mids = [(a + b) / 2 for a, b in zip(g[:-1], g[1:], strict=True)]
    return mids + [-m for m in mids]


@pytest.mark.parametrize("name", BLOCK_FORMATS)
@pytest.mark.parametrize("mode", ["even", "away"])
def test_midpoints_tie_correctly(name, mode):
    mids = _midpoints(name)
    y = q_pinned(mids, name, rounding=mode).tolist()
    want = [ref_round(m, name, mode) for m in mids]
    assert y == want
    g = GRID_FLOATS[name]
    if mode == "away":  # every tie goes to the larger magnitude
        assert all(abs(a) == hi for a, hi in zip(y, g[1:] * 2, strict=True))
    else:  # ties land on an even code: the first midpoint (0 | min subnormal) goes to 0
        assert y[0] == 0.0
        assert all(GRID_FLOATS[name].index(abs(a)) % 2 == 0 for a in y)


def _near_midpoints(name: str) -> torch.Tensor:
    """Midpoints and their fp32 neighbours on both sides: the decisive inputs for RNE."""
    m = torch.tensor(_midpoints(name), dtype=torch.float32)
    return torch.cat([torch.nextafter(m, m * 2), torch.nextafter(m, torch.zeros_like(m))])


@pytest.mark.parametrize("name", BLOCK_FORMATS)
@pytest.mark.parametrize("mode", ["even", "away"])
def test_random_and_near_midpoint_values_round_to_nearest(name, mode):
    g = torch.Generator().manual_seed(BLOCK_FORMATS.index(name))
    top = 2.0 ** (emax_of(name) + 1)  # amax < 2**(emax+1) keeps the pinned scale at 1
    rand = (torch.rand(3000, generator=g) * 2 - 1) * top * (1 - 2**-20)
    small = torch.randn(1000, generator=g) * GRID_FLOATS[name][1] * 2  # the subnormal region
    small = small.clamp(-top / 2, top / 2)
    vals = torch.cat([rand, small, _near_midpoints(name)])
    y = q_pinned(vals, name, rounding=mode).tolist()
    want = [ref_round(v, name, mode) for v in vals.tolist()]
    bad = [(v, a, b) for v, a, b in zip(vals.tolist(), y, want, strict=True) if a != b]
    assert not bad, bad[:5]


@pytest.mark.parametrize("name", BLOCK_FORMATS)
def test_values_above_max_saturate(name):
    mx, top = max_of(name), 2.0 ** (emax_of(name) + 1)
    over = torch.linspace(mx, top, 257)[1:-1]
    over = torch.cat([over, torch.nextafter(torch.tensor([mx, top]), torch.tensor([top, 0.0]))])
    assert (over > mx).all() and (over < top).all()
    vals = torch.cat([over, -over])
    y = q_pinned(vals, name)
    assert torch.equal(y, torch.sign(vals) * mx)
    # A block whose max lies above the element max (same binade) saturates it too, without pin.
    x = torch.stack([over, -over], dim=0)[:, :32]
    assert torch.equal(quant.quantize(x, name).abs(), torch.full_like(x, mx))


def _random_blocks(rows: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.randint(-20, 21, (rows, 1), generator=g).float())
    x = torch.randn(rows, 32, generator=g) * mag
    x[:4] = x[:4].sign() * torch.rand(4, 32, generator=g)  # some blocks of uniform data
    return x


@pytest.mark.parametrize("name", BLOCK_FORMATS)
@pytest.mark.parametrize("scale", ["e8m0", "ue4m3", "ue5m3"])
@pytest.mark.parametrize("rounding", ["even", "away"])
def test_sign_symmetry(name, scale, rounding):
    x = _random_blocks(256, seed=3)
    q = quant.quantize(x, name, scale=scale, rounding=rounding)
    assert torch.equal(quant.quantize(-x, name, scale=scale, rounding=rounding), -q)
    assert torch.equal(torch.signbit(q[q != 0]), torch.signbit(x[q != 0]))


@pytest.mark.parametrize("name", [*BLOCK_FORMATS, "bf16", "fp16"])
@pytest.mark.parametrize("rule", ["floor", "ceil"])
def test_idempotent(name, rule):
    x = _random_blocks(256, seed=4)
    q = quant.quantize(x, name, scale_rule=rule)
    assert torch.equal(quant.quantize(q, name, scale_rule=rule), q)
    assert not torch.equal(q, x)


@pytest.mark.parametrize("name", BLOCK_FORMATS)
@pytest.mark.parametrize("rule", ["floor", "ceil"])
def test_power_of_two_equivariance_e8m0(name, rule):
    g = torch.Generator().manual_seed(5)
    mag = torch.exp2(torch.randint(-4, 5, (128, 1), generator=g).float())
    x = torch.randn(128, 32, generator=g) * mag
    q = quant.quantize(x, name, scale_rule=rule)
    for j in (-90, -64, -17, -3, -1, 1, 2, 9, 31, 64, 90):
        xs = x * 2.0**j
        assert torch.equal(xs / 2.0**j, x)  # the scaling itself is exact
        assert torch.equal(quant.quantize(xs, name, scale_rule=rule), q * 2.0**j), j


def _fp8_inputs(name: str) -> torch.Tensor:
    """Every bf16 and every fp16 value within ±max, the fp8 midpoints and their fp32 neighbours,
    fp32 subnormals and random fp32 values spread over all binades of the format."""
    mx = max_of(name)
    every16 = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    bf = every16.view(torch.bfloat16).float()
    hf = every16.view(torch.float16).float()
    g = torch.Generator().manual_seed(6)
    rnd = torch.randint(-(2**31), 2**31, (200_000,), generator=g, dtype=torch.int64)
    rnd = rnd.to(torch.int32).view(torch.float32)
    lo = math.log2(GRID_FLOATS[name][1]) - 3
    spread = torch.exp2(torch.rand(100_000, generator=g) * (math.log2(mx) - lo) + lo)
    spread = spread * torch.where(torch.rand(100_000, generator=g) < 0.5, -1.0, 1.0)
    sub = torch.tensor([2.0**-149, 2.0**-130, -(2.0**-127), 1e-40])
    x = torch.cat([bf, hf, rnd, spread, _near_midpoints(name), sub])
    return x[torch.isfinite(x) & (x.abs() <= mx)]


@pytest.mark.parametrize("name, dtype", [("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)])
def test_fp8_matches_torch_native_cast(name, dtype):
    assert ELEM_FORMATS[name].torch_dtype is dtype
    x = _fp8_inputs(name)
    assert x.numel() > 150_000
    y = q_pinned(x, name)
    want = x.to(dtype).float()
    bad = (y != want).nonzero().flatten()
    assert bad.numel() == 0, list(
        zip(x[bad[:5]].tolist(), y[bad[:5]].tolist(), want[bad[:5]].tolist(), strict=True)
    )
    # and every native fp8 value is a value of our enumerated grid
    every8 = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).float()
    fin = every8[torch.isfinite(every8)]
    assert sorted(set(fin.abs().tolist())) == GRID_FLOATS[name]


# ---------------------------------------------------------------------------------------------
# Element-wise formats: bf16, fp16, fp32


def _fp32_probe(n: int, seed: int) -> torch.Tensor:
    """Random fp32 bit patterns (all binades, subnormals included) plus edge values."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**31), 2**31, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    sub_bits = torch.randint(1, 2**23, (n // 8,), generator=g, dtype=torch.int64).to(torch.int32)
    tiny = torch.tensor([1, 2, 3, 0x7FFF, 0x8000, 0x8001, 0x18000, 0x7FFFFF, 0x800000], dtype=torch.int32)
    x = torch.cat([bits, sub_bits, tiny]).view(torch.float32)
    return torch.cat([x, -x[-(n // 8 + tiny.numel()) :], torch.tensor([0.0, -0.0, 1.0, -1.0])])


def _half_ulp_neighbours(v: torch.Tensor, dtype) -> torch.Tensor:
    """Midpoints between adjacent values of ``dtype`` and their fp32 neighbours."""
    v = v[torch.isfinite(v)].float()
    up = torch.nextafter(v.to(dtype), torch.tensor(float("inf"), dtype=dtype)).float()
    ok = torch.isfinite(up)
    mid = ((v[ok].double() + up[ok].double()) / 2).float()  # exact: one extra bit
    return torch.cat([mid, torch.nextafter(mid, mid * 2), torch.nextafter(mid, torch.zeros_like(mid))])


def test_bf16_matches_torch_cast():
    x = _fp32_probe(1_000_000, seed=7)
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    x = torch.cat([x, _half_ulp_neighbours(every, torch.bfloat16)])
    bmax = ELEM_FORMATS["bf16"].max
    x = x[torch.isfinite(x) & (x.abs() <= bmax)]
    assert (x.abs() < 2.0**-126).sum() > 100_000  # plenty of fp32 subnormals
    y = quant.quantize(x, "bf16")
    want = x.to(torch.bfloat16).float()
    assert y.dtype == torch.float32
    bad = (y != want).nonzero().flatten()
    assert bad.numel() == 0, list(zip(x[bad[:5]].tolist(), y[bad[:5]].tolist(), strict=True))


def test_fp16_matches_torch_cast():
    g = torch.Generator().manual_seed(8)
    n = 400_000
    mant = torch.rand(n, generator=g) + 1
    e = torch.randint(-30, 16, (n,), generator=g).float()
    spread = mant * torch.exp2(e) * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16)
    x = torch.cat([spread, _fp32_probe(200_000, seed=9), _half_ulp_neighbours(every, torch.float16)])
    x = x[torch.isfinite(x) & (x.abs() <= 65504.0)]
    assert (x.abs() < 2.0**-14).sum() > 10_000  # the fp16 subnormal range is exercised
    y = quant.quantize(x, "fp16")
    want = x.to(torch.float16).float()
    bad = (y != want).nonzero().flatten()
    assert bad.numel() == 0, list(zip(x[bad[:5]].tolist(), y[bad[:5]].tolist(), strict=True))


@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_elementwise_overflow_saturates_but_inf_stays_inf(name):
    mx = ELEM_FORMATS[name].max
    f32max = torch.finfo(torch.float32).max
    over = torch.tensor([mx * (1 + 2**-12), mx * 1.01, mx * 2, f32max, 1e30 if name == "fp16" else f32max])
    over = torch.cat([over, torch.nextafter(torch.tensor([mx]), torch.tensor([f32max]))])
    over = over[torch.isfinite(over) & (over > mx)]
    assert over.numel() >= 3
    y = quant.quantize(torch.cat([over, -over]), name)
    assert torch.equal(y, torch.cat([torch.full_like(over, mx), torch.full_like(over, -mx)]))
    special = torch.tensor([float("inf"), float("-inf"), float("nan"), 1.0])
    ys = quant.quantize(special, name)
    assert ys[0] == float("inf") and ys[1] == float("-inf") and ys[2].isnan() and ys[3] == 1.0


def test_fp32_is_identity():
    x = torch.cat([_fp32_probe(10_000, seed=10), torch.tensor([float("inf"), float("-inf"), float("nan")])])
    y = quant.quantize(x, "fp32")
    assert torch.equal(y.view(torch.int32), x.view(torch.int32))
    assert torch.equal(
        quant.quantize(x, "fp32", block_size=7, scale="ue4m3").view(torch.int32), x.view(torch.int32)
    )


@pytest.mark.parametrize("name, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_elementwise_input_of_own_dtype_is_unchanged(name, dtype):
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    y = quant.quantize(every, name)
    assert y.dtype == dtype
    fin = torch.isfinite(every)
    assert torch.equal(y[fin], every[fin])
