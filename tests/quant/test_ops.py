"""Quantized training ops: Linear/matmul forward and both gradients, norms, converter, policies."""

import copy

import pytest
import torch
import torch.nn as nn

import quant
from quant import QuantPolicy, QuantSpec, quantize_spec


def _spread(*shape, seed=0):
    """randn with a per-row magnitude spread, so blocks see different scales."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.randint(-6, 7, (shape[0], *[1] * (len(shape) - 1)), generator=g).float())
    return torch.randn(*shape, generator=g) * mag


POLICIES = [
    QuantPolicy.uniform("fp8_e4m3"),
    QuantPolicy(
        w="fp8_e4m3", a="fp8_e5m2", w_bwd="fp6_e2m3", a_bwd="fp6_e3m2", g_dgrad="fp8_e5m2", g_wgrad="int8"
    ),
    QuantPolicy(w="nvfp4", a="mxfp6_e2m3", g_dgrad="bf16"),
    QuantPolicy(w="fp4_e2m1", a="fp4_e2m1", block_size=16, scale="ue5m3"),
    QuantPolicy(w="fp8_e4m3", a="bf16"),
    QuantPolicy.uniform("bf16"),  # value-by-value formats: backward reuses the forward's rounded copies
    QuantPolicy(w="bf16", a="fp16", w_bwd="fp16", g_dgrad="bf16", g_wgrad="fp16"),
]


def _reference_linear(x, w, b, p: QuantPolicy):
    """The three GEMMs written out with explicit quantize calls and plain matmuls."""
    x2 = x.reshape(-1, x.shape[-1])
    y = quantize_spec(x2, p.spec("a"), axis=-1) @ quantize_spec(w, p.spec("w"), axis=-1).t() + b
    dy = torch.ones_like(y) * torch.linspace(-3, 3, y.shape[-1])  # a non-uniform upstream gradient
    dx = quantize_spec(dy, p.spec("g_dgrad"), axis=-1) @ quantize_spec(w, p.spec("w_bwd"), axis=0)
    dw = quantize_spec(dy, p.spec("g_wgrad"), axis=0).t() @ quantize_spec(x2, p.spec("a_bwd"), axis=0)
    return y.reshape(*x.shape[:-1], -1), dy, dx.reshape(x.shape), dw, dy.sum(0)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.w}-{p.a}-{p.g_wgrad}")
@pytest.mark.parametrize("shape", [(48, 64), (3, 37, 96)])  # 37 tokens: ragged wgrad blocks
def test_linear_matches_explicit_reference(policy, shape):
    x = _spread(*shape).requires_grad_()
    lin = nn.Linear(shape[-1], 80)
    with torch.no_grad():
        lin.weight.mul_(_spread(80, 1, seed=1))
    y_ref, dy, dx_ref, dw_ref, db_ref = _reference_linear(
        x.detach(), lin.weight.detach(), lin.bias.detach(), policy
    )
    quant.convert(lin, policy)
    y = lin(x)
    y.backward(dy.reshape(y.shape))
    assert torch.equal(y, y_ref)
    assert torch.equal(x.grad, dx_ref)
    assert torch.equal(lin.weight.grad, dw_ref)
    assert torch.allclose(lin.bias.grad, db_ref)
    # Quantization really happened: the MX result differs from the fp32 one.
    assert not torch.equal(y, nn.functional.linear(x, lin.weight, lin.bias))


def test_value_by_value_formats_are_rounded_once_per_tensor(monkeypatch):
    """bf16 everywhere: x, W and dy are each rounded once (their rounding does not depend on the
    GEMM's axis), not twice; a policy with blocks still quantizes all six operands."""
    import quant.ops

    calls = []
    real = quant.ops.quantize_spec

    def counted(x, spec, **kw):
        calls.append(spec.elem.name)
        return real(x, spec, **kw)

    monkeypatch.setattr(quant.ops, "quantize_spec", counted)
    x = _spread(48, 64).requires_grad_()
    for policy, n in ((QuantPolicy.uniform("bf16"), 3), (QuantPolicy.uniform("fp8_e4m3"), 6)):
        calls.clear()
        lin = quant.convert(nn.Linear(64, 80, bias=False), policy)
        lin(x).sum().backward()
        assert len(calls) == n, (policy.w, calls)


def test_forward_only_backward_is_high_precision():
    x = _spread(32, 64).requires_grad_()
    lin = nn.Linear(64, 32, bias=False)
    p = QuantPolicy.uniform("fp8_e4m3", quantize_backward=False)
    quant.convert(lin, p)
    y = lin(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    xq = quantize_spec(x.detach(), p.spec("a"))
    wq = quantize_spec(lin.weight.detach(), p.spec("w"))
    assert torch.equal(y, xq @ wq.t())
    assert torch.equal(x.grad, dy @ lin.weight.detach())
    assert torch.equal(lin.weight.grad, dy.t() @ x.detach())


class _Tiny(nn.Module):
    """Every convertible module type, wired like a transformer block."""

    def __init__(self, d=64):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.rms = nn.RMSNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.qk, self.pv = quant.MatMul(), quant.MatMul()
        self.softmax = nn.Softmax(-1)
        self.fc1, self.act, self.fc2 = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.ln(x)
        att = self.softmax(self.qk(self.q(h), self.k(h).transpose(-1, -2)) / 8)
        x = x + self.pv(att, self.v(h))
        return x + self.fc2(self.act(self.fc1(self.rms(x))))


def _loss_and_grads(model, x):
    model.zero_grad()
    out = model(x)
    out.square().mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_fp32_policy_is_bit_identical_to_unconverted_model():
    torch.manual_seed(0)
    model = _Tiny()
    with torch.no_grad():  # norms with non-trivial affine parameters
        for m in (model.ln, model.rms):
            m.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 33, 64)
    ref_out, ref_grads = _loss_and_grads(model, x)
    quant.convert(model, QuantPolicy(attention=True))
    assert isinstance(model.fc1, quant.MXLinear)
    out, grads = _loss_and_grads(model, x)
    assert torch.equal(out, ref_out)
    for name, g in ref_grads.items():
        assert torch.equal(grads[name], g), name


def test_full_mx_model_differs_and_trains():
    torch.manual_seed(0)
    model = quant.convert(_Tiny(), QuantPolicy.uniform("fp8_e4m3", attention=True, norm_affine="fp8_e4m3"))
    x = torch.randn(2, 33, 64)
    out, grads = _loss_and_grads(model, x)
    ref = copy.deepcopy(model)
    quant.set_policy(ref, QuantPolicy())
    ref_out, _ = _loss_and_grads(ref, x)
    assert not torch.equal(out, ref_out)
    assert (out - ref_out).abs().max() < 0.2 * ref_out.abs().max()
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_attention_matmul_matches_reference():
    p = QuantPolicy(a="fp8_e4m3", g_dgrad="fp8_e5m2", attention=True)
    mm = quant.convert(quant.MatMul(), p)
    a = _spread(2, 40, 64).requires_grad_()
    b = _spread(2, 64, 40, seed=3).requires_grad_()
    y = mm(a, b)
    dy = torch.randn_like(y)
    y.backward(dy)
    sa, sg = p.spec("a"), p.spec("g_dgrad")
    assert torch.equal(y, quantize_spec(a.detach(), sa, axis=-1) @ quantize_spec(b.detach(), sa, axis=-2))
    da = quantize_spec(dy, sg, axis=-1) @ quantize_spec(b.detach(), sa, axis=-1).mT
    db = quantize_spec(a.detach(), sa, axis=-2).mT @ quantize_spec(dy, sg, axis=-2)
    assert torch.equal(a.grad, da)
    assert torch.equal(b.grad, db)


def test_layernorm_gamma_clamping_mechanism():
    """γ clustered just below 1 is clamped to 0.875 in E4M3 blocks; γ = 1.0 is not touched."""
    g = torch.Generator().manual_seed(0)
    gamma = torch.exp(torch.log(torch.tensor(0.95)) + 0.01 * torch.randn(256, generator=g))
    assert quant.clip_fraction(gamma, "fp8_e4m3") > 0.95
    assert quant.clip_fraction(torch.ones(256), "fp8_e4m3") == 0.0

    ln = nn.LayerNorm(256)
    with torch.no_grad():
        ln.weight.copy_(gamma)
    x = torch.randn(4, 256)
    quant.convert(ln, QuantPolicy(norm_affine="fp8_e4m3"))
    y = ln(x)
    clamped = torch.where(
        gamma > 0.875, torch.tensor(0.875), quantize_spec(gamma, QuantSpec.make("fp8_e4m3"))
    )
    assert torch.equal(y, nn.functional.layer_norm(x, (256,), clamped, ln.bias, ln.eps))
    # The gradient reaching γ is the straight-through one: computed with the clamped γ in the forward.
    y.sum().backward()
    x_hat = nn.functional.layer_norm(x, (256,), None, None, ln.eps)
    assert torch.allclose(ln.weight.grad, x_hat.sum(0), atol=1e-5)

    # bf16 mode (what the study's released emulator did): γ only rounded to bf16, no clamping.
    quant.set_policy(ln, QuantPolicy(norm_affine="bf16"))
    assert torch.equal(ln(x), nn.functional.layer_norm(x, (256,), gamma.bfloat16().float(), ln.bias, ln.eps))


def test_vector_ops_bf16_rounds_outputs():
    model = quant.convert(nn.Sequential(nn.Linear(32, 32), nn.GELU()), QuantPolicy(vector_ops="bf16"))
    y = model(torch.randn(8, 32))
    assert torch.equal(y, y.bfloat16().float())
    assert not torch.equal(model[0](torch.randn(8, 32)), model[0](torch.randn(8, 32)).bfloat16().float())


def test_set_policy_changes_precision_without_touching_state():
    torch.manual_seed(0)
    model = quant.convert(_Tiny(), QuantPolicy.uniform("fp8_e4m3"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(2, 16, 64)
    model(x).square().mean().backward()
    opt.step()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt_state = copy.deepcopy(opt.state_dict())
    out_mx = model(x)
    quant.set_policy(model, QuantPolicy(w="fp8_e4m3", a="bf16"))
    assert quant.policy_of(model).a == "bf16"
    assert not torch.equal(model(x), out_mx)
    for n, p in model.named_parameters():
        assert torch.equal(p, params[n])
    assert str(opt.state_dict()) == str(opt_state)


def test_convert_respects_exclude_and_keeps_state_dict_keys():
    model = nn.Sequential(nn.Embedding(10, 16), nn.Linear(16, 16), nn.Linear(16, 10))
    keys = list(model.state_dict())
    quant.convert(model, QuantPolicy.uniform("fp8_e4m3", exclude=("2",)))
    assert isinstance(model[1], quant.MXLinear)
    assert type(model[2]) is nn.Linear
    assert list(model.state_dict()) == keys
    with pytest.raises(ValueError, match="exclude cannot change"):
        quant.set_policy(model, QuantPolicy.uniform("fp8_e4m3"))


def test_stochastic_gradient_rounding_is_reproducible():
    def run():
        torch.manual_seed(0)
        lin = quant.convert(
            nn.Linear(64, 64), QuantPolicy.uniform("fp8_e4m3", grad_rounding="stochastic", seed=7)
        )
        x = torch.randn(32, 64, requires_grad=True)
        lin(x).square().sum().backward()
        return x.grad

    assert torch.equal(run(), run())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"w": "fp9_e4m3"}, "precision.w='fp9_e4m3' is not a known format"),
        ({"block_size": 0}, "block_size must be >= 1"),
        ({"scale": "e9m0"}, "precision.scale"),
        ({"rounding": "up"}, "precision.rounding"),
        ({"norm_affine": "fp7"}, "precision.norm_affine"),
        ({"w": "fp4_e2m1", "scale": "e8m0", "vector_ops": "fp8"}, "vector_ops"),
    ],
)
def test_policy_rejects_bad_input_with_a_clear_message(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QuantPolicy(**kwargs)


def test_global_scale_requires_float_scale_format():
    with pytest.raises(ValueError, match="global_scale needs a float scale format"):
        quant.quantize(torch.randn(64), "fp4_e2m1", scale="e8m0", global_scale=True)


def test_clip_fraction_uses_the_same_two_level_scales_as_quantize():
    # With NVFP4's per-tensor scale a lone 4724.5 gets block scale 448 and is represented exactly;
    # a single-level UE4M3 scale would saturate it (4724.5 / 6 > 448).
    x = torch.zeros(1, 16)
    x[0, 0] = 4724.5
    assert quant.quantize(x, "nvfp4")[0, 0] == x[0, 0]
    assert quant.clip_fraction(x, "nvfp4") == 0.0
    assert quant.clip_fraction(x, "fp4_e2m1", block_size=16, scale="ue4m3") == 1 / 16
