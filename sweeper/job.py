"""The job side of a sweep: what ``launch.py`` does around ``train`` so that every job is idempotent,
observable and requeue-safe.

* ``finished(run)``: a run directory that already holds a final record (done or diverged) of the same
  config is a no-op job (a requeued or relaunched job never trains twice, never crashes on it).
* ``running(out_dir)``: while training, ``<out_dir>/running.json`` names the host, pid and scheduler
  job, and a daemon thread touches it every ``HEARTBEAT_S``; ``sweeper.status`` calls a run
  *running* while that heartbeat is fresh (and, on the same host, its pid alive).
* ``hand_back(signum)``: ``train``'s Checkpointer turns SIGTERM/SIGUSR1/SIGUSR2 into "checkpoint at the
  next step boundary, stop with status interrupted" and then restores the previous handlers. The job
  then re-delivers the signal to whoever handled it before: under submitit that is submitit's own
  handler, which for its preemption signal (USR2, also sent ``signal_delay_s`` before a time-out)
  calls the job callable's ``checkpoint()`` — hydra-submitit-launcher's returns a ``DelayedSubmission``
  of the same job — requeues it and exits; the requeued job resumes from the checkpoint just written.
  Outside submitit the default action ends the process as the signal would have. Either way the job
  never returns a result for an interrupted run (which would read as a finished job).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from records import atomic_write

MARKER = "running.json"
HEARTBEAT_S = 30.0
STALE_S = 150.0
"""A heartbeat older than this means the job is gone (killed hard, node lost)."""


def scheduler_job() -> str | None:
    """The scheduler's id of this job (SLURM, else submitit local), if any."""
    for var in ("SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID", "SUBMITIT_LOCAL_JOB_ID"):
        if os.environ.get(var):
            if var == "SLURM_ARRAY_JOB_ID":
                return f"{os.environ[var]}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
            return os.environ[var]
    return None


@contextlib.contextmanager
def running(out_dir: str | Path) -> Iterator[None]:
    """Mark ``out_dir`` as running (with a heartbeat) for the duration of the block (rank 0 only)."""
    from train.distributed import is_main  # here: `launch.py --status` reads markers without torch

    if not is_main():  # DDP: one marker per run
        yield
        return
    path = Path(out_dir) / MARKER
    path.parent.mkdir(parents=True, exist_ok=True)
    info = {"host": socket.gethostname(), "pid": os.getpid(), "job": scheduler_job(), "started": time.time()}
    atomic_write(path, json.dumps(info) + "\n")
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(path)

    thread = threading.Thread(target=beat, name="mxsweep-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            path.unlink()


def is_running(out_dir: str | Path, now: float | None = None) -> bool:
    """True while ``out_dir``'s job is alive (fresh heartbeat; on this host, also a live pid)."""
    path = Path(out_dir) / MARKER
    try:
        age = (now or time.time()) - path.stat().st_mtime
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if age > STALE_S:
        return False
    if info.get("host") == socket.gethostname():
        try:
            os.kill(int(info["pid"]), 0)
        except ProcessLookupError:
            return False
        except (PermissionError, KeyError, ValueError, TypeError):
            pass
    return True


def finished(run: Any) -> dict[str, Any] | None:
    """The summary of ``run.out_dir`` if it is a final record (done, diverged) of this same config."""
    from train import record

    summary = record.read_summary(run.out_dir)
    if summary is None or summary.get("status") not in record.FINAL:
        return None
    return summary if _same_config(run) else None


def _same_config(run: Any) -> bool:
    from omegaconf import OmegaConf

    from sweeper.identity import identity, identity_of

    path = Path(run.out_dir) / "config.yaml"
    if not path.exists():
        return False
    return identity_of(OmegaConf.to_container(OmegaConf.load(path))) == identity(run)


def requested_signal(hooks: list[Any]) -> int | None:
    """The signal that stopped training (from ``train.hooks.Checkpointer``), if any."""
    for hook in hooks:
        value = getattr(hook, "requested", None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def hand_back(signum: int) -> None:
    """Re-deliver ``signum`` to the handler in place before training, then stop without a result."""
    signal.raise_signal(signum)  # submitit's USR2 handler requeues and exits; SIG_DFL terminates
    raise SystemExit(128 + signum)  # the handler returned (e.g. submitit's SIGTERM "bypass")
