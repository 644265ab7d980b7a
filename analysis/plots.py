"""Figures from frames and fits; nothing is fitted here. Every function returns a
``matplotlib.figure.Figure`` (the object API: no pyplot state, Agg canvas), ``save`` writes a PNG.

Curves follow the instability study's Figure 1: one panel per precision, one line per run, coloured
by tokens per parameter (log colour scale); grad norms are clipped at 20.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from analysis.fits import ChinchillaFit
from analysis.instability import sci, si
from analysis.isoflop import Frontier

PANEL = (3.6, 2.9)
GRAD_NORM_CLIP = 20.0


def save(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)  # constrained layout already fits everything; "tight" would draw twice
    return path


def _grid(n: int, ncols: int = 4, rows_per: int = 1, size=PANEL) -> tuple[Figure, np.ndarray]:
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols) * rows_per
    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    axes = np.atleast_2d(fig.subplots(nrows, ncols, squeeze=False))
    return fig, axes


def _unstable(runs: pd.DataFrame) -> pd.Series:
    """Which runs count as unstable: the table's ``unstable`` column (spikes included), else diverged."""
    return runs["unstable"].astype(bool) if "unstable" in runs else runs["status"].eq("diverged")


def _lognorm(values: pd.Series) -> Normalize:
    v = pd.Series(values, dtype=float)
    v = v[(v > 0) & np.isfinite(v)]
    if v.empty:
        return Normalize(0, 1)
    lo, hi = v.min(), v.max()
    return LogNorm(lo, hi if hi > lo else lo * 1.01)


def _hide_unused(axes: np.ndarray, used: int) -> None:
    for ax in axes.flat[used:]:
        ax.set_visible(False)


def run_curves(
    curves: pd.DataFrame,
    metric: str = "loss",
    *,
    by: str = "precision",
    color: str = "tokens_per_param",
    x: str = "step",
    log_y: bool = False,
    clip: float | None = None,
    title: str | None = None,
) -> Figure:
    """One panel per ``by`` value, a line per run of ``metric`` against ``x``, coloured by ``color``
    (log scale, shared colour bar)."""
    d = curves.dropna(subset=[metric]) if metric in curves else curves.iloc[:0]
    groups = sorted(d[by].dropna().unique()) if not d.empty else []
    fig, axes = _grid(max(1, len(groups)))
    norm, cmap = _lognorm(d[color] if color in d else pd.Series(dtype=float)), colormaps["viridis"]
    for ax, label in zip(axes.flat, groups, strict=False):
        g = d[d[by] == label]
        for _, run in g.groupby("run", sort=False):
            run = run.sort_values(x)
            y = run[metric].to_numpy(float)
            if clip is not None:
                y = np.minimum(y, clip)
            c = run[color].iloc[0] if color in run else np.nan
            ax.plot(run[x], y, lw=0.9, color=cmap(norm(c)) if np.isfinite(c) else "grey")
        ax.set_title(str(label), fontsize=9)
        ax.set_xlabel(x)
        ax.set_ylabel(metric)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
        if log_y:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    if not groups:
        axes.flat[0].text(0.5, 0.5, f"no {metric} logged", ha="center", va="center")
    _hide_unused(axes, max(1, len(groups)))
    if groups and color in d:
        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, label=color.replace("_", " "))
    if title:
        fig.suptitle(title)
    return fig


def loss_curves(curves: pd.DataFrame, **kw) -> Figure:
    return run_curves(curves, "loss", title="Train loss per precision (colour: tokens/param)", **kw)


def grad_norm_curves(curves: pd.DataFrame, **kw) -> Figure:
    return run_curves(
        curves,
        "grad_norm",
        log_y=True,
        clip=GRAD_NORM_CLIP,
        title=f"Grad norm (clipped at {GRAD_NORM_CLIP:g}) per precision (colour: tokens/param)",
        **kw,
    )


