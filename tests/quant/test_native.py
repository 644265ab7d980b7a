"""The C kernel of ``quant.native`` is bit-identical to the eager reference of ``quant.mx``.

It covers CPU fp32/bf16 block formats with round-to-nearest-even; the cases below cross every
element format with every scale kind and rule, the global scale, block sizes with and without a
ragged tail, blocks along the last dim (vectorized along the block) and along dim 0 (vectorized
along the columns, several chunks), on inputs full of edge cases (``hard_input``). NaN payloads
are not compared (PyTorch's own bf16 conversion writes two different NaNs).

The kernel has two element loops for rows of blocks of 16, 32, 64...: AVX-512 intrinsics and the
plain C loop that every other CPU runs. On a CPU with AVX-512 the identity tests run twice, the
second time on a build with ``-mno-avx512f``, so both loops are checked here.
"""

from __future__ import annotations

import platform

import pytest
import torch
from mx_cases import assert_bitwise, hard_input

import quant
from quant import native
from quant.formats import ELEM_FORMATS, ElemKind

pytestmark = pytest.mark.skipif(not native.available(), reason="no C compiler: quant.native is off")
BLOCK_FORMATS = [name for name, f in ELEM_FORMATS.items() if f.kind is ElemKind.BLOCK]

SCALES = [
    {},
    {"scale_rule": "ceil"},
    {"scale": "ue4m3"},
    {"scale": "ue5m3"},
    {"scale": "fp32"},
    {"scale": "ue4m3", "global_scale": True},
    {"scale": "ue5m3", "global_scale": True},
]


def _has_avx512() -> bool:
    return platform.machine() in ("x86_64", "AMD64") and " avx512f " in native._cpu_flags() + " "


@pytest.fixture(params=["default", "no-avx512"])
def build(request, monkeypatch):
    """The kernel as built for this CPU, then (where that one uses AVX-512) a build without it."""
    if request.param == "no-avx512":
        if not _has_avx512():
            pytest.skip("this CPU has no AVX-512: the default build is already the plain C loop")
        kernels = native._load((*native.FLAGS, "-mno-avx512f"))
        assert kernels is not None
        monkeypatch.setattr(native, "_kernels", lambda: kernels)
    return request.param


@pytest.fixture
def calls(monkeypatch):
    """Counts calls of the C kernels, so a test knows the native path really ran."""
    n = {"calls": 0}
    for name in ("fake_quant_blocks", "fake_quant_elementwise", "fake_quant_along"):
        real = getattr(native, name)

        def counted(x, spec, *axis, real=real):
            out = real(x, spec, *axis)
            n["calls"] += out is not None  # fake_quant_along declines layouts it does not take
            return out

        monkeypatch.setattr(native, name, counted)
    return n


