"""Running a planned sweep: decide what to skip, preview it (dry run), write the manifest, launch the
phases through whatever launches jobs (a Hydra launcher, in the plugin), watch progress, report.

Skip rule (``sweep.rerun``): a run whose record says done or diverged is skipped unless
``rerun=all``; failed unless ``rerun`` is ``failed`` or ``all``; a run whose job is alive (fresh
heartbeat) is always skipped. Everything else — never started, interrupted, killed — is launched
and resumes from its last checkpoint. ``rerun=all`` clears a finished run's directory first.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.config import resource_rule
from sweeper.grid import PlannedRun, SweepError
from sweeper.status import STATUSES, counts_line, read_manifest, read_summary, run_status, write_manifest
from sweeper.table import duration, format_table, loss, num, sci


@dataclass
class Decision:
    planned: PlannedRun
    status: str
    """The run's status before this launch."""
    launch: bool


@dataclass
class Sweep:
    """What one ``python launch.py -m ...`` asked for."""

    name: str
    sweep_dir: Path
    phases: list[list[PlannedRun]]
    rerun: str = "none"
    throughput: float = 2.0e9
    meta: dict[str, Any] = field(default_factory=dict)
    deferred: Callable[[], list[PlannedRun]] | None = None
    """Plans the second phase from the first phase's records (``sweep.branch_at``): called after the
    first phase has run (and by the dry run, for parents that have already finished)."""
    resources: list[tuple[float | None, dict[str, Any]]] = field(default_factory=list)
    """Validated ``sweep.resources`` rules (``sweeper.config.resource_rules``); empty: one launcher call
    per phase with the launcher's own parameters."""

    def rule(self, p: PlannedRun) -> int | None:
        """The index of the resource rule of a run (None without rules)."""
        return resource_rule(self.resources, p.coords["N"]) if self.resources else None

    @property
    def runs(self) -> list[PlannedRun]:
        return [p for phase in self.phases for p in phase]


def decide(runs: Sequence[PlannedRun], rerun: str) -> list[Decision]:
    out = []
    for p in runs:
        status = run_status(p.out_dir)
        if status == "running":
            launch = False
        elif status in ("done", "diverged"):
            launch = rerun == "all"
        elif status == "failed":
            launch = rerun in ("failed", "all")
        else:
            launch = True
        out.append(Decision(p, status, launch))
    return out


def check_unique(runs: Sequence[PlannedRun]) -> None:
    seen: dict[str, PlannedRun] = {}
    for p in runs:
        if p.run_id in seen:
            a, b = " ".join(seen[p.run_id].combo), " ".join(p.combo)
            raise SweepError(
                f"two runs of this sweep have the same training config (id {p.run_id}: [{a}] and [{b}]); "
                "sweep only over keys that change the run"
            )
        seen[p.run_id] = p


def table(decisions: Sequence[Decision], throughput: float) -> str:
    headers = ["#", "ph", "precision", "C", "d", "L", "N", "D", "D/N", "steps", "seed", "params", "cost",
               "time", "status", "run"]  # fmt: skip
    rows = []
    for i, d in enumerate(decisions):
        c = d.planned.coords
        action = d.status if d.launch else f"skip:{d.status}"
        rows.append(
            [
                i,
                d.planned.phase,
                c["precision"],
                sci(c["C"]),
                c["d"],
                c["L"],
                num(c["N"]),
                num(c["D"]),
                f"{c['ratio']:.3g}",
                c["steps"],
                c["seed"],
                c["params"] or "-",
                sci(c["cost"]),
                duration(c["cost"] / throughput),
                action,
                d.planned.name,
            ]  # fmt: skip
        )
    return format_table(headers, rows, left=("precision", "params", "status", "run"))