def clip_curves(summary: pd.DataFrame, *, by: str = "precision", color: str = "tokens_per_param") -> Figure:
    """Rows: max LN-γ clip fraction over layers, mean activation clip fraction over blocks; one
    column per precision; a line per run (``summary`` is ``instability.clip_summary`` with the run
    coordinates merged in)."""
    metrics = [m for m in ("ln_max", "act_mean") if m in summary and summary[m].notna().any()]
    groups = sorted(summary[by].dropna().unique()) if metrics else []
    ncols, nrows = max(1, len(groups)), max(1, len(metrics))
    fig = Figure(figsize=(PANEL[0] * ncols, PANEL[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    norm, cmap = (
        _lognorm(summary[color] if color in summary else pd.Series(dtype=float)),
        colormaps["viridis"],
    )
    names = {"ln_max": "LN-γ clip fraction (max over layers)", "act_mean": "activation clip fraction (mean)"}
    for j, label in enumerate(groups):
        g = summary[summary[by] == label]
        for i, m in enumerate(metrics):
            ax = axes[i, j]
            for _, run in g.dropna(subset=[m]).groupby("run", sort=False):
                run = run.sort_values("step")
                c = run[color].iloc[0] if color in run else np.nan
                ax.plot(run["step"], run[m], lw=0.9, color=cmap(norm(c)) if np.isfinite(c) else "grey")
            ax.set_title(f"{label}", fontsize=9)
            ax.set_xlabel("step")
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
            ax.set_ylabel(names[m], fontsize=8)
            ax.grid(alpha=0.3)
    if not groups:
        axes[0, 0].text(0.5, 0.5, "no clip fractions logged", ha="center", va="center")
    elif color in summary:
        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, label=color.replace("_", " "))
    return fig


def _draw_heatmap(ax, wide: pd.DataFrame, counts: pd.DataFrame | None, fmt) -> Any:
    nr, nc = wide.shape
    im = ax.imshow(wide.to_numpy(float), cmap="Reds", vmin=0, vmax=1, aspect="auto")
    col_labels = [fmt(c) if isinstance(c, int | float | np.floating) else str(c) for c in wide.columns]
    ax.set_xticks(range(nc), col_labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(nr), [str(r) for r in wide.index], fontsize=8)
    ax.set_xlabel(str(wide.columns.name or ""))
    ax.set_ylabel(str(wide.index.name or ""))
    for i in range(nr):
        for j in range(nc):
            v = wide.iat[i, j]
            if pd.isna(v):
                continue
            text = f"{v:.2f}"
            if counts is not None and not pd.isna(counts.iat[i, j]):
                text += f"\n{int(round(v * counts.iat[i, j]))}/{int(counts.iat[i, j])}"
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if v > 0.6 else "black")
    return im


def heatmap(wide: pd.DataFrame, *, title: str, counts: pd.DataFrame | None = None, fmt=sci) -> Figure:
    """Annotated grid of fractions in [0, 1] (``wide``: rows × columns, e.g. ``instability.pivot``);
    ``counts`` (same shape) adds "k/n" under each value. Numeric column labels go through ``fmt``."""
    nr, nc = wide.shape
    fig = Figure(figsize=(1.2 + 0.9 * max(nc, 2), 1.2 + 0.45 * max(nr, 2)), layout="constrained")
    ax = fig.subplots()
    im = _draw_heatmap(ax, wide, counts, fmt)
    fig.colorbar(im, ax=ax, label="fraction")
    ax.set_title(title, fontsize=10)
    return fig


def heatmap_grid(
    panels: Mapping[str, tuple[pd.DataFrame, pd.DataFrame | None]], *, title: str, fmt=sci, ncols: int = 3
) -> Figure:
    """One annotated fraction grid per panel (e.g. per precision pair), shared colour scale."""
    n = max(1, len(panels))
    nr = max((w.shape[0] for w, _ in panels.values()), default=2)
    nc = max((w.shape[1] for w, _ in panels.values()), default=2)
    size = (1.4 + 0.8 * max(nc, 2), 1.4 + 0.42 * max(nr, 2))
    fig, axes = _grid(n, ncols=ncols, size=size)
    im = None
    for ax, (label, (wide, counts)) in zip(axes.flat, panels.items(), strict=False):
        im = _draw_heatmap(ax, wide, counts, fmt)
        ax.set_title(str(label), fontsize=9)
    _hide_unused(axes, len(panels))
    if im is not None:
        fig.colorbar(im, ax=axes, label="fraction")
    fig.suptitle(title)
    return fig


def isoflop_curves(
    df: pd.DataFrame, minima: pd.DataFrame, loss: str = "final_val_loss", *, by: str = "precision"
) -> Figure:
    """Per precision: loss against N for each budget (colour), the fitted parabola in log N and its
    vertex (filled when interior)."""
    groups = sorted(minima[by].unique()) if not minima.empty else []
    fig, axes = _grid(max(1, len(groups)))
    norm, cmap = (
        _lognorm(minima["budget"] if not minima.empty else pd.Series(dtype=float)),
        colormaps["plasma"],
    )
    for ax, label in zip(axes.flat, groups, strict=False):
        for r in minima[minima[by] == label].itertuples():
            pts = df[(df[by] == label) & (df["budget"] == r.budget)].dropna(subset=[loss])
            pts = pts[pts["status"] == "done"]
            bad = _unstable(pts)
            col = cmap(norm(r.budget) * 0.85)
            ax.scatter(pts.loc[~bad, "N"], pts.loc[~bad, loss], s=12, color=col, zorder=3)
            ax.scatter(pts.loc[bad, "N"], pts.loc[bad, loss], s=20, color=col, marker="x", zorder=3)
            x = np.linspace(np.log10(pts["N"].min()) - 0.1, np.log10(pts["N"].max()) + 0.1, 60)
            ax.plot(10**x, r.c2 * x * x + r.c1 * x + r.c0, color=col, lw=1, label=sci(r.budget))
            if np.isfinite(r.N_opt):
                ax.scatter(
                    [r.N_opt],
                    [r.L_opt],
                    marker="*",
                    s=70,
                    color=col if r.interior else "white",
                    edgecolor=col,
                    zorder=4,
                )
        ax.set_xscale("log")
        ax.set_title(str(label), fontsize=9)
        ax.set_xlabel("N (parameters)")
        ax.set_ylabel(loss)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, title="C (FLOPs)", title_fontsize=6)
    if not groups:
        axes.flat[0].text(0.5, 0.5, "no budget has runs at >= 3 sizes", ha="center", va="center")
    _hide_unused(axes, max(1, len(groups)))
    fig.suptitle(
        "IsoFLOP curves: parabola in log N per budget (★ minimum, hollow: outside the sizes run; "
        "× unstable run, not fitted)"
    )
    return fig


