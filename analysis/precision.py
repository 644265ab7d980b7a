"""A precision-aware scaling law: one L(N, D, P) fitted jointly over every precision P.

The law has the form of Kumar et al. 2024, "Scaling Laws for Precision":

    L(N, D, P) = E + A / (N · m_P)^α + B / D^β,        m_ref = 1,

with E, A, B, α, β shared by all precisions and one *effective-parameter multiplier* m_P > 0 for
each precision other than the reference (``bf16`` by default: the label ``analysis.collect`` gives
a bf16 run, ``records.precision.label``).

Reading m_P
    Format P trains like a reference (bf16) model with m_P × the parameters: a run of N parameters in
    P reaches the loss a reference run of N·m_P parameters reaches on the same data. m_P = 0.6 means
    40 % of the parameters are "lost" to the format; m_P is usually <= 1, though nothing forces it.
    Only the parameter term moves, so the data term B/D^β and the floor E are the reference's.

Why the shift form
    (N·m_P)^α = exp(α (log N + log m_P)), so for the runs of one precision the law *is* the Chinchilla
    law of ``analysis.fits`` with log N shifted by s_P = log m_P. Equivalently precision P has its
    own Chinchilla law whose only change is A_P = A · m_P^(−α). The fit therefore reuses that module's
    objective unchanged: the mean Huber loss (δ = 1e-3) of the log-residuals in log-sum-exp form,

        J(θ) = Σ_P (n_P / n) · objective(x, log N_P + s_P, log D_P, log L_P),

    over θ = (log E, log A, log B, α, β, s_P for every non-reference P). Its gradient in x is the
    weighted sum of the groups' gradients, and ∂J/∂s_P = −α · (n_P/n) · ∂objective_P/∂(log A),
    because s_P enters only through log A − α(log N + s_P). Working with s_P = log m_P keeps
    m_P > 0 without a constraint and makes the multiplier a free additive shift for L-BFGS.

Why m_ref = 1 identifies the model
    Only the products A·m_P^(−α) are seen by the data: (A, m_P) → (A·c^α, c·m_P) for every P, with
    the same c, leaves every prediction unchanged. That one-parameter family of equal fits is removed
    by fixing one multiplier; fixing the reference's at 1 makes A the reference's coefficient and
    every m_P a ratio *to the reference*. For the same reason the multipliers are unchanged when all
    N are rescaled (only A absorbs the unit), and they are only as well determined as α: as α → 0
    every m_P^(−α) → 1 and the multipliers become arbitrary (watch the intervals).

Starts (the objective is not convex)
    1. A Chinchilla fit (``analysis.fits.fit_arrays``: profile-grid starts + L-BFGS) of the reference
       runs alone, when there are enough of them, and one of all runs pooled.
    2. From each, one alternation step: with x fixed, every group's s_P is profiled on a grid of
       log m (each group's own objective, so P's offset against the shared law); then the shared law
       is refitted on all runs with their N shifted, and the s_P profiled again. The shifts are then
       re-expressed against the reference (s_ref → 0, log A → log A − α s_ref).
    3. Joint L-BFGS over θ from each start; the best end point wins.

Bootstrap
    Runs are resampled with replacement *within* each precision (so every precision stays present
    with its own run count); a replicate in which a precision keeps fewer than two distinct (N, D)
    points, or whose optimisation fails, is skipped. Each replicate is one short L-BFGS started at
    the full-data optimum (resampling moves the optimum a little; the basin search is not redone).
    Intervals are percentiles of the replicates' multipliers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from analysis.fits import (
    _EXP_BOUNDS,
    HUBER_DELTA,
    MIN_RUNS,
    InsufficientData,
    _check,
    _natural,
    _r2,
    _usable,
    fit_arrays,
    map_refits,
    objective,
    single_threaded_blas,
)

__all__ = ["PrecisionLawFit", "fit_precision_law", "joint_objective"]

LOG_M_BOUNDS = (math.log(1e-6), math.log(1e4))
"""Box for s_P = log m_P: wide enough never to bind on real data, finite so that a precision whose
parameter term vanishes (m_P → ∞) or explodes (m_P → 0) cannot run L-BFGS off to infinity."""
LOG_M_GRID = np.linspace(math.log(1e-4), math.log(1e2), 93)
"""Profile grid for the starting shifts: m_P from 1e-4 to 100 in steps of 0.1 in log m."""
BOOT_MAXITER = 150

Group = tuple[np.ndarray, np.ndarray, np.ndarray]
"""(log N, log D, log L) of the runs of one precision."""


@dataclass(frozen=True)
class PrecisionLawFit:
    """A fitted L(N, D, P) = E + A/(N·m_P)^α + B/D^β.

    ``multipliers`` maps every precision to m_P (the reference to 1.0); ``intervals`` maps every
    precision to its bootstrap percentile interval of m_P (the reference to (1, 1)), empty without a
    bootstrap. ``r2`` is on log L over all runs; ``objective`` the mean Huber loss at the optimum;
    ``n_boot`` the bootstrap replicates that succeeded (of ``n_boot_requested``)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    multipliers: Mapping[str, float] = field(hash=False)
    intervals: Mapping[str, tuple[float, float]] = field(hash=False)
    runs_per_precision: Mapping[str, int] = field(hash=False)
    n_runs: int
    r2: float
    objective: float
    reference: str = "bf16"
    loss: str = "final_val_loss"
    include_diverged: bool = False
    ci_level: float = 0.95
    n_boot: int = 0
    n_boot_requested: int = 0

    def multiplier(self, precision: str | Sequence[str] | np.ndarray) -> float | np.ndarray:
        """m_P of one label, or an array of them for an array of labels."""
        if isinstance(precision, str):
            if precision not in self.multipliers:
                raise KeyError(f"precision {precision!r} was not fitted (have {sorted(self.multipliers)})")
            return self.multipliers[precision]
        labels = np.asarray(precision, dtype=object)
        return np.array([self.multiplier(str(p)) for p in labels.ravel()], dtype=float).reshape(labels.shape)

    def predict(self, N: Any, D: Any, precision: str | Sequence[str] | np.ndarray) -> np.ndarray:
        """The law at (N, D) for ``precision`` (one label, or one per point)."""
        N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
        m = self.multiplier(precision)
        return self.E + self.A * (N * m) ** -self.alpha + self.B * D**-self.beta

    def table(self) -> pd.DataFrame:
        """One row per precision: m_P, its interval (NaN without a bootstrap) and the runs it rests on;
        the reference first, then by m_P descending."""
        rows = [
            {
                "precision": p,
                "m_P": m,
                "ci_low": self.intervals.get(p, (np.nan, np.nan))[0],
                "ci_high": self.intervals.get(p, (np.nan, np.nan))[1],
                "n_runs": self.runs_per_precision.get(p, 0),
            }
            for p, m in sorted(self.multipliers.items(), key=lambda kv: (kv[0] != self.reference, -kv[1]))
        ]
        return pd.DataFrame(rows, columns=["precision", "m_P", "ci_low", "ci_high", "n_runs"])