def summary_line(decisions: Sequence[Decision], throughput: float) -> str:
    todo = [d for d in decisions if d.launch]
    cost = sum(d.planned.coords["cost"] for d in todo)
    return (
        f"{len(decisions)} runs asked, {len(decisions) - len(todo)} skipped, {len(todo)} to launch: "
        f"{sci(cost)} FLOPs (6·N·D) ≈ {duration(cost / throughput)} at {num(throughput)} FLOP/s per job "
        "(sweep.throughput)"
    )


def dry_run(sweep: Sweep, out=sys.stdout) -> list[Decision]:
    runs = sweep.runs
    if sweep.deferred is not None:
        later = sweep.deferred()
        runs = runs + later
        print(f"branches: {len(later)} planned from parents that have finished; the others are planned "
              "once their parents finish (sweep.branch_at)", file=out)  # fmt: skip
    decisions = decide(runs, sweep.rerun)
    print(table(decisions, sweep.throughput), file=out)
    print(f"dry run of sweep {sweep.name} in {sweep.sweep_dir}: " + summary_line(decisions, sweep.throughput),
          file=out)  # fmt: skip
    return decisions


def _earlier(sweep_dir: Path) -> list[dict[str, Any]]:
    """The runs an earlier launch into this sweep directory planned (its ``runs`` and its own
    ``earlier``), newest first by name: a relaunch with another seed or a subset must not make the
    sweep forget them (their precision label, budget and shape live only here)."""
    previous = read_manifest(sweep_dir) or {}
    out: dict[str, dict[str, Any]] = {}
    for r in [*(previous.get("runs") or []), *(previous.get("earlier") or [])]:
        if isinstance(r, dict) and isinstance(r.get("name"), str):
            out.setdefault(r["name"], r)
    return list(out.values())


