"""The LM precision study's numbers: Δ loss against bf16 on matched runs, the precision law's first table
and loss against compute, as pure functions of the runs frame of ``analysis.collect.collect``.

Labels
    A run's display label is the sweep's *named* precision (``sweep.precision`` from the manifest:
    ``bf16``, ``mxfp4_e2m1``, ``e4m3w-bf16a``, ``e4m3-fwd`` …) where it has one, else ``collect``'s
    ``precision`` label (``records.precision.label``, e.g. ``mxfp8_e4m3-fwd``). ``label_column`` adds
    it as ``label``.

Matching
    Δ_P = L_P − L_ref is taken between runs that differ *only* in precision: the same nominal budget,
    the same shape (``model.depth``, ``model.d_model`` and N, whichever are present), the same LR
    (``train.lr``, where a sweep scans it) and the same seed (``train.seed``, else ``sweep.seed``).
    The sweeps seed the initialisation and the data order alike, so a pair shares both and the
    pairing removes the shape, budget and seed effects from Δ. Only
    finished, stable runs (status ``done``, not ``unstable``) with a finite loss take part; a run
    without its counterpart is left out. Duplicate runs of one key (reruns) are averaged first.

Statistics per format
    ``mean_delta``/``sd_delta`` over the matched pairs, ``rel_delta`` = mean(Δ / L_ref) and
    ``p_value`` of the paired t-test (a one-sample t-test of the differences against 0; NaN with fewer
    than two pairs or all differences 0, 0 when they are all one other value), ``significant`` =
    p < 0.05 (uncorrected). Over seeds:
    each seed's mean Δ (over its budgets and shapes), then their mean ± sd (``mean_over_seeds``,
    ``sd_over_seeds``, the spread the report shows as "mean ± sd over seeds").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis.fits import InsufficientData
from analysis.instability import FINISHED, sci

__all__ = [
    "bit_ordering",
    "element_bits",
    "FORMAT_ORDER",
    "REFERENCE_LABELS",
    "compute_optimal",
    "contrast",
    "deltas_vs_reference",
    "display_deltas",
    "display_law_table",
    "fewer_budgets",
    "fit_law",
    "fit_record",
    "format_rank",
    "hybrid_labels",
    "is_compute_sweep",
    "label_column",
    "label_info",
    "law_table",
    "loss_vs_compute",
    "ordered_labels",
    "records",
    "reference_label",
    "tensor_error_table",
    "block_geometry",
    "unstable_pairs",
    "usable_runs",
    "verdict",
]

REFERENCE_LABELS = ("bf16", "bf16/bf16")  # the second: records written before the one label
FORMAT_ORDER = (
    "fp32",
    "bf16",
    "fp16",
    "fp8_e4m3",
    "fp8_e5m2",
    "int8",
    "fp6_e2m3",
    "fp6_e3m2",
    "fp4_e2m1",
    "nvfp4",
    "nvfp4_ue5m3",
)
"""Element formats from widest to narrowest (bf16 first among the trained ones): the order of the
heatmap's rows and columns and of every table. Names of MX recipes (``mxfp8_e4m3``) rank as their
element format; unknown names come last, alphabetically."""
SHAPE_COLUMNS = ("model.depth", "model.d_model", "N")
MATCH_COLUMNS = (*SHAPE_COLUMNS, "train.lr")
"""What a matched pair shares besides budget and seed: the shape, and the LR where a sweep scans it
(``lm_spikes``): without it the runs of every LR would be averaged into one key."""
SEED_COLUMNS = ("train.seed", "sweep.seed", "seed")
ALPHA = 0.05

DELTA_COLUMNS = [
    "label",
    "w",
    "a",
    "fwd_only",
    "hybrid",
    "budget",
    "n_pairs",
    "mean_delta",
    "sd_delta",
    "rel_delta",
    "p_value",
    "significant",
    "seeds",
    "mean_over_seeds",
    "sd_over_seeds",
    "ref_loss",
]


# -- labels ----------------------------------------------------------------------------------------
def label_column(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with ``label``: ``sweep.precision`` where present and non-null, else
    ``precision`` (else ``pair``)."""
    out = df.copy()
    fallback = next((c for c in ("precision", "pair") if c in out), None)
    base = out[fallback].astype(object) if fallback else pd.Series("?", index=out.index, dtype=object)
    if "sweep.precision" in out:
        named = out["sweep.precision"]
        base = named.where(named.notna() & named.astype(str).ne(""), base)
    out["label"] = base.map(
        lambda v: "?" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
    )
    return out


def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    return df if "label" in df else label_column(df)


def reference_label(labels: Iterable[Any]) -> str | None:
    """``bf16`` or ``bf16/bf16`` (in that order of preference) if among ``labels``; else the shortest
    label of a plain bf16 run (``bf16-ln_bf16``: the label with a non-default setting); else None."""
    present = {str(v) for v in labels if v is not None and not (isinstance(v, float) and math.isnan(v))}
    for ref in REFERENCE_LABELS:
        if ref in present:
            return ref
    plain = sorted((p for p in present if p.startswith(("bf16-", "bf16/bf16 ")) and "fwd" not in p), key=len)
    return plain[0] if plain else None


def format_rank(name: Any) -> tuple[int, str]:
    """Sort key of one format name in ``FORMAT_ORDER`` (``mxfp8_e4m3`` as ``fp8_e4m3``)."""
    s = str(name).lower()
    if s.startswith("mx") and s[2:] in FORMAT_ORDER:
        s = s[2:]
    return (FORMAT_ORDER.index(s), s) if s in FORMAT_ORDER else (len(FORMAT_ORDER), s)