def joint_objective(
    theta: np.ndarray, groups: Sequence[Group], delta: float = HUBER_DELTA
) -> tuple[float, np.ndarray]:
    """Mean Huber loss of the log-residuals over all runs, and its gradient, at θ = (log E, log A,
    log B, α, β, s_1, …, s_{K−1}); ``groups[0]`` is the reference (shift 0) and s_k = log m of
    ``groups[k]``. Each group is ``analysis.fits.objective`` on its own runs with log N shifted."""
    x = theta[:5]
    n = sum(len(g[2]) for g in groups)
    value, grad = 0.0, np.zeros_like(theta, dtype=float)
    for k, (lnN, lnD, lnL) in enumerate(groups):
        shift = theta[4 + k] if k else 0.0
        v, g = objective(x, lnN + shift, lnD, lnL, delta)
        w = len(lnL) / n
        value += w * v
        grad[:5] += w * g
        if k:
            grad[4 + k] = -x[3] * w * g[1]  # s_k enters as log A − α·s_k
    return value, grad


def _refine_joint(
    starts: Sequence[np.ndarray],
    groups: Sequence[Group],
    delta: float,
    *,
    maxiter: int = 1000,
    ftol: float = 1e-13,
    gtol: float = 1e-11,
) -> tuple[np.ndarray, float]:
    """L-BFGS-B on the joint objective (divided by δ, as in ``analysis.fits``, so the stopping rules
    see values of order one) from each start; the best end point and its (unscaled) objective."""
    bounds = [(None, None)] * 3 + [_EXP_BOUNDS] * 2 + [LOG_M_BOUNDS] * (len(groups) - 1)
    lo = np.array([-np.inf] * 3 + [b[0] for b in bounds[3:]])
    hi = np.array([np.inf] * 3 + [b[1] for b in bounds[3:]])

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        v, g = joint_objective(theta, groups, delta)
        return v / delta, g / delta

    best_theta, best_v = None, math.inf
    for t0 in starts:
        res = minimize(
            f,
            np.clip(np.asarray(t0, dtype=float), lo, hi),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": maxiter, "ftol": ftol, "gtol": gtol},
        )
        v = f(res.x)[0]
        if np.isfinite(v) and v < best_v:
            best_theta, best_v = res.x, v
    if best_theta is None:
        raise FloatingPointError("no start reached a finite objective")
    return best_theta, best_v * delta


