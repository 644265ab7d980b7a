"""The pieces of the instability study's mechanism experiment: the norm affine's own scale rule
(the γ-only ``ceil`` intervention), the LN-γ clip diagnostic computed with the format γ is really
quantized in, a separate LR for the norm parameters, and branches placed from the parent's spike."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn as nn

import quant
from quant import QuantPolicy
from records import spike_branch_step
from sweeper.config import SweepConfig
from train.config import TrainConfig
from train.hooks import MetricsLogger
from train.optim import make_optimizer, set_lr

# one 32-block in (0.875, 1): the paper's worked example, repeated, plus two values nearer 1
GAMMA = torch.tensor([0.8974, 0.8963, 0.8836, 0.8847, 0.9037] * 6 + [0.95, 0.99])


def _ln_output_weight(policy: QuantPolicy) -> torch.Tensor:
    """γ as the converted LayerNorm applies it (x = standard-normalised rows, β = 0: y = γ·x̂)."""
    ln = nn.LayerNorm(32)
    with torch.no_grad():
        ln.weight.copy_(GAMMA)
    quant.convert(ln, policy)
    x = torch.eye(32) * 32**0.5  # rows whose normalisation is a scaled one-hot: y_ii = γ_i · c
    y = ln(x)
    return y.diagonal() / nn.functional.layer_norm(x, (32,)).diagonal()


def test_norm_scale_rule_ceil_unclamps_gamma_only():
    floor = QuantPolicy(w="fp8_e4m3", a="fp8_e4m3", norm_affine="fp8_e4m3")
    ceil = floor.replace(norm_scale_rule="ceil")
    clamped = _ln_output_weight(floor)
    assert torch.allclose(clamped, torch.full_like(clamped, 0.875), rtol=1e-5)  # the paper's clamp: all of it
    g = _ln_output_weight(ceil)
    # X = 2**-8: no clamp but round-to-nearest on a grid of step 1/16 here (0.9037 → 0.875 as the
    # nearest, 0.95 → 0.9375, 0.99 → 1.0 instead of 0.875): errors within half a step, both signs
    assert (g - GAMMA).abs().max() <= 1 / 32 and g[-2:].tolist() == [0.9375, 1.0]
    assert ceil.spec("w").scale_rule.value == "floor"  # weights keep the OCP rule
    assert ceil.norm_spec().scale_rule.value == "ceil"
    with pytest.raises(ValueError, match="norm_scale_rule"):
        QuantPolicy(norm_affine="fp8_e4m3", norm_scale_rule="up")


def test_clip_fraction_follows_the_scale_rule():
    assert quant.clip_fraction(GAMMA, "fp8_e4m3") == 1.0
    assert quant.clip_fraction(GAMMA, "fp8_e4m3", scale_rule="ceil") == 0.0
    assert quant.spec_clip_fraction(GAMMA, QuantPolicy(norm_affine="fp8_e4m3").norm_spec()) == 1.0


@pytest.mark.parametrize(
    ("policy", "expected", "why"),
    [
        (QuantPolicy(w="fp8_e4m3", norm_affine="fp8_e4m3"), 1.0, "norm_affine"),
        (QuantPolicy(w="fp8_e4m3", norm_affine="fp8_e4m3", norm_scale_rule="ceil"), 0.0, "norm_affine"),
        # γ in FP6 E2M3 (max 7.5, emax 2): X = 2**-3, only 0.95 and 0.99 pass 7.5 · X = 0.9375
        (QuantPolicy(w="fp8_e4m3", norm_affine="fp6_e2m3"), 2 / 32, "norm_affine"),
        (QuantPolicy(w="fp8_e4m3"), 1.0, "weight format, diagnostic"),
        (QuantPolicy(w="fp8_e4m3", norm_affine="bf16"), 1.0, "weight format, diagnostic"),
    ],
)
def test_ln_clip_metric_uses_the_norm_format(policy, expected, why):
    model = nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 32))
    with torch.no_grad():
        model[0].weight.copy_(GAMMA)
    logger = MetricsLogger()
    out = logger._clipping(types.SimpleNamespace(policy=policy, model=model))
    assert out["clip_ln/0"] == expected
    assert logger.summary()["clip_ln_spec"].endswith(f"({why})")


def test_norm_lr_mult_scales_only_the_norm_group():
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8))
    task = types.SimpleNamespace(default_betas=(0.9, 0.999))
    plain = make_optimizer(model, TrainConfig(lr=1e-2), task)
    assert len(plain.param_groups) == 2  # the default keeps the checkpointed layout
    opt = make_optimizer(model, TrainConfig(lr=1e-2, norm_lr_mult=0.1), task)
    set_lr(opt, 1e-2)
    norm_ids = {id(p) for p in model[0].parameters()}
    for g in opt.param_groups:
        is_norm = {id(p) for p in g["params"]} <= norm_ids
        assert g["lr"] == pytest.approx(1e-3 if is_norm else 1e-2)
    with pytest.raises(ValueError, match="norm_lr_mult"):
        TrainConfig(norm_lr_mult=0)


@pytest.mark.parametrize(
    ("summary", "step"),
    [
        ({"spike_step": 400}, 300),
        ({"spike_step": 399}, 200),  # 0.75 · 399 = 299 → the checkpoint at 200
        ({"spike_step": None, "diverged_step": 1000}, 700),
        ({"spike_step": None, "diverged_step": None}, None),
        ({"spike_step": 120}, None),  # before the first checkpoint
        (None, None),
    ],
)
def test_spike_branch_step(summary, step):
    assert spike_branch_step(summary, 0.75, 100) == step


def test_branch_at_is_validated():
    from omegaconf import OmegaConf

    from sweeper.config import BudgetConfig, sweep_settings

    def settings(**sweep):
        sweep_node = OmegaConf.structured(SweepConfig(**sweep))
        cfg = OmegaConf.create({"sweep": sweep_node, "budget": BudgetConfig()})
        return sweep_settings(cfg)

    branches = [{"name": "x", "norm_affine": "none"}]
    assert settings(branches=branches, branch_at=[0.4, 0.75])[0].branch_at == [0.4, 0.75]
    with pytest.raises(ValueError, match="one of sweep.branch_step"):
        settings(branches=branches)
    with pytest.raises(ValueError, match="one of sweep.branch_step"):
        settings(branches=branches, branch_at=[0.5], branch_step=100)
    with pytest.raises(ValueError, match=r"1.5 is not in \(0, 1\)"):
        settings(branches=branches, branch_at=[0.5, 1.5])


def test_probe_reads_every_checkpoint_at_the_runs_own_weights(tmp_path):
    """The same-weights gradient probe: exact for fp32 (both gradients are the same computation), below
    1 for MX, one row per checkpoint with γ's mean and clip fraction, written atomically."""
    import json

    from models import ProxyConfig
    from train import probe
    from train.config import LoggerConfig, PrecisionConfig, RunConfig, WandbConfig
    from train.hooks import default_hooks
    from train.loop import train
    from train.tasks import make_task

    def run(out, prec):
        cfg = RunConfig(
            task="proxy",
            model=ProxyConfig(depth=2, width=32),
            precision=prec,
            train=TrainConfig(steps=6, batch_size=16, lr=1e-2, grad_clip=None, ckpt_every=2, eval_every=0),
            out_dir=str(out),
            logger=LoggerConfig(wandb=WandbConfig(mode="disabled")),
        )
        train(cfg, make_task(cfg), default_hooks(cfg))
        return probe.probe_run(out)

    exact = run(tmp_path / "fp32", PrecisionConfig())
    assert [r["step"] for r in exact] == [2, 4, 6]
    assert all(r["probe_cos"] == pytest.approx(1.0, abs=1e-12) and r["probe_zeta"] < 1e-20 for r in exact)
    mx = run(tmp_path / "mx", PrecisionConfig(w="fp4_e2m1", a="fp4_e2m1", norm_affine="fp8_e4m3"))
    assert all(r["probe_cos"] < 0.9999 for r in mx)
    assert {"clip_ln/blocks.0.norm", "gamma_mean/blocks.0.norm"} <= set(mx[0])
    lines = (tmp_path / "mx" / probe.PROBE).read_text().splitlines()
    assert [json.loads(line) for line in lines] == mx
    assert probe.main([str(tmp_path / "nothing")]) == 2
