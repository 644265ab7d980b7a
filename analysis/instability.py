"""Instability tables: how often runs diverge or spike, by precision pair × budget and by model size ×
tokens per parameter, and the LN-γ / activation clip fractions logged over training.

Only finished runs count (status ``done`` or ``diverged``). ``diverged``: the loss went non-finite;
``spiked``: the spike detector fired (``train.hooks.SpikeDetector``); ``unstable``: diverged, or spiked
and not recovered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

OUTCOMES = ("diverged", "spiked", "unstable")
FINISHED = ("done", "diverged")
CLIP_PREFIXES = {"ln": "clip_ln/", "act": "clip_act/"}


def si(x: float) -> str:
    """Compact engineering label: 16.6k, 460k, 19.5M, 1.7B."""
    if not np.isfinite(x):
        return "nan"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def sci(x: float) -> str:
    """Budget label: 2e17, 4.37e17."""
    if not np.isfinite(x) or x <= 0:
        return str(x)
    e = math.floor(math.log10(x))
    m = float(f"{x / 10**e:.3g}")
    if m >= 10:
        m, e = m / 10, e + 1
    return f"{m:g}e{e}"


def tokens_per_param_bins(x: pd.Series, edges: Sequence[float] | None = None) -> pd.Series:
    """Ordered categories of D/N over 1-2-5 edges spanning the data (e.g. ``"5–10"``)."""
    x = pd.Series(x, dtype=float)
    if edges is None:
        ok = x[(x > 0) & np.isfinite(x)]
        if ok.empty:
            return pd.Series(pd.Categorical([None] * len(x)), index=x.index)
        lo, hi = math.floor(math.log10(ok.min())), math.ceil(math.log10(ok.max()))
        seq = sorted(m * 10.0**e for e in range(lo - 1, hi + 2) for m in (1, 2, 5))
        start = max(e for e in seq if e <= ok.min())
        stop = min(e for e in seq if e > ok.max())
        edges = [e for e in seq if start <= e <= stop]
    labels = [f"{edges[i]:g}–{edges[i + 1]:g}" for i in range(len(edges) - 1)]
    return pd.cut(x, bins=list(edges), labels=labels, right=False)


def size_bins(N: pd.Series, max_levels: int = 12) -> pd.Series:
    """Model-size categories: each distinct N (labelled ``si``) when there are at most
    ``max_levels``, else logarithmic bins."""
    N = pd.Series(N, dtype=float)
    values = np.sort(N.dropna().unique())
    if len(values) <= max_levels:
        cat = pd.CategoricalDtype([si(v) for v in values], ordered=True)
        return N.map(lambda v: si(v) if np.isfinite(v) else None).astype(cat)
    edges = np.geomspace(values[0], values[-1] * 1.0001, max_levels + 1)
    labels = [f"{si(edges[i])}–{si(edges[i + 1])}" for i in range(max_levels)]
    return pd.cut(N, bins=edges, labels=labels, right=False)


def instability_map(df: pd.DataFrame, index: str = "pair", columns: str | None = "budget") -> pd.DataFrame:
    """Tidy counts and fractions per (``index``, ``columns``), or per ``index`` alone where ``columns``
    is None: ``n`` finished runs and, for each of ``OUTCOMES``, ``n_<outcome>`` and ``frac_<outcome>``.
    ``columns``/``index`` may also be ``"size"`` or ``"tokens_per_param_bin"`` (derived here from N and
    tokens_per_param)."""
    d = df[df["status"].isin(FINISHED)].copy()
    if "size" in (index, columns):
        d["size"] = size_bins(d["N"])
    if "tokens_per_param_bin" in (index, columns):
        d["tokens_per_param_bin"] = tokens_per_param_bins(d["tokens_per_param"])
    for o in OUTCOMES:
        d[o] = d[o].astype(bool) if o in d else False
    g = d.groupby([index] if columns is None else [index, columns], observed=True, sort=True)
    out = g.size().rename("n").to_frame()
    for o in OUTCOMES:
        out[f"n_{o}"] = g[o].sum()
        out[f"frac_{o}"] = out[f"n_{o}"] / out["n"]
    return out.reset_index()


def pivot(table: pd.DataFrame, value: str, index: str, columns: str) -> pd.DataFrame:
    """The wide grid of one ``value`` column of an ``instability_map`` (rows ``index``)."""
    return table.pivot(index=index, columns=columns, values=value)


def clip_long(curves: pd.DataFrame) -> pd.DataFrame:
    """The clip-fraction columns of ``curves`` as rows: run, step, kind (``ln``/``act``), layer, value
    (plus the run coordinates present in ``curves``)."""
    coords = [c for c in ("precision", "pair", "N", "tokens_per_param", "status") if c in curves]
    frames = []
    for kind, prefix in CLIP_PREFIXES.items():
        cols = [c for c in curves.columns if c.startswith(prefix)]
        if not cols:
            continue
        m = curves[["run", "step", *coords, *cols]].melt(
            id_vars=["run", "step", *coords], value_vars=cols, var_name="layer", value_name="value"
        )
        m = m.dropna(subset=["value"])
        m.insert(2, "kind", kind)
        m["layer"] = m["layer"].str.removeprefix(prefix)
        frames.append(m)
    if not frames:
        return pd.DataFrame(columns=["run", "step", "kind", "layer", "value", *coords])
    return pd.concat(frames, ignore_index=True)


def clip_summary(curves: pd.DataFrame) -> pd.DataFrame:
    """Per (run, step): max and mean over layers of the LN-γ clip fraction (``ln_max``, ``ln_mean``)
    and of the activation clip fraction (``act_max``, ``act_mean``)."""
    long = clip_long(curves)
    if long.empty:
        return pd.DataFrame(columns=["run", "step"])
    wide = long.pivot_table(index=["run", "step"], columns="kind", values="value", aggfunc=["max", "mean"])
    wide.columns = [f"{kind}_{stat}" for stat, kind in wide.columns]
    return wide.reset_index()