def _bootstrap_multipliers(theta: np.ndarray, delta: float, boot: Sequence[Group]) -> np.ndarray | None:
    """The multipliers m_P of one within-precision resample, refitted from the full-data optimum;
    None where the refit fails or ends non-finite (the replicate is dropped)."""
    try:
        tb, _ = _refine_joint([theta], boot, delta, maxiter=BOOT_MAXITER, ftol=1e-10, gtol=1e-8)
    except (FloatingPointError, ValueError, np.linalg.LinAlgError):
        return None
    return np.exp(tb[5:]) if np.all(np.isfinite(tb)) else None


def _profile_shifts(x: np.ndarray, groups: Sequence[Group], delta: float) -> np.ndarray:
    """For each group, the log-shift on ``LOG_M_GRID`` that best fits its runs to the law x held fixed."""
    out = np.empty(len(groups))
    for k, (lnN, lnD, lnL) in enumerate(groups):
        values = [objective(x, lnN + s, lnD, lnL, delta)[0] for s in LOG_M_GRID]
        out[k] = LOG_M_GRID[int(np.argmin(values))]
    return out


def _starts(groups: Sequence[Group], delta: float) -> list[np.ndarray]:
    """Joint starts θ from a Chinchilla fit of the reference alone (when it has enough runs) and of all
    runs pooled, each followed by one alternation step (profile shifts → refit shifted → profile)."""
    lnN, lnD, lnL = (np.concatenate([g[i] for g in groups]) for i in range(3))
    D, L = np.exp(lnD), np.exp(lnL)
    seeds = []
    ref = groups[0]
    if len(ref[2]) >= MIN_RUNS and np.unique(ref[0]).size >= 2 and np.unique(ref[1]).size >= 2:
        seeds.append(fit_arrays(*(np.exp(v) for v in ref), delta=delta)[0])
    seeds.append(fit_arrays(np.exp(lnN), D, L, delta=delta)[0])
    starts = []
    for x in seeds:
        s = _profile_shifts(x, groups, delta)
        shifted = np.concatenate([g[0] + sk for g, sk in zip(groups, s, strict=True)])
        x, _ = fit_arrays(np.exp(shifted), D, L, delta=delta, extra_starts=(x,))
        s = _profile_shifts(x, groups, delta)
        x = x.copy()
        x[1] -= x[3] * s[0]  # log A − α(log N + s) = (log A − α s_ref) − α(log N + s − s_ref)
        starts.append(np.concatenate([x, s[1:] - s[0]]))
    return starts


def _distinct_points(lnN: np.ndarray, lnD: np.ndarray) -> int:
    return len(set(zip(lnN.tolist(), lnD.tolist(), strict=True)))


