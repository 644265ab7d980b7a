"""Compute budget → runs: the one place where a FLOP budget becomes a number of steps.

FLOP convention (``models.config``): the training compute of a run is C = 6·N·D, with N *all*
trainable parameters (embeddings included) and D the training tokens (proxy: samples). Attention
score FLOPs are not counted, and emulated MX does not change FLOPs, so a budget is nominal
bf16-equivalent compute. For a budget C and a shape with N parameters at T tokens per optimizer step:

    steps = floor(C / (6·N·T))      D = steps·T      ratio = D/N

A (C, shape) pair is kept when ``ratio_min < D/N < ratio_max`` (strict; the study's 2 < D/N < 200).
Each kept run warms up over ``warmup_frac`` of its steps (20%: ``int(0.2·steps)`` warm-up steps, as
``train.optim.lr_at`` computes them) and evaluates every ``steps // evals`` steps (10 evaluations).
This is the instability study's ``scale.py`` arithmetic (``../shared/notes/seed-mx-instabilities.md``
§1): its ``scale_llama2.yaml`` grid, 95 (C, shape) pairs for C ≤ 4.84e19, is a golden test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BudgetPoint:
    """One kept (budget, shape) pair: how long that shape trains to spend the budget."""

    C: float
    """The budget (FLOPs)."""
    shape: Any
    """The shape as given (anything with ``n_params``, e.g. an ``LMConfig``)."""
    N: int
    tokens_per_step: int
    steps: int
    warmup_steps: int
    eval_every: int

    @property
    def D(self) -> int:
        """Training tokens (samples for the proxy)."""
        return self.steps * self.tokens_per_step

    @property
    def ratio(self) -> float:
        """Tokens per parameter D/N."""
        return self.D / self.N

    @property
    def flops(self) -> float:
        """Compute actually spent, 6·N·D (≤ C: steps are rounded down)."""
        return 6.0 * self.N * self.D


def geomspace(start: float, stop: float, num: int) -> list[float]:
    """``numpy.geomspace`` as floats (the study's budget list is ``geomspace(2e17, 1e19, 6)``)."""
    return [float(c) for c in np.geomspace(start, stop, int(num))]


def check_window(ratio_min: float, ratio_max: float) -> None:
    if not 0 <= ratio_min < ratio_max:
        raise ValueError(
            f"budget.ratio_min={ratio_min:g} / budget.ratio_max={ratio_max:g}: the tokens-per-parameter "
            "window needs 0 <= ratio_min < ratio_max (the study uses 2 and 200)"
        )


def plan(
    budgets: Sequence[float],
    shapes: Sequence[Any],
    tokens_per_step: int,
    *,
    ratio_min: float = 2.0,
    ratio_max: float = 200.0,
    warmup_frac: float = 0.2,
    evals: int = 10,
) -> list[BudgetPoint]:
    """Every (budget, shape) pair whose D/N falls in the window, in budget-then-shape order.

    ``shapes`` are objects with an ``n_params`` attribute. Raises ``ValueError`` (one line naming the
    field and the fix) on a budget ≤ 0, a bad window, or when no pair survives the ratio filter.
    """
    for i, c in enumerate(budgets):
        if not (isinstance(c, int | float) and math.isfinite(c) and c > 0):
            raise ValueError(f"budget.flops[{i}]={c!r} must be a positive number of FLOPs, e.g. 1e15")
    if not budgets:
        raise ValueError("budget.flops is empty; list at least one compute budget (FLOPs)")
    if not shapes:
        raise ValueError("the model ladder is empty; set budget.depths or budget.ladder")
    if tokens_per_step < 1:
        raise ValueError(f"tokens per step must be >= 1, got {tokens_per_step}")
    check_window(ratio_min, ratio_max)
    if not 0 <= warmup_frac < 1:
        raise ValueError(f"budget.warmup_frac must be in [0, 1), got {warmup_frac}")
    if evals < 1:
        raise ValueError(f"budget.evals must be >= 1, got {evals}")

    points, ratios = [], []
    for c in budgets:
        for shape in shapes:
            n = int(shape.n_params)
            steps = int(c // (6 * n * tokens_per_step))
            ratio = steps * tokens_per_step / n
            ratios.append(ratio)
            if steps >= 1 and ratio_min < ratio < ratio_max:
                warmup = int(warmup_frac * steps)
                points.append(
                    BudgetPoint(float(c), shape, n, tokens_per_step, steps, warmup, max(1, steps // evals))
                )
    if not points:
        raise ValueError(
            f"no (budget, shape) pair has {ratio_min:g} < D/N < {ratio_max:g} (D/N spans "
            f"{min(ratios):.3g}..{max(ratios):.3g}); widen budget.ratio_min/ratio_max or change "
            "budget.flops or the ladder"
        )
    return points