def frontier(minima: pd.DataFrame, frontiers: Mapping[str, Frontier], *, by: str = "precision") -> Figure:
    """L*(C) and N*(C) per precision: interior isoFLOP minima and the fitted power laws."""
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax_l, ax_n = fig.subplots(1, 2)
    colors = colormaps["tab10"]
    for i, (label, f) in enumerate(sorted(frontiers.items())):
        pts = minima[(minima[by] == label) & minima["interior"].astype(bool)]
        C = np.geomspace(min(f.budgets) / 1.5, max(f.budgets) * 1.5, 50)
        col = colors(i % 10)
        ax_l.scatter(pts["budget"], pts["L_opt"], color=col, s=14)
        ax_l.plot(C, f.loss(C), color=col, lw=1, label=f"{label}: {f.a:.3g}·C^-{f.b:.3f}")
        ax_n.scatter(pts["budget"], pts["N_opt"], color=col, s=14)
        ax_n.plot(C, f.n_opt(C), color=col, lw=1, label=f"{label}: ∝ C^{f.n_opt.exponent:.2f}")
    for ax, ylabel in ((ax_l, "L*(C)"), (ax_n, "N*(C)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("C (FLOPs)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        if frontiers:
            ax.legend(fontsize=6)
    ax_l.yaxis.set_major_formatter(ScalarFormatter())
    ax_l.yaxis.set_minor_formatter(ScalarFormatter())
    if not frontiers:
        ax_l.text(
            0.5,
            0.5,
            "too few isoFLOP minima for a frontier",
            ha="center",
            va="center",
            transform=ax_l.transAxes,
        )
    fig.suptitle("Compute frontier per precision")
    return fig


def multipliers(table: pd.DataFrame) -> Figure:
    """Effective-compute multiplier against the reference, per budget."""
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.subplots()
    for label, g in table.groupby("precision", sort=True):
        ax.plot(g["budget"], g["multiplier"], marker="o", ms=3, lw=1, label=str(label))
    ax.axhline(1, color="k", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("C (FLOPs)")
    ax.set_ylabel("effective compute multiplier")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.grid(alpha=0.3, which="both")
    ref = table["reference"].iloc[0] if not table.empty else "?"
    ax.set_title(f"Compute of {ref} reaching the same loss / C", fontsize=9)
    if not table.empty:
        ax.legend(fontsize=6)
    return fig


def fit_vs_data(
    df: pd.DataFrame,
    fits: Mapping[str, ChinchillaFit],
    loss: str = "final_val_loss",
    *,
    by: str = "precision",
    max_sizes: int = 8,
) -> Figure:
    """Per fitted precision: observed loss against D for each N (colour), with the fitted L(N, D)."""
    labels = sorted(fits)
    fig, axes = _grid(max(1, len(labels)))
    cmap = colormaps["viridis"]
    for ax, label in zip(axes.flat, labels, strict=False):
        f = fits[label]
        g = df[(df[by] == label) & (df["status"] == "done")].dropna(subset=[loss])
        sizes = np.sort(g["N"].unique())
        if len(sizes) > max_sizes:
            sizes = sizes[np.unique(np.linspace(0, len(sizes) - 1, max_sizes).round().astype(int))]
        norm = _lognorm(pd.Series(sizes))
        for N in sizes:
            pts = g[g["N"] == N]
            col = cmap(norm(N))
            ax.scatter(pts["D"], pts[loss], s=12, color=col, zorder=3)
            D = np.geomspace(g["D"].min() / 1.3, g["D"].max() * 1.3, 50)
            ax.plot(D, f.predict(N, D), color=col, lw=1, label=si(N))
        ax.set_xscale("log")
        ax.set_title(f"{label}: α={f.alpha:.2f} β={f.beta:.2f} E={f.E:.3g} R²={f.r2:.3f}", fontsize=8)
        ax.set_xlabel("D (tokens)")
        ax.set_ylabel(loss)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, title="N", title_fontsize=6, ncols=2)
    if not labels:
        axes.flat[0].text(0.5, 0.5, "no precision had enough runs to fit", ha="center", va="center")
    _hide_unused(axes, max(1, len(labels)))
    fig.suptitle("Fitted L(N, D) = E + A/N^α + B/D^β against the runs")
    return fig


def diverged_fit_comparison(
    df: pd.DataFrame,
    clean: Mapping[str, ChinchillaFit],
    with_diverged: Mapping[str, ChinchillaFit],
    loss: str = "final_val_loss",
    *,
    by: str = "precision",
    max_sizes: int = 4,
) -> Figure:
    """Per precision with unstable runs: loss against D for the model sizes that have unstable runs
    (×: unstable, ●: stable), with the fit without (solid) and with (dashed) them."""
    labels = sorted(set(clean) & set(with_diverged))
    fig, axes = _grid(max(1, len(labels)), ncols=3, size=(4.2, 3.3))
    cmap = colormaps["viridis"]
    for ax, label in zip(axes.flat, labels, strict=False):
        g = df[(df[by] == label) & df["status"].isin(["done", "diverged"])].dropna(subset=[loss])
        bad = _unstable(g)
        sizes = np.sort(g.loc[bad, "N"].unique())[-max_sizes:]
        norm = _lognorm(pd.Series(sizes))
        D = np.geomspace(g["D"].min() / 1.3, g["D"].max() * 1.3, 50)
        for N in sizes:
            col = cmap(norm(N) * 0.9)
            at = g["N"] == N
            ax.scatter(g.loc[at & ~bad, "D"], g.loc[at & ~bad, loss], s=14, color=col, zorder=3)
            ax.scatter(g.loc[at & bad, "D"], g.loc[at & bad, loss], s=24, color=col, marker="x", zorder=3)
            ax.plot(D, clean[label].predict(N, D), "-", color=col, lw=1, label=f"N={si(N)}")
            ax.plot(D, with_diverged[label].predict(N, D), "--", color=col, lw=1)
        c, w = clean[label], with_diverged[label]
        ax.set_title(f"{label}\nβ {c.beta:.2f} → {w.beta:.2f}, α {c.alpha:.2f} → {w.alpha:.2f}", fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("D (tokens)")
        ax.set_ylabel(loss)
        ax.legend(fontsize=6, title="solid: stable fit, dashed: with ×", title_fontsize=6)
        ax.grid(alpha=0.3, which="both")
    _hide_unused(axes, max(1, len(labels)))
    fig.suptitle("How diverged / unrecovered runs (×) distort the fit")
    return fig


def figure_names() -> Sequence[str]:
    """File names ``report.write_report`` may produce (for documentation and tests)."""
    return (
        "loss_curves.png",
        "grad_norm_curves.png",
        "clip_fractions.png",
        "instability_pair_budget.png",
        "instability_size_tpp.png",
        "isoflop.png",
        "frontier.png",
        "multipliers.png",
        "fit_vs_data.png",
        "fit_diverged.png",
    )
