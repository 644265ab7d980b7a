"""Checkpoints: the full training state at a step boundary, saved atomically, loaded weights-only.

A checkpoint at step k (``<run>/ckpt/step_<k>.pt``) holds everything the next update depends on:
model and optimizer state, the torch/python RNG states, the stochastic-rounding generator of the
converted model, the step (= data position: batches are a pure function of it), the policy in force
(as a dict of primitives) and each stateful hook's state (the fp32 twin, the spike detector …).
The LR schedule is a pure function of the step, so it needs no state of its own.

Only tensors and primitive containers are stored, so ``torch.load(weights_only=True)`` can read it.
Files are written to a temporary name and ``os.replace``-d, so a kill mid-save never leaves a
truncated "latest" checkpoint. All checkpoints are kept (branching needs the one at step k).
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from quant import QuantPolicy

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
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The raw checkpoint dict (weights-only unpickling)."""
    return torch.load(path, map_location=map_location, weights_only=True)


def restore(
    state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer, *, rng: bool = True
) -> None:
    """Load model/optimizer (and, with ``rng``, the RNG states) from a ``load``-ed checkpoint. The
    policy is not applied here: the caller decides (resume keeps it, a branch sets its own)."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if not rng:
        return
    torch.set_rng_state(state["torch_rng"].cpu())
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    version, internal, gauss = state["python_rng"]
    random.setstate((version, tuple(internal), gauss))


def restore_sr_generator(state: dict[str, Any], model: nn.Module) -> None:
    """Put the stochastic-rounding generator back where the checkpoint left it (after set_policy)."""
    gen = _sr_generator(model)
    if gen is not None and state.get("sr_generator") is not None:
        gen.set_state(state["sr_generator"].cpu())
