"""The one entry point: ``python launch.py [overrides]`` trains one run; ``-m`` runs a sweep of them.

    python launch.py                                   # a small byte-level LM on litmix
    python launch.py task=proxy                        # the residual-MLP proxy with its fp32 twin
    python launch.py precision.w=fp8_e4m3 precision.a=bf16 model.depth=2 train.steps=200
    python launch.py -m experiment=precision_grid      # a whole study (conf/experiment/), resumable
    python launch.py -m experiment=paper_llm sweep.dry_run=true   # preview: table + count, no jobs
    python launch.py --status outputs/sweeps/precision_grid       # counts by status and a table

Hydra lives here (and in the sweeper plugin): the composed config becomes typed dataclasses once
(``sweeper.config.to_run_config``, which runs every ``__post_init__``), and everything below receives
those. Bad input (unknown format, block size < 1, an unknown key, a budget ≤ 0 …) is one line on
stderr with exit status 2, before any work starts (for a sweep: before any job or run directory).

A sweep job is one call of ``main`` with the overrides the sweeper chose (``sweeper.grid``): it checks
that its config hashes to the identity the sweeper planned, is a no-op when its run directory already
holds a finished record, resumes from the run's last checkpoint otherwise, and hands a preemption or
time-out signal back to submitit so the job is requeued (``sweeper.job``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from sweeper.config import LaunchConfig, sweep_only_keys, to_run_config
from train.tasks import TASKS

ConfigStore.instance().store(name="run_schema", node=LaunchConfig)
# Each option of the model and data groups is typed by its task's schema (its defaults list names
# `<task>_schema`): a key the schema lacks fails while composing, before anything runs.
for _task, _spec in TASKS.items():
    ConfigStore.instance().store(group="model", name=f"{_task}_schema", node=_spec.model)
    if _spec.data is not None:
        ConfigStore.instance().store(group="data", name=f"{_task}_schema", node=_spec.data)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict | None:
    try:
        return _main(cfg)
    except Exception as e:
        if cfg.sweep.get("run_id") and cfg.get("out_dir"):  # a sweep's job: its record says it failed
            _record_failure(Path(str(cfg.out_dir)), e)
        raise


def _record_failure(out_dir: Path, e: BaseException) -> None:
    """A sweep job that raised before training wrote nothing, so it read as pending and was retried
    forever: record it ``failed`` with its error (``sweep.rerun=failed`` retries it). Never over an
    existing summary (training writes its own; a finished run of another config stays intact)."""
    from records import run as record

    if (out_dir / "summary.json").exists():
        return
    error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    with contextlib.suppress(OSError):
        out_dir.mkdir(parents=True, exist_ok=True)
        record.write_summary(out_dir, {"status": "failed", "error": error, "step": 0})


def _main(cfg: DictConfig) -> dict | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    job = cfg.sweep.get("run_id") is not None  # one run of a sweep (its job), however it was started
    if HydraConfig.get().mode == RunMode.RUN and not job and (keys := sweep_only_keys(cfg)):
        shown = ", ".join(keys[:3]) + (" …" if len(keys) > 3 else "")
        refuse(f"{shown}: sweep settings (from the command line or an experiment preset) need -m: "
               "python launch.py -m ...; without -m, drop them")  # fmt: skip
    if cfg.get("study") is not None:  # a study (launch.STUDIES), not a training run
        return run_study(cfg)
    from train import distributed

    try:
        run = to_run_config(cfg)  # ValueError with a one-line message on bad input (torch-free)
        from train.loop import check_device  # torch comes in here, once the config is known to be good

        # Here, not in to_run_config: a sweep may be planned on a login node without the job's GPU.
        check_device(distributed.resolve_device(run.train.device))
    except ValueError as e:
        if cfg.sweep.get("run_id"):  # a sweep's job: fail this job (the sweeper reports it), not the sweep
            raise
        refuse(str(e))
    from records import run as record
    from sweeper import job
    from sweeper.identity import run_id
    from train.hooks import ConsoleProgress, default_hooks
    from train.loop import train
    from train.tasks import make_task

    planned = cfg.sweep.run_id
    if planned is not None and run_id(run) != planned:
        msg = f"this job's config hashes to {run_id(run)}, the sweep planned {planned}"
        print(f"error: {msg}; the job's overrides do not reproduce the planned run (a bug)", file=sys.stderr)
        sys.exit(2)
    summary, hooks = job.finished(run), None
    overwrite = bool(cfg.get("overwrite")) and planned is None  # never inside a sweep's job
    if summary is not None and overwrite:
        summary = None  # overwrite=true redoes a finished run too
    if summary is None and not overwrite and (why := record.conflict(run.out_dir, run)) is not None:
        if planned is not None:  # a sweep's job: fail this job (the sweeper reports it)
            raise FileExistsError(why)
        refuse(f"{why}; {record.OVERWRITE_HINT}")
    if summary is None:
        if planned is None and distributed.is_main():
            print(f"run: {run.out_dir}", file=sys.stderr, flush=True)  # first, before any work
        try:
            with job.running(run.out_dir):
                summary = None if overwrite else job.finished(run)  # finished by another just before?
                if summary is None:
                    hooks = default_hooks(run)
                    if planned is None and run.logger.console_every_s > 0 and distributed.is_main():
                        hooks.insert(
                            -1, ConsoleProgress(run.logger.console_every_s)
                        )  # before the Checkpointer
                    summary = train(run, make_task(run), hooks, overwrite=overwrite)
        except job.RunHeld as e:  # another launcher trains it right now: never twice at once
            print(f"skipped: {e}", file=sys.stderr, flush=True)
            return {"status": "held", "holder": e.holder}
        except OSError as e:
            if planned is not None or (full := _disk_full(e)) is None:
                raise  # a sweep's job: the sweeper records it
            print(f"error: {full}; nothing was left half-written: free space and relaunch the same command "
                  "to resume", file=sys.stderr)  # fmt: skip
            sys.exit(1)
        signum = job.requested_signal(hooks) if hooks and summary["status"] == "interrupted" else None
        if signum == signal.SIGINT:  # Ctrl-C: a checkpoint is written; stop the whole command here
            raise KeyboardInterrupt(f"{run.out_dir} checkpointed at step {summary.get('step')}")
        if signum is not None:
            print(f"run record: {run.out_dir} (interrupted by signal {signum}; checkpointed)", flush=True)
            job.hand_back(signum)
    keys = ("status", "final_val_loss", "min_val_loss", "steps", "N", "D", "C", "spike_step")
    result = {k: summary.get(k) for k in keys}
    if distributed.is_main() and planned is None:  # one report (torchrun); a sweep's job: the sweeper's line
        print(json.dumps(result))
        print(f"run record: {run.out_dir}")
    return result


STUDIES = {"block_size": ("analysis.blocksize", "run_study")}
"""``study.name`` → the module and function that run it as ``function(out_dir, **study)``: studies that
are not training runs (imported on use: training jobs never load them)."""


def run_study(cfg: DictConfig) -> dict | None:
    """``experiment=block_size_study``: the study ``study.name`` with the other ``study.*`` keys as its
    arguments, a no-op when ``out_dir`` already holds its finished record."""
    import importlib

    from omegaconf import OmegaConf

    from sweeper.status import read_summary

    kwargs = OmegaConf.to_container(cfg.study, resolve=True)
    if not isinstance(kwargs, dict) or kwargs.get("name") not in STUDIES:
        name = kwargs.get("name") if isinstance(kwargs, dict) else kwargs
        refuse(f"study.name={name!r} is not a study; use one of: {', '.join(STUDIES)}")
    module, function = STUDIES[kwargs.pop("name")]
    study = getattr(importlib.import_module(module), function)
    out_dir = str(cfg.out_dir)
    summary = read_summary(Path(out_dir))
    kwargs = {k: v for k, v in kwargs.items() if v is not None}  # null: run_study's default
    if summary is not None and summary.get("status") == "done" and not kwargs.get("overwrite"):
        print(f"study record: {out_dir} (already done; study.overwrite=true redoes it)")
        return summary
    try:
        summary = study(out_dir, **kwargs)
    except TypeError as e:  # an unknown study.* key
        refuse(f"study: {e}; see {module}.{function} for its arguments")
    except (ValueError, FileExistsError, RuntimeError) as e:  # e.g. the MiniLM weights are missing
        refuse(str(e).splitlines()[0])
    print(f"study record: {out_dir}")
    return summary


def refuse(message: str) -> None:
    """Bad input to a single run: one line on stderr, exit 2, and nothing left behind. Hydra has
    already made the run directory with ``.hydra/`` and ``launch.log`` in it; they go again unless
    the directory holds a run record (then it is that run's, and untouched)."""
    print(f"error: {message}", file=sys.stderr)
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.RUN:
        out = Path(HydraConfig.get().runtime.output_dir)
        record_files = ("config.yaml", "summary.json", "metrics.jsonl", "ckpt", "running.json")
        if out.is_dir() and not any((out / name).exists() for name in record_files):
            shutil.rmtree(out / ".hydra", ignore_errors=True)
            (out / "launch.log").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                out.rmdir()  # only if now empty
                out.parent.rmdir()  # outputs/runs/ when this was its first run
    sys.exit(2)


def _one_line(e: BaseException) -> str:
    """Hydra/OmegaConf composition errors span several lines; the user gets one naming the key."""
    text, cause = str(e).strip(), str(e.__cause__ or "").strip().split("\n")[0]
    if text.startswith("Could not override '") and cause:  # an unknown key
        key = text.split("'")[1]
        return f"{key} is not a config key ({cause}); check the spelling (`python launch.py --cfg job`)"
    if "Available options in" in text:  # an unknown config group option
        head = text.split("\n")[0].removeprefix("In 'config': ")
        options = text.split("Available options in", 1)[1].split("Config search path")[0]
        group, _, names = options.partition(":")
        return f"{head}; available in{group}: {', '.join(names.split())}"
    text = " ".join(f"{text}\n{cause}".split())
    return text.split("full_key:")[0].strip()


def _disk_full(e: BaseException) -> str | None:
    """The first "no space left" in ``e``'s chain (a failed checkpoint, then the summary written on
    the way out, fail alike: the first is the one to report), as one line; None if there is none."""
    import errno

    from records import DiskFull

    chain, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    full = [x for x in chain if isinstance(x, DiskFull)]
    if full:
        return full[-1].strerror  # the deepest: the write that hit the full disk first
    plain = [x for x in chain if isinstance(x, OSError) and x.errno == errno.ENOSPC]
    return f"no space left on device ({plain[-1].filename or 'a record file'})" if plain else None


def cli() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--status":
        from sweeper.status import main as status

        sys.exit(status(sys.argv[2:]))
    if "HYDRA_FULL_ERROR" in os.environ:  # the user asked for Hydra's own full tracebacks
        main()
        return
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing; we print one line
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from sweeper.grid import SweepError

    try:
        main()
    except (HydraException, OmegaConfBaseException, SweepError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # e.g. an out_dir that cannot be created (Hydra makes it before main runs)
        if (full := _disk_full(e)) is not None:
            print(f"error: {full}; free space and relaunch the same command to resume", file=sys.stderr)
            sys.exit(1)
        where = f": {e.filename}" if e.filename else ""
        print(f"error: {e.strerror or e}{where}; choose an out_dir (or hydra.sweep.dir) that can be written",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    except KeyboardInterrupt as e:
        where = f" ({e})" if str(e) else ""
        print(f"interrupted{where}; relaunch the same command to resume", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    cli()
