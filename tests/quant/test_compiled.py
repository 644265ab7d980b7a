"""The torch.compile fast path of ``quant.mx`` is bit-identical to the eager reference.

Each distinct QuantSpec (and input dtype) is one compiled graph, costing ~2-6 s on first use on
CPU (plus ~20 s Inductor warm-up once per process), so the cases below are chosen to cover the
code paths with few graphs: both input dtypes for every scale kind and rule, the element-wise path,
a ragged 3-D shape, blocking along axis 0, and stochastic rounding with a seeded generator.

Two traps make a naive "compiled == eager" test pass without compiling anything:
1. Past dynamo's ``recompile_limit`` (8 graphs per function by default; every spec, dtype and
   rank is a graph of the same function) a call silently runs eagerly. This module starts from an
   empty dynamo cache and runs with ``fail_on_recompile_limit_hit``, so such a fallback is an
   error; since the module compiles more than 8 graphs it also checks that quant.mx lifts the limit.
2. A backend switch that never reaches torch.compile: each new spec must compile a dynamo frame.
"""

from __future__ import annotations

import pytest
import torch
from mx_cases import assert_bitwise, hard_input
from torch._dynamo.utils import counters

import quant

pytestmark = pytest.mark.compile


@pytest.fixture(scope="module", autouse=True)
def _fresh_compiler():
    """Start from an empty dynamo cache (earlier modules may have filled it) and make a fallback
    to eager at the recompile limit an error instead of a silent pass."""
    torch._dynamo.reset()
    counters.clear()  # reset() keeps dynamo's counters: count this module's graphs only
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield


_COMPILED_CALLS: list[str] = []  # every call through quant.mx's torch.compile'd function


@pytest.fixture(autouse=True)
def _count_compiled_calls(monkeypatch):
    real = quant.mx._compiled
    monkeypatch.setattr(quant.mx, "_compiled", lambda fn: _COMPILED_CALLS.append(fn.__name__) or real(fn))


def _eager_and_compiled(x: torch.Tensor, fmt: str, seed: int | None = None, new_graph=True, **kw):
    """(eager, compiled) results. The compiled call must go through torch.compile, in one graph (a
    graph break splits the quantizer into several compiled frames with eager code between them: slower
    to compile and to run), and, with ``new_graph`` (no earlier test compiled this spec/dtype/rank),
    compile a frame."""
    gen = (lambda: torch.Generator().manual_seed(seed)) if seed is not None else (lambda: None)
    quant.set_backend("eager")
    eager = quant.quantize(x, fmt, generator=gen(), **kw)
    frames, calls = counters["frames"]["ok"], len(_COMPILED_CALLS)
    quant.set_backend("compiled")
    compiled = quant.quantize(x, fmt, generator=gen(), **kw)
    assert len(_COMPILED_CALLS) > calls, "the compiled backend did not run torch.compile's function"
    assert not new_graph or counters["frames"]["ok"] > frames, "the compiled backend compiled nothing"
    assert not counters["graph_break"], (
        f"graph breaks in the compiled quantizer: {dict(counters['graph_break'])}"
    )
    return eager, compiled


BLOCK_CASES = [
    # (format, kwargs, also with bf16 input): bf16 inputs only add the exact upcast and the final
    # cast, so they are covered once per scale kind and not for every rule (compile time).
    ("fp8_e4m3", {}, True),
    ("fp8_e4m3", {"scale_rule": "ceil"}, False),
    ("fp4_e2m1", {}, True),
    ("fp4_e2m1", {"scale_rule": "ceil"}, False),
    ("nvfp4", {}, True),
    ("nvfp4_ue5m3", {}, True),
    ("int8", {}, False),
]
_PARAMS = [
    pytest.param(f, kw, dt, id=f + "".join(f"-{v}" for v in kw.values()) + f"-{name}")
    for f, kw, with_bf16 in BLOCK_CASES
    for dt, name in [(torch.float32, "fp32"), (torch.bfloat16, "bf16")]
    if dt is torch.float32 or with_bf16
]


