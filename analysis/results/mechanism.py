"""1.1's comparison and its re-runs: MX with γ/β in E4M3 against γ unquantized and the fp32 twin.

A setting's verdict (``_mechanism_verdict``) counts, over seeds, the runs that blew up (diverged, ended
≥ 2× the twin, or an unrecovered spike; ``analysis.proxy``) with γ in E4M3, γ unquantized and in the
twins, and tests the difference with Fisher's exact test. Because "ends ≥ 2× the twin" fires on noisy
endpoints too, each setting is set against the rule's mirror (``_mirror``: how often the *twin* ended
≥ 2× the run; the exact one-sided sign test says whether MX ends the worse side beyond the scatter).
Fresh-seed replications of a setting pool with every sweep before them (``_pooled_block``), with a
Clopper-Pearson interval of the blow-up rate. ``_scan`` lays one factor (LR, width, β2, …) out as a
table across sweeps.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pandas as pd

from analysis import proxy
from analysis.report import md_table
from analysis.results.common import (
    NOT,
    PARTIAL,
    REPRODUCED,
    Source,
    _cited,
    _Doc,
    _lr,
    _outcome,
    _seed_list,
    _setting,
)
from analysis.results.presets import ONE_FACTOR, REPLICATION, SETTING


@dataclass
class _Verdict:
    verdict: str
    sentence: str
    fisher: str
    k: int
    n: int
    rates: dict[str, str] = field(default_factory=dict)
    """The counts behind it, "k/n": γ in E4M3 blew up, γ unquantized blew up, fp32 twin not stable, and
    the rule's mirror (the twin ended ≥ 2× the γ-in-E4M3 run)."""


def _mechanism_verdict(runs: pd.DataFrame) -> _Verdict:
    """1.1's rule on one sweep's phase-1 runs: γ/β in E4M3 blew up in ≥ 2 of every 3 seeds while every
    fp32 twin and every γ-unquantized run stayed stable (reproduced); more often than both (partially)."""
    parents = runs[runs["parent"].isna()]
    ln = parents[parents["norm_affine"].ne("none")]
    none = parents[parents["norm_affine"].eq("none")]
    k, n = int(ln["blew_up"].sum()), len(ln)
    twins = ln["twin_stable"].dropna().astype(bool)
    fp32_ok = bool(twins.all()) and len(twins) == n
    none_ok = not none.empty and bool(none["stable"].all())
    twin_bad = len(twins) - int(twins.sum())
    none_bad = int(none["blew_up"].sum()) if not none.empty else 0
    if 3 * k >= 2 * n and fp32_ok and none_ok:
        verdict = REPRODUCED
    elif k / n > twin_bad / max(len(twins), 1) and (none.empty or k / n > none_bad / len(none)):
        verdict = PARTIAL
    else:
        verdict = NOT
    sentence = (
        f"γ/β in E4M3: **{k} of {n} seeds blew up**; their fp32 twins: {int(twins.sum())} of {len(twins)} "
        + (
            f"stable; γ/β unquantized: {int(none['stable'].sum())} of {len(none)} stable."
            if not none.empty
            else "stable; γ/β unquantized: not run in this sweep."
        )
    )
    fisher = ""
    if not none.empty:
        from scipy.stats import fisher_exact

        p = fisher_exact([[k, n - k], [none_bad, len(none) - none_bad]], alternative="greater").pvalue
        fisher = (
            f"Blow-up rate with γ in E4M3 {k}/{n} against {none_bad}/{len(none)} with γ unquantized "
            f"(same seeds, inits and batches): one-sided Fisher exact p = {p:.2g}."
        )
    rates = {
        "γ in E4M3 blew up": f"{k}/{n}",
        "γ unquantized blew up": f"{none_bad}/{len(none)}" if len(none) else "–",
        "fp32 twin not stable": f"{twin_bad}/{len(twins)}" if len(twins) else "–",
        f"twin ≥ {proxy.BLOWUP:g}× γ-in-E4M3 run": f"{int(ln['twin_worse'].sum())}/{n}",
    }
    return _Verdict(verdict, sentence, fisher, k, n, rates)


