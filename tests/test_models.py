"""Models: exact parameter counts, shapes, causality, RoPE, init, seeding, MX conversion, learning."""

import copy
import math
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import quant
from models import CONFIGS, LM, MODELS, LMConfig, ProxyConfig, build_lm, make_teacher_student, proxy_batch
from models.lm import RotaryEmbedding


def _numel(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _tokens(cfg: LMConfig, B: int = 2, T: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


def _study_formula(L: int, V: int, d: int) -> int:
    return 12 * L * d * d + 2 * V * d + 4 * L * d + d


# --- parameter counts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(depth=1, vocab_size=256),
        dict(depth=2, vocab_size=256),
        dict(depth=1, vocab_size=32000),
        dict(depth=2, vocab_size=32000),
        dict(depth=3, vocab_size=1000, d_model=96, n_heads=3),
    ],
    ids=str,
)
def test_lm_n_params_is_study_formula_and_numel(kw):
    cfg = LMConfig(**kw)
    assert cfg.n_params == _study_formula(cfg.depth, cfg.vocab_size, cfg.width)
    assert _numel(build_lm(cfg)) == cfg.n_params
    assert cfg.flops_per_token == 6 * cfg.n_params


@pytest.mark.parametrize("depth", [2, 3])  # 3 | d only for depth 3: then SwiGLU matches GeLU exactly
def test_lm_swiglu_n_params(depth):
    cfg = LMConfig(depth=depth, vocab_size=256, mlp="swiglu")
    assert _numel(build_lm(cfg)) == cfg.n_params
    gelu = LMConfig(depth=depth, vocab_size=256).n_params
    assert abs(cfg.n_params - gelu) <= depth * cfg.width  # h = round(8d/3): off by < 1 row per block
    assert (cfg.n_params == gelu) == (cfg.width % 3 == 0)


def test_lm_n_params_matches_study_sweep():
    # Hither1/systems-scaling sweep files: d256L4 and d512L8 with V = 32000.
    assert LMConfig(depth=4).n_params == 19_534_080
    assert LMConfig(depth=8).n_params == 57_950_720
    with torch.device("meta"):  # numel of the real d256L4 model without allocating it
        assert _numel(LM(LMConfig(depth=4))) == 19_534_080


@pytest.mark.parametrize("activation", ["gelu", "relu", "swiglu", "linear"])
@pytest.mark.parametrize("layernorm", [True, False])
def test_proxy_n_params(activation, layernorm):
    cfg = ProxyConfig(depth=3, width=48, activation=activation, layernorm=layernorm)
    teacher, student = make_teacher_student(cfg, seed=0)
    assert _numel(student) == cfg.n_params
    assert _numel(teacher) == cfg.teacher_n_params
    assert cfg.teacher_n_params == cfg.n_params - (3 * 2 * 48 if layernorm else 0)
    assert cfg.flops_per_token == 6 * cfg.n_params


# --- LM behaviour -----------------------------------------------------------------------------


def test_lm_forward_shape_and_heads():
    cfg = LMConfig(depth=2, vocab_size=300)
    assert (cfg.width, cfg.heads, cfg.head_dim) == (128, 2, 64)
    logits = build_lm(cfg)(_tokens(cfg, B=3, T=10))
    assert logits.shape == (3, 10, 300) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