def _mode(s: pd.Series) -> Any:
    s = s.dropna()
    return s.mode().iloc[0] if not s.empty else None


def _is_hybrid(label: str, w: Any, a: Any, fwd_only: Any, grads: Any = None) -> bool:
    """MX weights with bf16 activations, or forward-only MX (the study's two fixes), or block formats
    with the incoming gradient kept in high precision (``precision.g_dgrad=bf16``). Gradients in
    another block format (E4M3 forward, E5M2 gradients: OCP's MXFP8 training recipe) stay plain."""
    from quant.formats import ELEM_FORMATS, ElemKind

    low = label.lower()
    if "bf16a" in low or "fwd" in low or bool(fwd_only):
        return True
    g = ELEM_FORMATS.get(str(grads))
    if g is not None and g.kind is not ElemKind.BLOCK and str(grads) != str(w):
        return True
    return w is not None and a is not None and str(w) != str(a) and str(a) == "bf16"


def _gradient_format(g: pd.DataFrame) -> Any:
    """The incoming gradient's format where a run set it apart from what it inherits (``g_dgrad``,
    else ``g_wgrad``: ``records.precision``'s backward roles), else None."""
    for role in ("g_dgrad", "g_wgrad"):
        col = f"precision.{role}"
        if col in g and g[col].notna().any():
            return _mode(g[col])
    return None


def label_info(df: pd.DataFrame) -> pd.DataFrame:
    """One row per label: its (most common) ``w``, ``a``, ``fwd_only``, ``grads`` (the incoming
    gradient's format where a run set it, else missing), whether it is a hybrid, and its number of
    runs (``n_runs``, any status); indexed by label, in display order."""
    frame = _labelled(df)
    rows = []
    for label, g in frame.groupby("label", sort=False):
        w = _mode(g["w"]) if "w" in g else None
        a = _mode(g["a"]) if "a" in g else None
        fwd = bool(_mode(g["fwd_only"])) if "fwd_only" in g and g["fwd_only"].notna().any() else False
        grads = _gradient_format(g)
        rows.append(
            {
                "label": str(label),
                "w": w,
                "a": a,
                "fwd_only": fwd,
                "grads": grads,
                "hybrid": _is_hybrid(str(label), w, a, fwd, grads),
                "n_runs": len(g),
            }
        )
    cols = ["label", "w", "a", "fwd_only", "grads", "hybrid", "n_runs"]
    info = pd.DataFrame(rows, columns=cols).set_index("label")
    return info.loc[ordered_labels(info)]


def ordered_labels(info: pd.DataFrame, reference: str | None = None) -> list[str]:
    """Labels of ``info`` (``label_info``'s frame, or any frame indexed by label with w, a, hybrid):
    the reference first, then the plain formats by (W, A, the gradients') in ``FORMAT_ORDER``, then
    the hybrids."""
    labels = [str(x) for x in info.index]
    reference = reference if reference is not None else reference_label(labels)

    def key(label: str) -> tuple:
        r = info.loc[label]
        return (
            label != reference,
            bool(r.get("hybrid", False)),
            format_rank(r.get("w")),
            format_rank(r.get("a")),
            # the incoming gradient's own format, where a run set one, after the operands' (it inherits a)
            format_rank(r.get("a") if pd.isna(r.get("grads", None)) else r.get("grads")),
            bool(r.get("fwd_only", False)),
            label,
        )

    return sorted(labels, key=key)


def hybrid_labels(df: pd.DataFrame) -> list[str]:
    """Labels of the hybrids: ``bf16a`` or ``fwd`` in the label, forward-only runs, MX weights with
    bf16 activations (w ≠ a, a = bf16), or gradients in a format of their own."""
    info = label_info(df)
    return [str(k) for k in info.index[info["hybrid"].astype(bool)]]


# -- runs ------------------------------------------------------------------------------------------
def is_compute_sweep(df: pd.DataFrame) -> bool:
    """Whether ``df`` is a sweep over compute budgets: the sweeper named its budgets (``sweep.C`` or
    another of ``collect.BUDGET_KEYS``), or the runs fall into >= 2 budgets. A proxy sweep (one
    recipe at one length, no named budget) is not: the study's sections stay silent there."""
    from analysis.collect import BUDGET_KEYS

    for key in BUDGET_KEYS:
        if key != "budget" and key in df and pd.to_numeric(df[key], errors="coerce").notna().any():
            return True
    return "budget" in df and pd.to_numeric(df["budget"], errors="coerce").nunique() >= 2


def usable_runs(df: pd.DataFrame, loss: str = "final_val_loss") -> pd.DataFrame:
    """Finished (status ``done`` where there is a status), stable runs with a finite, positive loss."""
    frame = _labelled(df)
    if loss not in frame:
        return frame.iloc[:0]
    values = pd.to_numeric(frame[loss], errors="coerce").astype(float)
    keep = np.isfinite(values) & (values > 0)
    if "status" in frame:
        keep &= frame["status"].eq("done")
    if "unstable" in frame:
        keep &= ~frame["unstable"].fillna(False).astype(bool)
    return frame[keep]


