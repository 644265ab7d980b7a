"""What the compiled quantizer's graph takes as inputs: the tensor and its symbolic shape, nothing
else. With ``torch.compile(dynamic=True)`` torch lifts every int and float it meets into graph inputs
unless told to specialize them, the spec's too (emin, mbits, the E8M0 exponent range, max_elem);
Inductor then hands them to the CUDA kernel as int64 arguments, the shifts that build fp32 bit
patterns promote to int64, and Triton refuses to bitcast them to fp32: on an H200 no quantizer kernel
compiled at all (benchmarks/gpu_check.py, 2026-12-04). The CPU backend compiles either graph, so this
checks the graph itself."""

from __future__ import annotations

import pytest
import torch

import quant

pytestmark = pytest.mark.compile


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "nvfp4"])  # E8M0 bits; float scales with the global scale
def test_the_compiled_quantizer_takes_only_the_tensor_and_its_shape(monkeypatch, fmt):
    graphs: list[list] = []

    def record(gm, example_inputs):
        graphs.append([n for n in gm.graph.nodes if n.op == "placeholder"])
        return gm.forward

    real_compile = torch.compile
    # The recorder instead of Inductor (whose options it does not take).
    monkeypatch.setattr(
        torch, "compile", lambda fn, **kw: real_compile(fn, dynamic=kw["dynamic"], backend=record)
    )
    quant.mx._compiled.cache_clear()
    torch._dynamo.reset()
    try:
        with quant.mx.use_backend("compiled"):
            x = torch.randn(64, 96)
            quant.quantize(x, fmt)
    finally:
        quant.mx._compiled.cache_clear()  # the next caller gets inductor again
        torch._dynamo.reset()
    assert len(graphs) == 1
    tensors = [n.name for n in graphs[0] if isinstance(n.meta["example_value"], torch.Tensor)]
    scalars = [n.name for n in graphs[0] if not isinstance(n.meta["example_value"], torch.Tensor)]
    assert tensors == ["l_x_"]
    # Only the shape's symbols (Dynamo names them s<N>); a spec field would be L_spec_… or G_….
    assert scalars and all(name.startswith("s") and name[1:].isdigit() for name in scalars), scalars


def test_the_compiled_quantizer_divides_as_eager_does(monkeypatch):
    """Triton's fp32 ``x / y`` is the approximate div.full unless Inductor is told to round: the
    float scales of 5 of 32 compiled cases differed from eager on an H200. The quantizer's compile
    asks for IEEE division under whichever name this torch gives the option."""
    seen: list[dict] = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw) or fn)
    quant.mx._compiled.cache_clear()
    try:
        quant.mx._compiled(quant.mx._fake_quant_blocks)
    finally:
        quant.mx._compiled.cache_clear()
    (kw,) = seen
    options = kw.get("options") or {}
    assert set(options) & {"eager_numerics.division_rounding", "emulate_divison_rounding"}, kw
    assert all(options.values())