def _both(x: torch.Tensor, fmt: str, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    quant.set_backend("eager")
    eager = quant.quantize(x, fmt, **kw)
    quant.set_backend("native")
    return eager, quant.quantize(x, fmt, **kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("scale", SCALES, ids=lambda kw: "-".join(map(str, kw.values())) or "e8m0")
@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_bit_identical_to_eager(fmt, scale, dtype, build, calls):
    x = hard_input((40, 256), dtype)
    eager, fast = _both(x, fmt, **scale)
    assert_bitwise(eager, fast, f"{fmt} {scale} {dtype}")
    assert eager.isnan().any() and not eager.isnan().all()  # the Inf/NaN rows took effect
    assert calls["calls"] == 1


@pytest.mark.parametrize("block_size", [1, 7, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("axis", [-1, 0])
def test_block_sizes_ragged_tails_and_axis0(block_size, axis, build, calls):
    """axis=0 of a (70, 600) tensor: blocks of stride 600, i.e. three column chunks of the kernel
    (256, 256, 88) and a ragged last block when block_size does not divide 70."""
    for dtype in (torch.float32, torch.bfloat16):
        x = hard_input((70, 600), dtype, block=block_size)
        for fmt in ("fp8_e4m3", "fp4_e2m1"):
            eager, fast = _both(x, fmt, block_size=block_size, axis=axis)
            assert_bitwise(eager, fast, f"{fmt} block {block_size} axis {axis} {dtype}")
            eager, fast = _both(x, fmt, block_size=block_size, axis=axis, scale="ue4m3", global_scale=True)
            assert_bitwise(eager, fast, f"{fmt} ue4m3 global, block {block_size} axis {axis} {dtype}")
    assert calls["calls"] == 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_layouts_quantized_in_place_match_eager(dtype, calls):
    """Layouts the kernel reads from the tensor's own memory (no view or copy): a contiguous tensor
    blocked along any dim, and a transposed one (W.t()) blocked along its contiguous dim."""
    x = hard_input((64, 96), dtype)
    cases = [(x, -1), (x, 0), (x.reshape(2, 32, 96), 1), (x.t(), 0), (x.t().contiguous().t(), -1)]
    for t, axis in cases:
        for kw in ({}, {"scale": "ue4m3", "global_scale": True, "block_size": 16}):
            eager, fast = _both(t, "fp8_e4m3", axis=axis, **kw)
            assert_bitwise(eager, fast, f"shape {tuple(t.shape)} strides {t.stride()} axis {axis} {kw}")
            assert fast.shape == t.shape
    assert calls["calls"] == 2 * len(cases)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_elementwise_formats_bit_identical(fmt, dtype, calls):
    """bf16/fp16 rounding of fp32 (and bf16) values: ties, subnormals of both grids, values past
    their max (saturate), ±Inf (pass through) and NaN."""
    x = hard_input((40, 256), dtype)
    tiny = torch.exp2(-torch.arange(100, 150, dtype=torch.float32)) * 1.4  # bf16 and fp32 subnormals
    edge = torch.tensor([3.3895e38, 3.3896e38, 3.4e38, 65504.0, 65519.0, 65520.0, 1e5, 2.0**-24 * 1.5])
    x = torch.cat([x.flatten(), tiny.to(dtype), edge.to(dtype), -edge.to(dtype)])
    eager, fast = _both(x, fmt)
    assert_bitwise(eager, fast, f"{fmt} element-wise {dtype}")
    assert torch.isinf(eager).any() and eager.isnan().any()
    assert calls["calls"] == 1


def test_large_tensor_uses_all_threads_and_matches(calls):
    x = torch.randn(256, 4096, generator=torch.Generator().manual_seed(0))
    eager, fast = _both(x, "nvfp4")
    assert_bitwise(eager, fast, "nvfp4 256x4096")
    assert calls["calls"] == 1 and x.numel() >= native.PARALLEL_MIN_NUMEL


def test_what_it_does_not_cover_stays_on_the_torch_paths(calls):
    x = hard_input((8, 64), torch.float32)
    quant.set_backend("native")
    quant.quantize(x.half(), "fp8_e4m3")  # fp16
    quant.quantize(x, "fp8_e4m3", rounding="away")
    quant.quantize(x, "fp8_e4m3", rounding="stochastic", generator=torch.Generator().manual_seed(0))
    quant.quantize(x, "bf16", rounding="stochastic", generator=torch.Generator().manual_seed(0))
    w = x.clone().requires_grad_()
    out = quant.quantize(w, "fp8_e4m3")  # autograd through the torch ops, as before
    assert out.requires_grad
    assert calls["calls"] == 0
    with torch.no_grad():
        quant.quantize(w, "fp8_e4m3")
    assert calls["calls"] == 1


def test_empty_and_scalar_inputs():
    quant.set_backend("native")
    assert quant.quantize(torch.empty(0, 32), "fp8_e4m3").shape == (0, 32)
    eager, fast = _both(torch.tensor(3.3), "fp4_e2m1")
    assert_bitwise(eager, fast, "0-d")


POLICIES = {
    "full MX": dict(w="fp8_e4m3", a="fp8_e4m3", g_dgrad="fp8_e5m2", g_wgrad="fp8_e5m2",
                    norm_affine="fp8_e4m3", attention=True),
    "hybrid": dict(w="fp8_e4m3", a="bf16", norm_affine="bf16", vector_ops="bf16"),
}  # fmt: skip


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
def test_converted_lm_forward_and_gradients_match_eager(policy, calls):
    """A whole model: every GEMM operand (forward, dgrad, wgrad, along their own axes), the LN
    affine weights, the attention matmuls and the bf16 vector ops go through the kernels; outputs
    and every gradient equal the eager reference bit for bit."""
    from models import LMConfig, build_lm

    policy = quant.QuantPolicy(**policy)
    tokens = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(0))
    results = {}
    for backend in ("eager", "native"):
        model = quant.convert(build_lm(LMConfig(depth=2, vocab_size=256), seed=0), policy)
        quant.set_backend(backend)
        logits = model(tokens)
        logits.square().mean().backward()
        results[backend] = [logits.detach()] + [p.grad for p in model.parameters()]
    for i, (eager, fast) in enumerate(zip(results["eager"], results["native"], strict=True)):
        assert_bitwise(eager, fast, f"tensor {i}")
    assert calls["calls"] > 20
