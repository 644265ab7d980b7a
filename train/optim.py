"""The optimizer and its learning-rate schedule: a pure function of the run's ``train`` settings, the
task's defaults (betas, schedule) and the step.

* ``make_optimizer``: AdamW; weight decay only on the weight matrices of Linear layers; with
  ``train.norm_lr_mult != 1`` the norm parameters (LayerNorm/RMSNorm γ, β) are a group of their own.
* ``lr_at``: the LR of the update from ``step`` to ``step + 1``: constant, or linear warm-up over
  ``warmup_frac`` of the steps then cosine down to ``min_lr_frac``·lr (the task's default unless
  ``train.lr_schedule`` says otherwise). ``set_lr`` applies it, times each group's ``lr_mult``.
"""

from __future__ import annotations

import math
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


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_mult", 1.0)
