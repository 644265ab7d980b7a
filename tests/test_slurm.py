"""Sweeps on a real one-node SLURM cluster on localhost (scripts/slurm/start.sh: munged, MariaDB,
slurmdbd, slurmctld, slurmd), not a mock.

The session fixture starts the cluster (installing its Debian packages if missing, as root) and stops
it again if it was not already up. Tests: a plain submitit job round trip; the 4-run smoke sweep through
``hydra/launcher=slurm`` (hydra-submitit-launcher's submitit_slurm) lands every record; a running job
preempted (``scancel --signal=USR2``) or requeued (``scontrol requeue``) checkpoints, is requeued,
resumes and ends bit-identical to an uninterrupted run; relaunching the finished sweep submits nothing.

Skipped (not failed) where the cluster cannot be had: ``MXSWEEP_SLURM_TESTS=0``, or not root and the
cluster is not already up. Every wait is a poll with a deadline (a loaded 2-core box is slow, never hung).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launching import REPO, child_env

pytestmark = pytest.mark.slurm

SCRIPTS = REPO / "scripts" / "slurm"
LAUNCH_TIMEOUT_S = 240  # one sweep on the cluster, worst case on a loaded box (typically 10-45 s)
# one tiny LM, long enough (~300 steps, 10-20 s) to be signalled mid-run; one run of the smoke preset
LONG_RUN = [
    "budget.flops=[6.6e9]",
    "budget.ratio_max=10",
    "budget.ladder=[{depth:1,d_model:32,n_heads:2}]",
    "sweep.precisions=[{name:mxfp8,w:fp8_e4m3,a:fp8_e4m3}]",
]
SIGNAL_AFTER_STEPS = 40


def _run(cmd: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def _poll(what: str, check, timeout: float, every: float = 0.5):
    """``check()`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


@pytest.fixture(scope="session")
def slurm_cluster():
    """The localhost cluster, up (started here if needed; stopped at the end if started here)."""
    if os.environ.get("MXSWEEP_SLURM_TESTS") == "0":
        pytest.skip("MXSWEEP_SLURM_TESTS=0")
    status = _run(["bash", str(SCRIPTS / "status.sh"), "--short"])
    was_up = status.returncode == 0
    if not was_up and os.geteuid() != 0:
        pytest.skip(
            "the localhost SLURM cluster is down; starting it needs root: sudo scripts/slurm/start.sh"
        )
    if not was_up and shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        pytest.skip("no slurm and no apt-get to install it (scripts/slurm/install.sh is Debian-only)")
    started = time.monotonic()
    r = _run(["bash", str(SCRIPTS / "start.sh")], timeout=900)
    if r.returncode != 0:
        pytest.fail(f"scripts/slurm/start.sh failed ({r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    conf = re.search(r"^export SLURM_CONF=(\S+)$", r.stdout, re.M)
    assert conf, r.stdout
    print(f"\n{r.stdout.strip().splitlines()[0]} [{time.monotonic() - started:.1f}s]")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", conf.group(1))  # sbatch/sacct here, and (exported) inside the jobs
        yield conf.group(1)
    if not was_up and os.environ.get("MXSWEEP_SLURM_KEEP") != "1":
        _run(["bash", str(SCRIPTS / "stop.sh")], timeout=120)


def _sweep_args(sweep_dir: Path, *extra: str, slurm: bool = True) -> list[str]:
    launcher = ["hydra/launcher=slurm", "hydra.launcher.timeout_min=5", "hydra.launcher.cpus_per_task=1"]
    return [
        sys.executable, "launch.py", "-m", "experiment=smoke", "logger=disabled",
        *(launcher if slurm else ["hydra/launcher=local"]), f"hydra.sweep.dir={sweep_dir}", *extra,
    ]  # fmt: skip


def _launch(sweep_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return _run(_sweep_args(sweep_dir, *extra), timeout=LAUNCH_TIMEOUT_S, cwd=REPO, env=child_env())


def _jobs_of(sweep_dir: Path) -> set[str]:
    """SLURM ids of the jobs (array tasks) submitit submitted for this sweep (its folder names)."""
    names = {p.name for p in (sweep_dir / ".submitit").glob("*") if re.fullmatch(r"\d+(_\d+)?", p.name)}
    return {n for n in names if not any(m.startswith(f"{n}_") for m in names)}  # drop array parents


def _sacct(*args: str) -> list[list[str]]:
    r = _run(["sacct", "-a", "-X", "-n", "-P", "-S", "2000-01-01", *args])
    assert r.returncode == 0, r.stderr
    return [line.split("|") for line in r.stdout.splitlines() if line]


def _queue() -> list[str]:
    r = _run(["squeue", "-h", "-o", "%i %T"])
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:-1]


def _drained(jobs: set[str]) -> bool:
    """Every job in ``jobs`` is out of the queue and final in accounting."""
    queued = {line.split()[0] for line in _queue()}
    if queued & jobs:
        return False
    states = {row[0]: row[1] for row in _sacct("-o", "JobID,State")}
    final = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")  # sacct says "CANCELLED by <uid>"
    return all((states.get(j) or "?").split()[0] in final for j in jobs)


def _cancel(sweep_dir: Path) -> None:
    """Leave no job of this test behind (a failed test must not hold the node for the next)."""
    jobs = _jobs_of(sweep_dir)
    if jobs:
        _run(["scancel", *sorted(jobs)])
        _poll(
            "the cancelled jobs to leave the queue", lambda: not {q.split()[0] for q in _queue()} & jobs, 90
        )


@contextlib.contextmanager
def _sweep_in_background(sweep_dir: Path, *extra: str):
    """The sweep running in a child process (stdout and stderr together); on the way out, killed if it
    still runs, and its jobs cancelled (a failed test must not hold the node for the next)."""
    proc = subprocess.Popen(
        _sweep_args(sweep_dir, *extra),
        cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _cancel(sweep_dir)


def _record(run_dir: Path) -> tuple[dict, list[dict]]:
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(s) for s in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return summary, rows


def _run_dirs(sweep_dir: Path) -> list[Path]:
    return sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


# --------------------------------------------------------------------------------------------------


def test_submitit_job_round_trip(slurm_cluster, tmp_path):
    import submitit

    executor = submitit.AutoExecutor(folder=tmp_path / "%j", cluster="slurm")
    executor.update_parameters(timeout_min=2, cpus_per_task=1, mem_gb=1)
    job = executor.submit(submitit.helpers.CommandFunction(["bash", "-c", "echo $SLURM_JOB_ID $((2 + 3))"]))
    out = job.result().split()
    assert out == [job.job_id, "5"]
    _poll(f"sacct to record job {job.job_id} COMPLETED", lambda: _drained({job.job_id}), 60)
    assert dict(_sacct("-j", job.job_id, "-o", "JobID,State"))[job.job_id] == "COMPLETED"


@pytest.fixture(scope="module")
def smoke_sweep(slurm_cluster, tmp_path_factory):
    """``launch.py -m experiment=smoke hydra/launcher=slurm`` run once: (sweep_dir, its result)."""
    sweep_dir = tmp_path_factory.mktemp("slurm") / "smoke"
    try:
        r = _launch(sweep_dir)
        if _jobs_of(sweep_dir):
            _poll("the sweep's jobs to finish", lambda: _drained(_jobs_of(sweep_dir)), 120)
    except BaseException:
        _cancel(sweep_dir)
        raise
    return sweep_dir, r


def test_smoke_sweep_lands_every_record(smoke_sweep):
    sweep_dir, r = smoke_sweep
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    jobs = _jobs_of(sweep_dir)
    assert len(jobs) == 4, f"expected one SLURM array of 4 tasks, got {sorted(jobs)}"
    states = {row[0]: row[1] for row in _sacct("-o", "JobID,State")}
    assert {states[j] for j in jobs} == {"COMPLETED"}, states
    runs = _run_dirs(sweep_dir)
    assert len(runs) == 4, runs
    for run in runs:
        summary, rows = _record(run)
        assert summary["status"] == "done", (run.name, summary["status"])
        assert summary["step"] == summary["steps"] == rows[-1]["step"], run.name
        assert [row["step"] for row in rows] == list(range(1, summary["steps"] + 1)), run.name
        assert (run / "config.yaml").exists()
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    assert manifest["counts"]["launched"] == 4, manifest["counts"]
    status = _run([sys.executable, "launch.py", "--status", str(sweep_dir)], cwd=REPO, env=child_env())
    assert status.returncode == 0 and re.search(r"\bdone 4\b", status.stdout), status.stdout + status.stderr


def test_relaunching_the_finished_sweep_submits_nothing(smoke_sweep):
    sweep_dir, first = smoke_sweep
    assert first.returncode == 0, first.stderr[-3000:]
    before_jobs = {row[0] for row in _sacct("-o", "JobID")}
    before_folders = set(os.listdir(sweep_dir / ".submitit"))
    r = _launch(sweep_dir)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    assert manifest["counts"]["launched"] == 0 and manifest["counts"]["skipped"] == 4, manifest["counts"]
    time.sleep(3)  # > sched_interval: a submitted job would be in the queue or accounting by now
    assert _queue() == []
    assert {row[0] for row in _sacct("-o", "JobID")} == before_jobs
    assert set(os.listdir(sweep_dir / ".submitit")) == before_folders


@pytest.fixture(scope="module")
def reference_run(slurm_cluster, tmp_path_factory):
    """The long run without interruption, locally (hydra/launcher=local), started in the background so
    that it runs while the cluster job does; yields a function returning its run directory."""
    sweep_dir = tmp_path_factory.mktemp("slurm") / "reference"
    proc = subprocess.Popen(
        _sweep_args(sweep_dir, *LONG_RUN, slurm=False),
        cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip

    def result() -> Path:
        if proc.returncode is None:
            try:
                out, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail("the reference run did not finish")
            assert proc.returncode == 0, out[-3000:]
        (run,) = _run_dirs(sweep_dir)
        return run

    yield result
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("interrupt", ["scancel --signal=USR2", "scontrol requeue"])
def test_interrupted_job_requeues_and_resumes_bit_identical(
    slurm_cluster, reference_run, tmp_path, interrupt
):
    sweep_dir = tmp_path / "sweep"
    with _sweep_in_background(sweep_dir, *LONG_RUN) as proc:

        def training() -> Path | None:
            assert proc.poll() is None, f"the sweep ended before the signal:\n{proc.stdout.read()[-3000:]}"
            for metrics in sweep_dir.glob("*/metrics.jsonl"):
                if len(metrics.read_text().splitlines()) >= SIGNAL_AFTER_STEPS:
                    return metrics.parent
            return None

        run = _poll(f"the job to train {SIGNAL_AFTER_STEPS} steps", training, 120, every=0.2)
        (job,) = _jobs_of(sweep_dir)
        cmd = interrupt.split() + [job]
        r = _run(cmd)
        assert r.returncode == 0, f"{cmd}: {r.stderr}"
        out, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
        assert proc.returncode == 0, out[-3000:]
        _poll("the job to finish", lambda: _drained({job}), 60)

    # SLURM ran it twice: the first attempt was requeued, the second completed
    attempts = [row[1] for row in _sacct("-D", "-j", job, "-o", "JobID,State")]
    assert attempts == ["REQUEUED", "COMPLETED"], attempts
    # the first attempt checkpointed on the signal, and the second resumed from that checkpoint
    summary, rows = _record(run)
    assert summary["status"] == "done"
    ckpts = sorted(int(p.stem.split("_")[1]) for p in (run / "ckpt").glob("step_*.pt"))
    assert len(ckpts) == 2 and SIGNAL_AFTER_STEPS <= ckpts[0] < summary["steps"] == ckpts[1], ckpts
    logs = "".join(p.read_text() for p in (sweep_dir / ".submitit").rglob("*_log.out"))
    assert "interrupted by signal" in logs
    # ... and ended bit-identical to the run nobody interrupted
    reference = reference_run()
    assert run.name == reference.name  # the same identity: the same training config
    ref_summary, ref_rows = _record(reference)
    assert [row["step"] for row in rows] == [row["step"] for row in ref_rows]
    assert [row["loss"] for row in rows] == [row["loss"] for row in ref_rows]
    assert [row.get("val_loss") for row in rows] == [row.get("val_loss") for row in ref_rows]
    assert summary["final_val_loss"] == ref_summary["final_val_loss"]


def test_a_cancelled_job_does_not_stop_the_driver(slurm_cluster, tmp_path):
    """Issue 11, defect 5: scancel one running array task: the driver used to stop waiting at submitit's
    UncompletedJobError while the other job ran on, and left a stale 'running' in manifest.json. Now it
    waits for every job, records the cancelled run as not finished, says how to resume, and the
    relaunch finishes it."""
    sweep_dir = tmp_path / "sweep"
    two = [*LONG_RUN, "sweep.seeds=[0,1]"]
    with _sweep_in_background(sweep_dir, *two) as proc:

        def training_job() -> str | None:
            """The SLURM job of a run that is training now (its run lock names it)."""
            assert proc.poll() is None, f"the sweep ended before the cancel:\n{proc.stdout.read()[-3000:]}"
            for metrics in sweep_dir.glob("*/metrics.jsonl"):
                lock = metrics.parent / "running.json"
                if len(metrics.read_text().splitlines()) >= 10 and lock.exists():
                    with contextlib.suppress(ValueError, OSError):
                        return json.loads(lock.read_text()).get("job")
            return None

        job = _poll("a job to train", training_job, 180, every=0.1)
        jobs = _jobs_of(sweep_dir)
        r = _run(["scancel", job])
        assert r.returncode == 0, r.stderr
        out, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
        _poll("the jobs to leave the queue", lambda: _drained(_jobs_of(sweep_dir) | jobs), 90)
    assert proc.returncode == 2, out[-3000:]
    assert "relaunch the same command to resume" in out
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    after = sorted(r["status_after"] for r in manifest["runs"])
    assert "running" not in after and "done" in after, after  # it waited for the other job to finish
    assert set(after) <= {"done", "interrupted", "failed"}, after
    r = _launch(sweep_dir, *two)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert all(_record(d)[0]["status"] == "done" for d in _run_dirs(sweep_dir))
