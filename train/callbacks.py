"""The contract between the training loop and its hooks: the loop's ``State`` and the ``Callback``
base class. Dependency-free within ``train/`` (the loop, the hooks and the wandb logger import it; it
imports none of them), so a hook never reaches into the loop's module.

Order. The loop calls every hook's ``on_step_end`` in list order, and a hook may read what an earlier
one produced at the same step: ``metrics`` (eval loss, twin loss, spike flags) and ``state.row`` (the
metrics.jsonl row ``MetricsLogger`` wrote). That order is declared, not silent: a hook names the hooks
it must run after in ``after``, and ``check_order`` (called by ``train.loop.train``) refuses a list
that breaks it, in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class State:
    """What hooks see: the run, its task, model and optimizer, the policy in force and the step."""

    run: Any
    """The ``train.config.RunConfig``."""
    task: Any
    """The ``train.tasks.Task``."""
    model: Any
    """The trained ``nn.Module``."""
    optimizer: Any
    policy: Any
    """The ``quant.QuantPolicy`` in force."""
    hooks: Sequence[Any] = ()
    step: int = 0
    batch: Any = None
    stop: str | None = None
    """Set by a hook to end the run at this step boundary (e.g. ``"interrupted"``)."""
    status: str = "running"
    diverged_step: int | None = None
    last_loss: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    row: dict[str, Any] | None = None
    """The metrics.jsonl row written at this step, if any (set by ``MetricsLogger`` for later hooks)."""
    train_model: Any = None
    """What the training forward pass calls: ``model``, or its DDP wrapper."""
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


class Callback:
    """No-op base: subclass and override what you need."""

    all_ranks = False
    """Run on every rank under DDP (only rank 0 otherwise)."""
    after: tuple[str, ...] = ()
    """Names of hooks that, when present, must come before this one (it reads what they produce)."""

    @property
    def name(self) -> str:
        return type(self).__name__

    def on_train_start(self, state: State) -> None:
        pass

    def on_step_end(self, state: State, metrics: dict[str, Any]) -> None:
        pass

    def on_eval(self, state: State, metrics: dict[str, Any]) -> None:
        pass

    def on_train_end(self, state: State) -> None:
        pass


def check_order(hooks: Sequence[Any]) -> None:
    """A one-line ``ValueError`` if a hook comes before one it declares in ``after``."""
    position = {getattr(h, "name", type(h).__name__): i for i, h in enumerate(hooks)}
    for i, hook in enumerate(hooks):
        for name in getattr(hook, "after", ()):
            if position.get(name, -1) > i:
                this = getattr(hook, "name", type(hook).__name__)
                raise ValueError(
                    f"hook {this} must come after {name} (it reads what {name} produces at each step); "
                    "reorder the hooks list"
                )
