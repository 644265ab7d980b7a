"""Where a branch starts: the checkpoint of a parent run at a fraction of its first-spike step.

A parent's record says when it first got into trouble (``spike_step`` in its summary, else its
``diverged_step``); its checkpoints lie every ``train.ckpt_every`` steps. Branching "at 0.4 × the
spike" means the last checkpoint at or before that step. The sweeper plans branches with this rule,
and the analysis reads with the same rule which fraction a branch came from.
"""

from __future__ import annotations

from typing import Any


def spike_branch_step(summary: dict[str, Any] | None, fraction: float, every: int) -> int | None:
    """``sweep.branch_at``: ``fraction`` of the first-spike step of a parent's ``summary`` (its
    ``spike_step``, else its ``diverged_step``), rounded down to a multiple of ``every`` (its
    checkpoints); None without a spike, or when that is before the first checkpoint."""
    if not summary or every <= 0:
        return None
    spike = summary.get("spike_step") or summary.get("diverged_step")
    if isinstance(spike, bool) or not isinstance(spike, int | float) or spike <= 0:
        return None
    k = int(fraction * spike) // every * every
    return k if k > 0 else None


def branch_fraction(
    summary: dict[str, Any] | None, step: int | float, every: int, fractions: list[float]
) -> float | None:
    """Which of ``fractions`` (``sweep.branch_at``) puts a branch of this parent at ``step``: the
    smallest one whose ``spike_branch_step`` is ``step``; None when none does."""
    for f in sorted(fractions):
        if spike_branch_step(summary, f, every) == step:
            return f
    return None