def _keyed(frame: pd.DataFrame, loss: str) -> tuple[pd.DataFrame, list[str]]:
    """(label, budget, shape…, seed, loss) with duplicate keys averaged; NaN budget → -1 (one key)."""
    out = pd.DataFrame({"label": frame["label"].astype(str)}, index=frame.index)
    budget = (
        pd.to_numeric(frame["budget"], errors="coerce").astype(float)
        if "budget" in frame
        else pd.Series(np.nan, index=frame.index)
    )
    out["_budget"] = budget.fillna(-1.0)
    keys = ["_budget"]
    for col in MATCH_COLUMNS:
        if col in frame and frame[col].notna().any():
            out[f"_{col}"] = pd.to_numeric(frame[col], errors="coerce").astype(float).fillna(-1.0)
            keys.append(f"_{col}")
    seed_col = next((c for c in SEED_COLUMNS if c in frame and frame[c].notna().any()), None)
    out["_seed"] = (
        pd.to_numeric(frame[seed_col], errors="coerce").fillna(-1).astype(float) if seed_col else 0.0
    )
    keys.append("_seed")
    out["_loss"] = pd.to_numeric(frame[loss], errors="coerce").astype(float)
    return out.groupby(["label", *keys], as_index=False, sort=False)["_loss"].mean(), keys


def _pairs(df: pd.DataFrame, loss: str, reference: str | None) -> tuple[pd.DataFrame, str, pd.DataFrame]:
    """(matched pairs: label, keys, L, L_ref, delta; the reference label; label_info)."""
    frame = _labelled(df)
    info = label_info(frame)
    ref = reference if reference is not None else reference_label(info.index)
    if ref is None or ref not in set(info.index):
        raise InsufficientData(f"no reference precision (bf16) among the labels {sorted(info.index)}")
    keyed, keys = _keyed(usable_runs(frame, loss), loss)
    refs = keyed[keyed["label"] == ref].drop(columns="label").rename(columns={"_loss": "_ref"})
    others = keyed[keyed["label"] != ref]
    pairs = others.merge(refs, on=keys, how="inner")
    pairs["delta"] = pairs["_loss"] - pairs["_ref"]
    pairs["budget"] = pairs["_budget"].where(pairs["_budget"] >= 0)
    return pairs, ref, info


def _t_test(d: np.ndarray) -> float:
    if len(d) < 2 or not np.isfinite(d).all():
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_1samp(d, 0.0).pvalue)


def _summarise(label: str, g: pd.DataFrame, info: pd.DataFrame, budget: float) -> dict[str, Any]:
    d = g["delta"].to_numpy(float)
    per_seed = g.groupby("_seed")["delta"].mean().to_numpy(float)
    p = _t_test(d)
    r = info.loc[label]
    return {
        "label": label,
        "w": r["w"],
        "a": r["a"],
        "fwd_only": bool(r["fwd_only"]),
        "hybrid": bool(r["hybrid"]),
        "budget": budget,
        "n_pairs": len(d),
        "mean_delta": float(d.mean()) if len(d) else np.nan,
        "sd_delta": float(d.std(ddof=1)) if len(d) > 1 else np.nan,
        "rel_delta": float((g["delta"] / g["_ref"]).mean()) if len(d) else np.nan,
        "p_value": p,
        "significant": bool(np.isfinite(p) and p < ALPHA),
        "seeds": len(per_seed),
        "mean_over_seeds": float(per_seed.mean()) if len(per_seed) else np.nan,
        "sd_over_seeds": float(per_seed.std(ddof=1)) if len(per_seed) > 1 else np.nan,
        "ref_loss": float(g["_ref"].mean()) if len(d) else np.nan,
    }


def deltas_vs_reference(
    df: pd.DataFrame,
    loss: str = "final_val_loss",
    reference: str | None = None,
    budget: float | str | None = None,
) -> pd.DataFrame:
    """Δ loss of every label against ``reference`` (default: ``reference_label``) on matched runs (see
    the module docstring), one row per label with at least one matched pair, in display order.

    ``budget``: None pools every budget (``budget`` column NaN); ``"largest"`` takes, per label, the
    largest budget at which it has matched pairs with the reference; a number keeps that budget only.
    Raises ``InsufficientData`` when there is no reference label."""
    pairs, ref, info = _pairs(df, loss, reference)
    if isinstance(budget, str):
        if budget != "largest":
            raise ValueError(f"budget must be None, a number or 'largest', not {budget!r}")
    elif budget is not None:
        pairs = pairs[np.isclose(pairs["budget"], float(budget), rtol=1e-6)]
    rows = []
    for label in ordered_labels(info, ref):
        g = pairs[pairs["label"] == label]
        if label == ref or g.empty:
            continue
        at = np.nan
        if budget == "largest":
            at = float(g["_budget"].max())
            g = g[g["_budget"] == at]
            at = at if at >= 0 else np.nan
        elif budget is not None:
            at = float(budget)
        rows.append(_summarise(label, g, info, at))
    return pd.DataFrame(rows, columns=DELTA_COLUMNS)


def _directional(d: np.ndarray, margin: float | None) -> tuple[float, float]:
    """(one-sided t-test p that mean(d) > 0, TOST p that |mean(d)| < margin); NaN where it cannot be
    tested (fewer than two values, no spread, or no margin)."""
    if len(d) < 2 or not np.isfinite(d).all() or d.std(ddof=1) == 0:
        return np.nan, np.nan
    greater = float(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue)
    if margin is None:
        return greater, np.nan
    low = stats.ttest_1samp(d, -margin, alternative="greater").pvalue
    high = stats.ttest_1samp(d, margin, alternative="less").pvalue
    return greater, float(max(low, high))


