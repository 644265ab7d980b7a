"""The two training objectives behind ``train.tasks``' registry: what differs between model families.

* ``LMTask``: next-token cross-entropy over batches from a token source (``train.data.TokenBatches``
  or anything with ``get(step) -> (inputs, targets)``, ``val_batches(n)``, ``tokens_per_step`` and
  ``epoch(step)``). Defaults: AdamW (0.9, 0.95), warm-up + cosine.
* ``ProxyTask``: the student–teacher MLP of ``models.proxy`` under MSE, with x ~ N(0, I) drawn
  fresh per step from a generator seeded by (seed, step). Defaults: Adam (0.9, 0.999), constant LR.

Both build their model, serve batches as a pure function of the step (so resuming and branching
replay the same data order), compute the loss and know their token/FLOP accounting
(``flops_per_step = 6·N·tokens_per_step``, the convention of ``models.config``). ``lm_task`` and
``proxy_task`` make one from a ``RunConfig``; ``train.tasks.make_task`` picks between them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from models import LMConfig, ProxyConfig, build_lm, make_teacher_student, proxy_batch
from train import distributed
from train.tasks import Task, TokenSource


def _to(batch: Any, device: torch.device | str) -> Any:
    return tuple(t.to(device, non_blocking=True) for t in batch)


class LMTask:
    """Next-token prediction with cross-entropy on batches from ``source``."""

    default_betas = (0.9, 0.95)
    default_schedule = "cosine"

    def __init__(self, cfg: LMConfig, source: TokenSource, eval_batches: int = 4, device: str = "cpu"):
        self.cfg, self.source, self.eval_batches, self.device = cfg, source, eval_batches, device
        self.n_params = cfg.n_params
        self.tokens_per_step = int(source.tokens_per_step)
        self.flops_per_step = cfg.flops_per_token * self.tokens_per_step
        self._val: list | None = None

    def build(self, seed: int) -> nn.Module:
        return build_lm(self.cfg, seed).to(self.device)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _to(self.source.get(step), self.device)

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        inputs, targets = batch
        logits = model(inputs)  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    def val_batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if self._val is None:
            self._val = [_to(b, self.device) for b in self.source.val_batches(self.eval_batches)]
        return self._val

    def epoch(self, step: int) -> float:
        return float(self.source.epoch(step))


def _generator(seed: int, step: int, stream: int) -> torch.Generator:
    """A CPU generator that is a pure function of (seed, step, stream)."""
    state = np.random.SeedSequence([seed, step, stream]).generate_state(2, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state) >> 1)


class ProxyTask:
    """The student–teacher proxy: MSE of the student against the frozen teacher's noisy labels."""

    default_betas = (0.9, 0.999)
    default_schedule = "constant"

    def __init__(
        self, cfg: ProxyConfig, batch_size: int, seed: int, eval_batches: int = 4, device: str = "cpu"
    ):
        self.cfg, self.batch_size, self.seed = cfg, batch_size, seed
        self.eval_batches, self.device = eval_batches, device
        self.n_params = cfg.n_params
        self.tokens_per_step = batch_size  # one "token" = one sample
        self.flops_per_step = cfg.flops_per_token * batch_size
        self.teacher: nn.Module | None = None
        self._val: list | None = None

    def build(self, seed: int) -> nn.Module:
        """The student (the teacher, from the same seed, is kept on the task for the batches)."""
        teacher, student = make_teacher_student(self.cfg, seed)
        self.teacher = teacher.to(self.device)
        return student.to(self.device)

    def _draw(self, index: int, stream: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.teacher is None:
            raise RuntimeError("ProxyTask.build(seed) must run before batches are drawn")
        gen = _generator(self.seed, index, stream)
        return proxy_batch(self.teacher, self.batch_size, self.cfg.width, gen, self.cfg.noise_std)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._draw(step, 0)

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(model(x).float(), y.float())

    def val_batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if self._val is None:
            self._val = [self._draw(i, 1) for i in range(self.eval_batches)]
        return self._val

    def epoch(self, step: int) -> float:
        return 0.0  # fresh samples every step: never an epoch boundary


def lm_task(run: Any, source: TokenSource | None = None) -> Task:
    t = run.train
    device = distributed.resolve_device(t.device)
    if source is None:
        if run.data is None:
            raise ValueError("task='lm' needs data: set run.data (a DataConfig) or pass a token source")
        from train.data import make_batches

        rank, world = distributed.rank(), distributed.world_size()
        source = make_batches(run.data, t.batch_size, rank=rank, world_size=world)
    vocab = getattr(source, "vocab_size", None)
    if vocab is not None and vocab > run.model.vocab_size:
        raise ValueError(f"model.vocab_size={run.model.vocab_size} < the data's vocabulary {vocab}; raise it")
    return LMTask(run.model, source, t.eval_batches, device)


def proxy_task(run: Any, source: TokenSource | None = None) -> Task:
    t = run.train
    return ProxyTask(run.model, t.batch_size, t.seed, t.eval_batches, distributed.resolve_device(t.device))