def test_lm_is_causal():
    cfg = LMConfig(depth=2, vocab_size=256)
    model = build_lm(cfg).eval()
    tok = _tokens(cfg, B=1, T=12)
    changed = tok.clone()
    changed[0, 7] = (tok[0, 7] + 1) % cfg.vocab_size
    with torch.no_grad():
        a, b = model(tok), model(changed)
    assert torch.equal(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_rope_score_depends_only_on_offset():
    T, hd = 16, 64
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(hd, generator=g), torch.randn(hd, generator=g)
    rope = RotaryEmbedding(hd)
    rq = rope(q.expand(1, 1, T, hd).double())[0, 0]  # the same vector at every position
    rk = rope(k.expand(1, 1, T, hd).double())[0, 0]
    scores = rq @ rk.T  # scores[m, n] = f(m - n)
    for offset in range(-T + 1, T):
        diag = torch.diagonal(scores, offset)
        torch.testing.assert_close(diag, diag[:1].expand_as(diag), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(torch.diagonal(scores, 0)[0], torch.diagonal(scores, 3)[0])
    torch.testing.assert_close(rq[0], q.double())  # position 0 is not rotated
    torch.testing.assert_close(rq.norm(dim=-1), q.double().norm().expand(T))  # rotations keep norms


@pytest.mark.parametrize("init_std", ["width", "fan_in"])
def test_lm_init_std_and_truncation(init_std):
    cfg = LMConfig(depth=3, vocab_size=512, init_std=init_std)
    model = build_lm(cfg, seed=0)
    d = cfg.width
    down_fan_in = 4 * d if init_std == "fan_in" else d  # OLMo's code vs the study's 1/√d everywhere
    trunc = 0.98658  # std of a normal truncated at ±3σ, relative to σ
    expected = {"embed.weight": 1 / math.sqrt(d), "head.weight": 1 / math.sqrt(d)}
    for i in range(cfg.depth):
        res = 1 / math.sqrt(2 * (i + 1))
        expected |= {
            f"blocks.{i}.attn.qkv.weight": 1 / math.sqrt(d),
            f"blocks.{i}.attn.out.weight": res / math.sqrt(d),
            f"blocks.{i}.mlp.up.weight": 1 / math.sqrt(d),
            f"blocks.{i}.mlp.down.weight": res / math.sqrt(down_fan_in),
        }
    params = dict(model.named_parameters())
    for name, sigma in expected.items():
        w = params[name]
        assert abs(w.mean().item()) < 0.05 * sigma, name
        assert w.std().item() == pytest.approx(trunc * sigma, rel=0.05), name
        assert w.abs().max().item() <= 3 * sigma * (1 + 1e-6), name
    norms = [p for n, p in params.items() if n not in expected]
    assert len(norms) == 4 * cfg.depth + 1 and all(torch.equal(p, torch.ones_like(p)) for p in norms)


def test_build_lm_is_seeded_and_leaves_global_rng():
    cfg = LMConfig(depth=1, vocab_size=256)
    state = torch.random.get_rng_state()
    a, b, c = build_lm(cfg, seed=3), build_lm(cfg, seed=3), build_lm(cfg, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["embed.weight"], sc["embed.weight"])


# --- MX conversion ----------------------------------------------------------------------------

_CONVERTED = {
    nn.Linear: "MXLinear",
    nn.LayerNorm: "MXLayerNorm",
    quant.MatMul: "MXMatMul",
    nn.Softmax: "MXSoftmax",
    nn.GELU: "MXGELU",
    nn.SiLU: "MXSiLU",
}


def _convertible(model: nn.Module) -> dict[str, type]:
    return {n: type(m) for n, m in model.named_modules() if type(m) in _CONVERTED}


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_lm_mx_conversion_reaches_every_module(mlp):
    cfg = LMConfig(depth=2, vocab_size=256, mlp=mlp)
    model = build_lm(cfg)
    before = _convertible(model)
    kinds = set(before.values())
    assert {nn.Linear, nn.LayerNorm, quant.MatMul, nn.Softmax} <= kinds
    policy = quant.QuantPolicy.uniform("fp8_e4m3", attention=True, norm_affine="fp8_e4m3")
    quant.convert(model, policy)
    modules = dict(model.named_modules())
    for name, base in before.items():
        assert type(modules[name]).__name__ == _CONVERTED[base], name
    assert sum(isinstance(m, quant.MatMul) for m in modules.values()) == 2 * cfg.depth
    logits = model(_tokens(cfg))
    logits.logsumexp(-1).mean().backward()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_lm_fp32_policy_is_bit_identical():
    cfg = LMConfig(depth=2, vocab_size=256)
    model = build_lm(cfg)
    converted = quant.convert(copy.deepcopy(model), quant.QuantPolicy())
    assert type(converted.head).__name__ == "MXLinear"
    tok = _tokens(cfg)
    ref, out = model(tok), converted(tok)
    assert torch.equal(ref, out)
    ref.square().mean().backward()
    out.square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), converted.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), name


def test_proxy_student_converts():
    _, student = make_teacher_student(ProxyConfig(depth=2, width=32, activation="relu"))
    quant.convert(student, quant.QuantPolicy.uniform("fp8_e4m3", norm_affine="fp8_e4m3"))
    names = {type(m).__name__ for m in student.modules()}
    assert {"MXLinear", "MXLayerNorm", "MXReLU"} <= names
    assert "Linear" not in names and "LayerNorm" not in names


# --- proxy data and seeding -------------------------------------------------------------------


