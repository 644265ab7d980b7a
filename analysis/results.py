"""``python -m analysis results``: docs/results.md, generated from run records.

One section per claim of the two studies mxsweep reproduces (and one beyond them), each with its
verdict (reproduced / partially / not reproduced / not run here), the numbers (mean ± sd where there
are seeds), a figure, the exact command that produced the records, and that command's wall time as
recorded (first run start to last run end). Nothing is typed by hand: rerunning the commands and then
this one regenerates the file. A sweep that has not been run yet gives its section a "not run" verdict
and the command to run it.

The verdict rules are stated next to each claim; the proxy's vocabulary (blew up, stable, onset) is
``analysis.proxy``'s.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import math
import os
import shutil
import subprocess
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import yaml

from analysis import proxy
from analysis.collect import collect, curves, study_records
from analysis.instability import FINISHED, sci, si
from analysis.report import md_table
from records import RecordWarning, read_mapping

REPRODUCED, PARTIAL, NOT, NOT_RUN = "reproduced", "partially reproduced", "not reproduced", "not run here"


@dataclass
class Source:
    """Where a claim's records come from and how they were made."""

    name: str
    command: str
    path: Path
    df: pd.DataFrame = field(default_factory=pd.DataFrame)
    cur: pd.DataFrame = field(default_factory=pd.DataFrame)
    archive: Path | None = None
    """Its archive (``analysis.archive``): packed from live records, or restored from."""
    restored: bool = False

    @property
    def ran(self) -> bool:
        """Records exist: training runs, or a study's single record."""
        return not self.df.empty or (self.path / "summary.json").exists()

    @functools.cached_property
    def runs(self) -> pd.DataFrame:
        """``analysis.proxy.proxy_runs`` of the records (empty for other sweeps), each branch with the
        fraction of ``sweep.branch_at`` it came from (``proxy.with_branch_points``)."""
        return proxy.with_branch_points(proxy.proxy_runs(self.df), self.branch_at)

    @property
    def branch_at(self) -> list[float]:
        """The sweep's ``sweep.branch_at`` as launched (a list; older sweeps wrote one number)."""
        value = self.setting("sweep.branch_at")
        if value is None:
            return []
        return [float(v) for v in value] if isinstance(value, list) else [float(value)]

    @functools.cached_property
    def steps(self) -> pd.DataFrame:
        """``analysis.proxy.step_source`` of the records (Adam's step before each run's onset): read by
        a sweep's own 1.2 block, by the sweeps set against it and by the threshold it fixes."""
        return proxy.step_source(self.runs, self.cur)

    @functools.cached_property
    def mechanism(self) -> pd.DataFrame:
        """``analysis.proxy.mechanism`` of the records (reads each run's probe.jsonl once)."""
        if self.runs.empty or self.cur.empty:
            return pd.DataFrame()
        return proxy.mechanism(self.runs, self.cur)

    def setting(self, key: str) -> Any:
        """A setting of the sweep as it was launched (its ``multirun.yaml``), e.g. ``sweep.branch_at``;
        for a field the sweep predates, the value it ran with (``RECORD_DEFAULTS``)."""
        node: Any = self._multirun
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return RECORD_DEFAULTS.get(key) if node is None else node

    @functools.cached_property
    def _multirun(self) -> dict[str, Any]:
        path = self.path / "multirun.yaml"
        return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}

    @property
    def _manifest(self) -> dict[str, Any]:
        """The sweep's manifest.json (what the launcher was asked and planned; a relaunch rewrites it, so
        it is read afresh); empty where none."""
        return read_mapping(self.path / "manifest.json") or {}

    @property
    def asked(self) -> int:
        """How many runs the sweep's last launch was asked for (0 where no manifest says)."""
        return len(self._manifest.get("asked") or [])

    @functools.cached_property
    def planned_branches(self) -> dict[str, str]:
        """Second-phase runs the sweep's manifest planned (this launch's and earlier ones'): name →
        the parent's precision label (the part of the run's precision before "→")."""
        manifest = self._manifest
        runs = [*(manifest.get("runs") or []), *(manifest.get("earlier") or [])]
        return {
            str(r.get("name")): proxy.parent_label(str((r.get("coords") or {}).get("precision", "")))
            for r in runs
            if isinstance(r, dict) and r.get("phase") == 2
        }

    @functools.cached_property
    def search_rows(self) -> list[dict[str, Any]]:
        """The search log's rows of this sweep (``_source_search_rows``)."""
        return _source_search_rows(self)

    @functools.cached_property
    def wall(self) -> str:
        """First run start (config.yaml written) to last run end (summary.json written), less every
        stretch of over ``_STOPPED_S`` in which no run ran: the sweep was stopped and resumed later
        (its command skips what is done), and the hours between sessions are not the command's
        time. Shorter gaps stay in: process start-up, a launcher between phases. A study's single
        record: its own recorded wall time."""
        single = self.path / "summary.json"
        if single.exists():
            wall = json.loads(single.read_text()).get("wall_time")
            return _duration(float(wall)) if isinstance(wall, int | float) else "–"
        spans = sorted(
            (c.stat().st_mtime, s.stat().st_mtime)
            for c in self.path.glob("*/config.yaml")
            if (s := c.with_name("summary.json")).exists()
        )
        if not spans:
            return "–"
        wall, (lo, hi) = 0.0, spans[0]
        for start, end in spans[1:]:
            if start - hi > _STOPPED_S:
                wall, lo = wall + hi - lo, start
            hi = max(hi, end)
        return _duration(wall + hi - lo)


_STOPPED_S = 15 * 60
"""A gap this long with no run running means the sweep was stopped (``Source.wall``)."""


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s"


def _load(
    name: str, command: str, path: Path, archives: Path, with_curves: bool = False, runs: bool = True
) -> Source:
    """A sweep's records (``runs=False``: a study's single record, read by its section); restored
    from its archive first when they are not on this machine."""
    from analysis import archive

    src = Source(name, command, path, archive=archive.archive_path(archives, name))
    src.restored = archive.restore(src.archive, path)
    if runs and path.is_dir():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecordWarning)
            src.df = collect(path)
            if with_curves and not src.df.empty:
                src.cur = curves(path, src.df)
    return src


class _Doc:
    def __init__(self, out: Path):
        self.out, self.figdir, self.lines = out, out.parent / "figures", []

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def figure(self, fig_or_path: Any, name: str, caption: str) -> None:
        from analysis import plots

        self.figdir.mkdir(parents=True, exist_ok=True)
        target = self.figdir / name
        if isinstance(fig_or_path, str | Path):
            shutil.copyfile(fig_or_path, target)
        else:
            plots.save(fig_or_path, target)
        self.add(f"![{caption}]({os.path.relpath(target, self.out.parent)})", "")

    def claim(self, title: str, verdict: str, rule: str, src: Source) -> None:
        self.add(f"### {title}", "", f"**{verdict.capitalize()}.** {rule}", "")
        wall = src.wall if src.ran else "–"
        kept = f", archived in `{_rel(src.archive)}`" if src.ran and src.archive else ""
        self.add(
            f"Command: `{src.command}` (records: `{_rel(src.path)}`{kept}; wall time as recorded: {wall}).",
            "",
        )


