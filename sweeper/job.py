"""The job side of a sweep: what ``launch.py`` does around ``train`` so that every job is idempotent,
observable and requeue-safe.

* ``finished(run)``: a run directory that already holds a final record (done or diverged) of the same
  config is a no-op job (a requeued or relaunched job never trains twice, never crashes on it).
* ``running(out_dir)``: while training, the job holds the run lock (``records.lock``):
  ``<out_dir>/running.json``, created exclusively, names the host, pid and scheduler job, and a
  daemon thread touches it every ``HEARTBEAT_S``. A second launcher that reaches a held run skips it
  (``RunHeld``) instead of training it twice; ``sweeper.status`` calls a run *running* while its lock
  has a live holder.
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
import signal
from pathlib import Path
from typing import Any

from records import lock
from records.lock import MARKER, RunHeld


def running(out_dir: str | Path) -> contextlib.AbstractContextManager:
    """Hold ``out_dir``'s run lock while training (rank 0 only): ``records.lock.hold``, which raises
    ``records.lock.RunHeld`` when another live process trains this run."""
    from train.distributed import is_main  # here: `launch.py --status` reads markers without torch

    if not is_main():  # DDP: one lock per run, held by rank 0
        return contextlib.nullcontext()
    return lock.hold(out_dir)


def is_running(out_dir: str | Path) -> bool:
    """True while a live process holds ``out_dir``'s run lock (fresh heartbeat; on this host, a live
    pid; under SLURM, a job squeue still lists)."""
    return lock.holder(out_dir) is not None


def finished(run: Any) -> dict[str, Any] | None:
    """The summary of ``run.out_dir`` if it is a final record (done, diverged) of this same config."""
    from records import run as record

    summary = record.read_summary(run.out_dir)
    if summary is None or summary.get("status") not in record.FINAL:
        return None
    return summary if _same_config(run) else None


def _same_config(run: Any) -> bool:
    from omegaconf import OmegaConf

    from records import identity, identity_of

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


__all__ = ["MARKER", "RunHeld", "finished", "hand_back", "is_running", "requested_signal", "running"]