def _edge_block(
    doc: _Doc, edges: list[Source], mech: Source | None = None, pilots: Mapping[str, Source] | None = None
) -> None:
    """1.1's comparison re-run (another learning rate, or fresh seeds): the rule's outcome on each (not
    the verdict, which stays with the preset the issue names), one block per learning rate where a
    sweep ran several (an LR axis of ``hydra.sweeper.params``); fresh seeds at ``mech``'s setting are
    also pooled with its phase 1. ``pilots``: a re-run's name → the pilot sweep that chose its setting
    (``PILOT``), which says whether the re-run is a pre-registered test."""
    by_name = {s.name: s for s in (*edges, *([mech] if mech is not None else []))}
    # fresh seeds at mech's setting pool with mech's phase 1 and with every replication before them
    pool = [(mech, mech.runs[mech.runs["parent"].isna()])] if mech is not None and mech.ran else []
    for src in edges:
        runs = src.runs
        if runs.empty or runs["parent"].isna().sum() == 0:
            doc.add(f"Not run yet: `{src.command}` (1.1's comparison, re-run).", "")
            continue
        unfinished = int((~runs["finished"] & runs["parent"].isna()).sum())
        runs = runs[runs["finished"]]
        if unfinished:
            doc.add(f"`{src.name}`: {unfinished} run(s) not finished yet; counts below are the finished.", "")
        lrs = sorted(runs["train.lr"].dropna().unique()) if "train.lr" in runs else []
        for lr in lrs if len(lrs) > 1 else [None]:
            at = runs if lr is None else runs[runs["train.lr"] == lr]
            _edge_lr_block(doc, src, at, mech, (pilots or {}).get(src.name), lr, pool)
        base = by_name.get(ONE_FACTOR.get(src.name, ""))
        if base is not None:
            _one_factor_block(doc, src, runs, base)


def _setting_bases(sources: Sequence[Source]) -> list[Source]:
    """The first sweep that ran of each setting (``SETTING``'s values; the LR aside) among ``sources``:
    the bases of the scans over the LR, one per setting (a setting run at one LR shows none)."""
    first: dict[str, Source] = {}
    for src in sources:
        if src.ran:
            first.setdefault(repr([src.setting(k) for k, _ in SETTING]), src)
    return list(first.values())


def _one_factor_scans(edges: Sequence[Source]) -> list[tuple[Source, str]]:
    """(base sweep, key) for each key of ``SCANS`` that a one-factor re-run (``ONE_FACTOR``) changed
    from its base, once each: the scans over that key at the base's setting."""
    by_name = {s.name: s for s in edges}
    out: dict[tuple[str, str], tuple[Source, str]] = {}
    for name, base_name in ONE_FACTOR.items():
        src, base = by_name.get(name), by_name.get(base_name)
        if src is None or base is None:
            continue
        for key, *_ in _changed(src, base):
            if key in SCANS:
                out.setdefault((base_name, key), (base, key))
    return list(out.values())


def _changed(src: Source, base: Source) -> list[tuple[str, str, Any, Any]]:
    """The settings (``SETTING`` and the LR) in which ``src`` differs from ``base``: (key, its name,
    base's value, src's value)."""
    return [
        (key, name, base.setting(key), src.setting(key))
        for key, name in (*SETTING, ("train.lr", "lr"))
        if src.setting(key) != base.setting(key)
    ]


def _one_factor_block(doc: _Doc, src: Source, runs: pd.DataFrame, base: Source) -> None:
    """A one-factor re-run (``ONE_FACTOR``) beside its base sweep on the seeds both ran: each seed's
    outcome with γ in E4M3 and with γ unquantized, there and here (same seed: same init), and on those
    seeds how often each blew up and how often the fp32 twin was not stable."""
    if not base.ran or base.runs.empty:
        return
    changed = _changed(src, base)
    what = ", ".join(f"{name} {old} → {new}" for _, name, old, new in changed) or "no setting changed"
    sides = {}  # (variant, sweep) → its finished phase-1 runs by seed
    for tag, r in (("there", base.runs), ("here", runs)):
        parents = r[r["parent"].isna() & r["finished"]]
        for label, q in (("γ in E4M3", True), ("γ unquantized", False)):
            g = parents[parents["norm_affine"].ne("none") == q]
            sides[label, tag] = g.drop_duplicates("seed").set_index("seed")
    seeds = sorted(set(sides["γ in E4M3", "there"].index) & set(sides["γ in E4M3", "here"].index))
    if not seeds:
        return
    names = {"there": f"`{base.name}`", "here": "this sweep"}
    rows = [
        {"seed": int(s)}
        | {  # each variant there, then here
            f"{label} ({names[tag]})": _outcome(at.loc[s]) if s in at.index else "–"
            for (label, tag), at in sorted(sides.items(), key=lambda kv: kv[0][0] != "γ in E4M3")
        }
        for s in seeds
    ]

    def rate(label: str, column: str, value: bool) -> str:
        there, here = (sides[label, tag].reindex(seeds) for tag in ("there", "here"))
        k = [int(at[column].eq(value).sum()) for at in (there, here)]
        n = [int(at[column].notna().sum()) for at in (there, here)]
        return f"{k[0]}/{n[0]} → {k[1]}/{n[1]}"

    e4m3 = [sides["γ in E4M3", tag].loc[seeds, "blew_up"].astype(bool) for tag in ("there", "here")]
    same = int((e4m3[0] == e4m3[1]).sum())
    doc.add(
        f"**Beside `{base.name}`, seed by seed** ({what}, set before it ran; seeds "
        f"{_seed_list([int(s) for s in seeds])} have the same init in both; "
        f"`{base.name}` → this sweep): γ in E4M3 blew up {rate('γ in E4M3', 'blew_up', True)}, γ "
        f"unquantized {rate('γ unquantized', 'blew_up', True)}, fp32 twins not stable "
        f"{rate('γ in E4M3', 'twin_stable', False)}. With γ in E4M3 the same seeds blew up in both "
        f"(or stayed clear of it in both) in {same} of {len(seeds)} seeds.",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )


def _edge_lr_block(
    doc: _Doc,
    src: Source,
    runs: pd.DataFrame,
    mech: Source | None,
    pilot: Source | None,
    lr: float | None,
    pool: list[tuple[Source, pd.DataFrame]],
) -> None:
    """``_edge_block`` for the finished runs of ``src`` at one learning rate (``lr``: one of several
    the sweep ran, named in its figure; None: the sweep's only one). ``pool``: (sweep, phase-1 runs) at
    ``mech``'s setting so far, ``mech`` first; fresh seeds there join it and are reported pooled."""
    if not runs["norm_affine"].ne("none").any():  # no γ-in-E4M3 run finished: nothing to judge yet
        return
    v = _mechanism_verdict(runs)
    same_setting = (
        mech is not None
        and mech.ran
        and _lr(src, runs) == mech.setting("train.lr")
        and all(src.setting(k) == mech.setting(k) for k, _ in SETTING)
    )
    if same_setting:
        why = "Fresh seeds at the same setting: a replication of the rates above."
    elif src.name in REPLICATION:
        why = f"Fresh seeds at `{REPLICATION[src.name]}`'s setting: a replication of its rates."
    elif src.name in ONE_FACTOR:
        why = (
            f"One setting of `{ONE_FACTOR[src.name]}` changed, fixed before it ran (the preset's header "
            "says why); its seeds are that sweep's, compared seed by seed below."
        )
    else:
        why = _provenance(runs, pilot)
    doc.add(
        f"**The same comparison at {_setting(src, mech, runs)}**, {_cited(src)}: {v.sentence} By 1.1's "
        f"rule this setting is **{v.verdict}**. {why}",
        "",
        md_table(proxy.outcomes(runs)),
        "",
    )
    for line in (v.fisher, _mirror(runs)):
        if line:
            doc.add(line, "")
    paired = _paired_ratio(runs)
    if paired:
        doc.add(paired, "")
    if not same_setting and not src.cur.empty:  # another setting: its own MX-vs-twin view
        from analysis import plots

        at = "" if lr is None else f"_lr{lr:g}"
        doc.figure(
            plots.proxy_mechanism(src.cur, runs),
            f"proxy_mechanism_{src.name}{at}.png",
            f"MX vs fp32 twin ({src.name}{'' if lr is None else f', lr {lr:g}'})",
        )
    if same_setting:
        pool.append((src, runs[runs["parent"].isna()]))
        _pooled_block(doc, pool)