def _rel(path: Path) -> str:
    try:
        return os.path.relpath(path, Path.cwd())
    except ValueError:
        return str(path)


# -- study 1: the proxy ------------------------------------------------------------------------------
LATE_SEARCH = (
    "proxy_late_search",
    "proxy_late_drift",
    "proxy_late_lr",
    "proxy_late_norm10",
    "proxy_late_wide",
    "proxy_released_late",
    "proxy_released_w512",
)
"""The late-divergence search's presets (conf/experiment/), in the order they were run."""


SETTING = (
    ("model.width", "width"),
    ("model.depth", "depth"),
    ("train.batch_size", "batch"),
    ("model.teacher", "teacher"),
    ("model.activation", "activation"),
    ("model.noise_std", "label noise"),
    ("train.betas", "Adam betas"),
)
"""The keys that tell one proxy setting from another (with ``train.lr``), and their names."""

EDGE = (
    "proxy_mechanism_lr3",
    "proxy_mechanism_lr5",
    "proxy_mechanism_lr_fine",
    "proxy_mechanism_seeds",
    "proxy_mechanism_seeds16",
    "proxy_mechanism_d128",
    "proxy_mechanism_d128_b64",
    "proxy_mechanism_d128_b1024",
    "proxy_mechanism_d128_seeds",
    "proxy_mechanism_d128_seeds32",
    "proxy_mechanism_d128_seeds40",
    "proxy_mechanism_d128_lr",
    "proxy_mechanism_d128_lr_fine",
    "proxy_mechanism_d128_depth8",
    "proxy_mechanism_d128_depth8_fine",
    "proxy_mechanism_d128_swiglu",
    "proxy_mechanism_d128_swiglu_hi",
    "proxy_mechanism_d128_beta95",
    "proxy_mechanism_d128_beta99",
    "proxy_mechanism_beta95",
    "proxy_released",
)
"""proxy_mechanism's comparison again (conf/experiment/): at another learning rate, width, depth, batch,
teacher or activation, or on fresh seeds; reported beside 1.1 and in the search log."""

PILOT = {"proxy_released": "proxy_released_search"}
"""A re-run of EDGE → the pilot sweep (of SEARCH) whose runs chose its setting: on seeds the pilot did
not use, the re-run is a pre-registered test of that setting."""

RECORD_DEFAULTS = {
    "train.norm_lr_mult": 1.0,
    "model.teacher": "residual",
    "model.activation": "gelu",
    "train.betas": [0.9, 0.999],
}
"""Fields that records from before the field existed lack (or leave null, for the task's default), and
the value those runs ran with (the residual teacher is also proxy_mechanism's, the baseline of the late
search; GeLU is ``ProxyConfig``'s activation; Adam's betas are the proxy task's default,
``train.objectives``)."""

ONE_FACTOR = {
    "proxy_mechanism_d128_b64": "proxy_mechanism_d128",
    "proxy_mechanism_d128_b1024": "proxy_mechanism_d128",
    "proxy_mechanism_d128_beta95": "proxy_mechanism_d128",
    "proxy_mechanism_d128_beta99": "proxy_mechanism_d128",
    "proxy_mechanism_beta95": "proxy_mechanism",
}
"""A re-run of EDGE that changes one setting of another sweep of EDGE (set before it ran, on that
sweep's seeds) → that sweep: the report sets their outcomes side by side, seed by seed."""

REPLICATION = {
    "proxy_mechanism_d128_seeds": "proxy_mechanism_d128",
    "proxy_mechanism_d128_seeds32": "proxy_mechanism_d128",
    "proxy_mechanism_d128_seeds40": "proxy_mechanism_d128",
}
"""A re-run of EDGE on fresh seeds at another sweep of EDGE's setting → that sweep (a replication of its
rates; the scans pool them). proxy_mechanism's own replication is told by its setting instead."""

SEARCH = ("proxy_released_search", "proxy_beta95_search")
"""Pilot sweeps over several settings at once (conf/experiment/): reported in the search log only."""

RERUN_BRANCHES = (
    "proxy_mechanism_d128",
    "proxy_mechanism_d128_beta95",
    "proxy_mechanism_d128_beta99",
    "proxy_mechanism_d128_early",
    "proxy_mechanism_d128_step20",
    "proxy_mechanism_d128_adam_branch",
    "proxy_mechanism_d128_adam_dose",
    "proxy_mechanism_adam_branch",
    "proxy_mechanism_d128_adam_state",
    "proxy_released",
    "proxy_canonical_interventions",
)
"""Re-runs with interventions (conf/experiment/), reported beside 1.3: at other branch points."""

STEP_SOURCE = {
    "proxy_mechanism_d128_step_source": "mx_ln_e4m3",
    "proxy_mechanism_d128_step_predict": "mx_ln_e4m3",
}
"""Phase-1 sweeps that train the same seeds from init in several precisions beside their fp32 twins
(conf/experiment/) → the precision the others are set against seed by seed: which quantized tensor
gives Adam its larger step (``analysis.proxy.step_source``), reported under 1.2."""

STEP_PREDICTION = {"proxy_mechanism_d128_step_predict": "proxy_mechanism_d128_step_source"}
"""A STEP_SOURCE sweep on fresh seeds → the sweep whose runs fixed the step threshold it tests
(``proxy.step_threshold``, pooled over every run there): "blows up iff its step > threshold"."""

CLAMP_CONTROL = {
    "proxy_mechanism_d128_ceil": (
        "proxy_mechanism_d128_step_source",
        {"ln_only_ceil": "ln_only", "mx_ln_ceil": "mx_ln_e4m3"},
    ),
    "proxy_mechanism_d128_ceil_fresh": (
        "proxy_mechanism_d128_step_predict",
        {"ln_only_ceil": "ln_only", "mx_ln_ceil": "mx_ln_e4m3"},
    ),
}
"""γ's clamp against γ's rounding (conf/experiment/): a sweep with γ in E4M3 under E8M0's ceil rule
(same grid near 1, nothing saturates) → (the STEP_SOURCE sweep with the floor rule on the same seeds,
{its precision: the floor precision it is set against seed by seed}), reported under 1.2."""

