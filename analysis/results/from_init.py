"""Paired from-init comparisons (1.2, 1.3): the same seeds (same init, same batches, and on one machine
bit-identical fp32 twins) trained in two precisions, set seed by seed against each other.

A pair of sweeps shares its seeds; ``_paired`` counts the seeds that blew up on one side only and
gives the exact one-sided McNemar p (the binomial test on the discordant seeds), and checks that the
two sides' fp32 twins ended at the same val loss to the bit — the sign that the pairing is real and
not a machine's rounding. The blocks below use it for γ's clamp alone, γ's format (E4M3, bf16, ceil),
the interventions' precisions from init, and which quantized tensor sets Adam's step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import proxy
from analysis.report import md_table
from analysis.results.common import Source, _cited, _Doc, _seed_list
from analysis.results.mechanism import _mirror


@dataclass
class _Paired:
    """One precision of one sweep against one of another on their shared seeds (from init): each side's
    rows by seed, the seeds that blew up only on each side, the exact one-sided McNemar p that fewer
    blew up on side ``a``, and per seed whether the fp32 twins ended at the same val loss to the bit."""

    a: pd.DataFrame
    b: pd.DataFrame
    only_b: int
    only_a: int
    p: float
    twins_equal: pd.Series


def _paired(
    a_rows: pd.DataFrame, a_label: str, b_rows: pd.DataFrame, b_label: str, keys: Sequence[str] = ("seed",)
) -> _Paired | None:
    """``_Paired`` of ``a_label``'s rows against ``b_label``'s, matched on ``keys`` (the seed; with
    ``train.lr`` too where the sweeps ran several LRs on the same seeds); None where they share none."""
    a = a_rows[a_rows["label"] == a_label].set_index(list(keys))
    b = b_rows[b_rows["label"] == b_label].set_index(list(keys))
    seeds = a.index.intersection(b.index)
    if not len(seeds):
        return None
    a, b = a.loc[seeds], b.loc[seeds]
    only_b, only_a = int((b["blew_up"] & ~a["blew_up"]).sum()), int((a["blew_up"] & ~b["blew_up"]).sum())
    n = only_a + only_b
    p = proxy.exact_p(only_b, n, alternative="greater")
    return _Paired(a, b, only_b, only_a, p, a["twin_final_val_loss"] == b["twin_final_val_loss"])


def _clamp_control_block(doc: _Doc, src: Source, floor: Source, pairs: Mapping[str, str]) -> None:
    """γ in E4M3 under E8M0's ceil rule (``src``) against the floor rule (``floor``, same seeds from
    init): per pair of precisions, the blow-ups of each and the seeds where only one blew up (exact
    McNemar, one-sided: fewer under ceil), Adam's step over ``proxy.STEP_WINDOW`` (``proxy.step_source``)
    and in how many seeds the ceil run's is the lower, γ's clip fraction there, and whether the fp32
    twins (one trajectory per seed) agree to the bit across the two sweeps."""

    ceil, flo = src.steps, floor.steps
    if ceil.empty or flo.empty:
        return
    lo, hi = proxy.STEP_WINDOW
    rows, twins = [], []
    for c_label, f_label in pairs.items():
        pair = _paired(ceil, c_label, flo, f_label)
        if pair is None:
            continue
        a, b = pair.a, pair.b
        both = a["upd"].notna() & b["upd"].notna()
        twins.append(pair.twins_equal)
        rows.append(
            {
                "ceil rule": c_label,
                "floor rule": f_label,
                "seeds": len(a),
                "blew up (ceil / floor)": f"{int(a['blew_up'].sum())} / {int(b['blew_up'].sum())}",
                "only floor / only ceil": f"{pair.only_b} / {pair.only_a}",
                "p (McNemar, one-sided)": pair.p,
                f"step RMS {lo}–{hi} (ceil / floor, median)": (
                    f"{a['upd'].median():.4f} / {b['upd'].median():.4f}"
                ),
                "ceil's step lower": f"{int((a['upd'][both] < b['upd'][both]).sum())}/{int(both.sum())}",
                "LN-γ clip fraction (ceil / floor, median)": (
                    f"{a['clip_ln'].median():.3f} / {b['clip_ln'].median():.3f}"
                ),
            }
        )
    if not rows:
        return
    same = pd.concat(twins)
    doc.add(
        f"**γ's clamp or γ's rounding?** (`{src.name}`; the predictions in the preset's header were set "
        f"before it ran): {_cited(src)}. Under E8M0's ceil rule a 32-block of γ with its max in [0.5, 1) "
        "is rounded on the same grid near 1 as under floor, but nothing saturates at 0.875. The same seeds "
        f"from init against the floor rule's runs of `{floor.name}`, seed by seed (step RMS as above, read "
        f"over steps {lo}–{hi} before each run's onset):",
        "",
        md_table(pd.DataFrame(rows)),
        "",
        f"The fp32 twins of the two sweeps (same seed, same init, same batches) end at the same val loss to "
        f"the bit in {int(same.sum())} of {len(same)} pairs.",
        "",
    )


def _gamma_format_block(
    doc: _Doc, src: Source, bases: Sequence[tuple[Source, Mapping[str, str]]]
) -> list[_Paired]:
    """γ/β rounded to bf16 (``src``: no block scale, so no clamp) against γ/β in E4M3 in each of
    ``bases`` (same seeds from init), one row per pair: the blow-ups of each, the seeds where only one
    blew up (exact McNemar, one-sided: fewer in bf16), the base sweep's γ-unquantized runs on those
    seeds, and in how many seeds the fp32 twins (one trajectory per seed) agree to the bit. Returns
    the pairs it tabulated."""
    here = src.runs[src.runs["parent"].isna()] if not src.runs.empty else src.runs
    rows, out = [], []
    for base, pairs in bases:
        there = base.runs[base.runs["parent"].isna()] if not base.runs.empty else base.runs
        for label, base_label in pairs.items():
            pair = None if here.empty or there.empty else _paired(here, label, there, base_label)
            if pair is None:
                continue
            a, b = pair.a, pair.b
            out.append(pair)
            none = there[there["norm_affine"].eq("none")].set_index("seed")
            c = none.loc[none.index.intersection(a.index)]  # the base sweep's γ-unquantized runs, if any
            rows.append(
                {
                    "γ/β (this sweep)": f"{label} ({a['norm_affine'].iloc[0]})",
                    "against": f"`{base.name}` {base_label} ({b['norm_affine'].iloc[0]})",
                    "seeds": len(a),
                    "blew up (here / there)": f"{int(a['blew_up'].sum())} / {int(b['blew_up'].sum())}",
                    "γ unquantized blew up (there)": f"{int(c['blew_up'].sum())} / {len(c)}"
                    if len(c)
                    else "–",
                    "only there / only here": f"{pair.only_b} / {pair.only_a}",
                    "p (McNemar, one-sided)": pair.p,
                    "twins equal to the bit": f"{int(pair.twins_equal.sum())}/{len(a)}",
                    "final / twin (here, median)": float(a["ratio"].median()),
                }
            )
    if not rows:
        return out
    doc.add(
        f"**γ rounded to bf16: no block scale, no clamp** (`{src.name}`; the predictions in the preset's "
        f"header were set before it ran): {_cited(src)}. The same seeds from init against γ/β in E4M3, "
        "seed by seed. Where the fp32 twins differ the sweeps took different float paths (another machine "
        "or library): those pairs share seed, init and batches, not the trajectory.",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )
    return out


def _from_init_block(doc: _Doc, src: Source, base: Source, pairs: Mapping[str, str]) -> None:
    """``src``'s precisions trained from init on ``base``'s seeds and LRs, each set against a precision
    of ``base`` pair by pair of (LR, seed): per LR and over all, the blow-ups of each, the pairs where
    only one blew up (exact McNemar, two-sided: the predictions go both ways), the rule's mirror on
    each side and in how many pairs the fp32 twins (one trajectory per seed and LR) agree to the bit; a
    precision that ``base`` ran too is the same-machine check, whose runs must then end at ``base``'s
    val loss to the bit. ``base`` may be ``src`` itself (fresh seeds, each precision against one of its
    own). One figure per LR."""
    here = src.runs[src.runs["parent"].isna() & src.runs["finished"]]
    there = base.runs[base.runs["parent"].isna() & base.runs["finished"]]
    if here.empty or there.empty:
        return
    rows, repeats = [], []
    for label, base_label in pairs.items():
        pair = _paired(here, label, there, base_label, keys=("train.lr", "seed"))
        if pair is None:
            continue
        a, b = pair.a, pair.b
        lrs = a.index.get_level_values("train.lr")
        levels: list[float | None] = sorted(set(lrs))
        if len(levels) > 1:  # over all LRs too (one LR's row is already the whole sweep)
            levels.append(None)
        for lr in levels:
            at = np.ones(len(a), bool) if lr is None else np.asarray(lrs == lr)
            up_a, up_b = a["blew_up"][at], b["blew_up"][at]
            n_b, n_a = int((up_b & ~up_a).sum()), int((up_a & ~up_b).sum())
            rows.append(
                {
                    "precision (here)": label,
                    "against": f"`{base.name}` {base_label}",
                    "lr": "all" if lr is None else f"{lr:g}",
                    "seeds": int(at.sum()),
                    "blew up (here / there)": f"{int(up_a.sum())} / {int(up_b.sum())}",
                    "only there / only here": f"{n_b} / {n_a}",
                    "p (McNemar)": proxy.exact_p(n_b, n_a + n_b),
                    "twins equal to the bit": f"{int(pair.twins_equal[at].sum())}/{int(at.sum())}",
                    f"twin ≥ {proxy.BLOWUP:g}× run (here / there)": (
                        f"{int(a['twin_worse'][at].sum())} / {int(b['twin_worse'][at].sum())}"
                    ),
                    "final / twin (here / there, median)": (
                        f"{a['ratio'][at].median():.3g} / {b['ratio'][at].median():.3g}"
                    ),
                }
            )
        if label == base_label:
            same = a["final_val_loss"].eq(b["final_val_loss"]) | (
                a["status"].eq("diverged") & b["status"].eq("diverged")
            )
            repeats.append(f"`{label}` in {int(same.sum())} of {len(a)}")
    if not rows:
        return
    what = (
        "Fresh seeds, each precision from init beside its fp32 twin, set against the sweep's own runs pair "
        "by pair (same LR, seed, init and batches):"
        if base is src
        else f"`{base.name}`'s seeds and LRs retrained from init in each precision beside its fp32 twin, "
        "set against its runs pair by pair (same LR, seed, init and batches):"
    )
    asked = src.asked
    unfinished = (
        f" {asked - len(here)} of its {asked} runs have not finished (the sweep was stopped; its command "
        "resumes it): the table counts the finished, and the wall time is theirs."
        if asked > len(here)
        else ""
    )
    doc.add(
        f"**The interventions' precisions from init** (`{src.name}`; the predictions in the preset's header "
        f"were set before it ran): {_cited(src)}. {what}{unfinished}",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )
    mirror = _mirror(here)
    if mirror:
        doc.add(mirror, "")
    if repeats:
        doc.add(
            f"Retrained in the same precision, the runs end at `{base.name}`'s val loss to the bit (or both "
            f"diverge): {', '.join(repeats)} pairs.",
            "",
        )
    if not src.cur.empty:
        from analysis import plots

        for lr in sorted(here["train.lr"].dropna().unique()):
            doc.figure(
                plots.proxy_mechanism(src.cur, here[here["train.lr"] == lr]),
                f"proxy_mechanism_{src.name}_lr{lr:g}.png",
                f"MX vs fp32 twin ({src.name}, lr {lr:g})",
            )


def _pooled_same_machine(pairs: Sequence[_Paired]) -> str | None:
    """One sentence pooling the pairs whose fp32 twins agree to the bit in every seed (the same float
    path, so each seed is one trajectory up to the precision): blow-ups on each side, the seeds where
    only one blew up and the exact one-sided McNemar p that fewer blew up on side ``a``; None where
    fewer than two such pairs exist (a single pair is its own row already)."""
    same = [p for p in pairs if len(p.twins_equal) and bool(p.twins_equal.all())]
    if len(same) < 2:
        return None
    n = sum(len(p.a) for p in same)
    a_up, b_up = sum(int(p.a["blew_up"].sum()) for p in same), sum(int(p.b["blew_up"].sum()) for p in same)
    only_b, only_a = sum(p.only_b for p in same), sum(p.only_a for p in same)
    pv = proxy.exact_p(only_b, only_a + only_b, alternative="greater")
    return (
        f"Pooled over the {len(same)} same-machine pairings above (fp32 twins equal to the bit in every "
        f"seed; {n} seeds): γ in bf16 blew up in {a_up}, γ in E4M3 in {b_up}; only with γ in E4M3 {only_b}, "
        f"only with γ in bf16 {only_a}: exact McNemar, one-sided, p = {pv:.2g}."
    )


def _step_source_block(doc: _Doc, src: Source, reference: str, trained: Source | None = None) -> None:
    """Adam's normalized step per precision on the same seeds from init (``proxy.step_source``), each
    precision against ``reference`` of the same seed and against its own fp32 twin; whether the runs
    that blew up took larger steps, whatever their precision; whether the twins, one fp32
    trajectory per seed trained once per precision, agree to the bit; and, for a sweep on fresh seeds
    (``trained``: the sweep that fixed it), how well the step threshold predicts its blow-ups."""
    from scipy.stats import mannwhitneyu

    from analysis import plots

    source = src.steps
    if source.empty:
        return
    lo, hi = proxy.STEP_WINDOW
    runs = src.runs[src.runs["parent"].isna()]
    # the sweep's own order of its precisions (sweep.precisions), then any other label it recorded
    named = [str(e.get("name")) for e in src.setting("sweep.precisions") or [] if isinstance(e, dict)]
    order = [lab for lab in dict.fromkeys([*named, *source["label"]]) if lab in set(source["label"])]
    paired = proxy.paired_steps(source, reference).set_index("variant") if len(order) > 1 else pd.DataFrame()
    rows = []
    for label in order:
        g, r = source[source["label"] == label], runs[runs["label"] == label]
        twins = r["twin_stable"].dropna().astype(bool)
        vs_twin = g["upd_vs_twin"].dropna()
        row = {
            "precision": label,
            "seeds": int(g["seed"].nunique()),
            "blew up": int(r["blew_up"].sum()),
            "twin stable": f"{int(twins.sum())}/{len(twins)}" if len(twins) else "–",
            "step RMS (median)": float(g["upd"].median()),
            "step RMS (range)": proxy.value_range(g["upd"]),
            "step / twin's (median)": float(vs_twin.median()) if len(vs_twin) else np.nan,
            "≥ 1.5× twin's": f"{int((vs_twin >= 1.5).sum())}/{len(vs_twin)}",
            "Σg²/Σv̂ (median)": float(g["gv"].median()),
            "twin's Σg²/Σv̂": float(g["twin_gv"].median()),
            "consistency (median)": float(g["consistency"].median()),
            "twin's consistency": float(g["twin_consistency"].median()),
            "norms' step (median)": float(g["upd_norm"].median()),
            "train loss / twin's (median)": float(g["loss_vs_twin"].median()),
        }
        if not paired.empty:
            p = paired.loc[label] if label in paired.index else None
            row[f"below {reference}"] = "–" if p is None else p[f"below {reference}"]
            row["sign test p"] = "–" if p is None else p["sign test p"]
        rows.append(row)
    doc.add(
        f"**Which quantized tensor sets Adam's step**, {_cited(src)}: the same seeds "
        f"({_seed_list(sorted(int(x) for x in source['seed'].unique()))}) from init in {len(order)} "
        f"precisions, each beside its fp32 twin; step RMS = the median normalized step RMS(m̂/√v̂) of the "
        f"Linear weights over the logged steps {lo}–{hi} that precede the run's own onset, Σg²/Σv̂ its "
        "present gradient against Adam's memory of it there, consistency = step RMS / √(Σg²/Σv̂) how "
        "much of the gradient keeps its sign over β1's memory (1: all of it, ≈ 0.23: pure noise; "
        "`analysis.proxy`'s docstring derives it) (the "
        "predictions in the preset's header were set before it ran; below: against "
        f"`{reference}` of the same seed, two-sided sign test).",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )
    read = source.dropna(subset=["upd"])
    blew, calm = read[read["blew_up"]], read[~read["blew_up"]]
    if len(blew) and len(calm):
        p = mannwhitneyu(blew["upd"], calm["upd"], alternative="greater").pvalue
        doc.add(
            f"Over every run of the sweep, whatever its precision, the {len(blew)} that blew up (and had "
            f"steps {lo}–{hi} before their onset) took a step RMS of {proxy.value_range(blew['upd'])} "
            f"(median {blew['upd'].median():.3f}), the {len(calm)} that did not "
            f"{proxy.value_range(calm['upd'])} (median {calm['upd'].median():.3f}; one-sided "
            f"Mann-Whitney p = {p:.2g}).",
            "",
        )
    if trained is not None and trained.ran:
        threshold = proxy.step_threshold(trained.steps)
        if not math.isnan(threshold):
            p = proxy.step_prediction(source, threshold)
            doc.add(
                f"**The step as a predictor, on fresh seeds** (rule fixed before this sweep ran: the "
                f"threshold that best separated the runs of `{trained.name}`, pooled over its "
                f"precisions, {threshold:.4f}; a run is predicted to blow up iff its step RMS over steps "
                f"{lo}–{hi} exceeds it): {p['hit']} of {p['hit'] + p['miss']} runs that blew up were "
                f"predicted, {p['false alarm']} of {p['false alarm'] + p['correct rejection']} that did "
                f"not were flagged (balanced accuracy {p['balanced accuracy']:.2f}, one-sided Fisher "
                f"p = {p['p (Fisher, one-sided)']:.2g}); {p['unread']} runs blew up by step {lo} and had "
                "no step to read.",
                "",
            )
    twins = source.groupby("seed")["twin_final_val_loss"].nunique(dropna=False)
    same = int((twins == 1).sum())
    doc.add(
        f"The fp32 twins of a seed (one trajectory, trained once beside each precision) end at the same "
        f"val loss to the bit in {same} of {len(twins)} seeds.",
        "",
    )
    for label in order:
        r = runs[runs["label"] == label].dropna(subset=["twin_stable"])
        if label == reference or r.empty:
            continue
        twin_ok = r["twin_stable"].astype(bool)
        only_run, only_twin = int((r["blew_up"] & twin_ok).sum()), int((~r["blew_up"] & ~twin_ok).sum())
        n = only_run + only_twin
        sign = proxy.exact_p(only_run, n)
        doc.add(
            f"`{label}` blew up in {int(r['blew_up'].sum())} of {len(r)} seeds, its fp32 twins were "
            f"unstable in {int((~twin_ok).sum())}; the run alone in {only_run}, the twin alone in "
            f"{only_twin} (exact McNemar p = {sign:.2g}).",
            "",
        )
    doc.figure(plots.step_source(source, order, proxy.STEP_WINDOW), f"proxy_step_source_{src.name}.png",
               f"Adam's step per precision ({src.name})")  # fmt: skip