def _manifest(
    sweep: Sweep,
    decisions: Sequence[Decision],
    outcome: dict[str, str] | None,
    jobs: dict[str, int] | None = None,
    earlier: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    rules = {d.planned.name: sweep.rule(d.planned) for d in decisions}
    runs = [
        {
            "id": d.planned.run_id,
            "name": d.planned.name,
            "phase": d.planned.phase,
            "action": "launch" if d.launch else "skip",
            "status_before": d.status,
            "status_after": (outcome or {}).get(d.planned.name),
            "coords": d.planned.coords,
            "overrides": d.planned.overrides,
            "job": (jobs or {}).get(d.planned.name),
            "resources": None if rules[d.planned.name] is None else sweep.resources[rules[d.planned.name]][1],
        }
        for d in decisions
    ]
    launched = [r["name"] for r in runs if r["action"] == "launch"]
    skipped = {r["name"]: r["status_before"] for r in runs if r["action"] == "skip"}
    now = {r["name"] for r in runs}
    return {
        "name": sweep.name,
        "sweep_dir": str(sweep.sweep_dir),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **sweep.meta,
        "rerun": sweep.rerun,
        "counts": {"asked": len(runs), "skipped": len(skipped), "launched": len(launched)},
        "asked": [r["name"] for r in runs],
        "skipped": skipped,
        "launched": launched,
        "runs": runs,
        "earlier": [r for r in earlier if r["name"] not in now],
    }


class Progress:
    """The sweep's console: one short line per finished run (status, final val loss, steps, run
    directory) above one tqdm bar over the launched runs (``enabled``; the lines alone otherwise),
    fed by polling the run directories, so it works for any launcher: in-process, local processes or
    a cluster on a shared filesystem. Lines go through ``tqdm.write``, so they never tear the bar."""

    def __init__(self, runs: Sequence[PlannedRun], enabled: bool, every: float = 1.0):
        self.runs, self.every, self.stop = list(runs), every, threading.Event()
        self.before = {p.name: _mtime(p.out_dir / "summary.json") for p in self.runs}
        self.reported: set[str] = set()
        self.bar, self.thread, self.lock = None, None, threading.Lock()
        if self.runs:
            from tqdm import tqdm

            self.bar = tqdm(total=len(self.runs), desc="runs", unit="run", file=sys.stderr, leave=True,
                            disable=not enabled)  # fmt: skip
            self.thread = threading.Thread(target=self._poll, name="mxsweep-progress", daemon=True)
            self.thread.start()

    def _finished(self) -> dict[str, int]:
        done: dict[str, int] = {}
        for p in self.runs:
            if _mtime(p.out_dir / "summary.json") != self.before[p.name]:
                summary = read_summary(p.out_dir) or {}
                status = summary.get("status")
                if status in ("done", "diverged", "failed"):
                    done[status] = done.get(status, 0) + 1
                    if p.name not in self.reported:
                        self.reported.add(p.name)
                        self._line(p, status, summary)
        return done

    def _line(self, p: PlannedRun, status: str, summary: dict[str, Any]) -> None:
        from tqdm import tqdm

        shown = f"val {loss(summary.get('final_val_loss')):>6}"
        if status == "failed":
            shown = str(summary.get("error") or "")[:60]
        tqdm.write(f"{status:<8} {p.name}  {shown}  step {summary.get('step', '-')}", file=sys.stdout)

    def _poll(self) -> None:
        while not self.stop.wait(self.every):
            self._update()

    def _update(self) -> None:
        with self.lock:
            done = self._finished()
            if self.bar.disable:
                return
            if sum(done.values()) != self.bar.n or sys.stderr.isatty():  # a log file: one line per run
                self.bar.n = sum(done.values())
                self.bar.set_postfix(done, refresh=False)
                self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.stop.set()
            self.thread.join()
            self._update()
            self.bar.close()


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


_DEFERRED: list[PlannedRun] = []  # marks where the deferred phase runs (compared by identity)


def execute(sweep: Sweep, launch: Callable[..., Any], progress: bool = True) -> dict[str, str]:
    """Launch every phase (waiting for each), keep the manifest current; return name → final status.
    With resource rules (``sweep.resources``) a phase's runs are launched one rule at a time, in rule
    order, as ``launch(overrides, first_job, resources=<the rule's launcher keys>)``; without, as
    ``launch(overrides, first_job)``. Job numbers count launched runs in launch order (the manifest's
    ``job``); ``first_job`` is the number of the group's first run, for the launcher's job index.
    Raises ``SweepError`` at the end if a launched run did not finish (done or diverged)."""
    decisions = decide(sweep.runs, sweep.rerun)
    earlier = _earlier(sweep.sweep_dir)
    write_manifest(sweep.sweep_dir, _manifest(sweep, decisions, None, earlier=earlier))
    print(
        f"sweep {sweep.name} in {sweep.sweep_dir}: " + summary_line(decisions, sweep.throughput), flush=True
    )
    by_name = {d.planned.name: d for d in decisions}
    errors: dict[str, str] = {}
    jobs: dict[str, int] = {}
    phases = [*sweep.phases, *([_DEFERRED] if sweep.deferred is not None else [])]
    while phases:
        phase = phases.pop(0)
        if phase is _DEFERRED:
            phase = sweep.deferred()
            check_unique(sweep.runs + phase)
            added = decide(phase, sweep.rerun)
            decisions += added
            by_name.update({d.planned.name: d for d in added})
            print(f"phase 2: {len(phase)} branches planned from the parents' records", flush=True)
            write_manifest(sweep.sweep_dir, _manifest(sweep, decisions, None, jobs, earlier))
        todo = [p for p in phase if by_name[p.name].launch]
        todo = [p for p in todo if _parent_ready(p, by_name)]
        for p in todo:
            if sweep.rerun == "all" and p.out_dir.exists():
                shutil.rmtree(p.out_dir)
        if not todo:
            continue
        groups: dict[int | None, list[PlannedRun]] = {}
        for p in todo:
            groups.setdefault(sweep.rule(p), []).append(p)
        bar = Progress(todo, progress)
        try:
            for rule in sorted(groups, key=lambda r: -1 if r is None else r):
                group = groups[rule]
                first = len(jobs)
                jobs.update({p.name: first + i for i, p in enumerate(group)})
                kwargs = {} if rule is None else {"resources": sweep.resources[rule][1]}
                try:
                    returns = launch([p.overrides for p in group], first, **kwargs) or []
                    errors.update(
                        {p.name: e for p, r in zip(group, returns, strict=False) if (e := _job_error(r))}
                    )
                except Exception as e:  # a launcher that raises on a failed job: the records tell the rest
                    line = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    print(f"launcher: {type(e).__name__}: {line}", file=sys.stderr)
                    # submitit stops waiting at the first job that did not complete (scancel): the
                    # others may still run. Wait for every one of them before reading the outcome.
                    _wait_while_running(group)
        finally:
            bar.close()
    outcome = {d.planned.name: run_status(d.planned.out_dir) for d in decisions}
    write_manifest(sweep.sweep_dir, _manifest(sweep, decisions, outcome, jobs, earlier))
    counts = {s: sum(1 for v in outcome.values() if v == s) for s in STATUSES}
    print(f"{counts_line(counts)}; details: python launch.py --status {sweep.sweep_dir}")
    held = [d for d in decisions if d.launch and outcome[d.planned.name] == "running"]
    if held:  # another launcher holds them (records.lock): they were not trained twice
        print(
            f"{len(held)} run(s) are being trained by another launcher right now and were skipped here: "
            + ", ".join(d.planned.name for d in held[:3])
            + (" …" if len(held) > 3 else ""),
            file=sys.stderr,
        )
    bad = [
        d for d in decisions if d.launch and outcome[d.planned.name] not in ("done", "diverged", "running")
    ]
    if bad:
        rows = [[d.planned.name, outcome[d.planned.name], _error(d.planned, errors)] for d in bad]
        print(
            format_table(["run", "status", "error"], rows, left=("run", "status", "error")), file=sys.stderr
        )
        raise SweepError(
            f"{len(bad)} of {sum(d.launch for d in decisions)} launched runs did not finish "
            f"(logs: <run>/launch.log in {sweep.sweep_dir}); relaunch the same command to resume them "
            "(failed ones need sweep.rerun=failed)"
        )
    return outcome


def _wait_while_running(group: Sequence[PlannedRun], every: float = 2.0) -> None:
    """Until no run of ``group`` has a live holder of its run lock (``records.lock``: a fresh
    heartbeat; a SLURM job squeue still lists), so the outcome read next is final."""
    waiting = [p for p in group if run_status(p.out_dir) == "running"]
    if waiting:
        print(
            f"waiting for the {len(waiting)} run(s) of this launch still running", file=sys.stderr, flush=True
        )
    while waiting:
        time.sleep(every)
        waiting = [p for p in waiting if run_status(p.out_dir) == "running"]


def _parent_ready(p: PlannedRun, by_name: dict[str, Decision]) -> bool:
    """A branch needs its parent's checkpoint at the branch step (the parent may have diverged)."""
    if p.parent is None:
        return True
    from train.checkpoint import path_for

    ready = path_for(p.parent.out_dir, p.run.train.branch_step).exists()
    if not ready:
        by_name[p.name].launch = False
        by_name[p.name].status = f"blocked (no checkpoint at step {p.run.train.branch_step} in parent)"
    return ready


def _job_error(ret: Any) -> str | None:
    """The exception a Hydra ``JobReturn`` holds, as one short line (None if the job returned)."""
    try:
        ret.return_value  # noqa: B018 -- raises the job's exception
    except Exception as e:
        return f"{type(e).__name__}: {e}".splitlines()[0]
    return None


def _error(p: PlannedRun, errors: dict[str, str]) -> str:
    summary = read_summary(p.out_dir) or {}
    return str(summary.get("error") or errors.get(p.name) or "-")[:120]