GAMMA_FORMAT = (
    ("proxy_mechanism_d128_bf16", "proxy_mechanism_d128", {"mx_ln_bf16": "mx_ln_e4m3"}),
    ("proxy_mechanism_d128_bf16", "proxy_mechanism_d128_rerun", {"mx_ln_bf16": "mx_ln_e4m3"}),
    ("proxy_mechanism_d128_bf16_seeds", "proxy_mechanism_d128_seeds", {"mx_ln_bf16": "mx_ln_e4m3"}),
    ("proxy_mechanism_d128_bf16_seeds", "proxy_mechanism_d128_seeds32", {"mx_ln_bf16": "mx_ln_e4m3"}),
)
"""γ rounded without a block scale (conf/experiment/): (a sweep with γ/β in bf16, no 0.875 clamp; a
sweep with γ/β in E4M3 on the same seeds from init; {its precision: the E4M3 precision it is set against
seed by seed}), reported under 1.2 beside the clamp controls. proxy_mechanism_d128 ran on another
machine (its twins differ from these in every seed); its rerun here is the same-machine pair."""

FROM_INIT = {
    "proxy_mechanism_d128_swiglu_source": (
        "proxy_mechanism_d128_swiglu_hi",
        {"mx_ln_none": "mx_ln_none", "mx_bf16a": "mx_ln_none", "mx_fwd": "mx_ln_none"},
    ),
    "proxy_mechanism_d128_swiglu_fresh": (
        "proxy_mechanism_d128_swiglu_fresh",
        {"mx_bf16a": "mx_ln_none", "mx_fwd": "mx_ln_none"},
    ),
    "proxy_mechanism_d128_fwd": ("proxy_mechanism_d128", {"mx_fwd": "mx_ln_none"}),
    "proxy_mechanism_seeds16_source": (
        "proxy_mechanism_seeds16",
        {"ln_only": "mx_ln_e4m3", "mx_bf16a_ln": "mx_ln_e4m3"},
    ),
}
"""1.3's interventions held from init (conf/experiment/): a sweep that retrains another sweep's seeds at
its LRs in the precisions the interventions switch to (bf16 activations, forward-only MX; the same
precision again is the same-machine check) → (that sweep, {its precision: the precision it is set
against, pair by pair of LR and seed}; the sweep itself for fresh seeds, its precisions set against one
of its own), reported beside 1.3."""

CONTROL = {"proxy_mechanism_d128_control": "proxy_mechanism_d128_step20"}
"""A control of 1.3 (conf/experiment/) → the re-run whose γ-in-E4M3 branches it repeats: both
variants' parents branched into fp32 at the same step, to tell a γ-clamped prefix from any MX prefix."""

# 1.3 judges a rate, "≥ 2/3 of the branches of parents that blew up": on one or two parents that is
# one or two runs, and a single parent that lands just under the blow-up line after its branch point
# would call the claim reproduced. Below this many parents a setting is at most partially reproduced.
MIN_PARENTS = 3


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
        f"**The same comparison at {_setting(src, mech, runs)}** (`{src.command}`, records "
        f"`{_rel(src.path)}`, wall time as recorded {src.wall}): {v.sentence} By 1.1's rule this "
        f"setting is **{v.verdict}**. {why}",
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


def _lr(src: Source, runs: pd.DataFrame | None) -> Any:
    """The learning rate of ``runs`` when they share one (a sweep with an LR axis ran several), else
    the sweep's own ``train.lr``."""
    lrs = runs["train.lr"].dropna().unique() if runs is not None and "train.lr" in runs else []
    return float(lrs[0]) if len(lrs) == 1 else src.setting("train.lr")


def _seed_list(seeds: Sequence[int]) -> str:
    """Seeds as a range where they are consecutive, else each."""
    seeds = sorted(seeds)
    if not seeds:
        return ""
    return (
        f"{seeds[0]}–{seeds[-1]}"
        if seeds == list(range(seeds[0], seeds[-1] + 1))
        else ", ".join(map(str, seeds))
    )


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
            f"**The same interventions at {_setting(src, mech)}** (`{src.command}`, {where}, records "
            f"`{_rel(src.path)}`, wall time as recorded {src.wall}): by 1.3's rule this setting is "
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


def _canonical_complete(src: Source) -> bool:
    """Every run of the canonical sweep has an outcome (done or diverged)."""
    runs = src.runs if src.ran else pd.DataFrame()
    return not runs.empty and bool(runs.loc[runs["parent"].isna(), "finished"].all())


STUDY_DIVERGENCE = 5090
"""The step near which the study's canonical MX run diverged (Su et al.; 1.4's title)."""
CANONICAL_TAIL = 500
"""Steps at the end of each canonical run that its table summarizes (clip fraction, Adam's step)."""


def _canonical_block(doc: _Doc, src: Source, figure: str = "proxy_canonical.png") -> None:
    """The canonical run's records: where each run got to (a GPU lease can end it early), its outcome
    against its fp32 twin, γ's clip fraction and Adam's normalized step over its last steps, its step
    time and the machine it ran on; the mechanism figure."""
    from analysis import plots

    runs = src.runs[src.runs["parent"].isna()]
    rows = []
    for _, r in runs.iterrows():
        c = src.cur[src.cur["run"] == r["run"]] if not src.cur.empty else pd.DataFrame()
        tail = c[c["step"] > c["step"].max() - CANONICAL_TAIL] if not c.empty else c
        step = proxy._get(r, "step")
        rows.append(
            {
                "run": r["label"],
                "steps": f"{step:,.0f} of {proxy._get(r, 'train.steps'):,.0f}" if pd.notna(step) else "–",
                "status": r["status"],
                "spike / divergence": _outcome(r) if r["finished"] else _so_far(r),
                "val loss / fp32 twin's": r["ratio"],
                f"LN-γ clip fraction (last {CANONICAL_TAIL} steps, median)": float(
                    proxy._clip_mean(tail).median()
                ),
                "Adam step RMS run / twin (same steps)": f"{proxy._median(tail, 'adam_upd/matrix'):.3f} / "
                f"{proxy._median(tail, 'twin_adam_upd/matrix'):.3f}",
                "s per step (with twin)": proxy._get(r, "median_step_time_with_twin"),
            }
        )
    where = runs.iloc[0] if len(runs) else pd.Series(dtype=object)
    gpu, torch_version = proxy._get(where, "hardware.cuda"), proxy._get(where, "versions.torch")
    machine = ", ".join(v for v in (gpu, torch_version and f"torch {torch_version}") if v)
    check = _gpu_check(src.path)
    # records made before they named their quantizer backend: the GPU check that ran them does
    backend = proxy._get(where, "quant_backend") or (check or {}).get("backend")
    doc.add(
        f"**The canonical run on a GPU** ({machine or 'machine not recorded'}; quantizer backend "
        f"{backend or 'not recorded'}; records `{_rel(src.path)}`"
        + (
            ", run by `benchmarks/gpu_check.py`, whose result is kept beside them"
            if check is not None
            else ""
        )
        + "). "
        + (
            "Every run finished."
            if _canonical_complete(src)
            else "Not every run finished: the ones marked interrupted stopped where the GPU lease ended "
            "(they checkpointed; `python launch.py -m experiment=proxy_canonical` on a GPU resumes them "
            "where their checkpoints are kept, or reruns them)."
        ),
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )
    e4m3 = runs["norm_affine"].eq("fp8_e4m3") if "norm_affine" in runs else pd.Series(False, index=runs.index)
    clamped = runs[e4m3 & ~runs["finished"]]
    if len(clamped) and not clamped["blew_up"].any():
        reached, steps = int(clamped["step"].min()), int(proxy._get(clamped.iloc[0], "train.steps"))
        doc.add(
            f"The study's MX run diverged near step {STUDY_DIVERGENCE:,}; here the run with γ in E4M3 had "
            f"no spike or divergence through step {reached:,}"
            + (" (past that point)" if reached > STUDY_DIVERGENCE else "")
            + f", and its last {steps - reached:,} steps were not run.",
            "",
        )
    if _canonical_complete(src):
        steps = int(proxy._get(runs.iloc[0], "train.steps"))
        outcomes = []
        several = runs["seed"].nunique() > 1
        for _, r in runs.sort_values(["label", "seed"]).iterrows():
            # the recorded first spike (the trainer's detector, on a smoothed loss): proxy.onset's first
            # jump can be a one-step transient long before (γ in bf16 had one at step 240)
            at = r.get("spike_step") if pd.notna(r.get("spike_step")) else r.get("diverged_step")
            what = f"{r['label']}{f' seed {r.seed:.0f}' if several else ''} (γ/β {r['norm_affine']}) "
            if r["blew_up"]:
                what += "blew up" + (f" at step {at:,.0f}" if at is not None and pd.notna(at) else "")
                outcomes.append(what + f" and ended at {r['ratio']:.3g}× its twin's val loss")
            else:
                outcomes.append(what + f"did not blow up (ended at {r['ratio']:.3g}× its twin's)")
        doc.add(
            f"The study's MX run diverged near step {STUDY_DIVERGENCE:,} of {steps:,}; here "
            + "; ".join(outcomes)
            + ".",
            "",
        )
    if not src.cur.empty:
        doc.figure(plots.proxy_mechanism(src.cur, runs), figure, "the canonical run vs its fp32 twin")