@pytest.mark.parametrize("fmt,kw,dtype", _PARAMS)
def test_block_formats_bit_identical(fmt, kw, dtype):
    x = hard_input((48, 256), dtype)
    eager, compiled = _eager_and_compiled(x, fmt, **kw)
    assert_bitwise(eager, compiled, f"{fmt} {kw} {dtype}")
    assert eager.isnan().any() and not eager.isnan().all()  # the Inf/NaN rows took effect


def test_elementwise_bf16_bit_identical():
    x = hard_input((48, 256), torch.float32)
    eager, compiled = _eager_and_compiled(x, "bf16")
    assert_bitwise(eager, compiled, "bf16 element-wise")
    assert torch.isinf(eager).any()  # ±Inf passes through element-wise formats


def test_ragged_3d_and_axis0_bit_identical():
    """A last dim of 70 (two full blocks and a 6-long tail), a 3-D shape, and the same data
    blocked along axis 0 (a non-trivial trailing 'post' dim and a ragged block dim)."""
    x = hard_input((3, 37, 70), torch.float32)
    eager, compiled = _eager_and_compiled(x, "fp4_e2m1", new_graph=False)  # may reuse the 2-D graph
    assert_bitwise(eager, compiled, "fp4_e2m1 ragged 3-D")
    y = hard_input((70, 96), torch.float32, seed=1).t().contiguous()  # axis 0 has 96 rows
    eager, compiled = _eager_and_compiled(y, "fp8_e4m3", axis=0, new_graph=False)
    assert_bitwise(eager, compiled, "fp8_e4m3 axis=0")


def test_stochastic_rounding_bit_identical():
    x = hard_input((48, 256), torch.float32)
    eager, compiled = _eager_and_compiled(x, "fp4_e2m1", seed=1234, rounding="stochastic")
    assert_bitwise(eager, compiled, "fp4_e2m1 stochastic")
    # another seed moves some values (the generator is really used) and still matches eager
    g = torch.Generator().manual_seed(4321)
    other = quant.quantize(x, "fp4_e2m1", rounding="stochastic", generator=g)
    assert not torch.equal(other.nan_to_num(), compiled.nan_to_num())
    quant.set_backend("eager")
    g = torch.Generator().manual_seed(4321)
    assert_bitwise(quant.quantize(x, "fp4_e2m1", rounding="stochastic", generator=g), other, "seed 2")


def test_specs_beyond_recompile_limit_stay_compiled():
    """Every spec is its own graph of one compiled function: more than dynamo's default of 8 must
    still compile, not silently fall back to eager (``fail_on_recompile_limit_hit`` is on). After
    the tests above all these graphs are cached and this is cheap; run alone it compiles 11."""
    x = hard_input((16, 64), torch.float32)
    quant.set_backend("compiled")
    for param in _PARAMS:
        fmt, kw, dtype = param.values
        quant.quantize(x.to(dtype), fmt, **kw)
    assert counters["stats"]["unique_graphs"] > 8


def test_a_fresh_grid_rounds_in_one_graph():
    """Rounding onto a grid nothing has read yet traces as one graph (fullgraph: any graph break is an
    error). The derived numbers of a Grid (emax, normal_steps) were functools.cached_property, whose
    lock dynamo cannot enter: the first compiled quantize of a spec broke into 7 graphs. A fresh Grid
    is needed to see it: the table's grids are cached by every eager call before."""
    from quant.formats import Grid, Rounding

    grid = Grid(emin=-6, mbits=3, max=448.0)  # E4M3's numbers in a new object: nothing cached on it
    fn = torch.compile(quant.mx._round_to_grid, fullgraph=True, backend="eager")  # dynamo only
    x = hard_input((4, 64), torch.float32)
    compiled = fn(x, grid, Rounding.EVEN, None)  # first: an eager call would cache the properties
    assert_bitwise(quant.mx._round_to_grid(x, grid, Rounding.EVEN, None), compiled, "E4M3 grid")