def _pooled_block(doc: _Doc, pool: Sequence[tuple[Source, pd.DataFrame]]) -> None:
    """The last sweep of ``pool`` (fresh seeds at the first's setting) pooled with the ones before it:
    1.1's counts over every seed, the rule's mirror over them, and where γ in E4M3's blow-up rate can
    lie (95% Clopper-Pearson interval) against the rule's 2/3: only enough seeds tell the two apart."""
    runs = pd.concat([r for _, r in pool])
    v = _mechanism_verdict(runs)
    before = " and ".join(
        f"`{src.name}`'s seeds {_seed_list([int(x) for x in r['seed'].dropna().unique()])}"
        for src, r in pool[:-1]
    )
    lo, hi = proxy.rate_interval(v.k, v.n)
    where = (
        "which holds the rule's 2/3: these seeds cannot tell its rate from the rule's"
        if lo <= 2 / 3 <= hi
        else "which ends below the rule's 2/3: its rate is excluded at this setting"
        if hi < 2 / 3
        else "which starts above the rule's 2/3"
    )
    doc.add(
        f"Pooled with {before} ({v.n} seeds): {v.sentence} {v.fisher} γ in E4M3 blew up at a rate of "
        f"{v.k}/{v.n} = {v.k / v.n:.2f}, 95% Clopper-Pearson interval {lo:.2f}–{hi:.2f}, {where}.",
        "",
    )
    if (mirror := _mirror(runs)) is not None:
        doc.add(f"Pooled, {mirror[0].lower()}{mirror[1:]}", "")


class _Scan(NamedTuple):
    column: str
    name: str  # in a sentence
    one: str
    several: str
    shared: str  # what a seed shares across the values
    # Set for a key read from the sweep's launch setting, not from the runs' records (which hold a list
    # as JSON, or null for the task's default): that setting → a scalar to group and sort by.
    of_sweep: Callable[[Any], Any] | None = None


SCANS = {
    "train.lr": _Scan("lr", "learning rate", "LR", "LRs", "the same init and batches"),
    "train.batch_size": _Scan("batch", "batch size", "batch size", "batch sizes", "the same init"),
    "train.betas": _Scan("Adam β2", "Adam β2", "β2", "β2s", "the same init and batches", lambda b: b[1]),
}
"""A key 1.1's comparison is scanned over (``_scan``) → how its table and sentence name it."""


def _scan(doc: _Doc, base: Source, sources: Sequence[Source], key: str = "train.lr") -> None:
    """1.1's comparison over every value of ``key`` (``SCANS``) run at ``base``'s setting otherwise
    (its width, depth, batch, teacher, label noise and LR, except ``key``: ``base`` and those of
    ``sources`` that share them), one row per value, with what 1.1's rule says of that value's seeds
    pooled. Nothing when only one value ran there."""
    column, name, one, several, shared, of_sweep = SCANS[key]
    fixed = [k for k in (*(k for k, _ in SETTING), "train.lr") if k != key]
    unique = {s.name: s for s in [base, *sources]}.values()  # the base may be among the sources
    same = [s for s in unique if s.ran and all(s.setting(k) == base.setting(k) for k in fixed)]
    # A sweep with an LR axis keeps its base's train.lr in its launch setting: its runs at other LRs
    # match the base's setting there but are other settings, so each run's own LR decides.
    lr = None if key == "train.lr" else base.setting("train.lr")

    # A run's own value (an LR axis of hydra.sweeper.params), else the sweep's as launched (or
    # RECORD_DEFAULTS' for a field the sweep predates or left null).
    def keyed(s: Source) -> pd.DataFrame:
        r = proxy.at_lr(s.runs, lr)
        value = of_sweep(s.setting(key)) if of_sweep is not None else r[key] if key in r else s.setting(key)
        return r.assign(**{key: value})  # a Series of r itself: assigning s.runs' own would refill an empty r

    frames = {s.name: keyed(s) for s in same}
    same = [s for s in same if not frames[s.name].empty]  # the sweeps that have runs in the scan
    runs = pd.concat([frames[s.name] for s in same]) if same else pd.DataFrame()
    if runs.empty:
        return
    parents = runs[runs["parent"].isna() & runs["finished"]]
    rows, verdicts = [], []
    for value, g in parents.groupby(key, sort=True):
        if not g["norm_affine"].ne("none").any():  # γ unquantized only: no rate of γ in E4M3 to show
            continue
        v = _mechanism_verdict(g)
        verdicts.append(v)
        rows.append({column: value, "seeds": int(g["seed"].nunique()), **v.rates, "1.1's rule": v.verdict})
    if len(rows) < 2:
        return
    table = pd.DataFrame(rows)
    more = [f"{r[column]:g}" for r, v in zip(rows, verdicts, strict=True) if v.verdict != NOT]
    rates = [v.k / v.n for v in verdicts]
    monotone = all(a <= b for a, b in itertools.pairwise(rates))
    doc.add(
        f"**Over the {name} at `{base.name}`'s setting** ({', '.join(f'`{s.name}`' for s in same)}; "
        f"a seed has {shared} at every {one}, and a {one}'s seeds are pooled over its sweeps):",
        "",
        md_table(table),
        "",
        f"γ in E4M3 blew up more often than its fp32 twins and than γ unquantized (where run) at "
        f"{column + ' ' + ', '.join(more) if more else 'no ' + one}: {len(more)} of the {len(rows)} "
        f"{several}. Its blow-up rate {'rises' if monotone else 'does not rise monotonically'} with the "
        f"{one} ({', '.join(str(r['γ in E4M3 blew up']) for r in rows)}).",
        "",
    )


