"""The run lock: one process trains a run directory at a time, across launchers, hosts and SLURM nodes.

Two launchers started on the same sweep (a tired researcher, a requeue racing a relaunch) would
otherwise both train the same run and interleave its metrics. The lock is the run's ``running.json``
itself, created with ``O_CREAT | O_EXCL``: the one primitive that is atomic on a local disk and on
the network filesystems a cluster shares (NFSv3+, Lustre, GPFS), unlike ``fcntl``/``flock`` locks,
which NFS clients may keep per node. It names the holder (host, pid, SLURM job, start time), and a
heartbeat thread touches it every ``HEARTBEAT_S`` so that every host can tell a live holder from a
dead one.

A lock is *stale*, and is broken, when its holder is gone:

* its heartbeat is older than ``STALE_S`` (a killed job, a lost node), or
* it was taken on this host and its pid no longer runs, or
* it names a SLURM job that ``squeue`` no longer lists as pending or running.

Breaking is itself race-free: the stale file is renamed to a name unique to the breaker (a rename
either happens once or fails), and only then is the lock taken again with ``O_EXCL``. A launcher that
finds the lock held by a live holder gets ``RunHeld`` with the holder's description and skips the
run: it never trains it twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MARKER = "running.json"
HEARTBEAT_S = 30.0
STALE_S = 150.0
"""A heartbeat older than this means the holder is gone (killed hard, node lost)."""


class RunHeld(RuntimeError):
    """The run is being trained by another live process (``holder``: its running.json)."""

    def __init__(self, path: Path, holder: dict[str, Any]):
        self.path, self.holder = path, holder
        job = f", SLURM job {holder['job']}" if holder.get("job") else ""
        since = time.strftime("%H:%M:%S", time.localtime(holder.get("started", 0)))
        super().__init__(
            f"{path.parent} is being trained by pid {holder.get('pid')} on {holder.get('host')}{job} "
            f"(since {since}); skipped here"
        )

    def __reduce__(self):  # as records.atomic.DiskFull: it crosses the pool launcher's process boundary
        return type(self), (self.path, self.holder)


def scheduler_job() -> str | None:
    """This process's scheduler job (SLURM array task, SLURM job, or submitit's local job)."""
    for var in ("SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID", "SUBMITIT_LOCAL_JOB_ID"):
        if os.environ.get(var):
            if var == "SLURM_ARRAY_JOB_ID":
                return f"{os.environ[var]}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
            return os.environ[var]
    return None


def holder(run_dir: str | Path) -> dict[str, Any] | None:
    """The live holder of ``run_dir``'s lock, or None (no lock, or a stale one)."""
    path = Path(run_dir) / MARKER
    info = _read(path)
    return None if info is None or _stale(path, info) else info


@contextlib.contextmanager
def hold(run_dir: str | Path) -> Iterator[dict[str, Any]]:
    """Hold ``run_dir``'s lock for the block (``RunHeld`` if a live process holds it); yields what this
    holder wrote. The lock is removed at the end, also on an exception or Ctrl-C."""
    path = Path(run_dir) / MARKER
    path.parent.mkdir(parents=True, exist_ok=True)
    info = _acquire(path)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(path)

    thread = threading.Thread(target=beat, name="mxsweep-heartbeat", daemon=True)
    thread.start()
    try:
        yield info
    finally:
        stop.set()
        current = _read(path)
        if current is not None and current.get("token") == info["token"]:
            with contextlib.suppress(OSError):
                path.unlink()


def _acquire(path: Path) -> dict[str, Any]:
    info = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "job": scheduler_job(),
        "started": time.time(),
        "token": uuid.uuid4().hex,
    }
    for _attempt in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            current = _read(path)
            if current is not None and not _stale(path, current):
                raise RunHeld(path, current) from None
            if current is None and _young(path):
                time.sleep(0.2)  # being written by a holder that just took it: look again
                continue
            _break(path)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(info) + "\n")
        return info
    current = _read(path) or {}
    raise RunHeld(path, current)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return info if isinstance(info, dict) else None


def _young(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime < 2.0
    except OSError:
        return False


def _break(path: Path) -> None:
    """Move a stale lock out of the way; of two breakers only one rename succeeds."""
    with contextlib.suppress(FileNotFoundError):
        aside = path.with_name(f".{path.name}.stale-{uuid.uuid4().hex[:8]}")
        os.rename(path, aside)
        aside.unlink(missing_ok=True)


def _stale(path: Path, info: dict[str, Any], now: float | None = None) -> bool:
    try:
        age = (now or time.time()) - path.stat().st_mtime
    except OSError:
        return True
    if age > STALE_S:
        return True
    if info.get("host") == socket.gethostname() and not _pid_alive(info.get("pid")):
        return True
    job = info.get("job")
    return bool(job) and _slurm_job_gone(str(job))


def _pid_alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True
    return True


def _slurm_job_gone(job: str) -> bool:
    """True when ``squeue`` answers and does not list ``job`` as pending, running or being requeued
    (False when there is no squeue to ask: the heartbeat decides then)."""
    if not job.replace("_", "").isdigit() or shutil.which("squeue") is None:
        return False
    try:
        r = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return False
    if r.returncode != 0:
        return "Invalid job id" in r.stderr  # slurm forgets finished jobs: gone
    states = {s.strip() for s in r.stdout.split()}
    return not states & {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "SUSPENDED"}
