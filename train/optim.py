"""The optimizer and its learning-rate schedule: a pure function of the run's ``train`` settings, the
task's defaults (betas, schedule) and the step.

* ``make_optimizer``: AdamW; weight decay only on the weight matrices of Linear layers; with
  ``train.norm_lr_mult != 1`` the norm parameters (LayerNorm/RMSNorm γ, β) are a group of their own.
* ``lr_at``: the LR of the update from ``step`` to ``step + 1``: constant, or linear warm-up over
  ``warmup_frac`` of the steps then cosine down to ``min_lr_frac``·lr (the task's default unless
  ``train.lr_schedule`` says otherwise). ``set_lr`` applies it, times each group's ``lr_mult``.
* ``adam_stats``: what Adam's state says about the step it just took (logged with every metrics row).

Adam's state, read after an update. For a tensor θ with gradient g_k at step k, Adam keeps
m_k = β1·m + (1−β1)·g_k and v_k = β2·v + (1−β2)·g_k², and steps θ −= lr · m̂/(√v̂ + ε) with
m̂ = m_k/(1−β1^k), v̂ = v_k/(1−β2^k). Two numbers per kind of parameter (``norm``: LayerNorm/RMSNorm
γ and β; ``matrix``: Linear weights; ``other``: biases, embeddings):

    adam_upd/<kind> = RMS(m̂/(√v̂ + ε))   the step in units of the LR: ≈ 1 when every coordinate moves
                                         by the full LR (consistent gradients), ≪ 1 when noise dominates;
    adam_gv/<kind>  = Σg_k² / Σv̂        the gradient now against the second-moment memory: ≈ 1 when the
                                         gradient's scale is steady, > 1 when it rises faster than v
                                         follows (at most 1/(1−β2): 1000 at β2 = 0.999), < 1 when v
                                         still remembers a larger past.

and ``adam_gv_max``, the largest per-tensor Σg²/Σv̂. Why they matter here: at β2 = 0.999, v averages
g² over ~1000 steps, so a gradient whose scale grows over tens of steps outruns it and the normalized
step m̂/√v̂ grows with it (gv > 1, upd rising) — a feedback a short memory (β2 = 0.95, ~20 steps)
cuts. Conversely, lowering β2 where v remembers a larger past (gv < 1) lets v̂ fall to the present g²
within tens of steps, and the steps grow.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch
import torch.nn as nn

from train.config import TrainConfig


def make_optimizer(model: nn.Module, cfg: TrainConfig, task: Any) -> torch.optim.AdamW:
    """AdamW; weight decay only on the weight matrices of Linear layers. With ``norm_lr_mult != 1``
    the norm parameters are a group of their own whose ``lr_mult`` ``set_lr`` applies (with the
    default there is no such group, so checkpoints keep the two-group layout)."""
    decay = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    norms = set()
    if cfg.norm_lr_mult != 1.0:
        norm_modules = [m for m in model.modules() if isinstance(m, nn.LayerNorm | nn.RMSNorm)]
        norms = {id(p) for m in norm_modules for p in m.parameters()}
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if id(p) in decay], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if id(p) not in decay | norms], "weight_decay": 0.0},
        {"params": [p for p in params if id(p) in norms], "weight_decay": 0.0, "lr_mult": cfg.norm_lr_mult},
    ]
    betas = tuple(cfg.betas) if cfg.betas is not None else task.default_betas
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, betas=betas, eps=cfg.eps)


def lr_at(cfg: TrainConfig, task: Any, step: int) -> float:
    """The LR of the update from ``step`` to ``step + 1``."""
    if (cfg.lr_schedule or task.default_schedule) == "constant":
        return cfg.lr
    warmup = int(cfg.warmup_frac * cfg.steps)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - 1 - warmup)
    low = cfg.min_lr_frac * cfg.lr
    return low + (cfg.lr - low) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def param_kinds(model: nn.Module) -> dict[int, str]:
    """``id(parameter) → kind`` for ``adam_stats``: ``norm`` (LayerNorm/RMSNorm affine), ``matrix``
    (Linear weights), ``other`` (everything else that trains)."""
    kinds = {id(p): "other" for p in model.parameters() if p.requires_grad}
    for m in model.modules():
        if isinstance(m, nn.Linear):
            kinds[id(m.weight)] = "matrix"
        elif isinstance(m, nn.LayerNorm | nn.RMSNorm):
            kinds.update({id(p): "norm" for p in m.parameters(recurse=False)})
    return kinds


@torch.no_grad()
def adam_stats(
    optimizer: torch.optim.Optimizer, kinds: dict[int, str], prefix: str = "adam"
) -> dict[str, float]:
    """``{prefix}_upd/<kind>``, ``{prefix}_gv/<kind>`` and ``{prefix}_gv_max`` from an Adam-family
    optimizer's state after its step (module docstring); tensors without a gradient or state are left
    out, and an optimizer that has not stepped yet gives ``{}``."""
    names, sums, sizes = [], [], []  # per tensor: its kind, (Σ(m̂/(√v̂+ε))², Σg², Σv̂), its size
    for group in optimizer.param_groups:
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            state = optimizer.state.get(p)
            if p.grad is None or not state or "exp_avg_sq" not in state:
                continue
            k = float(state["step"])
            m_hat = state["exp_avg"].double() / (1 - beta1**k)
            v_hat = state["exp_avg_sq"].double() / (1 - beta2**k)
            step = m_hat / (v_hat.sqrt() + group["eps"])
            sums.append(torch.stack([step.square().sum(), p.grad.double().square().sum(), v_hat.sum()]))
            names.append(kinds.get(id(p), "other"))
            sizes.append(p.numel())
    if not sums:
        return {}
    per_tensor = torch.stack(sums).cpu().tolist()  # one device sync for the whole row
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])  # Σstep², Σg², Σv̂, size
    for kind, row, n in zip(names, per_tensor, sizes, strict=True):
        totals[kind] = [a + b for a, b in zip(totals[kind], [*row, n], strict=True)]
    out = {f"{prefix}_upd/{k}": math.sqrt(t[0] / t[3]) for k, t in sorted(totals.items())}
    out |= {f"{prefix}_gv/{k}": t[1] / t[2] for k, t in sorted(totals.items()) if t[2] > 0}
    ratios = [g2 / v for _, g2, v in per_tensor if v > 0]
    if ratios:
        out[f"{prefix}_gv_max"] = max(ratios)
    return out


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_mult", 1.0)
