"""Adam's state as ``train.optim.adam_stats`` reads it: the normalized step and the gradient against
the second-moment memory, checked against what Adam's recursion implies."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from train.optim import adam_stats, param_kinds


def _stepped(grads: list[float], beta2: float) -> tuple[torch.optim.Optimizer, dict[int, str]]:
    """One parameter of 64 coordinates, every coordinate given gradient g_k at step k."""
    p = nn.Parameter(torch.zeros(64))
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, beta2), eps=1e-12, weight_decay=0.0)
    for g in grads:
        p.grad = torch.full_like(p, g)
        opt.step()
    return opt, {id(p): "matrix"}


def test_a_steady_gradient_gives_a_full_step_and_a_ratio_of_one():
    opt, kinds = _stepped([0.01] * 50, beta2=0.999)
    s = adam_stats(opt, kinds)
    assert s["adam_upd/matrix"] == pytest.approx(1.0, rel=1e-6)
    assert s["adam_gv/matrix"] == pytest.approx(1.0, rel=1e-6) and s["adam_gv_max"] == s["adam_gv/matrix"]


@pytest.mark.parametrize("beta2", [0.999, 0.95])
def test_a_gradient_that_jumps_outruns_a_long_memory(beta2):
    """After k steady steps at g, one step at c·g: v̂ = (β2(1−β2^k) g² + (1−β2) c² g²)/(1−β2^(k+1)), so
    Σg²/Σv̂ is c²g² over that: ≈ 77 at β2 = 0.999 (c = 10, k = 400), ≈ 17 at 0.95 (the state is fp32)."""
    k, g, c = 400, 0.01, 10.0
    opt, kinds = _stepped([g] * k + [c * g], beta2)
    v_hat = (beta2 * (1 - beta2**k) * g**2 + (1 - beta2) * (c * g) ** 2) / (1 - beta2 ** (k + 1))
    s = adam_stats(opt, kinds)
    assert s["adam_gv/matrix"] == pytest.approx((c * g) ** 2 / v_hat, rel=1e-4)
    assert (s["adam_gv/matrix"] > 50) == (beta2 == 0.999)
    m_hat = (0.9 * (1 - 0.9**k) * g + 0.1 * c * g) / (1 - 0.9 ** (k + 1))
    assert s["adam_upd/matrix"] == pytest.approx(m_hat / math.sqrt(v_hat), rel=1e-4)


def test_kinds_split_norms_matrices_and_the_rest():
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8), nn.Embedding(4, 8))
    kinds = param_kinds(model)
    assert sorted(kinds.values()) == ["matrix", "norm", "norm", "other", "other"]
    opt = torch.optim.AdamW(model.parameters())
    assert adam_stats(opt, kinds) == {}  # nothing stepped yet
    x = torch.randn(3, 8)
    (model[1](model[0](x)).square().sum() + model[2].weight.sum()).backward()
    opt.step()
    s = adam_stats(opt, kinds, prefix="twin_adam")
    assert {k.split("/")[0] for k in s} == {"twin_adam_upd", "twin_adam_gv", "twin_adam_gv_max"}
    assert {k.split("/")[1] for k in s if "/" in k} == {"norm", "matrix", "other"}
