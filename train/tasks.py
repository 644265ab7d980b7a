"""Tasks: what differs between model families. The loop (``train.loop``) is the same for all.

A ``Task`` builds the trained model, serves batches as a pure function of the step (so resuming and
branching replay the same data order), computes the loss and knows its token/FLOP accounting
(``flops_per_step = 6·N·tokens_per_step``, the convention of ``models.config``).

* ``LMTask``: next-token cross-entropy over batches from a token source (``train.data.TokenBatches``
  or anything with ``get(step) -> (inputs, targets)``, ``val_batches(n)``, ``tokens_per_step`` and
  ``epoch(step)``). Defaults: AdamW (0.9, 0.95), warm-up + cosine.
* ``ProxyTask``: the student–teacher MLP of ``models.proxy`` under MSE, with x ~ N(0, I) drawn
  fresh per step from a generator seeded by (seed, step). Defaults: Adam (0.9, 0.999), constant LR.

``TASKS`` is the registry every task-dependent decision goes through (no ``task == "lm"`` tests
elsewhere): a run's ``task`` names its ``TaskSpec`` — the model schema its ``model`` must be, the data
schema (None: the task draws its own inputs), the builder of its ``Task``, the samples or tokens of
one step (known before any data is loaded: the sweeper plans budgets with it), and whether it trains
under ``torchrun``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from models import LMConfig, ProxyConfig, build_lm, make_teacher_student, proxy_batch
from train import distributed
from train.data import DataConfig


class TokenSource(Protocol):
    """What ``LMTask`` needs from the data side."""

    tokens_per_step: int

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor]: ...

    def val_batches(self, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]: ...

    def epoch(self, step: int) -> float: ...


class Task(Protocol):
    """The model-family-specific half of training."""

    n_params: int
    tokens_per_step: int
    flops_per_step: int
    default_betas: tuple[float, float]
    default_schedule: str

    def build(self, seed: int) -> nn.Module: ...

    def batch(self, step: int) -> Any: ...

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor: ...

    def val_batches(self) -> list[Any]: ...

    def epoch(self, step: int) -> float: ...


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


def _lm_task(run: Any, source: TokenSource | None = None) -> Task:
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


def _proxy_task(run: Any, source: TokenSource | None = None) -> Task:
    t = run.train
    return ProxyTask(run.model, t.batch_size, t.seed, t.eval_batches, distributed.resolve_device(t.device))


@dataclass(frozen=True)
class TaskSpec:
    """What a task name stands for (see the module docstring)."""

    model: type
    """The model schema (``models.CONFIGS``) a run of this task must have."""
    data: type | None
    """The data schema, or None: the task makes its own inputs and a run has ``data: null``."""
    make: Callable[..., Task]
    """``(run, source=None) -> Task``."""
    tokens_per_step: Callable[[Any], int]
    """Tokens (LM: batch × sequence length) or samples (proxy: batch) per optimizer step of a run."""
    distributed: bool
    """Trains under ``torchrun`` (data-parallel; the fp32 twin is single-process only)."""


TASKS: dict[str, TaskSpec] = {
    "lm": TaskSpec(LMConfig, DataConfig, _lm_task, lambda run: run.train.batch_size * run.data.seq_len, True),
    "proxy": TaskSpec(ProxyConfig, None, _proxy_task, lambda run: run.train.batch_size, False),
}


def task_spec(name: str) -> TaskSpec:
    """The registered task ``name``; a one-line ``ValueError`` listing the tasks otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"task={name!r} is unknown; use one of: {', '.join(TASKS)}") from None


def make_task(run: Any, source: TokenSource | None = None) -> Task:
    """The task of a ``RunConfig``. The LM reads ``source`` if given, else the batches of ``run.data``
    (a ``train.data.DataConfig``, loaded with ``train.data.make_batches``; under ``torchrun`` this
    rank's shard of every global batch)."""
    return task_spec(run.task).make(run, source)
