"""Study 1's proxy sections (1.1–1.4), put together from the blocks of ``mechanism``, ``from_init``,
``interventions`` and ``late``: each claim's rule, its verdict, the numbers and the figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from analysis import proxy
from analysis.report import md_table
from analysis.results.common import NOT, NOT_RUN, PARTIAL, REPRODUCED, Source, _cited, _Doc, _rel, _setting
from analysis.results.from_init import (
    _clamp_control_block,
    _from_init_block,
    _gamma_format_block,
    _Paired,
    _pooled_same_machine,
    _step_source_block,
)
from analysis.results.interventions import _intervention_block, _interventions, _prefix_control
from analysis.results.late import _canonical_block, _canonical_complete, _late_blowups, _late_findings
from analysis.results.mechanism import (
    _edge_block,
    _mechanism_verdict,
    _mirror,
    _one_factor_scans,
    _scan,
    _setting_bases,
)
from analysis.results.presets import MIN_PARENTS, STEP_PREDICTION
from analysis.results.search_log import _search_rows


def proxy_claims(
    doc: _Doc,
    mech: Source,
    lates: list[Source],
    canonical: Source,
    edges: list[Source],
    reruns: Sequence[Source] = (),
    pilots: Mapping[str, Source] | None = None,
    controls: Sequence[tuple[Source, Source | None]] = (),
    step_sources: Sequence[tuple[Source, str]] = (),
    clamp_controls: Sequence[tuple[Source, Source, Mapping[str, str]]] = (),
    gamma_formats: Sequence[tuple[Source, Source, Mapping[str, str]]] = (),
    canonical_seeds: Source | None = None,
    from_init: Sequence[tuple[Source, Source, Mapping[str, str]]] = (),
) -> None:
    runs = mech.runs
    parents = runs[runs["parent"].isna()] if not runs.empty else runs
    ln = parents[parents["norm_affine"].ne("none")] if not parents.empty else parents

    # 1.1 -------------------------------------------------------------------------------------------
    rule = (
        f"Rule: reproduced when full MXFP8 E4M3 with γ/β in E4M3 blew up (diverged, or final val loss ≥ "
        f"{proxy.BLOWUP:g}× its fp32 twin's) in at least 2 of every 3 seeds while every fp32 twin and every "
        "run with γ/β unquantized stayed stable; partially when γ/β in E4M3 blew up more often than both "
        "the fp32 twins and the runs with γ/β unquantized."
    )
    if ln.empty:
        doc.claim("1.1 MX with LayerNorm γ in E4M3 blows up where fp32 does not (proxy)", NOT_RUN, rule, mech)
    else:
        v = _mechanism_verdict(runs)
        doc.claim(
            "1.1 MX with LayerNorm γ in E4M3 blows up where fp32 does not (proxy)", v.verdict, rule, mech
        )
        doc.add(v.sentence, "", md_table(proxy.outcomes(runs)), "")
        for line in (v.fisher, _mirror(runs)):
            if line:
                doc.add(line, "")
        times = proxy.step_times(runs)
        if not times.empty:
            doc.add(
                "Step time (median, 1 thread per run) without and with the fp32 twin:",
                "",
                md_table(times),
                "",
            )
        if not mech.cur.empty:
            from analysis import plots

            doc.figure(plots.proxy_mechanism(mech.cur, runs), "proxy_mechanism.png", "MX vs fp32 twin")
        _edge_block(doc, edges, mech, pilots)
        for base in _setting_bases([mech, *edges]):
            _scan(doc, base, [mech, *edges], "train.lr")
        for base, key in _one_factor_scans([mech, *edges]):
            _scan(doc, base, [mech, *edges], key)

    # 1.2 -------------------------------------------------------------------------------------------
    rule = (
        "Rule: reproduced when, in every run that blew up, γ was clamped before the onset (clip fraction "
        f"in γ's own format ≥ 0.8 in at least one LayerNorm, median over the {proxy.WINDOW} logged steps "
        "before the onset) and the quantized gradient turned away from the fp32 one: the same-weights "
        "cosine cos(g_mx, g_fp32) at the run's last checkpoint before the onset is below its value at "
        "the first checkpoint and below the γ-unquantized run's of the same seed at that step "
        "(`python -m train.probe` on the checkpoints; without probes, the twin cosine falling); "
        "partially when that held in some of them."
    )
    title = "1.2 Before the spike: γ clamped to 0.875, the quantized gradient turns away from fp32"
    m = mech.mechanism
    if not m.empty:  # the claim is about γ in E4M3: runs with γ unquantized are the control
        m = m[m["label"].isin(set(ln["label"]))].reset_index(drop=True)
    if m.empty:
        doc.claim(title, NOT_RUN if ln.empty else NOT, rule, mech)
        if not ln.empty:
            doc.add("No run blew up, so there is no pre-spike window to read.", "")
    else:
        clamped = m["clip_max_before"] >= 0.8
        if "probe_cos_before" in m:
            turned = (m["probe_cos_before"] < m["probe_cos_early"]) & (
                m["probe_cos_before"] < m["probe_cos_control"].fillna(np.inf)
            )
        else:
            turned = m["cos_before"] < m["cos_early"]
        ok = clamped & turned
        verdict = REPRODUCED if ok.all() else PARTIAL if ok.any() else NOT
        doc.claim(title, verdict, rule, mech)
        doc.add(
            f"Both in {int(ok.sum())} of {len(m)} blow-ups (γ clamped: {int(clamped.sum())}; gradient turned "
            f"away: {int(turned.sum())}). The twin cosine (two trajectories) is "
            f"{m['cos_early'].median():.2f} early and {m['cos_before'].median():.2f} before the onset: "
            "it compares two trajectories that drift apart, so it does not isolate the quantization; "
            "the probe, at the same weights, does.",
            "",
            md_table(m.drop(columns=["run"])),
            "",
        )
        by_seed = proxy.cosine_by_seed(runs, mech.cur)
        variants = [c for c in by_seed.columns if c != "seed"]
        if len(variants) == 2:
            a, b = variants
            lower = int((by_seed[a] < by_seed[b]).sum())
            doc.add(
                f"Twin cosine by seed, median from step {proxy.WINDOW} to the onset (or the end): `{a}` "
                f"{by_seed[a].median():.2f} against `{b}` {by_seed[b].median():.2f}; lower for `{a}` in "
                f"{lower} of {len(by_seed)} seeds.",
                "",
                md_table(by_seed),
                "",
            )

    trained = {src.name: src for src, _ in step_sources}
    for src, reference in step_sources:
        if src.ran:
            _step_source_block(doc, src, reference, trained.get(STEP_PREDICTION.get(src.name, "")))
    for src, floor, pairs in clamp_controls:
        if src.ran and floor.ran:
            _clamp_control_block(doc, src, floor, pairs)
    paired: list[_Paired] = []
    for src in {id(s): s for s, _, _ in gamma_formats}.values():
        bases = [(base, pairs) for s, base, pairs in gamma_formats if s is src]
        for missing in [s for s in (src, *(b for b, _ in bases)) if not s.ran]:
            doc.add(f"Not run yet: `{missing.command}` (γ/β in bf16 against γ/β in E4M3).", "")
        if src.ran:
            paired += _gamma_format_block(doc, src, [(b, p) for b, p in bases if b.ran])
    if (pooled := _pooled_same_machine(paired)) is not None:
        doc.add(pooled, "")

    # 1.3 -------------------------------------------------------------------------------------------
    points = mech.branch_at
    where = " and ".join(f"{f:g}" for f in points) if points else "a fixed step"
    rule = (
        f"Rule: branches start from each parent's checkpoints at {where} × its first-spike step (read "
        "from the parent's record; `sweep.branch_at`). An intervention avoids the blow-up when the "
        f"branch ends stable (< {proxy.BLOWUP:g}× the parents' fp32 twin, no divergence, no unrecovered "
        "spike). Judged at the earliest branch point (the later ones show how early an intervention "
        "must come): reproduced when no LN quantization, bf16 activations and forward-only MX each "
        f"avoid it in ≥ 2/3 of the branches of at least {MIN_PARENTS} parents that blew up; partially when "
        "some do, or all do on fewer parents. Parents: "
        "the runs with γ/β in E4M3 (a γ-unquantized run that spiked is branched too, but there no LN "
        "quantization changes nothing; its branches are left out)."
    )
    title = "1.3 Interventions from a checkpoint before the spike"
    result = _interventions(mech)
    doc.claim(title, result.verdict, rule, mech)
    if result.verdict != NOT_RUN:
        _intervention_block(doc, mech, result, "proxy_branches.png")
    for src in reruns:
        result = _interventions(src)
        if result.verdict == NOT_RUN:
            if not src.ran:
                doc.add(f"Not run yet: `{src.command}` (1.3's interventions, another setting).", "")
            continue
        where = (
            f"branch point{'s' if len(src.branch_at) > 1 else ''} "
            f"{' and '.join(f'{f:g}' for f in src.branch_at)} × the spike step"
            if src.branch_at
            else f"branched at step {src.setting('sweep.branch_step')}"
        )
        doc.add(
            f"**The same interventions at {_setting(src, mech)}** ({where}), {_cited(src)}: by 1.3's rule "
            "this setting is "
            f"**{result.verdict}**.",
            "",
        )
        _intervention_block(doc, src, result, f"proxy_branches_{src.name}.png")
    for src, repeated in controls:
        _prefix_control(doc, src, repeated)
    for src, base, pairs in from_init:
        if not src.ran:
            doc.add(f"Not run yet: `{src.command}` (the interventions' precisions from init).", "")
        elif base.ran:
            _from_init_block(doc, src, base, pairs)

    # 1.4 -------------------------------------------------------------------------------------------
    title = "1.4 A late divergence (the study's canonical run: step ~5,090 of 9,000)"
    rule = (
        "Rule: a late blow-up is an MX run with γ in E4M3 that blows up after half of its steps while its "
        "fp32 twin stays stable. Reproduced when the canonical run (L4, W512, batch 2048, lr 6e-4, 9,000 "
        "steps, as the study ran it; a GPU preset, `experiment=proxy_canonical`) has records and some run "
        "shows one, not reproduced when all its runs finish without one; partially when only a CPU "
        "setting does (a canonical run cut short before its end, as by a GPU lease, leaves the verdict to "
        "the CPU search). Below: the canonical run, and the search for a CPU setting with a late blow-up; "
        "every configuration tried is in the search log at the end."
    )
    ran = [s for s in lates if s.ran]
    # Every sweep of the search can hold a late blow-up, the re-runs of 1.1 included.
    searched = [s for s in (mech, *edges, *ran, canonical, canonical_seeds) if s is not None and s.ran]
    rows = _search_rows(searched)
    late_rows = [row for src in searched for row in _late_blowups(src)]
    late_hits = [r for r in late_rows if r["γ in E4M3"] and r["twin stable"]]
    # The canonical run decides only where it shows a late blow-up or ran all its steps; an interrupted
    # one (a GPU lease ran out) leaves the verdict to the CPU search.
    canonicals = {s.name for s in (canonical, canonical_seeds) if s is not None}
    canon_hit = any(r["sweep"] in canonicals for r in late_hits)
    if canon_hit or _canonical_complete(canonical):
        verdict = REPRODUCED if canon_hit else NOT
    else:
        verdict = PARTIAL if late_hits else (NOT if rows else NOT_RUN)
    doc.claim(
        title,
        verdict,
        rule,
        canonical if canon_hit or _canonical_complete(canonical) else ran[0] if ran else mech,
    )
    if len(ran) > 1:
        doc.add(
            "The search's other sweeps (each a preset; wall times as recorded, on shared cores):",
            "",
            md_table(
                pd.DataFrame(
                    [
                        {
                            "sweep": s.name,
                            "command": f"`{s.command}`",
                            "wall time": s.wall,
                            "archive": f"`{_rel(s.archive)}`" if s.archive else "–",
                        }
                        for s in ran[1:]
                    ]
                )
            ),  # fmt: skip
            "",
        )
    not_run = [s.name for s in lates if not s.ran]
    if not_run:
        doc.add(f"Planned but not run yet: {', '.join(f'`experiment={n}`' for n in not_run)}.", "")
    if late_rows:
        doc.add(
            "Blow-ups after half of their run (the rule counts those with γ in E4M3 whose fp32 twin stayed "
            "stable), with γ's clip fraction before the onset (mean and max over the LayerNorms): where it "
            "is far below 1, γ had already left the clamp zone, so these are not the clamp mechanism of 1.2 "
            "acting late:",
            "",
            md_table(pd.DataFrame(late_rows)),
            "",
        )
    hot = ln.loc[ln["blew_up"]] if not ln.empty else ln
    baseline = {
        int(r["seed"]): proxy.onset(mech.cur[mech.cur["run"] == r["run"]], r.get("spike_step"))
        for _, r in hot.iterrows()
    } if not mech.cur.empty else {}  # fmt: skip
    for src in ran:
        for line in _late_findings(src, baseline):
            doc.add(line, "")
    if canonical.ran:
        _canonical_block(doc, canonical)
        if canonical_seeds is not None and canonical_seeds.ran:
            doc.add(f"**The canonical run on three more seeds** (`{canonical_seeds.command}`):", "")
            _canonical_block(doc, canonical_seeds, figure=f"{canonical_seeds.name}.png")
        elif canonical_seeds is not None:
            doc.add(
                f"Not run yet (a GPU preset, about 9 minutes on one H200 with 3 runs at once): "
                f"`{canonical_seeds.command}`: does the late blow-up show on seeds other than 1337?",
                "",
            )
    else:
        doc.add(
            "The canonical run was not run here (no GPU): `python launch.py -m experiment=proxy_canonical`.",
            "",
        )