def _so_far(run: pd.Series) -> str:
    """An unfinished run's outcome up to the step it reached."""
    for key, word in (("diverged_step", "diverged at"), ("spike_step", "spike at")):
        if pd.notna(run.get(key)):
            return f"{word} {run[key]:,.0f}"
    return f"none by step {run['step']:,.0f}" if pd.notna(run.get("step")) else "none recorded"


def _gpu_check(sweep: Path) -> dict[str, Any] | None:
    """The proxy step's numbers in the ``gpu_check.json`` that ``benchmarks/gpu_check.py`` wrote beside
    a sweep it ran (its quantizer backend among them); None where there is none."""
    try:
        result = json.loads((sweep / "gpu_check.json").read_text())
    except (OSError, ValueError):
        return None
    step = next((s for s in result.get("steps", []) if s.get("step") == "proxy"), {})
    return step.get("numbers") or {}


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
        p = mannwhitneyu(blew["upd_before"], calm["upd_before"]).pvalue if len(calm) else math.nan
        ratio = blew["upd_before"] / blew["twin_upd_before"]
        span = proxy.value_range
        doc.add(
            f"Before the onset the gradient stays *below* Adam's memory of it: the largest per-tensor "
            f"Σg²/Σv̂ is {span(blew['gv_max_before'], '{:.2f}')} (median over the {w} steps) in the "
            f"runs that blew up and {span(calm['gv_max_before'], '{:.2f}')} in those that did not; "
            f"it first exceeds 1 {span(lead.abs(), '{:.0f}')} steps before the onset "
            f"({len(lead)} of {len(blew)} runs), then peaks at {span(blew['gv_max_peak'], '{:.0f}')} "
            f"(those that did not blow up: at most {calm['gv_max_peak'].max():.2f}). "
            f"What sets the runs that blew up apart before it is the size of Adam's step: RMS(m̂/√v̂) of "
            f"the Linear weights {span(blew['upd_before'], '{:.3f}')} against "
            f"{span(calm['upd_before'], '{:.3f}')} in the MX runs that did not blow up "
            f"(Mann-Whitney p = {p:.2g}) and {ratio.median():.2f}× their own twins' "
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
    doc.figure(
        plots.adam_state(src.cur, state), fig.replace(".png", "_adam.png"), f"Adam's state ({src.name})"
    )


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
        f"**γ's clamp or γ's rounding?** (`{src.name}`: `{src.command}`, records `{_rel(src.path)}`, wall "
        f"time as recorded {src.wall}; the predictions in the preset's header were set before it ran). "
        "Under E8M0's ceil rule a 32-block of γ with its max in [0.5, 1) is rounded on the same grid near "
        "1 as under floor, but nothing saturates at 0.875. The same seeds from init against the floor "
        f"rule's runs of `{floor.name}`, seed by seed (step RMS as above, read over steps {lo}–{hi} before "
        "each run's onset):",
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
        f"**γ rounded to bf16: no block scale, no clamp** (`{src.name}`: `{src.command}`, records "
        f"`{_rel(src.path)}`, wall time as recorded {src.wall}; the predictions in the preset's header were "
        "set before it ran). The same seeds from init against γ/β in E4M3, seed by seed. Where the fp32 "
        "twins differ the sweeps took different float paths (another machine or library): those pairs "
        "share seed, init and batches, not the trajectory.",
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
        f"**The interventions' precisions from init** (`{src.name}`: `{src.command}`, records "
        f"`{_rel(src.path)}`, wall time as recorded {src.wall}; the predictions in the preset's header were "
        f"set before it ran). {what}{unfinished}",
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
        f"**Which quantized tensor sets Adam's step** (`python launch.py -m experiment={src.name}`, records "
        f"`{_rel(src.path)}`, wall time as recorded {src.wall}): the same seeds "
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


def _outcome(run: pd.Series, spike: bool = True) -> str:
    """One run's outcome in words: "blew up", "stable", "unstable" (spiked, not recovered) or "not
    finished"; with its first spike unless ``spike`` is false."""
    if not run["finished"]:
        return "not finished"
    word = "blew up" if run["blew_up"] else "stable" if run["stable"] else "unstable"
    at = run.get("spike_step")
    if spike and pd.notna(at):
        word += f" (spike {at:.0f}{', recovered' if run['stable'] else ''})"
    return word


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
        f"**Control: does the γ-clamped prefix decide the blow-up?** (`{src.command}`, records "
        f"`{_rel(src.path)}`, wall time as recorded {src.wall}): {_setting(src, None, parents)}; each seed's "
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


def _hardware(src: Source, runs: pd.Series) -> str:
    """The CPU's vector ISA and thread count those runs recorded, with its model where recorded (records
    before the fields: not recorded)."""
    cols = [c for c in ("hardware.cpu_capability", "hardware.threads") if c in src.df]
    if len(cols) < 2:
        return "not recorded"
    picked = src.df[src.df["run"].isin(set(runs))]
    cpu = picked["hardware.cpu"] if "hardware.cpu" in picked else pd.Series(None, index=picked.index)
    hw = picked[cols].assign(cpu=cpu.fillna("")).dropna().drop_duplicates()
    if hw.empty:
        return "not recorded"
    return "; ".join(
        f"{m + ', ' if m else ''}{c}, {int(n)} thread{'s' * (int(n) != 1)}"
        for c, n, m in hw.itertuples(index=False)
    )


def _setting(src: Source, mech: Source | None, runs: pd.DataFrame | None = None) -> str:
    """How a re-run's setting differs from ``mech``'s (width, depth, batch), with its LR and the seeds
    of ``runs`` (default: all of its runs)."""
    parts = []
    for key, name in SETTING:
        value = src.setting(key)
        default = mech is None and value == RECORD_DEFAULTS.get(key)  # the default needs no naming
        if value is not None and not default and (mech is None or value != mech.setting(key)):
            parts.append(f"{name} {value}")
    parts.append(f"lr {_lr(src, runs):g}")
    runs = src.runs if runs is None else runs
    seeds = {int(x) for x in runs["seed"].dropna()} if not runs.empty else set()
    if seeds:
        parts.append(f"seeds {_seed_list(list(seeds))}")
    return ", ".join(parts)


def _late_blowups(src: Source) -> list[dict[str, Any]]:
    """The phase-1 runs of one sweep that blew up after half of their steps: ``proxy.mechanism``'s row
    (onset, γ's clamp and the twin cosine before it) with whether γ was quantized and the run's fp32
    twin stayed stable (what 1.4's rule asks of a late blow-up)."""
    r, m = src.runs, src.mechanism
    if m.empty:
        return []
    by_run = r.set_index("run")
    steps = by_run["train.steps"] if "train.steps" in by_run else pd.Series(np.nan, index=by_run.index)
    m = m[m["onset"] > m["run"].map(steps) / 2]
    lrs = by_run["train.lr"] if "train.lr" in by_run else pd.Series(np.nan, index=by_run.index)
    out = []
    for run, row in zip(m["run"], m.drop(columns=["run"]).to_dict("records"), strict=True):
        quantized = by_run.at[run, "norm_affine"] != "none"  # in E4M3, or rounded to bf16
        lr = lrs.get(run)
        out.append(
            {
                "sweep": src.name,
                **row,
                "lr": lr,  # an LR-axis sweep has several
                "γ in E4M3": by_run.at[run, "norm_affine"] == "fp8_e4m3",
                "twin stable": by_run.at[run, "twin_stable"] == 1.0,
                # a γ-unquantized run is the control itself
                "γ unquantized (same seed)": _control_outcome(r, by_run.at[run, "seed"], lr)
                if quantized
                else "–",
            }
        )
    return out


def _control_outcome(runs: pd.DataFrame, seed: float, lr: float | None = None) -> str:
    """The outcome of the seed's control (``proxy.control_run``, at ``lr`` where given): "blew up",
    "stable", "unstable" (spiked, not recovered), or "–" where there is none or it has not finished."""
    c = proxy.control_run(runs, seed, lr)
    return "–" if c is None or not c["finished"] else _outcome(c, spike=False)


def _late_findings(src: Source, baseline: dict[int, Any]) -> list[str]:
    """What one late-search sweep showed, from its records: per seed, the onset of its blow-up at
    proxy_mechanism's setting (``baseline``: seed → onset step of its blown-up γ-in-E4M3 run) next
    to the onset here (the dose-response of a change that should move the clock), then γ's clamp,
    the runs against their fp32 twins, fp32 twins that went unstable, and unfinished runs."""
    runs = src.runs
    if runs.empty:
        return []
    out = []
    hot = {s: t for s, t in baseline.items() if t is not None and t == t}
    parents = runs[runs["parent"].isna()]
    status = parents["status"] if "status" in parents else pd.Series("done", index=parents.index)
    finished = status.isin(FINISHED)
    for row in src.search_rows:
        # Another teacher is another task: proxy_mechanism's onsets are no baseline for its seeds.
        own_task = row["teacher"] == RECORD_DEFAULTS["model.teacher"]
        teacher = "" if own_task else f", {row['teacher']} teacher"
        setting = (
            f"`{src.name}` ({row['d × L, batch']}{teacher}, lr {row['lr (norm ×)']}, {row['steps']} steps)"
        )
        per_seed = []
        for _, r in parents[finished].sort_values("seed").iterrows():
            curve = src.cur[src.cur["run"] == r["run"]] if not src.cur.empty else src.cur
            here = proxy.onset(curve, r.get("spike_step")) if r["blew_up"] else None
            now = "none" if here is None or here != here else f"{here:.0f}"
            was = hot.get(int(r["seed"]))
            per_seed.append(
                f"seed {int(r['seed'])} {'–' if was is None else f'{was:.0f}'} → {now}"
                if own_task
                else f"seed {int(r['seed'])} {now}"
            )
        twin_bad = [int(s) for s in parents.loc[parents["twin_stable"].eq(0.0), "seed"]]
        twin = (
            f" The fp32 twin itself went unstable in seed {', '.join(map(str, twin_bad))}: at this "
            "setting the instability is not MX's alone."
            if twin_bad
            else ""
        )
        left = int((~finished).sum())
        pending = f" {left} run(s) not finished yet, not counted." if left else ""
        onsets = "blow-up onset at proxy_mechanism's setting → here" if own_task else "blow-up onset"
        out.append(
            f"{setting}: {onsets}, per seed: "
            f"{'; '.join(per_seed) or '–'} ({row['late blow-ups']} after half of the run). Median final / "
            f"fp32 twin {row['final / twin (median)']:.2f}; γ's clip fraction (run median) "
            f"{row['γ clamped (run median)']:.2f}.{twin}{pending}"
        )
    return out


def _search_rows(sources: list[Source]) -> list[dict[str, Any]]:
    return [row for src in sources for row in src.search_rows]


def _source_search_rows(src: Source) -> list[dict[str, Any]]:
    """One row per phase-1 configuration of one proxy sweep (the search log's rows)."""
    rows = []
    runs = src.runs
    if runs.empty:
        return []
    parents = runs[runs["parent"].isna() & runs["finished"]].copy()
    keys = [
        "model.width",
        "model.depth",
        "train.batch_size",
        "model.teacher",
        "model.activation",
        "train.lr",
        "train.norm_lr_mult",
        "adam_beta2",
        "train.steps",
    ]
    # collect writes a list-valued field as JSON; null (the task's default) is RECORD_DEFAULTS'.
    betas = parents["train.betas"] if "train.betas" in parents else pd.Series(None, index=parents.index)
    parents["adam_beta2"] = [(proxy.betas_of(b) or RECORD_DEFAULTS["train.betas"])[1] for b in betas]
    for k in keys:
        if k not in parents:
            parents[k] = RECORD_DEFAULTS.get(k, np.nan)
        elif k in RECORD_DEFAULTS:
            parents[k] = parents[k].fillna(RECORD_DEFAULTS[k])
    parents["onset_step"] = (
        [
            proxy.onset(src.cur[src.cur["run"] == r["run"]], r.get("spike_step")) if r["blew_up"] else np.nan
            for _, r in parents.iterrows()
        ]
        if not src.cur.empty
        else np.nan
    )
    for key, g in parents.groupby(["label", *keys], dropna=False, sort=False):
        label, width, depth, batch, teacher, activation, lr, mult, beta2, steps = key
        onsets = pd.to_numeric(g["onset_step"], errors="coerce").dropna()
        twins = g["twin_stable"].dropna().astype(bool)
        rows.append(
            {
                "sweep": src.name,
                "precision": label,
                "d × L, batch": f"{width:.0f} × {depth:.0f}, {batch:.0f}",
                "teacher": teacher,
                "φ": activation,
                "lr (norm ×)": f"{lr:g} (×{mult:g})",
                "Adam β2": f"{beta2:g}",
                "steps": int(steps),
                "seeds": int(g["seed"].nunique()),
                "blew up": int(g["blew_up"].sum()),
                "late blow-ups": int((onsets > steps / 2).sum()),
                "onset steps": ", ".join(f"{t:.0f}" for t in sorted(onsets)) or "–",
                "fp32 twin stable": f"{int(twins.sum())}/{len(twins)}" if len(twins) else "–",
                f"twin ≥ {proxy.BLOWUP:g}× run": int(g["twin_worse"].sum()),
                "final / twin (median)": float(g["ratio"].median()),
                "γ clamped (run median)": _clamped(src.cur, g["run"]),
            }
        )
    return rows


def _clamped(cur: pd.DataFrame, runs: pd.Series) -> float:
    """Median over the given runs of each run's median LN-γ clip fraction (max over the LayerNorms)
    across its logged steps up to its blow-up: how long γ sat in the clamp zone."""
    if cur.empty:
        return math.nan
    cols = [c for c in cur.columns if c.startswith("clip_ln/")]
    if not cols:
        return math.nan
    per_run = []
    for run in runs:
        c = cur[cur["run"] == run].sort_values("step")
        t = proxy.onset(c, None)
        c = c[c["step"] < t] if t is not None else c
        if not c.empty:
            per_run.append(float(c[cols].max(axis=1).median()))
    return float(np.median(per_run)) if per_run else math.nan


def search_log(doc: _Doc, sources: list[Source]) -> None:
    doc.add("## Search log: every proxy configuration run for the instability mechanism", "")
    rows = _search_rows([s for s in sources if s.ran])
    if not rows:
        doc.add("No proxy sweep has records yet.", "")
        return
    doc.add(
        "One row per configuration (phase-1 runs only; branches are in 1.3). Onset: first logged step "
        f"whose loss exceeds {proxy.ONSET:g}× the lowest before it (a one-step transient that recovers "
        "counts too, so a run can show an early onset and a late blow-up: the runs' recorded spike steps, "
        "from the trainer's smoothed detector, are in the sections above); late: after half the steps. "
        "γ clamped: "
        "the median, over the logged steps before any onset, of the largest LN-γ clip fraction, as a "
        "median over the seeds (1 = some LayerNorm's γ entirely at 0.875 all along). Earlier "
        "exploration on older code (before the twin was a full citizen) is in "
        "`shared/notes/proxy-search-so-far.md`; its settings are the starting point of these sweeps.",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )


# -- study 1: the LM ---------------------------------------------------------------------------------
def lm_claims(doc: _Doc, lm: Source) -> pd.DataFrame:
    """The LM claims of the instability study; returns the deltas table (for the law section)."""
    from analysis import lmstudy

    title = "1.5 MX weights with bf16 activations, and forward-only MX, train like bf16 (LM)"
    rule = (
        "Rule: Δ = final val loss − bf16's on matched runs (same budget, shape and seed), mean ± sd over "
        "seeds; significant when a paired t-test over the matched runs gives p < 0.05. Reproduced when the "
        "hybrid (E4M3 weights, bf16 activations) is not significantly worse than bf16 while full MXFP8 "
        "E4M3 is (partially when both are within noise: untestable at this scale); forward-only MX (E4M3 "
        "forward, high-precision backward) is judged the same way and must hold too."
    )
    spikes = "1.6 Sharp loss spikes in MX W × A sweeps (LM, CPU scale)"
    spikes_rule = (
        "Rule: reproduced when MX runs spike or diverge (spike detector: 100-step mean rising 0.008 above "
        "its minimum; unstable = diverged or not recovered) where bf16 runs of the same (budget, shape, "
        "seed) do not. The study saw them at ≥ 10⁸ parameters (its claim)."
    )
    if not lm.ran:
        doc.claim(title, NOT_RUN, rule, lm)
        doc.claim(spikes, NOT_RUN, spikes_rule, lm)
        return pd.DataFrame()
    df = lmstudy.label_column(lm.df)
    ref = lmstudy.reference_label(df["label"].unique())
    deltas = lmstudy.deltas_vs_reference(df, reference=ref) if ref else pd.DataFrame()
    if deltas.empty:
        doc.claim(title, NOT, rule + " (no bf16 runs to compare against)", lm)
        doc.claim(spikes, NOT, spikes_rule + " (no bf16 runs to compare against)", lm)
        return deltas
    d = deltas.set_index("label")
    full = d.loc["mxfp8_e4m3"] if "mxfp8_e4m3" in d.index else None
    fixes = [d.loc[k] for k in ("e4m3w-bf16a", "e4m3-fwd") if k in d.index]
    fine = [not bool(f["significant"]) for f in fixes]
    if full is None or not fixes:
        verdict = NOT_RUN
    elif all(fine) and bool(full["significant"]) and full["mean_delta"] > 0:
        verdict = REPRODUCED
    elif any(fine):
        verdict = PARTIAL
    else:
        verdict = NOT
    doc.claim(title, verdict, rule, lm)
    largest = lmstudy.deltas_vs_reference(df, reference=ref, budget="largest")
    doc.add(
        "Δ vs bf16 over all budgets and at each format's largest budget (mean ± sd over seeds of the "
        "per-seed mean Δ; p: paired over matched runs, not corrected for the number of formats):",
        "",
        md_table(lmstudy.display_deltas(deltas, largest)),
        "",
        *[f"- {line}" for line in lmstudy.verdict(deltas, ref)],
        "",
    )
    from analysis import plots

    doc.figure(plots.delta_heatmap(deltas, reference=ref), "lm_delta_heatmap.png", "Δ loss vs bf16, W × A")

    fin = df[df["status"].isin(FINISHED)]
    unstable = fin.groupby("label")["unstable"].agg(["sum", "size"])
    ref_bad = int(unstable.loc[ref, "sum"]) if ref in unstable.index else 0
    mx_bad = int(unstable.drop(index=ref, errors="ignore")["sum"].sum())
    verdict = REPRODUCED if mx_bad > 0 and ref_bad == 0 else NOT
    doc.claim(spikes, verdict, spikes_rule, lm)
    doc.add(f"These models have N = {si(fin['N'].min())}–{si(fin['N'].max())} parameters.", "")
    t = unstable.reset_index().rename(columns={"sum": "unstable", "size": "runs"})
    doc.add(md_table(t), "")
    return deltas


def law_section(doc: _Doc, lm: Source) -> None:
    from analysis import lmstudy
    from analysis.fits import InsufficientData

    doc.add("## Beyond the papers: one scaling law over all precisions", "")
    title = "3.1 Fewer bits per element, fewer effective parameters (Kumar et al. 2024)"
    rule = (
        "L(N, D, P) = E + A/(N·m_P)^α + B/D^β with m_bf16 = 1 and E, A, B, α, β shared (the form of "
        "Kumar et al. 2024, *Scaling Laws for Precision*): format P trains like bf16 with m_P × the "
        "parameters. 95 % intervals: bootstrap over runs within each format. Rule: reproduced when m_P "
        "falls with the bits per element, every width's intervals lying below every wider width's (the "
        "plain W = A formats, bf16 at 16 bits with m = 1); partially when some neighbouring widths "
        "separate so and none in the opposite order; else not."
    )
    if not lm.ran:
        doc.claim(title, NOT_RUN, rule, lm)
        return
    df = lmstudy.label_column(lm.df)
    ref = lmstudy.reference_label(df["label"].unique())
    try:
        fit, excluded = lmstudy.fit_law(df, reference=ref, n_boot=200)
    except InsufficientData as e:
        doc.claim(title, NOT, f"{rule} Too few runs: {e}", lm)
        return
    table = lmstudy.law_table(df, fit, reference=ref)
    order = lmstudy.bit_ordering(table, df)
    if order.empty or order["reversed"].any() or not order["separated"].any():
        verdict = NOT
    else:
        verdict = REPRODUCED if order["separated"].all() else PARTIAL
    doc.claim(title, verdict, rule, lm)
    if fit.E < 1e-6:
        rule_note = (
            f"E collapsed to ≈ 0 ({fit.E:.2g}): at N = {si(df['N'].min())}–{si(df['N'].max())} and "
            f"C ≤ {sci(df['budget'].max())} FLOPs the data do not pin "
            "the irreducible loss, so A, α and the m_P are conditional on E = 0. The paired Δ of 1.5 is "
            "the stronger test of a gap; an m_P interval containing 1 with a significant Δ means the "
            "bootstrap over runs is the weaker of the two."
        )
        doc.add(rule_note, "")
    doc.add(
        f"Shared: E = {fit.E:.4g}, A = {fit.A:.4g}, B = {fit.B:.4g}, α = {fit.alpha:.3f}, "
        f"β = {fit.beta:.3f}; R² (log L) = {fit.r2:.4f} over {fit.n_runs} runs.",
        "",
    )
    doc.add(md_table(lmstudy.display_law_table(table, ref or "bf16")), "")
    if not order.empty:
        shown = order.assign(
            pair=[f"{a} vs {b} bits" for a, b in zip(order["bits"], order["bits_wider"], strict=True)],
            verdict=[
                "below" if s else "above" if r else "overlap"
                for s, r in zip(order["separated"], order["reversed"], strict=True)
            ],
        )
        doc.add(
            "Neighbouring element widths (plain formats): the narrower width's largest upper end against "
            "the wider width's smallest lower end of the m_P intervals:",
            "",
            md_table(
                shown[["pair", "labels", "labels_wider", "high", "low_wider", "verdict"]].rename(
                    columns={
                        "labels": "narrower",
                        "labels_wider": "wider",
                        "high": "upper end (narrower)",
                        "low_wider": "lower end (wider)",
                    }  # fmt: skip
                )
            ),
            "",
        )
    doc.add(*[f"- `{k}` left out of the fit: {why}" for k, why in excluded.items()], "")
    from analysis import plots

    doc.figure(
        plots.loss_vs_compute_plot(lmstudy.loss_vs_compute(df), fit),
        "lm_loss_vs_compute.png",
        "loss vs compute, every precision, with the fitted law",
    )
    doc.figure(plots.multiplier_plot(fit), "lm_multipliers.png", "effective-parameter multipliers")


# -- study 2 ------------------------------------------------------------------------------------------
def blocksize_claims(doc: _Doc, bs: Source) -> None:
    records = study_records(bs.path, "block_size_study") if bs.path.exists() else []
    rule_inv = (
        "Rule: reproduced when, for FP4 E2M1 elements with UE4M3 block scales, blocks of 8 are worse than "
        "blocks of 16 below some σ ≲ 0.02 (the crossover σ* of the closed-form model, checked by Monte "
        "Carlo and on the real weights of all-MiniLM-L6-v2 rescaled to each σ)."
    )
    title = "2.1 Finer blocks get worse with UE4M3 scales below σ ≈ 0.02"
    if not records:
        doc.claim(title, NOT_RUN, rule_inv, bs)
        return
    run_dir, s = records[-1]
    cross = s.get("crossovers") or {}

    def num(x: Any) -> float:
        try:
            return float(x)
        except (TypeError, ValueError):
            return math.nan

    ue4 = cross.get("ue4m3:8v16") or {}
    t, w = num(ue4.get("theory")), num(ue4.get("weights"))
    verdict = REPRODUCED if np.isfinite(t) and t <= 0.03 else NOT
    doc.claim(title, verdict, rule_inv, bs)
    rows = []
    for key, v in cross.items():
        scale, pair = key.split(":")
        rows.append({"scale": scale, "blocks": pair.replace("v", " vs "), "σ* theory": num(v.get("theory")),
                     "σ* MiniLM": num(v.get("weights"))})  # fmt: skip
    doc.add(
        f"UE4M3, blocks 8 vs 16: σ* = {t:.4f} (theory), {w:.4f} (MiniLM weights). Below σ* the smaller "
        "block has the larger error.",
        "",
    )
    table = pd.DataFrame(rows)
    table = table[
        table["scale"].isin(["ue4m3", "ue5m3"]) & table[["σ* theory", "σ* MiniLM"]].notna().any(axis=1)
    ]
    doc.add(md_table(table), "")
    figs = [run_dir / f for f in s.get("figures") or [] if "sigma" in f and (run_dir / f).exists()]
    if figs:
        doc.figure(figs[0], "blocksize_sigma.png", "relative MSE vs σ per block size")

    title = "2.2 UE5M3 scales (and a per-tensor global scale) remove the inversion"
    rule = (
        "Rule: reproduced when UE5M3's crossover σ* lies below 10⁻³ (an order of magnitude below the "
        "σ of trained weights, measured below) and UE4M3 with a global scale has no crossover in the σ "
        "range studied."
    )
    ue5 = [num(v.get("theory")) for k, v in cross.items() if k.startswith("ue5m3:")]
    glob = [num(v.get("theory")) for k, v in cross.items() if k.startswith("ue4m3_global:")]
    ok5 = bool(ue5) and all((not np.isfinite(x)) or x < 1e-3 for x in ue5)
    okg = bool(glob) and all(not np.isfinite(x) for x in glob)
    doc.claim(title, REPRODUCED if ok5 and okg else PARTIAL if ok5 or okg else NOT, rule, bs)
    doc.add(f"UE5M3 σ* (all block pairs): ≤ {np.nanmax(ue5) if ue5 else math.nan:.2g}; UE4M3 + global scale: "
            f"{'no crossover' if okg else 'crossovers present'}.", "")  # fmt: skip
    sigma = ((s.get("weights") or {}).get("sigma_range")) or []
    if len(sigma) == 2:
        doc.add(f"The layers of all-MiniLM-L6-v2 have σ from {sigma[0]:.3g} to {sigma[1]:.3g}.", "")

    title = "2.3 The closed-form error model predicts the Monte Carlo"
    dev = num(s.get("max_abs_rel_dev_sigma_0.005_0.05", s.get("max_abs_rel_dev")))
    rule = (
        "Rule: reproduced when the model's relative MSE is within 5 % of Monte Carlo for σ in [0.005, 0.05]."
    )
    doc.claim(title, REPRODUCED if dev <= 0.05 else NOT, rule, bs)
    doc.add(f"Largest relative deviation over {s.get('n_points')} (σ, block, scale) points: {dev:.2%}.", "")


# -- the document ------------------------------------------------------------------------------------
def write_results(
    root: str | Path = "outputs", out: str | Path = "docs/results.md", archives: str | Path | None = None
) -> Path:
    """Regenerate ``out`` from the records under ``root`` (the commands' default locations). A sweep
    whose records are missing is first restored from ``archives`` (default: ``records/`` beside
    ``out``); every sweep read from live records is packed there (``analysis.archive``), so the
    document can be regenerated from a fresh checkout."""
    from analysis import archive

    root, out = Path(root), Path(out)
    archives = Path(archives) if archives is not None else out.parent / "records"
    sweeps = root / "sweeps"
    mech = _load("proxy_mechanism", "python launch.py -m experiment=proxy_mechanism && "
                 "python -m train.probe outputs/sweeps/proxy_mechanism",
                 sweeps / "proxy_mechanism", archives, with_curves=True)  # fmt: skip
    lates = [_load(n, f"python launch.py -m experiment={n}", sweeps / n, archives, with_curves=True)
             for n in LATE_SEARCH]  # fmt: skip
    loaded = {n: _load(n, f"python launch.py -m experiment={n}", sweeps / n, archives, with_curves=True)
              for n in dict.fromkeys((*EDGE, *RERUN_BRANCHES, *SEARCH, *CONTROL, *STEP_SOURCE, *CLAMP_CONTROL,
                                      *(m for g in GAMMA_FORMAT for m in g[:2]), *FROM_INIT))}  # fmt: skip
    edges, reruns = [loaded[n] for n in EDGE], [loaded[n] for n in RERUN_BRANCHES]
    searches = [loaded[n] for n in SEARCH]
    canonical = _load("proxy_canonical", "python launch.py -m experiment=proxy_canonical",
                      sweeps / "proxy_canonical", archives, with_curves=True)  # fmt: skip
    canonical_seeds = _load("proxy_canonical_seeds", "python launch.py -m experiment=proxy_canonical_seeds "
                            "hydra/launcher=pool hydra.launcher.n_jobs=3", sweeps / "proxy_canonical_seeds",
                            archives, with_curves=True)  # fmt: skip
    lm = _load("lm_precisions", "python launch.py -m experiment=lm_precisions", sweeps / "lm_precisions",
               archives)  # fmt: skip
    bs = _load("block_size_study", "python launch.py experiment=block_size_study",
               root / "studies" / "block_size_study", archives, runs=False)  # fmt: skip
    for src in (mech, *loaded.values(), *lates, canonical, canonical_seeds, lm, bs):
        if src.ran and not src.restored:
            archive.pack(src.path, archives, src.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = _Doc(out)
    doc.add(
        "# Results: reproducing the two studies at CPU scale",
        "",
        "Generated by `python -m analysis results` from the run records under `outputs/` (restored from "
        f"their archives in `{_rel(archives)}` where a fresh checkout has none; "
        f"{dt.date.today().isoformat()}, commit {_git_rev()}); do not edit by hand. Each claim states its "
        "rule, the verdict that rule gives on the records, the numbers, a figure, and the command that "
        "made the records with its wall time on this 2-core machine (several sweeps shared the cores, so "
        "times are upper bounds). Rerun the commands, then `python -m analysis results`, to regenerate.",
        "",
        "## Study 1: training instabilities in MX formats (Su et al.)",
        "",
    )
    pilots = {name: loaded[pilot] for name, pilot in PILOT.items()}
    controls = [(loaded[n], loaded.get(r)) for n, r in CONTROL.items()]
    step_sources = [(loaded[n], reference) for n, reference in STEP_SOURCE.items()]
    clamps = [(loaded[n], loaded[floor], pairs) for n, (floor, pairs) in CLAMP_CONTROL.items()]
    formats = [(loaded[n], loaded[base], pairs) for n, base, pairs in GAMMA_FORMAT]
    from_init = [(loaded[n], loaded[base], pairs) for n, (base, pairs) in FROM_INIT.items()]
    proxy_claims(
        doc, mech, lates, canonical, edges, reruns, pilots, controls, step_sources, clamps, formats,
        canonical_seeds, from_init,
    )  # fmt: skip
    lm_claims(doc, lm)
    doc.add("## Study 2: is finer better? (block size × scale format)", "")
    blocksize_claims(doc, bs)
    law_section(doc, lm)
    clamp_sweeps = [c for c, _, _ in clamps]
    search_log(
        doc,
        [mech, *edges, *searches, *lates, *(s for s, _ in step_sources), *clamp_sweeps,
         *{id(s): s for f in formats for s in f[:2] if all(s is not e for e in edges)}.values(),
         *(s for s, _, _ in from_init), canonical, canonical_seeds],
    )  # fmt: skip
    out.write_text("\n".join(doc.lines).rstrip() + "\n")
    return out


def _git_rev() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def summary(path: Path) -> dict[str, Any]:
    """The verdict of every claim in a generated results.md (for tests and the README)."""
    verdicts = {}
    title = None
    for line in path.read_text().splitlines():
        if line.startswith("### "):
            title = line[4:]
        elif title and line.startswith("**"):
            verdicts[title] = line[2:].split(".**", 1)[0].lower()
            title = None
    return verdicts


__all__ = ["summary", "write_results"]