def _provenance(runs: pd.DataFrame, pilot: Source | None) -> str:
    """Where a re-run's setting came from: the pilot sweep that chose it, and whether the re-run's seeds
    are fresh (none of the pilot's), which makes it a pre-registered test; else a search result."""
    if pilot is None or not pilot.ran or pilot.runs.empty:
        return (
            "Its setting was chosen after the run above, to test whether another setting keeps γ's "
            "blow-ups and loses fp32's, so this is a search result, not a pre-registered test."
        )
    used = {int(x) for x in pilot.runs["seed"].dropna()}
    here = {int(x) for x in runs["seed"].dropna()}
    chosen = f"Its setting was chosen on `{pilot.name}`'s seeds {_seed_list(used)} (in the search log)"
    if used & here:
        return f"{chosen}, and shares seeds with it, so this is a search result, not a pre-registered test."
    return f"{chosen}; these seeds are fresh, so this is a pre-registered test of that setting."


def _paired_ratio(runs: pd.DataFrame) -> str:
    """Final loss / fp32 twin, γ in E4M3 against γ unquantized of the same seed (same init, batches and
    twin): in how many seeds it is higher, and a one-sided Wilcoxon signed-rank test."""
    parents = runs[runs["parent"].isna()]
    ln = parents[parents["norm_affine"].ne("none")].set_index("seed")["ratio"]
    none = parents[parents["norm_affine"].eq("none")].set_index("seed")["ratio"]
    pairs = pd.concat([ln, none], axis=1, keys=["ln", "none"], join="inner").dropna()
    if len(pairs) < 2:
        return ""
    from scipy.stats import wilcoxon

    higher = int((pairs["ln"] > pairs["none"]).sum())
    diff = pairs["ln"] - pairs["none"]
    p = wilcoxon(diff, alternative="greater").pvalue if (diff != 0).any() else 1.0  # all ties: no evidence
    return (
        f"Final loss / fp32 twin, γ in E4M3 against γ unquantized of the same seed: higher in {higher} of "
        f"{len(pairs)} seeds (median {pairs['ln'].median():.3g} against {pairs['none'].median():.3g}; "
        f"one-sided Wilcoxon signed-rank p = {p:.2g})."
    )


def _mirror(runs: pd.DataFrame) -> str | None:
    """The blow-up rule run the other way (``proxy`` "twin worse": the fp32 twin ended ≥ 2× the MX
    run's loss) against the blow-ups, per precision, each with the exact one-sided sign test over the
    runs where either fired (the two exclude each other) that MX ends the worse side more often; None
    where the mirror never fires, as at every setting where fp32 trains well."""
    parents = runs[runs["parent"].isna() & runs["finished"]]
    if parents.empty or not parents["twin_worse"].any():
        return None

    each, beyond = [], []
    for label, g in parents.groupby("label", sort=False):
        up, worse = int(g["blew_up"].sum()), int(g["twin_worse"].sum())
        p = proxy.exact_p(up, up + worse, alternative="greater")
        each.append(f"{label} {up} / {worse} of {len(g)} (p = {p:.2g})")
        if p < 0.05:
            beyond.append(label)
    return (
        f"The rule's mirror: how often the fp32 twin ended ≥ {proxy.BLOWUP:g}× the MX run's loss, against "
        f"the blow-ups (blew up / twin ≥ {proxy.BLOWUP:g}×, with the exact one-sided sign test that MX "
        f"ends the worse side more often): {'; '.join(each)}. "
        + (
            f"MX ends the worse side beyond the endpoints' scatter (p < 0.05) in {', '.join(beyond)}; for "
            "the rest the blow-up count alone does not say MX."
            if beyond
            else "In no precision does MX end the worse side beyond the endpoints' scatter (p ≥ 0.05 each): "
            "here the blow-up count alone does not say MX."
        )
    )
