"""Figures from frames and fits; nothing is fitted here. Every function returns a
``matplotlib.figure.Figure`` (the object API: no pyplot state, Agg canvas), ``save`` writes a PNG.

Curves follow the instability study's Figure 1: one panel per precision, one line per run, coloured
by tokens per parameter (log colour scale); grad norms are clipped at 20.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, ScalarFormatter

from analysis.fits import ChinchillaFit
from analysis.instability import sci, si
from analysis.isoflop import Frontier


def _suptitle(fig: Figure, text: str, fontsize: float = 12) -> None:
    """The figure's title, wrapped to the figure's width so that no title is clipped (a one-column
    figure is ~4 inches wide; DejaVu Sans averages ~0.6 em a character)."""
    per_line = max(20, int(0.92 * fig.get_figwidth() * 72 / (0.6 * fontsize)))
    fig.suptitle(textwrap.fill(text, per_line), fontsize=fontsize)


PANEL = (3.6, 2.9)
GRAD_NORM_CLIP = 20.0


def save(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)  # constrained layout already fits everything; "tight" would draw twice
    return path


def _fitted_legend(fig: Figure, handles: Sequence, labels: Sequence[str], fontsize: float) -> None:
    """One legend under the panels, in as few rows as fit the figure's width: every entry side by side
    where they fit, else the widest balanced grid that does (six long precision names do not fit one
    row of a 10-inch figure, and a legend wider than the figure is cut at both edges when saved)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # measures text as savefig will draw it
    n = len(labels)
    for ncols in sorted({math.ceil(n / rows) for rows in range(1, n + 1)}, reverse=True):  # balanced grids
        leg = fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=fontsize,
                         frameon=False)  # fmt: skip
        if ncols == 1 or leg.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            return
        leg.remove()


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
        _suptitle(fig, title)
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
    _suptitle(fig, title)
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
    _suptitle(
        fig,
        "IsoFLOP curves: parabola in log N per budget (★ minimum, hollow: outside the sizes run; "
        "× unstable run, not fitted)",
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
    _suptitle(fig, "Compute frontier per precision")
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
    _suptitle(fig, "Fitted L(N, D) = E + A/N^α + B/D^β against the runs")
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
    _suptitle(fig, "How diverged / unrecovered runs (×) distort the fit")
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


# ---------------------------------------------------------------------------------------------
# Block-size study (``analysis.blocksize``; ``study.plot_study`` saves these into its run record)

BLOCKSIZE_FONT = 9
"""Smallest font in the block-size figures (tick labels, legends): readable at 100 %."""
BLOCKSIZE_LAYER_KINDS = {
    "query": "q",
    "key": "k",
    "value": "v",
    "attention.output": "attn out",
    "intermediate": "ffn in",
    "output.dense": "ffn out",
    "pooler": "pooler",
}
"""Substring of a MiniLM weight name → the layer kind ``blocksize_layers`` colours by (first match)."""


def _plain_log_labels(axis, max_ratio: float, subs: tuple[int, ...]) -> None:
    """Plain labels (0.005, 0.01, 0.02) on a log ``axis`` spanning less than ``max_ratio``, instead of
    matplotlib's 2×10⁻² on every minor tick: decades and the ``subs`` multiples of each decade, or every
    tick where those would be fewer than two (under about a decade matplotlib places linear ticks:
    0.0125, 0.013 …)."""
    from matplotlib.ticker import FuncFormatter

    lo, hi = sorted(axis.get_view_interval())
    if not (lo > 0 and hi < max_ratio * lo):
        return

    def picked(v: float) -> bool:  # a decade or one of its ``subs`` multiples
        m = v / 10 ** math.floor(math.log10(v) + 1e-9)
        return min(abs(m - t) for t in (1, *subs)) < 1e-6

    k = np.arange(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    ticks = (np.arange(1, 10)[:, None] * 10.0**k).ravel()
    inside = ticks[(ticks >= lo) & (ticks <= hi)]
    every = len(inside) <= 1 or sum(map(picked, inside)) < 2
    minor = FuncFormatter(lambda v, _: f"{v:.3g}" if every or picked(v) else "")
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    axis.set_minor_formatter(minor)


def _blocksize_axes(ax, title: str, blocks: Sequence[int] | None = None) -> None:
    """Log axes (set the limits first), grid, fonts; with ``blocks`` a log2 block-size x axis labelled
    4, 8, 16 …, else a log σ axis."""
    from matplotlib.ticker import NullLocator

    ax.set_yscale("log")
    if blocks is not None:
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(blocks), [str(b) for b in blocks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("block size", fontsize=BLOCKSIZE_FONT + 1)
    else:
        ax.set_xscale("log")
        ax.set_xlabel("σ", fontsize=BLOCKSIZE_FONT + 1)
        _plain_log_labels(ax.xaxis, 1000, (2, 5))
    _plain_log_labels(ax.yaxis, 100, (2, 3, 5))
    ax.set_title(title, fontsize=BLOCKSIZE_FONT + 1)
    ax.tick_params(which="both", labelsize=BLOCKSIZE_FONT)
    ax.grid(True, which="both", alpha=0.3)


def _blocksize_legend(fig: Figure, handles: list, ncols: int) -> None:
    """The figure's one legend, under the panels (outside every axes: it covers no curve)."""
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=min(ncols, len(handles)),
        fontsize=BLOCKSIZE_FONT,
        frameon=False,
    )


def blocksize_curves(grid: pd.DataFrame, *, elem: str = "fp4_e2m1") -> Figure:
    """Relative MSE (MSE/σ²) against block size: one panel per scale variant, one colour per σ; the
    Gaussian theory (line), Monte Carlo (o) and, where the table has them, the MiniLM layers rescaled to
    σ (x, dashed). ``grid``: the study's table (scale, block_size, sigma, theory, monte_carlo,
    weights_rescaled)."""
    from matplotlib.lines import Line2D

    scales = list(dict.fromkeys(grid["scale"]))
    sigmas = sorted(set(grid["sigma"]))
    blocks = sorted(set(grid["block_size"]))
    cmap = colormaps["viridis"]
    colour = {s: cmap(0.92 * i / max(1, len(sigmas) - 1)) for i, s in enumerate(sigmas)}
    has_w = "weights_rescaled" in grid and grid["weights_rescaled"].notna().any()
    fig, axes = _grid(max(1, len(scales)), ncols=3, size=(3.1, 2.5))
    for ax, sc in zip(axes.flat, scales, strict=False):
        g = grid[grid["scale"] == sc]
        for s in sigmas:
            h = g[g["sigma"] == s].sort_values("block_size")
            c = colour[s]
            ax.plot(h["block_size"], h["theory"], "-", color=c, lw=1.2)
            ax.plot(h["block_size"], h["monte_carlo"], "o", color=c, ms=4, mfc="none")
            if has_w and h["weights_rescaled"].notna().any():
                ax.plot(h["block_size"], h["weights_rescaled"], "x--", color=c, ms=4, lw=0.7, alpha=0.8)
        _blocksize_axes(ax, sc, blocks)
    for ax in axes[:, 0]:
        ax.set_ylabel("MSE / σ²", fontsize=BLOCKSIZE_FONT + 1)
    _hide_unused(axes, max(1, len(scales)))
    handles = [Line2D([], [], color=colour[s], lw=1.5, label=f"σ = {s:g}") for s in sigmas]
    handles += [
        Line2D([], [], color="k", lw=1.2, label="theory (Gaussian)"),
        Line2D([], [], color="k", marker="o", mfc="none", ls="none", label="Monte Carlo"),
    ]
    if has_w:
        handles.append(Line2D([], [], color="k", marker="x", ls="--", lw=0.7, label="MiniLM rescaled to σ"))
    _blocksize_legend(fig, handles, ncols=6)
    _suptitle(fig, f"{elem}: relative quantization MSE against block size, per scale format", fontsize=11)
    return fig


def _worse_spans(wide: pd.DataFrame, rtol: float = 1e-3) -> list[tuple[float, float]]:
    """σ intervals where some block size has a larger relative MSE than the next larger one
    (``wide``: theory, index σ ascending, columns block sizes ascending); edges halfway (in log σ)
    between grid points."""
    v = wide.to_numpy(float)
    worse = (v[:, :-1] > v[:, 1:] * (1 + rtol)).any(axis=1)
    sig = wide.index.to_numpy(float)
    edges = np.sqrt(sig[1:] * sig[:-1])
    spans, start = [], None
    for i, w in enumerate(worse):
        if w and start is None:
            start = sig[0] if i == 0 else edges[i - 1]
        if not w and start is not None:
            spans.append((start, edges[i - 1]))
            start = None
    if start is not None:
        spans.append((start, sig[-1]))
    return spans


def blocksize_sigma(
    fine: pd.DataFrame,
    grid: pd.DataFrame,
    crossovers: pd.DataFrame | None = None,
    *,
    elem: str = "fp4_e2m1",
    pair: tuple[int, int] = (8, 16),
) -> Figure:
    """Relative MSE against σ (log–log), one panel per scale of ``fine`` (the theory on a fine σ grid:
    scale, block_size, sigma, theory), one colour per block size, Monte Carlo points from ``grid``.
    Shaded: the σ range where some smaller block is worse than the next larger one (theory); dotted:
    the ``pair`` crossover from ``crossovers``. The y range is chosen from the data of interest — from
    the smallest MSE up to 4× the largest large-σ plateau — so the inversion fills the panel; curves
    leave through the top where whole blocks round to zero (MSE/σ² → 1)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    scales = list(dict.fromkeys(fine["scale"]))
    blocks = sorted(set(fine["block_size"]))
    cmap = colormaps["plasma"]
    bcol = {b: cmap(0.88 * i / max(1, len(blocks) - 1)) for i, b in enumerate(blocks)}
    fig, axes = _grid(max(1, len(scales)), ncols=2, size=(4.7, 4.0))
    marked = False
    for ax, sc in zip(axes.flat, scales, strict=False):
        wide = fine[fine["scale"] == sc].pivot_table(index="sigma", columns="block_size", values="theory")
        wide = wide.sort_index()[sorted(wide.columns)]
        sig = wide.index.to_numpy(float)
        for lo, hi in _worse_spans(wide):
            ax.axvspan(lo, hi, color="0.88", lw=0, zorder=0)
        for b in wide.columns:
            ax.plot(sig, wide[b], color=bcol[b], lw=1.3)
            h = grid[(grid["scale"] == sc) & (grid["block_size"] == b)]
            ax.plot(h["sigma"], h["monte_carlo"], "o", color=bcol[b], ms=4, mfc="none")
        y_lo = 0.8 * float(np.nanmin(wide.to_numpy(float)))
        y_hi = min(1.5, 4 * float(wide.iloc[-1].max()))
        x_lo = sig[(wide.to_numpy(float) < y_hi).any(axis=1)].min() / 1.5
        ax.set_xlim(x_lo, sig[-1])
        ax.set_ylim(y_lo, y_hi)
        title = sc
        if crossovers is not None and len(crossovers):
            c = crossovers[
                (crossovers["scale"] == sc)
                & (crossovers["small"] == pair[0])
                & (crossovers["large"] == pair[1])
            ]["theory_sigma"].dropna()
            if len(c) and np.isfinite(c.iloc[0]):
                ax.axvline(c.iloc[0], color="k", ls=":", lw=1.2)
                title, marked = f"{sc}: {pair[0]} vs {pair[1]} cross at σ = {c.iloc[0]:.3g}", True
        _blocksize_axes(ax, title)
    axes[0, 0].set_ylabel("MSE / σ²  (theory, no global scale)", fontsize=BLOCKSIZE_FONT + 1)
    _hide_unused(axes, max(1, len(scales)))
    handles = [Line2D([], [], color=bcol[b], lw=1.5, label=f"block {b}") for b in blocks]
    handles.append(Line2D([], [], color="k", marker="o", mfc="none", ls="none", label="Monte Carlo"))
    handles.append(Patch(color="0.88", label="a smaller block is worse"))
    if marked:
        handles.append(Line2D([], [], color="k", ls=":", lw=1.2, label=f"{pair[0]} vs {pair[1]} crossover"))
    _blocksize_legend(fig, handles, ncols=5)
    _suptitle(
        fig, f"{elem}: relative MSE against σ (curves leave the top where blocks round to 0)", fontsize=11
    )
    return fig


def blocksize_layers(layers: pd.DataFrame) -> Figure:
    """Real weights at their own σ: per layer ||Q(W) − W||²/||W||² against block size, one panel per
    scale variant, coloured by layer kind (``BLOCKSIZE_LAYER_KINDS``). ``layers``: the study's
    per-layer table (layer, scale, block_size, rel_err)."""
    from matplotlib.lines import Line2D

    def kind(name: str) -> str:
        return next((v for k, v in BLOCKSIZE_LAYER_KINDS.items() if k in name), "other")

    kinds = list(dict.fromkeys([*BLOCKSIZE_LAYER_KINDS.values(), "other"]))
    kcol = {k: colormaps["tab10"](i) for i, k in enumerate(kinds)}
    scales = list(dict.fromkeys(layers["scale"]))
    blocks = sorted(set(layers["block_size"]))
    fig, axes = _grid(max(1, len(scales)), ncols=3, size=(3.1, 2.5))
    seen: set[str] = set()
    for ax, sc in zip(axes.flat, scales, strict=False):
        for layer, h in layers[layers["scale"] == sc].groupby("layer", sort=False):
            k = kind(str(layer))
            seen.add(k)
            h = h.sort_values("block_size")
            ax.plot(h["block_size"], h["rel_err"], color=kcol[k], lw=0.8, alpha=0.75)
        _blocksize_axes(ax, sc, blocks)
    for ax in axes[:, 0]:
        ax.set_ylabel("‖Q(W) − W‖² / ‖W‖²", fontsize=BLOCKSIZE_FONT + 1)
    _hide_unused(axes, max(1, len(scales)))
    handles = [Line2D([], [], color=kcol[k], lw=1.5, label=k) for k in kinds if k in seen]
    _blocksize_legend(fig, handles, ncols=7)
    _suptitle(fig, "all-MiniLM-L6-v2 layers at their own σ: relative error against block size", fontsize=11)
    return fig


# -- the instability study's proxy (analysis.proxy) ------------------------------------------------
_SEED_CMAP = "tab10"


def _seed_colors(seeds: Sequence[Any]) -> dict[Any, Any]:
    cmap = colormaps[_SEED_CMAP]
    return {s: cmap(i % 10) for i, s in enumerate(sorted(seeds))}


def proxy_mechanism(curves: pd.DataFrame, runs: pd.DataFrame) -> Figure:
    """The mechanism, one column per phase-1 variant (e.g. γ in E4M3 / γ unquantized), a line per seed:
    train loss (solid) against the fp32 twin's (dotted, same colour; log y), the gradient cosine to the
    twin, and the LayerNorm-γ clip fraction (mean over LayerNorms). A cross marks each run's end when
    it blew up."""
    parents = runs[runs["parent"].isna()]
    variants = list(dict.fromkeys(parents["label"]))
    colors = _seed_colors(parents["seed"].dropna().unique())
    fig = Figure(figsize=(4.6 * max(1, len(variants)), 8.4), layout="constrained")
    axes = np.atleast_2d(fig.subplots(3, max(1, len(variants)), squeeze=False, sharex=True))
    for j, label in enumerate(variants):
        for _, r in parents[parents["label"] == label].sort_values("seed").iterrows():  # legend in seed order
            c = curves[curves["run"] == r["run"]].sort_values("step")
            if c.empty:
                continue
            col = colors.get(r["seed"], "grey")
            axes[0, j].plot(c["step"], c["loss"], color=col, lw=0.9, label=f"seed {r['seed']:.0f}")
            if "twin_loss" in c:
                t = c.dropna(subset=["twin_loss"])
                axes[0, j].plot(t["step"], t["twin_loss"], color=col, lw=0.8, ls=":")
            if r["blew_up"]:
                last = c.dropna(subset=["loss"]).iloc[-1]
                axes[0, j].plot(last["step"], last["loss"], "x", color=col, ms=7, mew=2)
            if "twin_cos" in c:
                t = c.dropna(subset=["twin_cos"])
                axes[1, j].plot(
                    t["step"], t["twin_cos"].rolling(5, min_periods=1).median(), color=col, lw=0.9
                )
            clip = [k for k in c.columns if k.startswith("clip_ln/")]
            if clip:
                axes[2, j].plot(c["step"], c[clip].mean(axis=1), color=col, lw=0.9)
        axes[0, j].set_title(label, fontsize=10)
        axes[0, j].set_yscale("log")
        axes[2, j].set_xlabel("step")
        for ax in axes[:, j]:
            ax.grid(alpha=0.3)
        axes[1, j].set_ylim(-0.1, 1.02)
        axes[2, j].set_ylim(-0.02, 1.02)
    axes[0, 0].set_ylabel("train loss (dotted: fp32 twin)")
    axes[1, 0].set_ylabel("grad cosine to twin")
    axes[2, 0].set_ylabel("LN-γ clip fraction")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        per_row = 4 * max(1, len(variants))  # ~4 "seed n" entries fit under one 4.6-inch column
        fig.legend(handles, labels, loc="outside lower center", ncols=min(per_row, len(handles)), fontsize=9)
    _suptitle(fig, "Proxy: each MX precision against its fp32 twin (× : blew up)", fontsize=11)
    return fig


def adam_state(
    curves: pd.DataFrame, state: pd.DataFrame, setting: str, span: tuple[int, int] = (-300, 100)
) -> Figure:
    """Adam's state around the blow-up (``analysis.proxy.adam_state``) in the sweep's ``setting`` (its
    title, e.g. "width 256, lr 0.004"), steps relative to each run's
    onset (a run that did not blow up: the median onset of those that did). Left: the largest per-tensor
    Σg²/Σv̂, a thin line per run (log y; 1 dashed: the gradient as large as Adam's memory of it).
    Right: the normalized step RMS(m̂/√v̂) of the Linear weights, median over runs with the
    interquartile band, for the MX runs that blew up, those that did not, and the fp32 twins."""
    fig = Figure(figsize=(10.5, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2, sharex=True)
    groups = {"MX, blew up": ("tab:red", []), "MX, did not": ("tab:blue", []), "fp32 twins": ("grey", [])}
    for _, r in state.dropna(subset=["onset"]).iterrows():
        c = curves[curves["run"] == r["run"]].sort_values("step")
        x = c["step"] - r["onset"]
        keep = (x >= span[0]) & (x <= span[1])
        name = "MX, blew up" if r["blew_up"] else "MX, did not"
        color = groups[name][0]
        left.plot(x[keep], c.loc[keep, "adam_gv_max"], color=color, lw=0.8, alpha=0.7)
        groups[name][1].append(pd.Series(c.loc[keep, "adam_upd/matrix"].to_numpy(), index=x[keep].to_numpy()))
        if "twin_adam_upd/matrix" in c:
            t = c[keep].dropna(subset=["twin_adam_upd/matrix"])
            groups["fp32 twins"][1].append(
                pd.Series(t["twin_adam_upd/matrix"].to_numpy(), index=(t["step"] - r["onset"]).to_numpy())
            )
    left.axhline(1.0, color="black", lw=0.7, ls="--")
    left.set_yscale("log")
    left.set_ylabel("max over tensors of Σg² / Σv̂")
    left.set_title("gradient against Adam's second-moment memory", fontsize=10)
    for name, (color, series) in groups.items():
        if not series:
            continue
        wide = pd.concat(series, axis=1).sort_index()
        q = wide.quantile([0.25, 0.5, 0.75], axis=1).T
        right.plot(q.index, q[0.5], color=color, lw=1.4, label=f"{name} ({len(series)})")
        right.fill_between(q.index, q[0.25], q[0.75], color=color, alpha=0.2, lw=0)
    right.set_yscale("log")
    right.set_ylabel("normalized step RMS(m̂/√v̂), Linear weights")
    right.set_title("Adam's step in units of the LR", fontsize=10)
    right.legend(fontsize=9, loc="upper left")
    for ax in (left, right):
        ax.axvline(0, color="grey", lw=0.6, ls=":")
        ax.set_xlabel("steps from the onset of the blow-up")
        ax.grid(alpha=0.3)
    _suptitle(fig, f"Proxy, {setting}, γ in E4M3: Adam's state before and at the blow-up", fontsize=11)
    return fig


def step_source(
    source: pd.DataFrame, order: Sequence[str] | None = None, window: tuple[int, int] = (100, 200)
) -> Figure:
    """Adam's normalized step of the Linear weights per precision (``analysis.proxy.step_source``):
    one dot per seed, red where the run blew up, a thin line joining the same seed across precisions
    (same init, same batches), and the fp32 twins' steps in the last column (log y)."""
    labels = list(order) if order else list(dict.fromkeys(source["label"]))
    columns = [*labels, "fp32 twin"]
    fig = Figure(figsize=(max(6.0, 1.3 * len(columns) + 1.5), 4.4), layout="constrained")
    ax = fig.subplots()
    wide = source.pivot_table(index="seed", columns="label", values="upd")
    twins = source.groupby("seed")["twin_upd"].median()
    for seed, row in wide.iterrows():
        ys = [row.get(lab, np.nan) for lab in labels] + [twins.get(seed, np.nan)]
        ax.plot(range(len(columns)), ys, color="grey", lw=0.5, alpha=0.5, zorder=1)
    seen = set()
    for i, lab in enumerate(labels):
        g = source[source["label"] == lab]
        for blew, color, name in ((True, "tab:red", "blew up"), (False, "tab:blue", "did not blow up")):
            h = g[g["blew_up"] == blew]
            ax.scatter(np.full(len(h), i), h["upd"], s=22, color=color, zorder=2,
                       label=None if name in seen or h.empty else name)  # fmt: skip
            seen |= {name} if not h.empty else set()
    ax.scatter(np.full(len(twins), len(labels)), twins, s=22, color="black", marker="x", zorder=2,
               label="fp32 twin (one per seed)")  # fmt: skip
    ax.set_xticks(range(len(columns)), columns, fontsize=9)
    ax.set_yscale("log")
    # the steps span less than a decade: label 1, 2, 3, 5, 7 × 10^k as plain numbers
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 3, 5, 7)))
    _lm_plain_axis(ax.yaxis)
    ax.set_ylabel("normalized step RMS(m̂/√v̂), Linear weights")
    ax.grid(alpha=0.3, axis="y")
    fig.legend(loc="outside lower center", ncols=3, fontsize=9)
    title = f"Adam's step per precision, same seeds (median, steps {window[0]}–{window[1]})"
    _suptitle(fig, title, fontsize=11)
    return fig