def _gap(df: pd.DataFrame, loss: str, worse: str, better: str) -> pd.DataFrame:
    """Matched pairs (``_pairs``) of ``worse`` against ``better``; empty where either has no runs."""
    try:
        pairs, _, _ = _pairs(df, loss, better)
    except InsufficientData:  # no runs of ``better`` (yet)
        return pd.DataFrame(columns=["label", "delta", "_seed"])
    return pairs[pairs["label"] == worse]


def contrast(
    df: pd.DataFrame,
    worse: str,
    better: str,
    loss: str = "final_val_loss",
    margin: float | None = None,
    minus: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Is ``worse`` worse than ``better``? Δ = L(worse) − L(better) on runs matched as in the module
    docstring (``better`` plays the reference). Returns n_pairs, mean and sd of Δ over the pairs, the
    per-seed means (seeds, seeds_above: how many are > 0), ``p_greater``: the one-sided paired t-test
    that Δ > 0, and with a ``margin`` the equivalence test |Δ| < margin by two one-sided tests (TOST):
    ``p_equivalent`` = the larger of the two one-sided p-values (Δ > −margin, Δ < margin), equivalent
    when it is < 0.05 (the same as the 90 % interval ``ci90`` lying inside ±margin). ``p_seeds``: the
    same test (TOST with a margin, else one-sided) over the per-seed means instead of the pairs: runs
    of one seed share its initialisation and data order, so it asks whether the gap holds seed by
    seed. ``p_two_sided`` and ``p_seeds_two_sided``: the two-sided tests, for a contrast no direction was
    predicted for. With ``minus`` = (c, d), Δ is a difference of differences, (L(worse) − L(better)) − (L(c) −
    L(d)) on runs matched across all four: does the first gap exceed the second? NaN where fewer than
    two pairs (seeds) match; n_pairs 0 where a format has no usable runs."""
    pairs = _gap(df, loss, worse, better)
    if minus is not None:
        keys = [c for c in pairs.columns if c.startswith("_") and c not in ("_loss", "_ref")]
        other = _gap(df, loss, *minus)
        if set(keys) <= set(other.columns):  # else one of c, d has no runs: nothing matches
            pairs = pairs.merge(other[[*keys, "delta"]], on=keys, suffixes=("", "_minus"))
            pairs["delta"] = pairs["delta"] - pairs["delta_minus"]
        else:
            pairs = pairs.iloc[:0]
    d = pairs["delta"].to_numpy(float)
    per_seed = pairs.groupby("_seed")["delta"].mean().to_numpy(float)
    greater, equivalent = _directional(d, margin)
    seeds = _directional(per_seed, margin)
    half = (
        stats.t.ppf(0.95, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)) if np.isfinite(greater) else np.nan
    )
    return {
        "worse": worse,
        "better": better,
        "n_pairs": len(d),
        "mean": float(d.mean()) if len(d) else np.nan,
        "sd": float(d.std(ddof=1)) if len(d) > 1 else np.nan,
        "seeds": len(per_seed),
        "seeds_above": int((per_seed > 0).sum()),
        "p_greater": greater,
        "ci90": (float(d.mean() - half), float(d.mean() + half)) if np.isfinite(half) else (np.nan, np.nan),
        "margin": margin,
        "p_equivalent": equivalent,
        "p_seeds": seeds[0] if margin is None else seeds[1],
        "p_two_sided": _t_test(d),
        "p_seeds_two_sided": _t_test(per_seed),
    }


def unstable_pairs(df: pd.DataFrame, label: str, reference: str) -> dict[str, Any]:
    """Is ``label`` unstable where ``reference`` is not (results 1.6)? Runs matched as in the module
    docstring, but every finished run counts (status ``done`` or ``diverged``), stable or not: the
    outcome is ``unstable`` itself (diverged, or a loss spike not recovered from; a rerun of one key
    counts as unstable when any of its runs was). Returns n_pairs and the four cells of the paired
    table, ``both``, ``only`` (``label`` unstable, ``reference`` not), ``only_reference`` and
    ``neither``, and ``p_greater``: the exact one-sided McNemar test that ``only`` exceeds
    ``only_reference`` (the discordant pairs as fair coin flips; 1 where there are none)."""
    from analysis.proxy import exact_p

    frame = _labelled(df)
    if "status" in frame:
        frame = frame[frame["status"].isin(FINISHED)]
    flag = frame["unstable"].fillna(False).astype(bool) if "unstable" in frame else False
    keyed, keys = _keyed(frame.assign(_flag=np.asarray(flag, dtype=float)), "_flag")
    own = keyed[keyed["label"] == label].drop(columns="label")
    ref = keyed[keyed["label"] == reference].drop(columns="label")
    pairs = own.merge(ref, on=keys, suffixes=("", "_ref"))
    a, b = pairs["_loss"].to_numpy(float) > 0, pairs["_loss_ref"].to_numpy(float) > 0  # _keyed's value
    only, only_ref = int((a & ~b).sum()), int((~a & b).sum())
    return {
        "label": label,
        "reference": reference,
        "n_pairs": len(pairs),
        "both": int((a & b).sum()),
        "only": only,
        "only_reference": only_ref,
        "neither": int((~a & ~b).sum()),
        "p_greater": exact_p(only, only + only_ref, alternative="greater"),
    }


def tensor_error_table(rows: pd.DataFrame) -> pd.DataFrame:
    """``train.tensor_error``'s rows (one per run; columns ``<metric>/<operand>/<format>/<rule>``) →
    one row per (format, rule) with the median over runs of each ``<metric>/<operand>``; empty when
    there are none."""
    cols = [c for c in rows.columns if c.count("/") == 3]
    if not cols:
        return pd.DataFrame()
    med = rows[cols].median()
    keys = pd.DataFrame([c.split("/") for c in cols], columns=["metric", "operand", "format", "rule"])
    keys["value"] = med.to_numpy(float)
    keys["column"] = keys["metric"] + "/" + keys["operand"]
    out = keys.pivot_table(index=["format", "rule"], columns="column", values="value", sort=False)
    out = out[list(dict.fromkeys(keys["column"]))]  # the rows' own order of operands, not alphabetical
    out.columns.name = None
    return out.reset_index()


# -- the precision law -----------------------------------------------------------------------------
def fit_law(
    df: pd.DataFrame,
    loss: str = "final_val_loss",
    *,
    reference: str | None = None,
    n_boot: int = 100,
    seed: int = 0,
) -> tuple[Any, dict[str, str]]:
    """``analysis.precision.fit_precision_law`` over the labels, leaving out (with the reason) every
    label that cannot carry a multiplier yet: fewer than two distinct (N, D) among its finished, stable
    runs. Returns (fit, {left-out label: reason}); raises ``InsufficientData`` as the law does (no
    reference, too few runs in all)."""
    from analysis.precision import fit_precision_law

    frame = _labelled(df)
    info = label_info(frame)
    ref = reference if reference is not None else reference_label(info.index)
    if ref is None:
        raise InsufficientData(f"no reference precision (bf16) among the labels {sorted(info.index)}")
    ok = usable_runs(frame, loss)
    ok = ok[np.isfinite(ok["N"].astype(float)) & np.isfinite(ok["D"].astype(float))] if "N" in ok else ok
    excluded: dict[str, str] = {}
    keep = []
    for label in info.index:
        g = ok[ok["label"] == label]
        points = len(set(zip(g["N"].astype(float), g["D"].astype(float), strict=True))) if "N" in g else 0
        if points >= 2:
            keep.append(label)
        elif label != ref:
            excluded[str(label)] = (
                f"{len(g)} finished stable run(s) at {points} (N, D) point(s); a multiplier needs >= 2"
            )
    if ref not in keep:
        raise InsufficientData(
            f"the reference {ref!r} has fewer than 2 (N, D) points among its finished runs"
        )
    fit = fit_precision_law(
        frame[frame["label"].isin(keep)],
        loss=loss,
        precision="label",
        reference=ref,
        n_boot=n_boot,
        seed=seed,
    )
    return fit, excluded


def law_table(
    df: pd.DataFrame,
    fit: Any = None,
    loss: str = "final_val_loss",
    *,
    reference: str | None = None,
    deltas: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The report's first table, one row per label in display order: m_P and its bootstrap interval
    (``fit``, a ``PrecisionLawFit`` or None: NaN), Δ loss against the reference at the largest budget
    (``deltas``, default ``deltas_vs_reference(df, loss, reference, "largest")``): mean and sd over
    seeds, the seeds and pairs behind it, its p-value and significance; the label's finished, stable
    runs (``n_runs``) and all its runs (``n_total``)."""
    frame = _labelled(df)
    info = label_info(frame)
    ref = reference if reference is not None else (fit.reference if fit is not None else None)
    ref = ref if ref is not None else reference_label(info.index)
    if deltas is None:
        try:
            deltas = deltas_vs_reference(frame, loss, ref, budget="largest")
        except InsufficientData:
            deltas = pd.DataFrame(columns=DELTA_COLUMNS)
    d = deltas.set_index("label")
    ok = usable_runs(frame, loss)["label"].value_counts()
    rows = []
    for label in ordered_labels(info, ref):
        mult = fit.multipliers.get(label, np.nan) if fit is not None else np.nan
        lo, hi = fit.intervals.get(label, (np.nan, np.nan)) if fit is not None else (np.nan, np.nan)
        has = label in d.index
        rows.append(
            {
                "label": label,
                "reference": label == ref,
                "hybrid": bool(info.loc[label, "hybrid"]),
                "m_P": float(mult),
                "ci_low": float(lo),
                "ci_high": float(hi),
                "budget": float(d.loc[label, "budget"]) if has else np.nan,
                "delta": float(d.loc[label, "mean_over_seeds"]) if has else np.nan,
                "delta_sd": float(d.loc[label, "sd_over_seeds"]) if has else np.nan,
                "seeds": int(d.loc[label, "seeds"]) if has else 0,
                "n_pairs": int(d.loc[label, "n_pairs"]) if has else 0,
                "p_value": float(d.loc[label, "p_value"]) if has else np.nan,
                "significant": bool(d.loc[label, "significant"]) if has else False,
                "n_runs": int(ok.get(label, 0)),
                "n_total": int(info.loc[label, "n_runs"]),
            }
        )
    return pd.DataFrame(rows)


def element_bits(name: Any) -> float:
    """Bits per element of a format named in a record's ``w``/``a`` (an element format or a recipe:
    ``fp8_e4m3`` → 8, ``nvfp4`` → 4, ``bf16`` → 16); NaN for a name the format table does not know."""
    from quant.formats import ELEM_FORMATS, RECIPES

    name = str(name)
    if name in RECIPES:
        name = RECIPES[name].elem
    return float(ELEM_FORMATS[name].bits) if name in ELEM_FORMATS else np.nan


def block_geometry(df: pd.DataFrame, *, gradients: bool = False) -> pd.DataFrame:
    """One row per label of a plain block format (W = A, not a hybrid) as trained: elem, block_size,
    scale, global_scale, rule (its E8M0 or float scales' rounding rule) and ``name``, the geometry's
    ``records.precision.block_name`` (``train.tensor_error``'s keys); a recipe (``nvfp4``) by its own
    geometry, a record written before ``precision.global_scale`` existed as without one, ``grads``,
    the incoming gradient's format (the element format where the run left it to W's),
    ``grad_rounding``, how the gradients were rounded (None: as every role, to nearest), and
    ``grad_rule``, the gradients' blocks' scale rule (``rule`` unless the run set its own). With
    ``gradients``, also the labels that differ from a plain one only in keeping the gradients in high
    precision. Indexed by label, in display order."""
    from quant.formats import ELEM_FORMATS, RECIPES, ElemKind
    from records.precision import DEFAULTS, block_name

    frame = _labelled(df)
    cols = ["elem", "block_size", "scale", "global_scale", "rule", "name"]
    rows = []
    for label, r in label_info(frame).iterrows():
        # with ``gradients`` a hybrid only by its gradients is kept
        hybrid = _is_hybrid(str(label), r["w"], r["a"], r["fwd_only"]) if gradients else r["hybrid"]
        if r["w"] != r["a"] or hybrid:
            continue
        own_grads = pd.notna(r["grads"]) and str(r["grads"]) != str(r["w"])
        g = frame[frame["label"] == label]

        def setting(key: str, g: pd.DataFrame = g) -> Any:
            col = f"precision.{key}"
            values = g[col].dropna() if col in g else pd.Series(dtype=object)
            return _mode(values) if len(values) else DEFAULTS[key]

        w = str(r["w"])
        if w in RECIPES:
            rec = RECIPES[w]
            elem, block, scale, glob, rule = (
                rec.elem,
                rec.block_size,
                rec.scale,
                rec.global_scale,
                rec.scale_rule.value,
            )
        else:
            elem, block, scale = w, setting("block_size"), setting("scale")
            glob, rule = bool(setting("global_scale")), setting("scale_rule")
        if elem not in ELEM_FORMATS or ELEM_FORMATS[elem].kind is not ElemKind.BLOCK:
            continue  # bf16, fp32: rounded value by value
        geometry = (elem, int(block), str(scale), bool(glob))
        rows.append(
            {
                "label": str(label),
                **dict(zip(cols, (*geometry, str(rule), block_name(*geometry)), strict=True)),
                "grads": str(r["grads"]) if own_grads else elem,
                "grad_rounding": setting("grad_rounding"),
                "grad_rule": str(setting("grad_scale_rule") or rule),
            }
        )
    extra = ["grads", "grad_rounding", "grad_rule"]
    return pd.DataFrame(rows, columns=["label", *cols, *extra]).set_index("label")


def bit_ordering(table: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Does m_P fall with the element width? ``table`` is ``law_table``'s frame, ``df`` the runs it came
    from. Plain formats (W = A, not hybrids; the reference at its own width with m = 1) are grouped by
    bits per element, and each pair of neighbouring widths is compared on the bootstrap intervals:
    ``separated`` when every interval of the narrower width lies below every interval of the wider
    one, ``reversed`` when every one lies above, else neither (they overlap). One row per neighbouring
    pair: bits, bits_wider, labels, labels_wider, high (largest upper end, narrower width), low_wider
    (smallest lower end, wider width), separated, reversed."""
    cols = ["bits", "bits_wider", "labels", "labels_wider", "high", "low_wider", "separated", "reversed"]
    info = label_info(df)
    t = table[~table["hybrid"]].copy()
    t = t[[info.loc[x, "w"] == info.loc[x, "a"] for x in t["label"]]]
    t["bits"] = [element_bits(info.loc[x, "w"]) for x in t["label"]]
    lo = t["ci_low"].where(~t["reference"], 1.0)
    hi = t["ci_high"].where(~t["reference"], 1.0)
    t = t.assign(lo=lo, hi=hi).dropna(subset=["bits", "lo", "hi"])
    groups = [g for _, g in t.groupby("bits", sort=True)]
    rows = []
    for a, b in zip(groups, groups[1:], strict=False):
        rows.append(
            {
                "bits": int(a["bits"].iloc[0]),
                "bits_wider": int(b["bits"].iloc[0]),
                "labels": ", ".join(a["label"]),
                "labels_wider": ", ".join(b["label"]),
                "high": float(a["hi"].max()),
                "low_wider": float(b["lo"].min()),
                "separated": bool(a["hi"].max() < b["lo"].min()),
                "reversed": bool(a["lo"].min() > b["hi"].max()),
            }
        )
    return pd.DataFrame(rows, columns=cols)


def fewer_budgets(
    df: pd.DataFrame, labels: Iterable[str], reference: str, loss: str = "final_val_loss"
) -> list[str]:
    """Of ``labels``, those whose finished, stable runs cover fewer budgets than the reference's (a
    sweep still running): their m_P rests on the budgets they have, where the shared law is fitted
    mostly by the other formats, so their matched Δ is the safer reading until they catch up."""
    ok = usable_runs(df, loss)
    if "budget" not in ok:
        return []
    have = ok.groupby("label")["budget"].agg(lambda b: set(b.dropna()))
    ref = have.get(reference, set())
    return [str(k) for k in labels if k != reference and have.get(k, set()) < ref]


# -- loss against compute --------------------------------------------------------------------------
def loss_vs_compute(df: pd.DataFrame, loss: str = "final_val_loss") -> pd.DataFrame:
    """Per label and nominal budget: each seed's best loss over the shapes run, then the mean and sd
    (ddof 1; NaN for one seed) over seeds. Columns label, budget, mean, sd, n_seeds, n_runs, n_shapes
    (fewest shapes any seed has), complete (every seed of the sweep has a finished, stable run of every
    shape any run has at that budget: else a best-of-fewer, biased up, or missing seeds) and N_best
    (the N most often best)."""
    cols = ["label", "budget", "mean", "sd", "n_seeds", "n_runs", "n_shapes", "complete", "N_best"]
    ok = usable_runs(df, loss)
    if "budget" not in ok:
        return pd.DataFrame(columns=cols)
    ok = ok[pd.to_numeric(ok["budget"], errors="coerce").notna()]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    keyed, keys = _keyed(ok, loss)
    shape = [k for k in keys if k not in ("_budget", "_seed")]
    n_col = "_N" if "_N" in keyed else None
    planned, _ = _keyed(_labelled(df).assign(_any=0.0), "_any")  # every run, finished or not
    by = [k for k in shape if k != "_N"] or shape  # an unfinished run has no N yet
    planned = planned[planned[by].ne(-1.0).all(axis=1)] if by == shape else planned
    seeds = set(planned["_seed"])
    rows = []
    for (label, budget), g in keyed.groupby(["label", "_budget"], sort=False):
        best = g.loc[g.groupby("_seed")["_loss"].idxmin()]
        shapes = g.groupby("_seed").apply(lambda s: len(s.drop_duplicates(shape)), include_groups=False)
        want = len(planned.loc[planned["_budget"] == budget, by].drop_duplicates())
        complete = set(shapes.index) >= seeds and int(shapes.min()) >= want
        rows.append(
            {
                "label": str(label),
                "budget": float(budget),
                "mean": float(best["_loss"].mean()),
                "sd": float(best["_loss"].std(ddof=1)) if len(best) > 1 else np.nan,
                "n_seeds": len(best),
                "n_runs": len(g),
                "n_shapes": int(shapes.min()),
                "complete": bool(complete),
                "N_best": float(_mode(best[n_col])) if n_col else np.nan,
            }
        )
    out = pd.DataFrame(rows, columns=cols)
    order = {label: i for i, label in enumerate(ordered_labels(label_info(df)))}
    return (
        out.assign(_o=out["label"].map(order))
        .sort_values(["_o", "budget"], kind="stable")
        .drop(columns="_o")
        .reset_index(drop=True)
    )


# -- display ---------------------------------------------------------------------------------------
def _pm(mean: float, sd: float, digits: int = 4) -> str:
    if not np.isfinite(mean):
        return "–"
    sd_text = f" ± {sd:.{digits}f}" if np.isfinite(sd) else " (1 seed)"
    return f"{mean:+.{digits}f}{sd_text}"


def _p(p: float, significant: bool) -> str:
    if not np.isfinite(p):
        return "–"
    return (f"{p:.2g}" if p >= 1e-3 else f"{p:.0e}") + (" *" if significant else "")


def display_law_table(table: pd.DataFrame, reference_name: str = "bf16") -> pd.DataFrame:
    """``law_table`` as the report prints it (strings): format, m_P [95 % CI], Δ at the largest budget
    (mean ± sd over seeds), p (``*``: < 0.05), seeds/pairs, runs. The budget goes into the Δ header
    when every row shares it, else into its own column; without any matched pair the Δ columns are
    left out."""
    budgets = set(table.loc[table["n_pairs"] > 0, "budget"].dropna())
    one = len(budgets) <= 1
    at = f"C = {sci(next(iter(budgets)))}" if one and budgets else "the largest C"
    head = f"Δ loss vs {reference_name} at {at}"
    paired = bool((table["n_pairs"] > 0).any())
    rows = []
    for r in table.itertuples(index=False):
        if not np.isfinite(r.m_P):
            m = "– (not fitted)"
        elif r.reference:
            m = "1 (reference)"
        elif np.isfinite(r.ci_low):
            m = f"{r.m_P:.3g} [{r.ci_low:.3g}, {r.ci_high:.3g}]"
        else:
            m = f"{r.m_P:.3g}"
        row = {"format": r.label + (" (hybrid)" if r.hybrid else ""), "m_P [95% CI]": m}
        if paired and not one:
            row["C"] = sci(r.budget) if r.n_pairs else "–"
        if paired:  # without a single matched pair the Δ columns would be dashes only
            row[f"{head} (mean ± sd over seeds)"] = "reference" if r.reference else _pm(r.delta, r.delta_sd)
            row["p (paired t)"] = "" if r.reference else _p(r.p_value, r.significant)
            row["seeds / pairs"] = "" if r.reference else f"{r.seeds} / {r.n_pairs}"
        row["runs"] = f"{r.n_runs}/{r.n_total}"
        rows.append(row)
    return pd.DataFrame(rows)


def display_deltas(all_budgets: pd.DataFrame, largest: pd.DataFrame) -> pd.DataFrame:
    """Δ over all budgets and at the largest, side by side, as strings (one row per label); the largest
    budget goes into the header when every label shares it, else into each cell."""
    big = largest.set_index("label")
    budgets = set(largest["budget"].dropna())
    one = len(budgets) == 1
    head = f"Δ at C = {sci(next(iter(budgets)))}" if one else "Δ at the largest C"
    rows = []
    for r in all_budgets.itertuples(index=False):
        row = {
            "format": r.label + (" (hybrid)" if r.hybrid else ""),
            "W / A": f"{r.w} / {r.a}" + (" fwd-only" if r.fwd_only else ""),
            "pairs": r.n_pairs,
            "Δ all budgets (mean ± sd over seeds)": _pm(r.mean_over_seeds, r.sd_over_seeds),
            "Δ/L": f"{100 * r.rel_delta:+.2f} %" if np.isfinite(r.rel_delta) else "–",
            "p": _p(r.p_value, r.significant),
        }
        if r.label in big.index:
            b = big.loc[r.label]
            where = "" if one else f" (C = {sci(b['budget'])})"
            row[f"{head} (mean ± sd over seeds)"] = _pm(b["mean_over_seeds"], b["sd_over_seeds"]) + where
            row[f"p ({'C = ' + sci(next(iter(budgets))) if one else 'largest C'})"] = _p(
                b["p_value"], bool(b["significant"])
            )
        rows.append(row)
    return pd.DataFrame(rows)


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame as JSON-able records (NaN → None)."""
    import json

    return json.loads(df.to_json(orient="records"))


def verdict(all_budgets: pd.DataFrame, reference: str) -> list[str]:
    """Sentences naming the formats significantly worse / better than the reference and whether the
    hybrids are within noise of it (and closer than their fully-MX counterpart)."""
    if all_budgets.empty:
        return [f"No run matched a {reference} run yet (same budget, shape and seed)."]
    sig = all_budgets[all_budgets["significant"]]
    worse = sig[sig["mean_delta"] > 0]
    better = sig[sig["mean_delta"] < 0]

    def names(t: pd.DataFrame) -> str:
        return ", ".join(f"{r.label} ({r.mean_over_seeds:+.4f})" for r in t.itertuples()) or "none"

    noise = all_budgets[~all_budgets["significant"]]
    k = len(all_budgets)
    out = [
        f"Significantly worse than {reference} (paired t-test over matched runs, p < 0.05, uncorrected "
        f"for {k} comparison{'s' if k != 1 else ''}): {names(worse)}. "
        f"Significantly better: {names(better)}. Within noise: {', '.join(noise['label']) or 'none'}."
    ]
    hybrids = all_budgets[all_budgets["hybrid"]]
    plain = all_budgets[~all_budgets["hybrid"]]
    parts = []
    for r in hybrids.itertuples():
        state = (
            "within noise of" if not r.significant else ("worse than" if r.mean_delta > 0 else "better than")
        )
        p = f"p = {r.p_value:.2g}" if np.isfinite(r.p_value) else "no test"
        text = f"{r.label} is {state} {reference} (Δ = {_pm(r.mean_over_seeds, r.sd_over_seeds)}, {p})"
        full = plain[(plain["w"] == r.w) & (plain["a"] == r.w) & ~plain["fwd_only"].astype(bool)]
        if not full.empty and r.label not in set(full["label"]):
            f = full.iloc[0]
            text += f"; fully-MX {f['label']}: Δ = {_pm(f['mean_over_seeds'], f['sd_over_seeds'])}"
        parts.append(text)
    if parts:
        tracks = all(not r.significant for r in hybrids.itertuples())
        out.append(
            "Hybrids: "
            + "; ".join(parts)
            + f". {'They track' if tracks else 'Not all of them track'} {reference} within seed noise."
        )
    return out


def fit_record(fit: Any, excluded: Mapping[str, str], table: pd.DataFrame) -> dict[str, Any]:
    """The law, its multipliers and intervals, the left-out labels and the first table, JSON-able."""
    return {
        "reference": fit.reference,
        **{k: float(getattr(fit, k)) for k in ("E", "A", "B", "alpha", "beta", "r2", "objective")},
        "n_runs": int(fit.n_runs),
        "n_boot": int(fit.n_boot),
        "n_boot_requested": int(fit.n_boot_requested),
        "multipliers": {k: float(v) for k, v in fit.multipliers.items()},
        "intervals": {k: [float(v[0]), float(v[1])] for k, v in fit.intervals.items()},
        "runs_per_precision": {k: int(v) for k, v in fit.runs_per_precision.items()},
        "excluded": dict(excluded),
        "table": records(table),
    }


def compute_optimal(fit: Any, label: str, C: Sequence[float] | np.ndarray, n_grid: int = 800) -> np.ndarray:
    """L*(C) = min over N of the law at (N, C/(6N)) for ``label``: the law's compute-optimal loss,
    on a log grid of N from 1 to C/6 (every N with D >= 1 token)."""
    C = np.asarray(C, dtype=float)
    N = np.geomspace(1.0, max(10.0, C.max() / 6), n_grid)[:, None]
    L = fit.predict(N, C[None, :] / (6 * N), label)
    return np.nanmin(L, axis=0)
