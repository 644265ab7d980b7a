"""Tasks: what differs between model families. The loop (``train.loop``) is the same for all.

A ``Task`` builds the trained model, serves batches as a pure function of the step (so resuming and
branching replay the same data order), computes the loss and knows its token/FLOP accounting
(``flops_per_step = 6·N·tokens_per_step``, the convention of ``models.config``). The two tasks,
``LMTask`` (next-token cross-entropy) and ``ProxyTask`` (the student–teacher MLP under MSE), live in
``train.objectives``.

``TASKS`` is the registry every task-dependent decision goes through (no ``task == "lm"`` tests
elsewhere): a run's ``task`` names its ``TaskSpec`` — the model schema its ``model`` must be, the data
schema (None: the task draws its own inputs), the builder of its ``Task``, the samples or tokens of
one step (known before any data is loaded: the sweeper plans budgets with it), and whether it trains
under ``torchrun``.

This module is torch-free: validating a config and planning a sweep read the registry's schemas and
step sizes only; a task's ``make`` imports ``train.objectives`` (and torch) when a run is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from models import LMConfig, ProxyConfig
from train.data import DataConfig

if TYPE_CHECKING:
    import torch
    import torch.nn as nn


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


def _objective(name: str) -> Callable[..., Task]:
    """``train.objectives.<name>``, imported when a run is built (it brings in torch)."""

    def make(run: Any, source: TokenSource | None = None) -> Task:
        from train import objectives

        return getattr(objectives, name)(run, source)

    return make


TASKS: dict[str, TaskSpec] = {
    "lm": TaskSpec(
        LMConfig, DataConfig, _objective("lm_task"), lambda run: run.train.batch_size * run.data.seq_len, True
    ),
    "proxy": TaskSpec(ProxyConfig, None, _objective("proxy_task"), lambda run: run.train.batch_size, False),
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
