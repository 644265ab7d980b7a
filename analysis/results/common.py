"""What every section of docs/results.md stands on: a sweep's records (``Source``: its runs, curves,
manifest, setting and wall time, restored from ``docs/records`` where this checkout has none), the
document being written (``_Doc``), the four verdicts, and the small phrasings several sections share
(seed lists, a sweep's setting, its hardware, a run's outcome).
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from analysis import proxy
from analysis.collect import collect, curves
from analysis.results.presets import RECORD_DEFAULTS, SETTING
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
        self.add(f"Command: {_cited(src)}.", "")


def _cited(src: Source) -> str:
    """A sweep as the document cites it: its command, where its records are (and their archive), and
    the wall time they recorded."""
    wall = src.wall if src.ran else "–"
    kept = f", archived in `{_rel(src.archive)}`" if src.ran and src.archive else ""
    return f"`{src.command}` (records: `{_rel(src.path)}`{kept}; wall time as recorded: {wall})"


def _rel(path: Path) -> str:
    try:
        return os.path.relpath(path, Path.cwd())
    except ValueError:
        return str(path)


def _lr(src: Source, runs: pd.DataFrame | None) -> Any:
    """The learning rate of ``runs`` when they share one (a sweep with an LR axis ran several), else
    the sweep's own ``train.lr``."""
    lrs = runs["train.lr"].dropna().unique() if runs is not None and "train.lr" in runs else []
    return float(lrs[0]) if len(lrs) == 1 else src.setting("train.lr")


def _and(names: tuple[str, ...] | list[str]) -> str:
    """ "H1", "H1 and H2", "H1, H2 and H3"."""
    names = list(names)
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _seed_list(seeds: Sequence[int]) -> str:
    """Seeds as a range where they are consecutive (two or more), else each."""
    seeds = sorted(seeds)
    if not seeds:
        return ""
    return (
        f"{seeds[0]}–{seeds[-1]}"
        if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1))
        else ", ".join(map(str, seeds))
    )


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
