"""Checkpoints: the full training state at a step boundary, saved atomically, loaded weights-only.

A checkpoint at step k (``<run>/ckpt/step_<k>.pt``) holds everything the next update depends on:
model and optimizer state, the torch/python RNG states, the stochastic-rounding generator of the
converted model, the step (= data position: batches are a pure function of it), the policy in force
(as a dict of primitives) and each stateful hook's state (the fp32 twin, the spike detector …).
The LR schedule is a pure function of the step, so it needs no state of its own.

Only tensors and primitive containers are stored, so ``torch.load(weights_only=True)`` can read it.
Files are written to a temporary name and ``os.replace``-d (``records.atomic_write``), so a kill
mid-save never leaves a truncated "latest" checkpoint; its orphaned temporary is removed on resume. A
checkpoint damaged some other way is passed over for the one before it (``latest_intact``). All
checkpoints are kept (branching needs the one at step k).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import random
import re
import zipfile
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from quant import QuantPolicy
from records import atomic_write

_NAME = re.compile(r"step_(\d+)\.pt$")


def path_for(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "ckpt" / f"step_{step:08d}.pt"


def available(run_dir: str | Path) -> dict[int, Path]:
    """Step → checkpoint path, for every checkpoint in ``run_dir``."""
    folder = Path(run_dir) / "ckpt"
    if not folder.is_dir():
        return {}
    found = {int(m.group(1)): p for p in folder.iterdir() if (m := _NAME.search(p.name))}
    return dict(sorted(found.items()))


def checkpointed_runs(path: str | Path) -> tuple[list[Path], bool]:
    """(the run directories with checkpoints at ``path``, whether ``path`` is one run): ``path`` itself
    when it is a run directory (it holds config.yaml), else every run directly inside it (a sweep)."""
    path = Path(path)
    single = (path / "config.yaml").exists()
    runs = [path] if single else sorted(d.parent for d in path.glob("*/config.yaml"))
    return [d for d in runs if available(d)], single


def latest(run_dir: str | Path) -> Path | None:
    """The checkpoint with the highest step, or None."""
    found = available(run_dir)
    return found[max(found)] if found else None


def policy_to_dict(policy: QuantPolicy) -> dict[str, Any]:
    d = dataclasses.asdict(policy)
    d["exclude"] = list(d["exclude"])
    return d


def policy_from_dict(d: dict[str, Any]) -> QuantPolicy:
    return QuantPolicy(**{**d, "exclude": tuple(d["exclude"])})


def _sr_generator(model: nn.Module) -> torch.Generator | None:
    for m in model.modules():
        gen = getattr(m, "mx_generator", None)
        if gen is not None:
            return gen
    return None


def _python_state_to_primitives(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def save(
    run_dir: str | Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    policy: QuantPolicy,
    hook_states: dict[str, Any],
) -> Path:
    """Write the checkpoint of ``step`` atomically and return its path."""
    gen = _sr_generator(model)
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "policy": policy_to_dict(policy),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python_rng": _python_state_to_primitives(random.getstate()),
        "sr_generator": gen.get_state() if gen is not None else None,
        "hooks": hook_states,
    }
    path = path_for(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, lambda tmp: torch.save(state, tmp))


class CheckpointError(RuntimeError):
    """A checkpoint that was not loaded, with the one-line reason."""


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The raw checkpoint dict (weights-only unpickling). ``CheckpointError`` with one line when the
    file is cut short or damaged, or is not a mxsweep checkpoint (a pickle that needs code to load
    is refused, not loaded: mxsweep never unpickles anything but tensors and primitives)."""
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointError(
            f"{path} is not a mxsweep checkpoint (it holds objects that only a full unpickle could "
            "build, which can run code); it was not loaded"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{path} is unreadable ({type(e).__name__}: {first[:160]})") from None
    if not isinstance(state, dict) or "model" not in state or "step" not in state:
        raise CheckpointError(
            f"{path} is not a mxsweep checkpoint (no model state or step); it was not loaded"
        )
    return state


def latest_intact(run_dir: str | Path) -> tuple[dict[str, Any] | None, Path | None, list[str]]:
    """The newest checkpoint that loads: (state, path, why each newer one was passed over). A kill
    cannot cut a checkpoint short (atomic writes), but a full disk, a copy or a bad sector can; the
    run then resumes from the one before, and the metrics are cut back to it, so it still ends
    bit-identical to an uninterrupted run."""
    skipped = []
    for _step, path in reversed(available(run_dir).items()):
        try:
            return load(path), path, skipped
        except CheckpointError as e:
            skipped.append(str(e))
    return None, None, skipped


def remove_stale_temporaries(run_dir: str | Path) -> list[Path]:
    """Delete the temporary files of checkpoint writes whose writer is gone (a SIGKILL mid-save leaves
    ``ckpt/.step_*.pt.tmp<pid>``); a writer still alive on this host keeps its file. Returns them."""
    folder = Path(run_dir) / "ckpt"
    gone = []
    for p in folder.glob(".step_*.pt.tmp*") if folder.is_dir() else []:
        pid = p.name.rsplit(".tmp", 1)[1]
        if pid.isdigit() and _alive(int(pid)):
            continue
        p.unlink(missing_ok=True)
        gone.append(p)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def restore(
    state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer, *, rng: bool = True
) -> None:
    """Load model/optimizer (and, with ``rng``, the RNG states) from a ``load``-ed checkpoint. The
    policy is not applied here: the caller decides (resume keeps it, a branch sets its own).

    The optimizer's *state* (Adam's moments and step counts) is the checkpoint's, its hyperparameters
    (betas, eps, weight decay) stay those ``optimizer`` was built with, i.e. this run's: torch's
    ``load_state_dict`` would put back the saved run's, so a branch that changes β2 at its branch point
    would otherwise keep training with its parent's. On a resume the two are the same."""
    model.load_state_dict(state["model"])
    load_optimizer_state(optimizer, state["optimizer"])
    if not rng:
        return
    torch.set_rng_state(state["torch_rng"].cpu())
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    version, internal, gauss = state["python_rng"]
    random.setstate((version, tuple(internal), gauss))


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Adam's moments and step counts from ``saved`` (an ``optimizer.state_dict()``); betas, eps, weight
    decay and LR stay ``optimizer``'s own (``restore``). The fp32 twin's optimizer loads this way too."""
    own = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, settings in zip(optimizer.param_groups, own, strict=True):
        group.update(settings)


def restore_sr_generator(state: dict[str, Any], model: nn.Module) -> None:
    """Put the stochastic-rounding generator back where the checkpoint left it (after set_policy)."""
    gen = _sr_generator(model)
    if gen is not None and state.get("sr_generator") is not None:
        gen.set_state(state["sr_generator"].cpu())


LOOP_KEY = "_loop"
"""The loop's own state among the hooks' states of a checkpoint (no hook has this name)."""


def hook_name(hook: Any) -> str:
    """The key of a hook's state in a checkpoint (its ``name``, else its class name)."""
    return getattr(hook, "name", type(hook).__name__)


def save_state(state: Any) -> None:
    """Checkpoint a run at ``state.step`` (a ``train.callbacks.State``; rank 0 only): model,
    optimizer, policy and the state of every hook that has one (``state_dict``)."""
    if not state.is_main:
        return
    hooks = {hook_name(h): h.state_dict() for h in state.hooks if hasattr(h, "state_dict")}
    hooks = {k: v for k, v in hooks.items() if v is not None}
    hooks[LOOP_KEY] = {"last_loss": state.last_loss}  # the summary's final_train_loss after a resume
    save(state.run.out_dir, state.step, state.model, state.optimizer, state.policy, hooks)
