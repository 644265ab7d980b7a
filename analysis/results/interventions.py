"""1.3: interventions branched from a parent's checkpoints before its first spike.

Each parent that blew up is branched at fixed fractions of its first-spike step (``sweep.branch_at``)
into the paper's interventions (MX off, no LN-affine quantization, bf16 activations, forward-only MX,
γ with E8M0's ceil rule) and, in the optimizer re-runs, into lower Adam β2. A branch avoids the
blow-up when it ends stable; the verdict asks for ≥ 2/3 of the branches of ≥ ``MIN_PARENTS`` parents.
Also here: the prefix control (fp32 from step 20) and a re-run's repeat on another machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis import proxy
from analysis.report import md_table
from analysis.results.common import (
    NOT,
    NOT_RUN,
    PARTIAL,
    REPRODUCED,
    Source,
    _cited,
    _Doc,
    _hardware,
    _lr,
    _outcome,
    _setting,
)
from analysis.results.presets import MIN_PARENTS


@dataclass
class _Interventions:
    verdict: str
    table: pd.DataFrame
    """``proxy.branch_outcomes`` of the branches of γ-in-E4M3 parents."""
    hot: pd.DataFrame
    """Those branches, finished, of parents that blew up: what the rule judges."""
    runs: pd.DataFrame
    """The γ-in-E4M3 phase-1 runs and their branches."""
    parents: int = 0
    """How many parents that blew up the judged branches came from."""


def _interventions(src: Source) -> _Interventions:
    """1.3's rule on one sweep's branches of γ-in-E4M3 parents (a γ-unquantized parent that spiked is
    branched too, but there no LN quantization changes nothing: not the claim's). Judged at the
    earliest branch point: the paper-named interventions (no LN quantization, bf16 activations,
    forward-only MX) must each avoid the blow-up in ≥ 2/3 of the branches of parents that blew up."""
    runs = src.runs
    if runs.empty:
        return _Interventions(NOT_RUN, runs, runs, runs)
    quantized = set(runs.loc[runs["parent"].isna() & runs["norm_affine"].ne("none"), "run"])
    runs = runs[runs["run"].isin(quantized) | runs["parent"].isin(quantized)]
    table = proxy.branch_outcomes(runs)
    if table.empty:
        return _Interventions(NOT_RUN, table, table, runs)
    branches = runs[runs["parent"].notna() & runs["finished"]]
    blew = dict(zip(runs["run"], runs["blew_up"], strict=True))
    hot = branches[branches["parent"].map(blew).astype(bool)]
    first = hot["branch_at"].min() if hot["branch_at"].notna().any() else None
    judged = hot[hot["branch_at"] == first] if first is not None else hot
    rates = judged.groupby("variant")["stable"].mean()
    paper = ("no_ln_quant", "bf16_acts", "fwd_only")
    good = [v for v in paper if v in rates and rates[v] >= 2 / 3]
    parents = int(judged["parent"].nunique())
    # a sweep that branched into only some of them, or from too few parents that blew up, can
    # reproduce the claim only partially
    every = len(good) == len(paper) and parents >= MIN_PARENTS
    verdict = REPRODUCED if every else PARTIAL if good else NOT
    return _Interventions(verdict, table, hot, runs, parents)


def _intervention_block(doc: _Doc, src: Source, result: _Interventions, fig: str) -> None:
    """One sweep's interventions: the outcome table, whether fp32 itself still rescues at each branch
    point (if not, that point cannot tell the interventions apart), and parents vs branches."""
    hot = result.hot
    doc.add(md_table(result.table), "")
    if result.parents == 0:
        doc.add("No parent with γ in E4M3 blew up here, so there was nothing for the interventions to "
                "rescue: the branches above are of parents that spiked and recovered.", "")  # fmt: skip
    elif result.parents < MIN_PARENTS:
        doc.add(
            f"Only {result.parents} parent{'s' if result.parents > 1 else ''} blew up: too few for 1.3's "
            f"rate (≥ 2/3 of the branches of at least {MIN_PARENTS}), so this setting is at most "
            "partially reproduced.",
            "",
        )
    runs = result.runs  # the branches of γ-in-E4M3 parents: which have not finished yet
    parents = set(runs.loc[runs["parent"].isna(), "label"])
    planned = sum(label in parents for label in src.planned_branches.values())
    finished = int((runs["parent"].notna() & runs["finished"]).sum())
    unfinished = max(planned, int(runs["parent"].notna().sum())) - finished
    if unfinished:
        doc.add(f"{unfinished} planned branches had not finished when this was generated; they are left out.",
                "")  # fmt: skip
    spikes = dict(zip(runs["run"], runs["spike_step"], strict=True))

    def pairs(rows: pd.DataFrame) -> list[str]:
        """Each branch's parent's first spike → the branch's own, for branches that spiked."""
        return [
            f"{spikes.get(r['parent']):.0f} → {r['spike_step']:.0f}"
            for _, r in rows.sort_values("seed").iterrows()
            if pd.notna(r["spike_step"]) and pd.notna(spikes.get(r["parent"]))
        ]

    groups = hot.groupby("branch_at") if hot["branch_at"].notna().any() else [(None, hot)]
    for point, g in groups:
        nomx = g[g["variant"] == "no_mx"]
        if nomx.empty:
            continue
        at = f"at {point:g} × the spike step" if point is not None else "at this branch step"
        k, n = int(nomx["stable"].sum()), len(nomx)
        if 3 * k >= 2 * n:
            # a rescued fp32 branch that still spiked where its parent did was on that course before
            # the branch point: ending under the blow-up line is then not the spike being removed
            spiked = pairs(nomx[nomx["stable"]])
            still = (
                f" Of those, {len(spiked)} still spiked (first spike of each parent → of its fp32 "
                f"branch: {', '.join(spiked)}); where the two match, fp32 from the branch point on "
                "met the parent's spike anyway, and what it avoided is the spike's size."
                if spiked
                else ""
            )
            doc.add(
                f"{at.capitalize()}, switching everything to fp32 (`no_mx`) avoided the blow-up in "
                f"{k} of {n} branches: the parents were still rescuable there, so this branch point "
                f"tells the interventions apart.{still}",
                "",
            )
        else:
            lost = pairs(nomx[~nomx["stable"]])
            when = f" First spike of each parent → of its fp32 branch: {', '.join(lost)}." if lost else ""
            doc.add(
                f"{at.capitalize()}, even switching everything to fp32 (`no_mx`) avoided the blow-up "
                f"in only {k} of {n} branches: these runs are already past what a change of precision "
                f"rescues there, so this branch point cannot tell the precision interventions apart.{when}",
                "",
            )
    for name, changed in proxy.optimizer_branches(result.runs).items():
        paired = proxy.paired_rescues(hot, name, "no_mx")
        if paired.empty:
            continue
        own = hot[hot["variant"].eq(name)]
        spiked = own[own["spike_step"].notna()]
        after = spiked["spike_step"] - spiked["branch_step"]
        transient = (
            f" {len(spiked)} of its {len(own)} branches spiked {after.min():.0f}–{after.max():.0f} steps "
            f"after the branch point (median {after.median():.0f}), and "
            f"{int(spiked['recovered'].eq(True).sum())} of those recovered."
            if not spiked.empty
            else f" None of its {len(own)} branches spiked."
        )
        doc.add(
            f"`{name}` changed only {changed} at the branch point: MX, γ in E4M3, the weights and "
            f"Adam's moments stay the parent's.{transient} Against switching everything to fp32 "
            "(`no_mx`) on the same parents that blew up:",
            "",
            md_table(paired),
            "",
        )
    if not src.cur.empty:
        from analysis import plots

        doc.figure(plots.proxy_branches(src.cur, result.runs), fig, f"parents and branches ({src.name})")
    _adam_block(doc, src, fig)


def _adam_block(doc: _Doc, src: Source, fig: str) -> None:
    """Adam's state before and at the blow-up, and right after each optimizer branch (records that log
    ``train.optim.adam_stats``; ``analysis.proxy.adam_state``, ``adam_after_branch``)."""
    from scipy.stats import mannwhitneyu

    from analysis import plots

    state = proxy.adam_state(src.runs, src.cur)
    if state.empty or "gv_max_before" not in state:
        return
    blew, calm = state[state["blew_up"]], state[~state["blew_up"]]
    w = proxy.ADAM_WINDOW
    shown = ("seed", "blew_up", "onset", "gv_max_before", "gv_before", "gv_norm_before", "upd_before",
             "twin_upd_before", "lead", "gv_max_peak", "branch_step", "gv_at_branch")  # fmt: skip
    table = state.sort_values(["blew_up", "seed"], ascending=[False, True])[[c for c in shown if c in state]]
    table = table.replace({"blew_up": {True: "yes", False: "no"}})
    table = table.rename(columns={"blew_up": "blew up", "onset": "onset (or median onset)",
                      "gv_max_before": f"max Σg²/Σv̂, {w} steps before", "gv_before": "Σg²/Σv̂ (Linear)",
                      "gv_norm_before": "Σg²/Σv̂ (norms)", "upd_before": "step RMS (Linear)",
                      "twin_upd_before": "twin's step RMS", "lead": "max Σg²/Σv̂ > 1, steps from onset",
                      "gv_max_peak": "peak max Σg²/Σv̂", "branch_step": "branch step",
                      "gv_at_branch": "Σg²/Σv̂ (Linear) at the branch"})  # fmt: skip
    doc.add(
        f"**Adam's state** (logged every {int(src.setting('train.log_every') or 10)} steps for the run and "
        f"its twin: `train.optim.adam_stats`; medians over the {w} steps before each onset; a run that "
        "did not blow up is read at the same steps before the median onset of those that did):",
        "",
        md_table(table),
        "",
    )
    if not blew.empty:
        lead = blew["lead"].dropna()
        ratio = blew["upd_before"] / blew["twin_upd_before"]
        span = proxy.value_range
        # a sweep of parents chosen because they blew up has no MX run that did not: no comparison there
        calm_gv = calm_peak = ""
        calm_upd = " (every MX run here blew up, so none to set them against)"
        if len(calm):
            calm_gv = f" and {span(calm['gv_max_before'], '{:.2f}')} in those that did not"
            calm_peak = f" (those that did not blow up: at most {calm['gv_max_peak'].max():.2f})"
            calm_upd = (
                f" against {span(calm['upd_before'], '{:.3f}')} in the MX runs that did not blow up "
                f"(Mann-Whitney p = {mannwhitneyu(blew['upd_before'], calm['upd_before']).pvalue:.2g})"
            )
        doc.add(
            f"Before the onset the gradient stays *below* Adam's memory of it: the largest per-tensor "
            f"Σg²/Σv̂ is {span(blew['gv_max_before'], '{:.2f}')} (median over the {w} steps) in the "
            f"runs that blew up{calm_gv}; it first exceeds 1 {span(lead.abs(), '{:.0f}')} steps before "
            f"the onset ({len(lead)} of {len(blew)} runs), then peaks at "
            f"{span(blew['gv_max_peak'], '{:.0f}')}{calm_peak}. What sets the runs that blew up apart "
            f"before it is the size of Adam's step: RMS(m̂/√v̂) of the Linear weights "
            f"{span(blew['upd_before'], '{:.3f}')}{calm_upd} and {ratio.median():.2f}× their own twins' "
            f"({span(ratio, '{:.2f}')}).",
            "",
        )
    after = proxy.adam_after_branch(src.runs, src.cur, steps=w)
    if not after.empty:
        rows = []
        for name, g in after.groupby("variant", sort=False):
            upd = f"{g['upd_before'].median():.3f} → {g['upd_after'].median():.3f}"
            gv = f"{g['gv_before'].median():.3f} → {g['gv_after'].median():.3f}"
            rows.append({
                "branch": name, "branches": len(g), "avoided blow-up": int(g["stable"].sum()),
                f"step RMS, {w} before → after": upd, f"Σg²/Σv̂, {w} before → after": gv,
                "final / twin (median)": g["ratio"].median(),
            })  # fmt: skip
        doc.add(
            f"Right after each branch point (medians over the branches; {w} steps of the parent before, "
            "of the branch after; final / twin: over the branch's own fp32 twin, which steps with the "
            "branch's optimizer settings, where it trains one, else over its parent's):",
            "",
            md_table(pd.DataFrame(rows)),
            "",
        )
    pairs = proxy.fp32_siblings(src.runs)
    for (name, sibling), g in pairs.groupby(["variant", "sibling"], sort=False) if not pairs.empty else ():
        worse, tied = int((g["ratio"] > 1).sum()), int((g["ratio"] == 1).sum())
        n = len(g) - tied
        sign = proxy.exact_p(worse, n)
        doc.add(
            f"`{name}` against `{sibling}` (fp32 from the same checkpoint with the same optimizer settings) "
            f"on {len(g)} parents: final val loss {g['ratio'].median():.3g}× its fp32 sibling's (median; "
            f"{proxy.value_range(g['ratio'])}), higher in {worse} of {n} "
            f"(two-sided sign test p = {sign:.2g}); "
            f"{int(g['stable'].sum())} and {int(g['sibling_stable'].sum())} of them avoided the blow-up.",
            "",
        )
    setting = f"width {src.setting('model.width')}, lr {_lr(src, src.runs):g}"
    doc.figure(
        plots.adam_state(src.cur, state, setting),
        fig.replace(".png", "_adam.png"),
        f"Adam's state ({src.name})",
    )


def _prefix_control(doc: _Doc, src: Source, repeated: Source | None) -> None:
    """The control of 1.3's early fp32 branches: each seed's γ-in-E4M3 and γ-unquantized parents both
    branched into fp32 at one step. Its rule was fixed before it ran (the preset's header): the
    γ-clamped prefix decides the blow-up when the fp32 branches of γ-in-E4M3 parents end unstable in
    at least 2 more seeds than those of γ-unquantized parents."""
    runs = src.runs
    if not src.ran or runs.empty:
        doc.add(f"Not run yet: `{src.command}` (the control of the early fp32 branches).", "")
        return
    step = src.setting("sweep.branch_step")
    parents = runs[runs["parent"].isna()]
    quantized = dict(zip(parents["run"], parents["norm_affine"].ne("none"), strict=True))
    fp32 = runs[runs["parent"].notna() & runs["variant"].eq("no_mx")]
    fp32 = fp32.assign(quantized=fp32["parent"].map(quantized))
    done = fp32[fp32["finished"]]
    tally = {q: (int((~g["stable"]).sum()), len(g)) for q, g in done.groupby("quantized")}  # unstable, n
    rows = []
    for seed, g in parents.sort_values("seed").groupby("seed"):
        row: dict[str, Any] = {"seed": int(seed)}
        twin = g["twin_stable"].dropna()  # the same fp32 trajectory beside either parent
        row["fp32 twin (from step 0)"] = ("stable" if twin.iloc[0] else "unstable") if len(twin) else "–"
        for _, p in g.sort_values("norm_affine", key=lambda s: s.eq("none")).iterrows():
            name = "γ in E4M3" if quantized[p["run"]] else "γ unquantized"
            b = fp32[fp32["parent"] == p["run"]]
            row[name] = _outcome(p)
            row[f"{name} → fp32 at step {step}"] = _outcome(b.iloc[0]) if not b.empty else "–"
        rows.append(row)
    doc.add(
        f"**Control: does the γ-clamped prefix decide the blow-up?** {_cited(src)}: "
        f"{_setting(src, None, parents)}; each seed's "
        f"γ-in-E4M3 and γ-unquantized parents both branched into fp32 (`no_mx`) at step {step}. Rule, "
        "fixed before it ran: the γ-clamped prefix decides when the fp32 branches of γ-in-E4M3 parents end "
        "unstable (blew up, or spiked and did not recover) in at least 2 more seeds than those of "
        "γ-unquantized parents.",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )
    if set(tally) == {True, False}:
        (hot, n_hot), (cold, n_cold) = tally[True], tally[False]
        if hot - cold >= 2:
            verdict = "the γ-clamped prefix decides the blow-up: fp32 from the same step rescues the other"
        elif cold - hot >= 2:
            verdict = "the γ-unquantized prefix is the more fragile one: not the clamp mechanism"
        else:
            verdict = (
                "the two prefixes leave fp32 about equally unstable: what the first steps decide is not "
                "the γ clamp alone"
            )
        blew = dict(zip(parents["run"], parents["blew_up"], strict=True))
        rescue = done[done["quantized"].astype(bool) & done["parent"].map(blew).astype(bool)]
        rescued = (
            f" Of the {len(rescue)} γ-in-E4M3 parents that blew up in this sweep, fp32 from step {step} "
            f"avoided it in {int(rescue['stable'].sum())}."
            if len(rescue)
            else ""
        )
        doc.add(
            f"fp32 from step {step}: unstable in {hot} of {n_hot} seeds after γ in E4M3, in {cold} of "
            f"{n_cold} after γ unquantized: {verdict}.{rescued}",
            "",
        )
    if repeated is not None and not repeated.runs.empty:
        _repeat_line(doc, src, repeated, [r for r, q in quantized.items() if q])
    if not src.cur.empty:
        from analysis import plots

        doc.figure(plots.proxy_prefix_control(src.cur, runs), f"proxy_prefix_control_{src.name}.png",
                   f"fp32 from step {step} of each parent ({src.name})")  # fmt: skip


def _repeat_line(doc: _Doc, src: Source, repeated: Source, parents: list[str]) -> None:
    """``src``'s runs of ``parents`` and their branches against the same configs and seeds in
    ``repeated``: equal to the bit, or where the fp32 twins first differ (then the fp32 arithmetic
    itself differed: the hardware) and which parents' blow-ups that difference turned around."""
    runs, other = src.runs, repeated.runs
    mine = runs[runs["run"].isin(parents) | runs["parent"].isin(parents)]
    joined = mine.merge(other, on=["label", "seed", "branch_step"], suffixes=("", "_repeated"))
    if joined.empty:
        return
    same = int((joined["final_val_loss"] == joined["final_val_loss_repeated"]).sum())
    line = (
        f"Its γ-in-E4M3 parents and their fp32 branches repeat `{repeated.name}`'s runs (the same configs "
        f"and seeds): the same final val loss, to the bit, in {same} of {len(joined)}."
    )
    pj = joined[joined["parent"].isna()]
    if same < len(joined) and not pj.empty and not src.cur.empty and not repeated.cur.empty:
        first = []
        for _, r in pj.iterrows():
            a = src.cur[src.cur["run"] == r["run"]].set_index("step")["twin_loss"]
            b = repeated.cur[repeated.cur["run"] == r["run_repeated"]].set_index("step")["twin_loss"]
            both = pd.concat([a, b], axis=1, join="inner").dropna()
            differ = both[both.iloc[:, 0] != both.iloc[:, 1]]
            if not differ.empty:
                k = differ.index[0]
                first.append((k, abs(differ.iloc[0, 0] / differ.iloc[0, 1] - 1)))
        if first:
            k = min(s for s, _ in first)
            rel = max(d for s, d in first if s == k)
            hw = [_hardware(repeated, pj["run_repeated"]), _hardware(src, pj["run"])]
            line += (
                f" Their fp32 twins already differ at step {k:.0f} (by {rel:.1g} relative): the two sweeps' "
                f"fp32 arithmetic differed, i.e. the hardware (summary.json's `hardware`: {hw[0]} there, "
                f"{hw[1]} here), not the code."
            )
        flipped = pj[pj["blew_up"] != pj["blew_up_repeated"]]
        if not flipped.empty:
            seeds = ", ".join(f"{s:.0f}" for s in sorted(flipped["seed"]))
            line += (
                f" That difference turned the outcome around in {len(flipped)} of {len(pj)} parents "
                f"(blew up in one sweep, not in the other: seeds {seeds}): which seeds blow up is not fixed "
                "by the seed."
            )
    doc.add(line, "")
