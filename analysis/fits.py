"""Chinchilla fits: L(N, D) = E + A/N^α + B/D^β, as pure functions of a runs frame.

The objective is the instability study's (``plot/utils_scaling.py``): the mean Huber loss (δ = 1e-3)
between the log-prediction, written in log-sum-exp form

    log L̂ = LSE(log A − α log N, log B − β log D, log E),

and log L, minimised by L-BFGS over (log E, log A, log B, α, β). Its 16-start grid (log A, log B ∈
{5, 10, 15, 20}, E = e^0.5, α = β = 0.4; ``fit_chinchilla_study``) can end in a wrong basin when the
losses or sizes are far from the paper's, so the starts here come from a profile instead: for every
(α, β) on a grid the model is linear in (E, A, B), which are solved by non-negative least squares on
relative residuals (exactly, over the 7 active sets, for all grid points at once); the best few
distinct grid points seed L-BFGS on the full Huber objective, and the best end point wins.

Bootstrap intervals resample runs with replacement and refit (a coarser grid plus the full-data
optimum as starts); intervals are percentiles. The resamples are drawn here, in order, and refitted
on one process per core (``map_refits``): each refit is independent and deterministic, so the
intervals are the same, bit for bit, as those of one loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

HUBER_DELTA = 1e-3
MIN_RUNS = 6
PARAMS = ("E", "A", "B", "alpha", "beta")
ALPHA_GRID = np.linspace(0.02, 2.0, 45)
BETA_GRID = np.linspace(0.02, 2.0, 45)
_EXP_BOUNDS = (1e-3, 10.0)


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run the block with BLAS on one thread (threadpoolctl). The fits make thousands of BLAS calls
    on 5×5 problems (L-BFGS-B's internals, batched 3×3 solves); threads only add wake-up latency,
    which on a busy machine made a fit 30× slower."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


PARALLEL_MIN_TASKS = 16  # fewer refits than this run in the caller: a worker's start (~1 s) would not pay


def _cores() -> int:
    """The cores this process may use (joblib's count: CPU affinity and cgroup limits included)."""
    from joblib import cpu_count

    return cpu_count()


def _refit_chunk(fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
    with single_threaded_blas():
        return [fn(t) for t in tasks]


def map_refits(fn: Callable[[Any], Any], tasks: Sequence[Any], *, jobs: int | None = None) -> list[Any]:
    """``[fn(t) for t in tasks]``, on one process per core (joblib's loky pool, reused between calls)
    when there are at least ``PARALLEL_MIN_TASKS`` tasks. ``fn`` must pickle (a module-level function
    or a ``functools.partial`` of one) and be deterministic; the tasks go out in contiguous shares,
    four per process (a refit takes 40 to 500 iterations, so one share per process left one idle
    while the other finished), each run with one BLAS thread, and the results come back in order,
    so they equal the loop's."""
    jobs = min(jobs or _cores(), len(tasks))
    if jobs < 2 or len(tasks) < PARALLEL_MIN_TASKS:
        return _refit_chunk(fn, tasks)
    from joblib import Parallel, delayed

    bounds = np.linspace(0, len(tasks), min(4 * jobs, len(tasks)) + 1).round().astype(int)
    shares = Parallel(n_jobs=jobs, backend="loky")(
        delayed(_refit_chunk)(fn, tasks[a:b]) for a, b in itertools.pairwise(bounds)
    )
    return [r for share in shares for r in share]


class InsufficientData(ValueError):
    """Too few usable runs (or too few distinct N or D) for the fit."""


@dataclass(frozen=True)
class ChinchillaFit:
    """A fitted L(N, D) = E + A/N^α + B/D^β. ``r2`` is on log L; ``objective`` is the mean Huber loss
    at the optimum; ``ci`` maps each of E, A, B, alpha, beta to a (low, high) bootstrap interval."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    r2: float
    n: int
    objective: float
    loss: str = "final_val_loss"
    include_diverged: bool = False
    ci: Mapping[str, tuple[float, float]] = field(default_factory=dict, hash=False, compare=False)
    ci_level: float = 0.95
    n_bootstrap: int = 0

    def predict(self, N: Any, D: Any) -> np.ndarray:
        N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
        return self.E + self.A * N**-self.alpha + self.B * D**-self.beta

    def n_opt(self, C: Any) -> np.ndarray:
        """Compute-optimal N at C = 6ND: G·(C/6)^{β/(α+β)}, G = (αA/(βB))^{1/(α+β)}."""
        a, b = self.alpha, self.beta
        G = (a * self.A / (b * self.B)) ** (1 / (a + b))
        return G * (np.asarray(C, dtype=float) / 6) ** (b / (a + b))

    def d_opt(self, C: Any) -> np.ndarray:
        return np.asarray(C, dtype=float) / (6 * self.n_opt(C))

    def caveats(self) -> list[str]:
        """Reasons to distrust the coefficients: an exponent at its bound, E driven to ~0, or a bootstrap
        interval of α or β wider than a factor 2 (the data do not pin the law down)."""
        out = []
        for p in ("alpha", "beta"):
            v = getattr(self, p)
            if v <= _EXP_BOUNDS[0] * 1.5 or v >= _EXP_BOUNDS[1] * 0.99:
                out.append(f"{p} at its bound")
            lo, hi = self.ci.get(p, (np.nan, np.nan))
            if lo > 0 and hi / lo > 2:
                out.append(f"{p} interval spans ×{hi / lo:.3g}")
        if self.E < 1e-9:
            out.append("E → 0")
        return out

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ci"] = {k: list(v) for k, v in self.ci.items()}
        d["caveats"] = self.caveats()
        return d


def _huber(r: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Huber loss and its derivative, elementwise."""
    a = np.abs(r)
    small = a <= delta
    return np.where(small, 0.5 * r * r, delta * (a - 0.5 * delta)), np.where(small, r, delta * np.sign(r))


def objective(x: np.ndarray, lnN: np.ndarray, lnD: np.ndarray, lnL: np.ndarray, delta: float = HUBER_DELTA):
    """Mean Huber loss of the log-residuals at x = (log E, log A, log B, α, β), and its gradient."""
    e, a, b, alpha, beta = x
    u, v = a - alpha * lnN, b - beta * lnD
    m = np.maximum(np.maximum(u, v), e)
    eu, ev, ee = np.exp(u - m), np.exp(v - m), np.exp(e - m)
    s = eu + ev + ee
    r = m + np.log(s) - lnL
    dh = np.clip(r, -delta, delta)  # Huber'(r)
    g = dh / s
    gu, gv = g * eu, g * ev
    grad = np.array([g @ ee, gu.sum(), gv.sum(), -(gu @ lnN), -(gv @ lnD)])
    n = len(lnL)
    return float(dh @ (r - 0.5 * dh)) / n, grad / n  # Huber(r) = h'(r)·(r − h'(r)/2)


def _scaled(lnN, lnD, lnL, delta):
    """The objective divided by δ, so L-BFGS's stopping rules see values of order one."""

    def f(x):
        v, g = objective(x, lnN, lnD, lnL, delta)
        return v / delta, g / delta

    return f


_SUBSETS = [s for k in (3, 2, 1) for s in itertools.combinations(range(3), k)]


def profile_grid(
    N: np.ndarray, D: np.ndarray, L: np.ndarray, alphas: np.ndarray, betas: np.ndarray, delta: float
) -> tuple[np.ndarray, np.ndarray]:
    """For every (α, β) on the grid: (E, A, B) ≥ 0 minimising Σ((E + A N^-α + B D^-β − L)/L)²
    (exact NNLS: the best feasible least-squares solution over the 7 active sets), and the Huber
    objective there. Returns (x of shape (k, 5) in the fit's parametrisation, objective (k,))."""
    ag, bg = np.meshgrid(alphas, betas, indexing="ij")
    ag, bg = ag.ravel(), bg.ravel()
    wt = 1.0 / L
    X = np.stack(
        [
            np.broadcast_to(wt, (len(ag), len(L))),
            N[None, :] ** -ag[:, None] * wt,
            D[None, :] ** -bg[:, None] * wt,
        ],
        axis=-1,
    )  # (k, n, 3): columns of the relative-residual system
    scale = np.linalg.norm(X, axis=1)  # (k, 3), for conditioning
    Xs = X / scale[:, None, :]
    y = np.ones(len(L))  # L·wt
    G = np.einsum("kni,knj->kij", Xs, Xs)
    r = np.einsum("kni,n->ki", Xs, y)
    best_ss = np.full(len(ag), np.inf)
    best_c = np.zeros((len(ag), 3))
    for s in _SUBSETS:
        idx = np.array(s)
        Gs = G[:, idx[:, None], idx[None, :]] + 1e-12 * np.eye(len(idx))
        c = np.linalg.solve(Gs, r[:, idx][..., None])[..., 0]
        ok = (c >= 0).all(axis=1)
        ss = len(L) - 2 * np.einsum("ki,ki->k", c, r[:, idx]) + np.einsum("ki,kij,kj->k", c, Gs, c)
        take = ok & (ss < best_ss - 1e-15)
        full = np.zeros((len(ag), 3))
        full[:, idx] = c
        best_ss = np.where(take, ss, best_ss)
        best_c = np.where(take[:, None], full, best_c)
    coef = best_c / scale  # back to E, A, B
    floor = 1e-12 * L.mean()
    logs = np.log(np.maximum(coef, floor))
    x = np.column_stack([logs[:, 0], logs[:, 1], logs[:, 2], ag, bg])
    lnN, lnD, lnL = np.log(N), np.log(D), np.log(L)
    t = np.stack(
        [x[:, 1:2] - ag[:, None] * lnN, x[:, 2:3] - bg[:, None] * lnD, np.repeat(x[:, :1], len(L), 1)]
    )
    pred = np.logaddexp.reduce(t, axis=0)
    obj = _huber(pred - lnL, delta)[0].mean(axis=1)
    return x, obj


def _distinct_best(x: np.ndarray, obj: np.ndarray, k: int, min_dist: float = 0.15) -> list[np.ndarray]:
    picked: list[np.ndarray] = []
    for i in np.argsort(obj):
        if all(np.hypot(*(x[i, 3:] - p[3:])) > min_dist for p in picked):
            picked.append(x[i])
            if len(picked) == k:
                break
    return picked


def _refine(starts, lnN, lnD, lnL, delta, maxiter=500) -> tuple[np.ndarray, float]:
    f = _scaled(lnN, lnD, lnL, delta)
    bounds = [(None, None), (None, None), (None, None), _EXP_BOUNDS, _EXP_BOUNDS]
    best_x, best_v = None, math.inf
    for x0 in starts:
        x0 = np.array(x0, dtype=float)
        x0[3:] = np.clip(x0[3:], *_EXP_BOUNDS)
        res = minimize(
            f,
            x0,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": maxiter, "ftol": 1e-13, "gtol": 1e-11},
        )
        v = f(res.x)[0]
        if v < best_v:
            best_x, best_v = res.x, v
    return best_x, best_v * delta


def fit_arrays(
    N: Any,
    D: Any,
    L: Any,
    *,
    delta: float = HUBER_DELTA,
    alphas: np.ndarray = ALPHA_GRID,
    betas: np.ndarray = BETA_GRID,
    n_starts: int = 4,
    extra_starts: tuple[np.ndarray, ...] = (),
) -> tuple[np.ndarray, float]:
    """The fit on plain arrays: x = (log E, log A, log B, α, β) and the mean Huber objective."""
    N, D, L = (np.asarray(v, dtype=float) for v in (N, D, L))
    lnN, lnD, lnL = np.log(N), np.log(D), np.log(L)
    x, obj = profile_grid(N, D, L, np.asarray(alphas), np.asarray(betas), delta)
    starts = _distinct_best(x, obj, n_starts) + list(extra_starts)
    return _refine(starts, lnN, lnD, lnL, delta)


def _usable(df: pd.DataFrame, loss: str, include_diverged: bool) -> pd.DataFrame:
    if loss not in df:
        raise InsufficientData(f"no column {loss!r} in the runs frame")
    keep = df["status"].isin(["done", "diverged"] if include_diverged else ["done"])
    if not include_diverged and "unstable" in df:
        keep &= ~df["unstable"].astype(bool)
    sub = df.loc[keep, ["N", "D", loss]].astype(float)
    sub = sub[np.isfinite(sub).all(axis=1) & (sub > 0).all(axis=1)]
    return sub


def _check(sub: pd.DataFrame, what: str) -> None:
    if len(sub) < MIN_RUNS or sub["N"].nunique() < 2 or sub["D"].nunique() < 2:
        raise InsufficientData(
            f"{what}: {len(sub)} usable runs with {sub['N'].nunique()} distinct N and "
            f"{sub['D'].nunique()} distinct D; a Chinchilla fit needs >= {MIN_RUNS} runs and >= 2 of each"
        )


def _r2(x: np.ndarray, lnN, lnD, lnL) -> float:
    e, a, b, alpha, beta = x
    pred = np.logaddexp.reduce(np.stack([a - alpha * lnN, b - beta * lnD, np.full_like(lnN, e)]), axis=0)
    ss_tot = ((lnL - lnL.mean()) ** 2).sum()
    return float(1 - ((lnL - pred) ** 2).sum() / ss_tot) if ss_tot > 0 else float("nan")


@single_threaded_blas()
def fit_chinchilla(
    df: pd.DataFrame,
    loss: str = "final_val_loss",
    *,
    include_diverged: bool = False,
    bootstrap: int = 200,
    ci: float = 0.95,
    seed: int = 0,
    delta: float = HUBER_DELTA,
) -> ChinchillaFit:
    """Fit L(N, D) to the runs in ``df`` (columns N, D, ``loss``, status; ``unstable`` if present).

    Only finished runs (status ``done``) count; diverged or spiked-and-unrecovered runs are left out
    unless ``include_diverged`` (to show how they distort the fit). ``bootstrap`` resamples give the
    intervals (0 skips them). Raises ``InsufficientData`` with fewer than ``MIN_RUNS`` usable runs."""
    sub = _usable(df, loss, include_diverged)
    _check(sub, "fit_chinchilla")
    N, D, L = (sub[c].to_numpy() for c in ("N", "D", loss))
    x, obj = fit_arrays(N, D, L, delta=delta)
    lnN, lnD, lnL = np.log(N), np.log(D), np.log(L)
    intervals: dict[str, tuple[float, float]] = {}
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        picks = [rng.integers(0, len(L), len(L)) for _ in range(bootstrap)]
        picks = [i for i in picks if np.unique(N[i]).size >= 2 and np.unique(D[i]).size >= 2]
        draws = map_refits(functools.partial(_bootstrap_refit, N, D, L, delta, x), picks)
        if draws:
            arr = np.array(draws)
            q = 100 * np.array([(1 - ci) / 2, (1 + ci) / 2])
            lo, hi = np.percentile(arr, q, axis=0)
            intervals = {p: (float(lo[j]), float(hi[j])) for j, p in enumerate(PARAMS)}
    return _fit_from(
        x, lnN, lnD, lnL, objective=float(obj), loss=loss, include_diverged=include_diverged,
        ci=intervals, ci_level=ci, n_bootstrap=bootstrap,
    )  # fmt: skip


def _bootstrap_refit(N, D, L, delta: float, x: np.ndarray, i: np.ndarray) -> tuple[float, ...]:
    """One bootstrap refit of the runs ``i`` (a coarser grid and the full-data optimum ``x`` as starts)."""
    xb, _ = fit_arrays(
        N[i], D[i], L[i], delta=delta, alphas=ALPHA_GRID[::3], betas=BETA_GRID[::3], n_starts=1,
        extra_starts=(x,),
    )  # fmt: skip
    return _natural(xb)


def _fit_from(x: np.ndarray, lnN, lnD, lnL, **fields) -> ChinchillaFit:
    """The ChinchillaFit of log-space parameters ``x`` (log E, log A, log B, α, β) on these data."""
    E, A, B, alpha, beta = _natural(x)
    return ChinchillaFit(
        E=E, A=A, B=B, alpha=alpha, beta=beta, r2=_r2(x, lnN, lnD, lnL), n=len(lnN), **fields
    )


def _natural(x: np.ndarray) -> tuple[float, float, float, float, float]:
    return (float(np.exp(x[0])), float(np.exp(x[1])), float(np.exp(x[2])), float(x[3]), float(x[4]))


def fit_per_precision(
    df: pd.DataFrame, by: str = "precision", **kwargs: Any
) -> dict[str, ChinchillaFit | InsufficientData]:
    """``fit_chinchilla`` for each value of ``by``; a group with too few runs maps to the
    ``InsufficientData`` error saying why (test with ``isinstance(v, ChinchillaFit)``)."""
    out: dict[str, ChinchillaFit | InsufficientData] = {}
    for label, group in df.groupby(by, sort=True):
        try:
            out[str(label)] = fit_chinchilla(group, **kwargs)
        except InsufficientData as e:
            out[str(label)] = e
    return out


STUDY_STARTS = tuple((0.5, a, b, 0.4, 0.4) for a in (5, 10, 15, 20) for b in (5, 10, 15, 20))


@single_threaded_blas()
def fit_chinchilla_study(
    df: pd.DataFrame,
    loss: str = "final_val_loss",
    *,
    include_diverged: bool = False,
    delta: float = HUBER_DELTA,
) -> ChinchillaFit:
    """The instability study's procedure, kept for comparison: L-BFGS (200 iterations) on the same
    objective from its 16 fixed starts, best end point kept. No bootstrap."""
    sub = _usable(df, loss, include_diverged)
    _check(sub, "fit_chinchilla_study")
    N, D, L = (sub[c].to_numpy() for c in ("N", "D", loss))
    lnN, lnD, lnL = np.log(N), np.log(D), np.log(L)
    f = _scaled(lnN, lnD, lnL, delta)
    best_x, best_v = None, math.inf
    for x0 in STUDY_STARTS:
        res = minimize(f, np.array(x0, dtype=float), jac=True, method="L-BFGS-B", options={"maxiter": 200})
        if res.fun < best_v:
            best_x, best_v = res.x, float(res.fun)
    return _fit_from(
        best_x, lnN, lnD, lnL, objective=best_v * delta, loss=loss, include_diverged=include_diverged
    )


def fits_table(fits: Mapping[str, ChinchillaFit | Exception]) -> pd.DataFrame:
    """One row per fitted group: coefficients, interval bounds (``<param>_lo``/``_hi``), r2, n."""
    rows = []
    for label, fit in fits.items():
        if not isinstance(fit, ChinchillaFit):
            continue
        row: dict[str, Any] = {"precision": label, "n": fit.n}
        for p in PARAMS:
            row[p] = getattr(fit, p)
            lo, hi = fit.ci.get(p, (np.nan, np.nan))
            row[f"{p}_lo"], row[f"{p}_hi"] = lo, hi
        row["r2"] = fit.r2
        rows.append(row)
    return pd.DataFrame(rows)