def _loss_panel(ax, bottom: bool, left: bool) -> None:
    """A train-loss-over-steps panel of a grid: log y, light grid, axis labels on the outer edge only."""
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if bottom:
        ax.set_xlabel("step")
    if left:
        ax.set_ylabel("train loss")


def _legend_below(fig: Figure, axes: np.ndarray, any_data: bool, ncols: Callable[[int], int]) -> None:
    """One legend under the figure for every panel's lines (each label once); an empty grid says so."""
    if not any_data:
        axes.flat[0].text(0.5, 0.5, "no branches", ha="center", va="center")
    handles: dict = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=ncols(len(handles)),
                   fontsize=9)  # fmt: skip


def proxy_branches(curves: pd.DataFrame, runs: pd.DataFrame, max_parents: int = 8) -> Figure:
    """Parent vs branches: a row per branched parent, a column per branch point (its earliest branch
    step first), each panel with the parent's train loss (black), its fp32 twin (grey dotted) and every
    intervention from that step (colours shared; one legend under the figure). Log y. With one branch
    point the parents fill two columns, row by row, rather than one tall column."""
    branches = runs[runs["parent"].notna()].sort_values(["parent", "branch_step"], kind="stable")
    by_run = runs.set_index("run")
    seed = by_run["seed"]
    parents = sorted(dict.fromkeys(branches["parent"]), key=lambda r: seed.get(r, np.inf))[:max_parents]
    steps = {p: sorted(set(branches.loc[branches["parent"] == p, "branch_step"])) for p in parents}
    points = max((len(v) for v in steps.values()), default=1)
    names = list(dict.fromkeys(branches["variant"]))
    cmap = colormaps["tab10"]
    color = {n: cmap(i % 10) for i, n in enumerate(names)}
    wrap = points == 1 and len(parents) > 1
    per_row = 2 if wrap else 1  # parents per row of panels
    ncols = 2 if wrap else points
    nrows = max(1, -(-len(parents) // per_row))
    fig = Figure(figsize=(4.2 * ncols, 2.9 * nrows + 0.6), layout="constrained")
    axes = np.atleast_2d(fig.subplots(nrows, ncols, squeeze=False))
    for ax in axes.flat[len(parents) :] if wrap else ():
        ax.set_visible(False)  # the odd parent's empty neighbour
    for i, parent in enumerate(parents):
        c = curves[curves["run"] == parent].sort_values("step")
        p = by_run.loc[parent]
        for point in range(points):
            row, col = divmod(i, per_row) if wrap else (i, point)
            ax = axes[row, col]
            if point >= len(steps[parent]):
                ax.set_visible(False)
                continue
            k = steps[parent][point]
            ax.plot(c["step"], c["loss"], color="black", lw=1.0, label="parent (no change)")
            if "twin_loss" in c:
                t = c.dropna(subset=["twin_loss"])
                ax.plot(t["step"], t["twin_loss"], color="grey", lw=0.9, ls=":", label="fp32 twin")
            here = branches[(branches["parent"] == parent) & (branches["branch_step"] == k)]
            for _, b in here.iterrows():
                bc = curves[curves["run"] == b["run"]].sort_values("step")
                ax.plot(bc["step"], bc["loss"], color=color[b["variant"]], lw=0.9, label=b["variant"])
            ax.axvline(k, color="grey", lw=0.6, ls="--")
            f = here["branch_at"].iloc[0] if "branch_at" in here else np.nan
            at = f"step {k:.0f} ({f:g}× spike)" if pd.notna(f) else f"step {k:.0f}"
            ax.set_title(f"{p['label']} seed {p['seed']:.0f}, branch at {at}", fontsize=9)
            _loss_panel(ax, i + per_row >= len(parents), col == 0)  # no parent's panel below it
    # a one-column figure (one parent, one branch point) is too narrow for four entries in a row
    _legend_below(fig, axes, bool(parents), lambda n: min(4 if ncols > 1 else 2, n))
    _suptitle(fig, "Interventions branched from each parent before its spike", fontsize=11)
    return fig


def proxy_prefix_control(curves: pd.DataFrame, runs: pd.DataFrame) -> Figure:
    """Which MX prefix commits the blow-up: a row per seed, a column per parent variant (γ in E4M3,
    γ unquantized); each panel the parent's train loss (black), the fp32 twin (grey dotted, the same in
    both columns: fp32 from step 0) and the fp32 branch from the parent's checkpoint (colour). Log y."""
    branches = runs[runs["parent"].notna()]
    parents = runs[runs["run"].isin(set(branches["parent"]))]
    seeds = sorted(parents["seed"].dropna().unique())
    labels = list(dict.fromkeys(parents.sort_values("norm_affine", key=lambda s: s.eq("none"))["label"]))
    nrows, ncols = max(1, len(seeds)), max(1, len(labels))
    fig = Figure(figsize=(4.2 * ncols, 2.4 * nrows + 0.6), layout="constrained")
    axes = np.atleast_2d(fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey="row"))
    for row, seed in enumerate(seeds):
        for col, label in enumerate(labels):
            ax = axes[row, col]
            p = parents[(parents["seed"] == seed) & (parents["label"] == label)]
            if p.empty:
                ax.set_visible(False)
                continue
            c = curves[curves["run"] == p["run"].iloc[0]].sort_values("step")
            ax.plot(c["step"], c["loss"], color="black", lw=1.0, label="parent")
            if "twin_loss" in c:
                t = c.dropna(subset=["twin_loss"])
                ax.plot(
                    t["step"], t["twin_loss"], color="grey", lw=0.9, ls=":", label="fp32 twin (from step 0)"
                )
            for _, b in branches[branches["parent"] == p["run"].iloc[0]].iterrows():
                bc = curves[curves["run"] == b["run"]].sort_values("step")
                ax.plot(
                    bc["step"],
                    bc["loss"],
                    color="tab:red",
                    lw=0.9,
                    label=f"fp32 from step {b['branch_step']:.0f} ({b['variant']})",
                )
                ax.axvline(b["branch_step"], color="grey", lw=0.6, ls="--")
            ax.set_title(f"{label}, seed {seed:.0f}", fontsize=9)
            _loss_panel(ax, row == nrows - 1, col == 0)
    # one figure column is too narrow for the legend in one row
    _legend_below(fig, axes, bool(seeds), lambda n: n if ncols > 1 else 1)
    _suptitle(fig, "fp32 from the same step of each parent: which prefix commits the blow-up", fontsize=11)
    return fig


# ---------------------------------------------------------------------------------------------
# LM precision study (``analysis.lmstudy``; the report's precision-law and Δ-vs-bf16 sections)

LM_FONT = 9
"""Smallest font in the LM-study figures: readable at 100 %."""


def _lm_colours(labels: Sequence[str]) -> dict[str, Any]:
    cmap = colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _lm_plain_axis(axis) -> None:
    """Plain numbers (0.5, 1, 2) on a log axis instead of 5×10⁻¹."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _log_dodge(i: int, n: int, step: float) -> float:
    """The factor that puts item ``i`` of ``n`` side by side on a log x axis, ``step`` decades apart and
    centred on the true x, so error bars at one x do not hide each other."""
    return 10 ** ((i - (n - 1) / 2) * step)


def loss_vs_compute_plot(table: pd.DataFrame, fit: Any = None, *, loss: str = "final_val_loss") -> Figure:
    """Every precision on one axis: per nominal budget, each seed's best loss over the shapes run, mean
    ± sd over seeds (``analysis.lmstudy.loss_vs_compute``; labels in its row order, points dodged a
    little in x so the bars do not hide each other), and where ``fit`` (a ``PrecisionLawFit``) has the
    label, its compute-optimal L*(C) = min_N L(N, C/6N, P) as a line of the same colour. A hollow
    marker: the point is not ``complete`` (a seed lacks a finished, stable run of some shape, so its
    best is over fewer shapes). Legend outside the axes."""
    from matplotlib.lines import Line2D

    from analysis.lmstudy import compute_optimal

    labels = list(dict.fromkeys(table["label"])) if not table.empty else []
    colour = _lm_colours(labels)
    fig = Figure(figsize=(8.2, 4.8), layout="constrained")
    ax = fig.subplots()
    budgets = np.sort(table["budget"].unique()) if labels else np.array([])
    n = max(1, len(labels))
    step = min(0.012, 0.09 / n)  # log10 offset between neighbours: the group spans < 0.09 decade
    curves, hollow = 0, False
    for i, label in enumerate(labels):
        g = table[table["label"] == label].sort_values("budget")
        off = _log_dodge(i, n, step)
        m = fit.multipliers.get(label) if fit is not None else None
        text = f"{label} (m_P = {m:.3g})" if m is not None else label
        ax.errorbar(
            g["budget"] * off,
            g["mean"],
            yerr=g["sd"].fillna(0.0),
            fmt="o",
            ms=4.5,
            capsize=2.5,
            elinewidth=1.1,
            color=colour[label],
            label=text,
            zorder=3,
        )
        if "complete" in g and not g["complete"].all():
            part = g[~g["complete"].astype(bool)]
            ax.scatter(
                part["budget"] * off,
                part["mean"],
                s=22,
                facecolor="white",
                edgecolor=colour[label],
                linewidth=1.2,
                zorder=4,
                gid="incomplete",
            )
            hollow = True
        if m is not None and len(budgets):
            C = np.geomspace(budgets.min() / 1.35, budgets.max() * 1.35, 80)
            ax.plot(C, compute_optimal(fit, label, C), color=colour[label], lw=1.1, alpha=0.85, gid="law")
            curves += 1
    ax.set_xscale("log")
    if len(budgets):
        from matplotlib.ticker import NullLocator

        ax.set_xticks(list(budgets), [sci(b) for b in budgets])
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("compute C (FLOPs, nominal budget)", fontsize=LM_FONT + 1)
    ax.set_ylabel(f"{loss} (best shape per seed)", fontsize=LM_FONT + 1)
    ax.tick_params(labelsize=LM_FONT)
    ax.grid(alpha=0.3, which="both")
    if not labels:
        ax.text(0.5, 0.5, "no finished runs with a budget", ha="center", va="center", transform=ax.transAxes)
    else:
        handles, names = ax.get_legend_handles_labels()
        key = [Line2D([], [], color="0.3", marker="o", ls="none", ms=4.5)]
        key_names = ["mean ± sd over seeds"]
        if hollow:
            key.append(Line2D([], [], color="0.3", marker="o", mfc="white", ls="none", ms=4.5))
            key_names.append("hollow: best over fewer shapes\n(a run unstable or unfinished)")
        if curves:
            key.append(Line2D([], [], color="0.3", lw=1.1))
            key_names.append("law: L*(C) = min_N L(N, C/6N, P)")
        fig.legend(
            handles + key,
            names + key_names,
            loc="outside right upper",
            fontsize=LM_FONT,
            frameon=False,
        )
    ax.set_title(
        "Loss vs compute: best shape per seed, mean ± sd over seeds"
        + ("\nlines: the precision law's compute-optimal loss L*(C)" if curves else ""),
        fontsize=LM_FONT + 1,
    )
    return fig


def delta_heatmap(
    deltas: pd.DataFrame,
    *,
    reference: str = "bf16",
    reference_pair: tuple[str, str] = ("bf16", "bf16"),
    loss: str = "final_val_loss",
) -> Figure:
    """Δ loss vs the reference as a W × A grid (rows: weight format, columns: activation format, both
    in ``lmstudy.FORMAT_ORDER``): the mean over seeds, annotated "mean (* p < 0.05) / ± sd over seeds",
    a diverging colour map centred at 0 (red: worse than the reference), grey where nothing ran.
    ``deltas``: ``lmstudy.deltas_vs_reference``; forward-only labels are left out (the table lists them)
    and of two labels with one (W, A) the first is shown. The reference's own cell reads "ref"."""
    from matplotlib.colors import Normalize

    from analysis.lmstudy import format_rank

    d = deltas[~deltas["fwd_only"].astype(bool)].dropna(subset=["w", "a", "mean_over_seeds"])
    d = d.drop_duplicates(["w", "a"])
    ws = sorted({*d["w"].astype(str), reference_pair[0]}, key=format_rank)
    as_ = sorted({*d["a"].astype(str), reference_pair[1]}, key=format_rank)
    nr, nc = len(ws), len(as_)
    mean = np.full((nr, nc), np.nan)
    for r in d.itertuples(index=False):
        mean[ws.index(str(r.w)), as_.index(str(r.a))] = r.mean_over_seeds
    ref_ij = (ws.index(reference_pair[0]), as_.index(reference_pair[1]))
    mean[ref_ij] = 0.0
    vmax = float(np.nanmax(np.abs(mean))) if np.isfinite(mean).any() else 0.0
    vmax = vmax if vmax > 0 else 1e-3
    small = np.abs(d["mean_over_seeds"].to_numpy(float))
    digits = 4 if (small < 0.01).any() else 3  # +0.0006 ± 0.0009, not +0.001 ± 0.001
    fig = Figure(figsize=(max(6.4, 2.2 + 1.05 * nc), 1.7 + 0.62 * max(nr, 2)), layout="constrained")
    ax = fig.subplots()
    cmap = colormaps["RdBu_r"].with_extremes(bad="#e6e6e6")
    im = ax.imshow(np.ma.masked_invalid(mean), cmap=cmap, norm=Normalize(-vmax, vmax), aspect="auto")
    ax.set_xticks(range(nc), as_, rotation=30, ha="right", fontsize=LM_FONT)
    ax.set_yticks(range(nr), ws, fontsize=LM_FONT)
    ax.set_xlabel("activation format (A)", fontsize=LM_FONT + 1)
    ax.set_ylabel("weight format (W)", fontsize=LM_FONT + 1)
    ax.set_xticks(np.arange(nc + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(nr + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", lw=1.5)
    ax.tick_params(which="minor", length=0)
    ax.text(*ref_ij[::-1], f"{reference}\n(ref)", ha="center", va="center", fontsize=LM_FONT)
    for r in d.itertuples(index=False):
        i, j = ws.index(str(r.w)), as_.index(str(r.a))
        if (i, j) == ref_ij:
            continue
        sd = f"± {r.sd_over_seeds:.{digits}f}" if np.isfinite(r.sd_over_seeds) else "(1 seed)"
        star = "*" if r.significant else ""
        dark = abs(r.mean_over_seeds) > 0.6 * vmax
        ax.text(
            j,
            i,
            f"{r.mean_over_seeds:+.{digits}f}{star}\n{sd}",
            ha="center",
            va="center",
            fontsize=LM_FONT,
            color="white" if dark else "black",
        )
    fig.colorbar(im, ax=ax, label=f"Δ loss vs {reference}", shrink=0.9)
    ax.set_title(
        f"Δ {loss} vs {reference}, matched runs: mean ± sd over seeds\n"
        "* p < 0.05 (paired t) · grey: not run · forward-only: see the table",
        fontsize=LM_FONT + 1,
    )
    return fig


def multiplier_plot(fit: Any) -> Figure:
    """m_P of every precision with its bootstrap interval as a horizontal error bar, sorted (largest on
    top); the reference (m = 1) as a dashed line. Log x when the values span more than 5×."""
    t = fit.table().sort_values("m_P", kind="stable").reset_index(drop=True)
    n = len(t)
    fig = Figure(figsize=(7.0, 1.3 + 0.42 * max(n, 2)), layout="constrained")
    ax = fig.subplots()
    y = np.arange(n)
    has_ci = t["ci_low"].notna() & (t["precision"] != fit.reference)
    lo = (t["m_P"] - t["ci_low"]).where(has_ci, 0.0).clip(lower=0)
    hi = (t["ci_high"] - t["m_P"]).where(has_ci, 0.0).clip(lower=0)
    ax.errorbar(t["m_P"], y, xerr=[lo, hi], fmt="o", ms=5, capsize=3, color="tab:blue", zorder=3)
    ref = (t["precision"] == fit.reference).to_numpy()
    ax.scatter(t.loc[ref, "m_P"], y[ref], marker="D", s=36, color="black", zorder=4)
    ax.axvline(1.0, color="0.4", lw=0.9, ls="--")
    names = []
    for r in t.itertuples(index=False):
        if r.precision == fit.reference:
            names.append(f"{r.precision}  (reference, 1)")
        elif np.isfinite(r.ci_low):
            names.append(f"{r.precision}  {r.m_P:.3g} [{r.ci_low:.3g}, {r.ci_high:.3g}]")
        else:
            names.append(f"{r.precision}  {r.m_P:.3g}")
    ax.set_yticks(y, names, fontsize=LM_FONT)
    ax.set_ylim(-0.6, n - 0.4)
    span = pd.concat([t["m_P"], t["ci_low"], t["ci_high"]]).dropna()
    span = span[span > 0]
    if len(span) and span.max() / span.min() > 5:
        ax.set_xscale("log")
        m = t["m_P"][t["m_P"] > 0]
        # an unidentified format's interval can span 1e-4 … 1e4: keep the estimates readable, cut its bar
        ax.set_xlim(max(span.min() / 1.2, m.min() / 20), min(span.max() * 1.2, m.max() * 20))
        _lm_plain_axis(ax.xaxis)
    ax.set_xlabel("effective-parameter multiplier m_P  (N·m_P bf16 parameters)", fontsize=LM_FONT + 1)
    ax.tick_params(axis="x", labelsize=LM_FONT)
    ax.grid(alpha=0.3, axis="x", which="both")
    ci = (
        f"{100 * fit.ci_level:.0f} % bootstrap intervals, {fit.n_boot} resamples"
        if fit.n_boot
        else "no bootstrap"
    )
    ax.set_title(f"Effective-parameter multiplier m_P ({fit.reference} = 1)\n{ci}", fontsize=LM_FONT + 1)
    return fig


def format_error_plot(points: pd.DataFrame, reference: str = "bf16") -> Figure:
    """Δ loss vs ``reference`` (mean ± sd over seeds) of each block format against its closed-form
    quantization error (``analysis.blocksize.theory.format_error``), one row of ``points`` per (label,
    sample): columns label, bits, error, sample, mean, sd. Log-log where every Δ is positive (else log x,
    linear y). Marker: the bits per element; colour: the sample (the exploratory sweep, the fresh-seed
    confirmation), so a reader sees whether the loss gap follows the error or the bit count. Formats of
    (nearly) equal error stand side by side, named in one note."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig = Figure(figsize=(7.8, 4.6), layout="constrained")
    ax = fig.subplots()
    samples = list(dict.fromkeys(points["sample"])) if not points.empty else []
    colour = {s: c for s, c in zip(samples, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=False)}
    markers = {4: "v", 6: "s", 8: "o"}
    # formats whose errors agree within 2 % share a group: dodged in x, so neither hides the other
    errors = points.drop_duplicates("label").sort_values("error", kind="stable") if samples else points
    groups: list[list[Any]] = []
    for r in errors.itertuples(index=False):
        if groups and np.isclose(r.error, groups[-1][0].error, rtol=0.02):
            groups[-1].append(r)
        else:
            groups.append([r])
    dodge = {r.label: _log_dodge(j, len(g), 0.06) for g in groups for j, r in enumerate(g)}
    n = max(1, len(samples))
    for i, s in enumerate(samples):
        off = _log_dodge(i, n, 0.015)
        for r in points[points["sample"] == s].itertuples(index=False):
            sd = 0.0 if pd.isna(r.sd) else r.sd
            x = r.error * dodge[r.label] * off
            marker = markers.get(int(r.bits), "D")
            ax.errorbar(x, r.mean, yerr=sd, fmt=marker, ms=6, capsize=2.5, color=colour[s], zorder=3)
    spread = _log_dodge(n - 1, n, 0.015)  # the outermost sample's offset
    for k, g in enumerate(groups):
        names = [str(r.label) for r in g]
        at = points[points["label"].isin(names)]
        # the note goes right of its markers, or left where the next group is close enough to collide
        crowded = k + 1 < len(groups) and groups[k + 1][0].error / g[-1].error < 1.5
        x = (min if crowded else max)(r.error * dodge[r.label] for r in g) * (
            1 / spread if crowded else spread
        )
        ax.annotate("\n".join(names), (x, at["mean"].max()), xytext=(-7 if crowded else 7, 0),
                    textcoords="offset points", fontsize=LM_FONT, va="center",
                    ha="right" if crowded else "left")  # fmt: skip
    if samples:
        ax.set_xscale("log")
        if (points["mean"] > 0).all():
            ax.set_yscale("log")
            _lm_plain_axis(ax.yaxis)
        ax.set_xlim(points["error"].min() / 3.0, points["error"].max() * 3.0)  # room for a note either side
    else:
        none = "no block formats with matched runs"
        ax.text(0.5, 0.5, none, ha="center", va="center", transform=ax.transAxes)
    xlabel = "closed-form relative quantization MSE of Gaussian blocks, E[(Q(x) − x)²]/σ²"
    ax.set_xlabel(xlabel, fontsize=LM_FONT + 1)
    ax.set_ylabel(f"Δ final val loss vs {reference}\n(mean ± sd over seeds)", fontsize=LM_FONT + 1)
    ax.tick_params(labelsize=LM_FONT)
    ax.grid(alpha=0.3, which="both")
    ax.set_title(f"Δ loss vs {reference} against each format's quantization error", fontsize=LM_FONT + 1)
    bits = sorted({int(b) for b in points["bits"]}) if samples else []
    key = [Patch(color=colour[s]) for s in samples]
    key += [Line2D([], [], color="0.35", marker=markers.get(b, "D"), ls="none", ms=6) for b in bits]
    names = [*samples, *(f"{b} bits per element" for b in bits)]
    fig.legend(key, names, loc="outside right upper", fontsize=LM_FONT, frameon=False)
    return fig


FAMILY_STYLES = {
    "UE4M3 + per-tensor scale": ("tab:blue", "o"),
    "UE5M3 alone": ("tab:red", "s"),
    "UE5M3 + per-tensor scale": ("tab:green", "^"),
    "E8M0 alone": ("tab:purple", "D"),
    "E8M0 alone, ceil rule": ("tab:orange", "v"),
}
"""(colour, marker) of each block-scale family the LM studies train, the same in every figure that
compares them (results 3.5–3.9); another family takes a spare style."""
_SPARE_STYLES = (("tab:brown", "P"), ("tab:gray", "X"), ("tab:olive", "*"), ("tab:cyan", "h"))


def block_size_training_plot(points: pd.DataFrame, reference: str = "bf16") -> Figure:
    """Study 2's question asked of training: Δ final val loss vs ``reference`` (mean ± sd over seeds)
    against the block size, one line per block-scale family (``points``: family, block, label, mean,
    sd). Finer blocks sit left (x in log2, ticks at the block sizes): a line falling to the left says
    finer is better, one rising says it is worse (the inversion)."""
    fig = Figure(figsize=(6.8, 4.2), layout="constrained")
    ax = fig.subplots()
    families = list(dict.fromkeys(points["family"]))
    spare = iter(s for s in _SPARE_STYLES if s not in {FAMILY_STYLES.get(f) for f in families})
    n = max(1, len(families))
    for i, family in enumerate(families):
        colour, marker = FAMILY_STYLES.get(family) or next(spare)
        g = points[points["family"] == family].sort_values("block")
        x = g["block"].to_numpy(float) * _log_dodge(i, n, 0.03)  # side by side where they meet
        ax.errorbar(x, g["mean"], yerr=g["sd"].fillna(0.0), fmt=f"-{marker}", color=colour, ms=6, capsize=3,
                    label=family, zorder=3)  # fmt: skip
    if families:
        blocks = sorted({int(b) for b in points["block"]})
        ax.set_xscale("log", base=2)
        ax.set_xticks(blocks, [str(b) for b in blocks])
        ax.minorticks_off()
        ax.set_xlim(min(blocks) / 1.4, max(blocks) * 1.4)
        fig.legend(loc="outside right upper", fontsize=LM_FONT, frameon=False)
    else:
        ax.text(
            0.5, 0.5, "no block formats with matched runs", ha="center", va="center", transform=ax.transAxes
        )
    ax.set_xlabel("block size (elements per scale)", fontsize=LM_FONT + 1)
    ax.set_ylabel(f"Δ final val loss vs {reference}\n(mean ± sd over seeds)", fontsize=LM_FONT + 1)
    ax.tick_params(labelsize=LM_FONT)
    ax.grid(alpha=0.3)
    ax.set_title("FP4 E2M1 in training: does a finer block help?", fontsize=LM_FONT + 1)
    return fig


def gradient_format_plot(
    points: pd.DataFrame,
    reference: str = "bf16",
    *,
    kinds: tuple[str, str] | None = None,
    title: str | None = None,
    xlabel: str = "FP4 E2M1 block-scale family",
) -> Figure:
    """Where a block-scale family's cost lies: Δ final val loss vs ``reference`` (mean ± sd over seeds)
    of each family (x, as first met) with its incoming gradient in the family's own format and kept in
    high precision, side by side in one colour each (``points``: family, gradients, own, mean, sd).
    A family whose two points part widely pays in its gradients; two families that meet once the
    gradients are out differ only there. ``kinds`` names the two kinds of point in the legend (own,
    other) where they are not the gradients' formats (e.g. rounded to nearest or stochastically), with
    the ``title`` and ``xlabel`` that go with them."""
    fig = Figure(figsize=(6.8, 4.2), layout="constrained")
    ax = fig.subplots()
    families = list(dict.fromkeys(points["family"]))
    x = {f: i for i, f in enumerate(families)}
    present = [k for k in (True, False) if (points["own"] == k).any()]
    for own, colour, marker in ((True, "tab:red", "s"), (False, "tab:blue", "o")):
        g = points[points["own"] == own]
        if g.empty:
            continue
        kept = " / ".join(dict.fromkeys(g["gradients"]))
        if kinds is not None:
            label = kinds[0] if own else kinds[1]
        else:
            label = "gradients in " + ("the family's format" if own else kept)  # one entry per kind
        # the two kinds side by side at each family; one kind alone sits on the family's tick
        shift = (present.index(own) - 0.5) * 0.18 if len(present) == 2 else 0.0
        xs = [x[f] + shift for f in g["family"]]
        ax.errorbar(xs, g["mean"], yerr=g["sd"].fillna(0.0), fmt=marker, color=colour, ms=7, capsize=3,
                    label=label, zorder=3)  # fmt: skip
    if families:
        # "UE4M3 + per-tensor scale" and "E8M0 alone, ceil rule" on two lines: three to four families'
        # names fit side by side
        ticks = [f.replace(" + ", "\n+ ").replace(", ", ",\n") for f in families]
        ax.set_xticks(range(len(families)), ticks)
        ax.set_xlim(-0.6, len(families) - 0.4)
        # below the axes, side by side: a legend at the right meets a long title
        fig.legend(loc="outside lower center", ncols=len(present), fontsize=LM_FONT, frameon=False)
    else:
        ax.text(
            0.5, 0.5, "no block formats with matched runs", ha="center", va="center", transform=ax.transAxes
        )
    ax.axhline(0.0, color="0.5", lw=0.8, zorder=1)
    ax.set_xlabel(xlabel, fontsize=LM_FONT + 1)
    ax.set_ylabel(f"Δ final val loss vs {reference}\n(mean ± sd over seeds)", fontsize=LM_FONT + 1)
    ax.tick_params(labelsize=LM_FONT)
    ax.grid(alpha=0.3, axis="y")
    if title is None:
        title = (
            "Where each scale family's cost lies: the gradients?"
            if len(present) != 1 or present[0]
            else f"Each scale family with its gradients in {' / '.join(dict.fromkeys(points['gradients']))}"
        )
    ax.set_title(title, fontsize=LM_FONT + 1)
    return fig


def lr_scan_plot(points: pd.DataFrame, reference: str = "bf16") -> Figure:
    """Results 1.6: does a precision turn unstable, or fall behind ``reference``, as the LR rises? Final
    val loss against the LR (log x), every precision on one axis: per (label, lr) the mean ± sd over
    seeds of its stable runs (dodged a little in x so the bars do not hide each other), and each
    unstable run (diverged, or a spike not recovered from) as a cross of its label's colour at its own
    loss (at the top of the axes where that loss is not finite). ``points``: one row per run, columns
    label, lr, seed, final_val_loss, unstable; labels in their order of first appearance."""
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(6.8, 4.4), layout="constrained")
    ax = fig.subplots()
    labels = list(dict.fromkeys(points["label"])) if not points.empty else []
    colour = _lm_colours(labels)
    loss = pd.to_numeric(points.get("final_val_loss"), errors="coerce")
    bad = points["unstable"].fillna(False).astype(bool) if labels else pd.Series(dtype=bool)
    finite = loss[np.isfinite(loss)]
    top = float(finite.max()) if len(finite) else 1.0
    for i, label in enumerate(labels):
        own = points["label"] == label
        off = _log_dodge(i, len(labels), 0.03)
        stats_ = points[own & ~bad].assign(loss=loss).groupby("lr")["loss"].agg(["mean", "std"]).reset_index()
        ax.errorbar(stats_["lr"] * off, stats_["mean"], yerr=stats_["std"].fillna(0.0), fmt="o-", ms=5,
                    capsize=3, color=colour[label], label=label, zorder=3)  # fmt: skip
        lost = points[own & bad]
        if not lost.empty:
            y = loss[own & bad].where(np.isfinite(loss[own & bad]), top)
            ax.plot(lost["lr"] * off, y, "x", ms=8, mew=2, color=colour[label], zorder=4)
    if labels:
        ax.set_xscale("log")
        _lm_plain_axis(ax.xaxis)
        lrs = sorted(points["lr"].unique())
        ax.set_xticks(lrs, [f"{v:g}" for v in lrs])
        ax.set_xlim(lrs[0] / 2, lrs[-1] * 2)
        key = [Line2D([], [], color="0.35", marker="x", ls="none", ms=8, mew=2)]
        handles, names = ax.get_legend_handles_labels()
        names = [*names, f"an unstable run ({int(bad.sum())} in all)"]
        _fitted_legend(fig, [*handles, *key], names, LM_FONT)
    else:
        ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("peak learning rate (warm-up, then cosine)", fontsize=LM_FONT + 1)
    ax.set_ylabel("final val loss\n(mean ± sd over seeds, stable runs)", fontsize=LM_FONT + 1)
    ax.tick_params(labelsize=LM_FONT)
    ax.grid(alpha=0.3, which="both")
    ax.set_title(f"Every precision against the LR, beside {reference}", fontsize=LM_FONT + 1)
    return fig


def training_curves_plot(curves: pd.DataFrame, title: str, window: int = 10) -> Figure:
    """How each precision trained, side by side: train loss (left) and gradient norm (right) against
    the step, each precision's mean over its seeds as a line and their range as a band of the same
    colour (``curves``: one row per logged step of a run, columns label, seed, step, loss, grad_norm;
    labels in their order of first appearance). Each run is smoothed over ``window`` logged steps first
    (a rolling mean), so a band shows the seeds' spread, not one batch's noise. The study's Figure-1
    signature reads here: a gradient norm that climbs after the warm-up where the reference's falls."""
    fig = Figure(figsize=(10.0, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    labels = list(dict.fromkeys(curves["label"])) if not curves.empty else []
    colour = _lm_colours(labels)
    panels = (("loss", "train loss"), ("grad_norm", "gradient norm (before clipping)"))
    late = 0.1 * float(curves["step"].max()) if labels else 0.0  # the first steps' loss is off-scale
    for ax, (metric, name) in zip(axes, panels, strict=True):
        top = -np.inf
        for label in labels:
            g = curves[curves["label"] == label].dropna(subset=[metric]).sort_values("step")
            if g.empty:
                continue
            smooth = g.groupby("seed", sort=False)[metric].transform(lambda v: v.rolling(window, 1).mean())
            band = g.assign(v=smooth).groupby("step")["v"].agg(["mean", "min", "max"])
            ax.plot(band.index, band["mean"], lw=1.6, color=colour[label], label=label)
            ax.fill_between(band.index, band["min"], band["max"], color=colour[label], alpha=0.18, lw=0)
            top = max(top, float(band.loc[band.index >= late, "max"].max()))
        if metric == "loss" and np.isfinite(top):
            ax.set_ylim(top=top * 1.02)
        ax.set_xlabel("step", fontsize=LM_FONT + 1)
        ax.set_ylabel(f"{name}\n(mean over seeds; band: their range)", fontsize=LM_FONT + 1)
        ax.tick_params(labelsize=LM_FONT)
        ax.grid(alpha=0.3)
        if not labels:
            ax.text(0.5, 0.5, f"no {name} logged", ha="center", va="center", transform=ax.transAxes)
    if labels:
        _fitted_legend(fig, *axes[0].get_legend_handles_labels(), LM_FONT)
    _suptitle(fig, title, fontsize=LM_FONT + 2)
    return fig