def test_teacher_frozen_and_seeded():
    cfg = ProxyConfig(depth=2, width=32)
    state = torch.random.get_rng_state()
    t1, s1 = make_teacher_student(cfg, seed=5)
    t2, s2 = make_teacher_student(cfg, seed=5)
    t3, s3 = make_teacher_student(cfg, seed=6)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert not any(p.requires_grad for p in t1.parameters()) and not t1.training
    assert all(p.requires_grad for p in s1.parameters())
    for a, b in ((t1, t2), (s1, s2)):
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(t1.blocks[0].fc1.weight, t3.blocks[0].fc1.weight)
    assert not torch.equal(s1.blocks[0].fc1.weight, s3.blocks[0].fc1.weight)
    assert not any(isinstance(m, nn.LayerNorm) for m in t1.modules())
    # LN has no random init: an LN-free student of the same seed starts from the same linear weights.
    _, s_noln = make_teacher_student(ProxyConfig(depth=2, width=32, layernorm=False), seed=5)
    assert torch.equal(s_noln.blocks[1].fc2.weight, s1.blocks[1].fc2.weight)


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_released_teacher_is_plain_bias_free_and_tiny(activation):
    """model.teacher=released: the authors' script's teacher (L × Linear(d, d) → φ → Linear(d, d), no
    bias, no residual), frozen and seeded like the residual one; default init shrinks its output."""
    cfg = ProxyConfig(depth=4, width=64, activation=activation, teacher="released")
    teacher, student = make_teacher_student(cfg, seed=3)
    assert (
        _numel(teacher) == cfg.teacher_n_params == 4 * ((2 if activation == "swiglu" else 1) * 64 + 64) * 64
    )
    linears = [m for m in teacher.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 8 and all(m.bias is None for m in linears)
    assert not any(p.requires_grad for p in teacher.parameters()) and not teacher.training
    assert _numel(student) == cfg.n_params  # the student is the same as with the residual teacher
    x = torch.randn(2048, 64, generator=torch.Generator().manual_seed(0))
    # No residual path: the output is far below the input's unit scale (the residual teacher's ~1).
    assert (
        teacher(x).std().item()
        < 0.05
        < make_teacher_student(ProxyConfig(depth=4, width=64), 3)[0](x).std().item()
    )
    again, _ = make_teacher_student(cfg, seed=3)
    assert torch.equal(teacher(x), again(x))
    with pytest.raises(ValueError, match="model.teacher='plain' is unknown; use one of: residual, released"):
        ProxyConfig(teacher="plain")


def test_proxy_batch_is_seeded_and_noisy():
    cfg = ProxyConfig(depth=2, width=32, noise_std=0.1)
    teacher, _ = make_teacher_student(cfg)
    x1, y1 = proxy_batch(teacher, 4096, cfg.width, torch.Generator().manual_seed(0), cfg.noise_std)
    x2, y2 = proxy_batch(teacher, 4096, cfg.width, torch.Generator().manual_seed(0), cfg.noise_std)
    assert x1.shape == y1.shape == (4096, 32)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.std().item() == pytest.approx(1.0, rel=0.02)
    assert (y1 - teacher(x1)).std().item() == pytest.approx(0.1, rel=0.02)
    g = torch.Generator().manual_seed(0)
    first, second = proxy_batch(teacher, 8, 32, g)[0], proxy_batch(teacher, 8, 32, g)[0]
    assert not torch.equal(first, second)  # fresh data every call, never cycled


# --- learning ---------------------------------------------------------------------------------


def test_tiny_lm_overfits_a_batch():
    cfg = LMConfig(depth=1, vocab_size=256)
    model = build_lm(cfg)
    tok = _tokens(cfg, B=4, T=33)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(50):
        logits = model(tok[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tok[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_proxy_student_learns():
    cfg = ProxyConfig(depth=2, width=32)
    teacher, student = make_teacher_student(cfg, seed=0)
    opt = torch.optim.Adam(student.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(60):
        x, y = proxy_batch(teacher, 256, cfg.width, g, cfg.noise_std)
        loss = F.mse_loss(student(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert not any(p.grad is not None for p in teacher.parameters())


# --- registry and validation ------------------------------------------------------------------


def test_registry():
    assert set(MODELS) == set(CONFIGS) == {"lm", "proxy"}
    lm = MODELS["lm"](CONFIGS["lm"](depth=1, vocab_size=64), 0)
    teacher, student = MODELS["proxy"](CONFIGS["proxy"](depth=1, width=16), 0)
    assert _numel(lm) == LMConfig(depth=1, vocab_size=64).n_params
    assert _numel(student) == ProxyConfig(depth=1, width=16).n_params


@pytest.mark.parametrize(
    "cls, kw, field",
    [
        (LMConfig, dict(depth=0), "model.depth must be >= 1, got 0"),
        (LMConfig, dict(vocab_size=0), "model.vocab_size"),
        (LMConfig, dict(d_model=100), "model.n_heads"),
        (LMConfig, dict(d_model=128, n_heads=3), "model.n_heads=3"),
        (LMConfig, dict(d_model=96, n_heads=32), "model.n_heads"),  # head size 3: odd, no RoPE
        (LMConfig, dict(mlp="relu"), "model.mlp='relu'"),
        (LMConfig, dict(rope_theta=0.0), "model.rope_theta"),
        (LMConfig, dict(init_std="xavier"), "model.init_std='xavier'"),
        (ProxyConfig, dict(depth=0), "model.depth"),
        (ProxyConfig, dict(width=0), "model.width"),
        (ProxyConfig, dict(activation="tanh"), "model.activation='tanh'"),
        (ProxyConfig, dict(noise_std=-1.0), "model.noise_std"),
    ],
)
def test_bad_config_names_the_field(cls, kw, field):
    with pytest.raises(ValueError, match=re.escape(field)):
        cls(**kw)
