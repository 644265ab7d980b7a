"""IsoFLOP analysis: per budget the loss-minimising model size, the frontier per precision, and the
effective-compute multiplier of each precision against a high-precision reference.

1. ``isoflop_minima``: for every (precision, budget) with runs at >= 3 distinct sizes, a parabola
   L = c₂x² + c₁x + c₀ in x = log₁₀ N; its vertex gives N*(C) and L*(C) (``interior`` says whether the
   vertex lies inside the sizes that were run; only interior minima with c₂ > 0 feed the frontier).
2. ``fit_frontiers``: per precision, least squares in log-log space for L*(C) = a·C^−b and
   N*(C) = k·C^m (D* = C/(6N*)).
3. ``compute_multipliers``: at each budget C of precision p, the compute C_ref at which the
   reference frontier reaches p's frontier loss: C_ref = (a_ref / L_p*(C))^{1/b_ref}. The multiplier
   C_ref/C < 1 means p needs more compute than the reference for the same loss (it is "worth"
   that fraction of reference compute). The reference is ``bf16``, else ``fp32``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.fits import _usable

REFERENCES = ("bf16", "fp32", "bf16/bf16", "fp32/fp32")  # the last two: records before the one label


def isoflop_minima(
    df: pd.DataFrame,
    loss: str = "final_val_loss",
    *,
    by: str = "precision",
    budget: str = "budget",
    include_diverged: bool = False,
    min_sizes: int = 3,
) -> pd.DataFrame:
    """One row per (``by``, budget) group with >= ``min_sizes`` distinct N: the parabola's
    coefficients, ``N_opt``, ``D_opt``, ``L_opt``, ``interior`` and the best run actually observed."""
    rows = []
    sub = df.loc[_usable(df, loss, include_diverged).index]
    for (label, C), g in sub.groupby([by, budget], sort=True):
        if g["N"].nunique() < min_sizes:
            continue
        x, y = np.log10(g["N"].to_numpy(float)), g[loss].to_numpy(float)
        c2, c1, c0 = np.polyfit(x, y, 2)
        row: dict[str, Any] = {by: label, "budget": float(C), "n_runs": len(g), "n_sizes": g["N"].nunique()}
        row.update(c2=c2, c1=c1, c0=c0)
        if c2 > 0:
            xv = -c1 / (2 * c2)
            row.update(log10_N_opt=xv, N_opt=10**xv, L_opt=c0 - c1 * c1 / (4 * c2))
            row["interior"] = bool(x.min() <= xv <= x.max())
        else:
            row.update(log10_N_opt=np.nan, N_opt=np.nan, L_opt=np.nan, interior=False)
        row["D_opt"] = C / (6 * row["N_opt"])
        best = g.loc[g[loss].idxmin()]
        row.update(N_best=float(best["N"]), L_best=float(best[loss]))
        rows.append(row)
    cols = [by, "budget", "n_runs", "n_sizes", "c2", "c1", "c0", "log10_N_opt", "N_opt", "L_opt", "interior"]
    return pd.DataFrame(rows, columns=[*cols, "D_opt", "N_best", "L_best"])


@dataclass(frozen=True)
class PowerLaw:
    """y = coef · x^exponent, fitted by least squares on log y vs log x (``r2`` in log space)."""

    coef: float
    exponent: float
    r2: float
    n: int

    def __call__(self, x: Any) -> np.ndarray:
        return self.coef * np.asarray(x, dtype=float) ** self.exponent

    def inverse(self, y: Any) -> np.ndarray:
        return (np.asarray(y, dtype=float) / self.coef) ** (1 / self.exponent)


def fit_power_law(x: Any, y: Any) -> PowerLaw:
    lx, ly = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (slope * lx + intercept)
    ss_tot = ((ly - ly.mean()) ** 2).sum()
    r2 = float(1 - (resid**2).sum() / ss_tot) if ss_tot > 0 else float("nan")
    return PowerLaw(float(np.exp(intercept)), float(slope), r2, len(lx))


@dataclass(frozen=True)
class Frontier:
    """The compute frontier of one precision: L*(C) = a·C^−b and N*(C) = k·C^m."""

    precision: str
    loss: PowerLaw
    n_opt: PowerLaw
    budgets: tuple[float, ...]

    @property
    def a(self) -> float:
        return self.loss.coef

    @property
    def b(self) -> float:
        return -self.loss.exponent

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(a=self.a, b=self.b)
        return d


def fit_frontiers(
    minima: pd.DataFrame, *, by: str = "precision", interior_only: bool = True
) -> dict[str, Frontier]:
    """A ``Frontier`` per precision with >= 2 usable budgets (valid vertex, interior if asked)."""
    ok = minima[np.isfinite(minima["L_opt"]) & (minima["c2"] > 0) & (minima["L_opt"] > 0)]
    if interior_only:
        ok = ok[ok["interior"].astype(bool)]
    out = {}
    for label, g in ok.groupby(by, sort=True):
        if g["budget"].nunique() < 2:
            continue
        C = g["budget"].to_numpy(float)
        out[str(label)] = Frontier(
            precision=str(label),
            loss=fit_power_law(C, g["L_opt"]),
            n_opt=fit_power_law(C, g["N_opt"]),
            budgets=tuple(float(c) for c in sorted(C)),
        )
    return out


def reference_precision(labels: Iterable[str]) -> str | None:
    """``bf16`` if present, else ``fp32``, else None."""
    labels = set(labels)
    return next((r for r in REFERENCES if r in labels), None)


def compute_multipliers(
    frontiers: Mapping[str, Frontier], reference: str | None = None, budgets: Iterable[float] | None = None
) -> pd.DataFrame:
    """Effective-compute multiplier of every precision against ``reference`` at equal loss, at each
    of the precision's own budgets (or ``budgets``); the reference gets 1 by construction."""
    reference = reference or reference_precision(frontiers)
    cols = ["precision", "reference", "budget", "loss", "C_reference", "multiplier"]
    if reference is None or reference not in frontiers:
        return pd.DataFrame(columns=cols)
    ref = frontiers[reference]
    rows = []
    for label, f in frontiers.items():
        for C in budgets if budgets is not None else f.budgets:
            L = float(f.loss(C))
            C_ref = float(ref.loss.inverse(L)) if ref.b > 0 else np.nan
            rows.append([label, reference, float(C), L, C_ref, C_ref / C])
    return pd.DataFrame(rows, columns=cols)