@single_threaded_blas()
def fit_precision_law(
    df: pd.DataFrame,
    *,
    loss: str = "final_val_loss",
    precision: str = "precision",
    reference: str = "bf16",
    n_boot: int = 200,
    seed: int = 0,
    include_diverged: bool = False,
    ci: float = 0.95,
    delta: float = HUBER_DELTA,
) -> PrecisionLawFit:
    """Fit L(N, D, P) = E + A/(N·m_P)^α + B/D^β jointly to the runs in ``df``.

    ``df`` has columns N, D, ``loss``, ``precision`` (the label P) and optionally ``status`` (rows
    without it count as done) and ``unstable``; runs are filtered as in ``analysis.fits``: diverged or
    unstable runs are left out unless ``include_diverged``. ``reference`` gets m = 1. ``n_boot``
    within-precision bootstrap replicates give ``ci``-level percentile intervals of every m_P (0 skips
    them). Raises ``InsufficientData`` when the reference has no usable runs, a precision has fewer
    than two distinct (N, D) points, or there are fewer than ``MIN_RUNS`` runs (or < 2 distinct N or
    D) in all."""
    if precision not in df:
        raise InsufficientData(f"fit_precision_law: no column {precision!r} in the runs frame")
    frame = df.reset_index(drop=True)
    if "status" not in frame:
        frame = frame.assign(status="done")
    sub = _usable(frame, loss, include_diverged)
    labels = frame.loc[sub.index, precision].astype(str)
    present = sorted(set(labels))
    if reference not in present:
        raise InsufficientData(
            f"fit_precision_law: no usable runs of the reference precision {reference!r} (have {present})"
        )
    order = [reference] + [p for p in present if p != reference]
    groups: list[Group] = []
    for p in order:
        g = sub[(labels == p).to_numpy()]
        group = (np.log(g["N"].to_numpy()), np.log(g["D"].to_numpy()), np.log(g[loss].to_numpy()))
        if _distinct_points(group[0], group[1]) < 2:
            raise InsufficientData(
                f"fit_precision_law: precision {p!r} has {_distinct_points(group[0], group[1])} distinct "
                "(N, D) point(s); its multiplier needs >= 2"
            )
        groups.append(group)
    _check(sub, "fit_precision_law")

    theta, obj = _refine_joint(_starts(groups, delta), groups, delta)

    intervals: dict[str, tuple[float, float]] = {}
    n_ok = 0
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        boots = []
        for _ in range(n_boot):
            picks = [rng.integers(0, len(g[2]), len(g[2])) for g in groups]
            boot = [(g[0][i], g[1][i], g[2][i]) for g, i in zip(groups, picks, strict=True)]
            if all(_distinct_points(b[0], b[1]) >= 2 for b in boot):
                boots.append(boot)
        refits = map_refits(functools.partial(_bootstrap_multipliers, theta, delta), boots)
        draws = [m for m in refits if m is not None]
        n_ok = len(draws)
        if draws:
            q = 100 * np.array([(1 - ci) / 2, (1 + ci) / 2])
            lo, hi = np.percentile(np.array(draws), q, axis=0)
            intervals = {reference: (1.0, 1.0)}
            intervals.update({p: (float(lo[j]), float(hi[j])) for j, p in enumerate(order[1:])})

    E, A, B, alpha, beta = _natural(theta[:5])
    shifts = np.concatenate([[0.0], theta[5:]])
    lnN = np.concatenate([g[0] + s for g, s in zip(groups, shifts, strict=True)])
    lnD, lnL = (np.concatenate([g[i] for g in groups]) for i in (1, 2))
    return PrecisionLawFit(
        E=E,
        A=A,
        B=B,
        alpha=alpha,
        beta=beta,
        multipliers={p: float(np.exp(s)) for p, s in zip(order, shifts, strict=True)},
        intervals=intervals,
        runs_per_precision={p: len(g[2]) for p, g in zip(order, groups, strict=True)},
        n_runs=len(lnL),
        r2=_r2(theta[:5], lnN, lnD, lnL),
        objective=float(obj),
        reference=reference,
        loss=loss,
        include_diverged=include_diverged,
        ci_level=ci,
        n_boot=n_ok,
        n_boot_requested=n_boot,
    )
