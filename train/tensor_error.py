"""``python -m train.tensor_error <run or sweep dir>``: the block-quantization error of a trained model's
own tensors, for every element format and E8M0 scale rule, at the run's final weights.

Study 2's closed-form error (``analysis.blocksize.theory.format_error``) prices a format on Gaussian
blocks. A Linear in training quantizes other things: its weight W, its input X and, going back, the
gradient dY of its output. This probe measures the same quantities on those: it loads a run's last
checkpoint (the model as trained, quantization off), takes the batch the run would train on next
(``task.batch(step)``, a pure function of the step), runs one forward and backward, and for every
``nn.Linear`` takes each operand as one of its GEMMs blocks it (blocks run along the contraction):

    W     [out, in]      along ``in``      forward  Y = X Wᵀ
    X     [tokens, in]   along ``in``      forward
    X_T   [in, tokens]   along ``tokens``  weight gradient dW = dYᵀ X
    dY    [tokens, out]  along ``out``     data gradient dX = dY W
    dY_T  [out, tokens]  along ``tokens``  weight gradient

and computes, per (element format, scale rule) of ``FORMATS``,

    rel_mse = ‖Q(t) − t‖² / ‖t‖²     (Q: ``quant.quantize``, blocks of 32, E8M0 scales, RNE)
    flushed = #{t ≠ 0 : Q(t) = 0} / #{t ≠ 0}

The first is the tensor's own relative MSE (the Gaussian one where t's blocks are Gaussian). The
second counts values lost outright: a block whose max sits far above its other values leaves them
below the element grid's smallest subnormal, where they round to 0 — more of them in a narrow-range
format (E2M1, E2M3), and more under the ceil rule, which gives up up to one binade of range so that the
max never clamps. One row, each metric averaged over the model's Linears (keys
``<metric>/<operand>/<format>/<rule>``, the metrics.jsonl convention), goes to
``<run>/tensor_error.jsonl``, written atomically and replaced on every call; ``analysis`` reads it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn

import quant
from records import atomic_write, dumps
from train import checkpoint
from train.probe import run_config

OUT = "tensor_error.jsonl"
FORMATS = tuple(
    (elem, rule)
    for elem in ("fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1")
    for rule in ("floor", "ceil")
)
"""(element format, E8M0 scale rule) pairs measured: every MX element format, under both rules."""


def errors(t: torch.Tensor, elem: str, rule: str) -> tuple[float, float]:
    """(rel_mse, flushed) of ``t`` quantized to ``elem`` in blocks of 32 along its last axis, E8M0
    scales under ``rule`` (see the module docstring); NaN for an all-zero tensor."""
    t = t.detach().float().reshape(-1, t.shape[-1])
    energy, nonzero = float(t.square().sum()), t != 0
    if energy == 0.0:
        return float("nan"), float("nan")
    q = quant.quantize(t.contiguous(), elem, block_size=32, scale="e8m0", scale_rule=rule)
    flushed = float(((q == 0) & nonzero).sum()) / float(nonzero.sum())
    return float((q - t).square().sum()) / energy, flushed


def operands(model: nn.Module, task: Any, step: int) -> dict[str, dict[str, torch.Tensor]]:
    """Every ``nn.Linear``'s operands (see the module docstring) on the batch of ``step``, after one
    forward and backward: name → {W, X, X_T, dY, dY_T}."""
    seen: dict[str, dict[str, torch.Tensor]] = {}

    def keep(name: str, key: str, t: torch.Tensor) -> None:
        seen[name][key] = t.detach().reshape(-1, t.shape[-1])

    hooks = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            seen[name] = {"W": m.weight.detach()}
            hooks.append(m.register_forward_hook(lambda _m, inp, _o, n=name: keep(n, "X", inp[0])))
            hooks.append(m.register_full_backward_hook(lambda _m, _gi, go, n=name: keep(n, "dY", go[0])))
    model.zero_grad(set_to_none=True)
    task.loss(model, task.batch(step)).backward()
    for h in hooks:
        h.remove()
    return {n: {**t, "X_T": t["X"].t(), "dY_T": t["dY"].t()} for n, t in seen.items()}


def tensor_errors(run_dir: str | Path, formats: tuple[tuple[str, str], ...] = FORMATS) -> dict[str, Any]:
    """Measure one run (see the module docstring); returns the row it wrote to ``OUT``: the step and,
    per ``<metric>/<operand>/<format>/<rule>``, the mean over the model's Linears."""
    from train.tasks import make_task

    run_dir = Path(run_dir)
    step, path = max(checkpoint.available(run_dir).items(), default=(None, None))
    if path is None:
        raise ValueError(f"{run_dir}: no checkpoint to read the trained weights from")
    run = run_config(run_dir)
    task = make_task(run)
    model = task.build(run.train.seed)
    model.load_state_dict(checkpoint.load(path)["model"])  # plain modules: nothing is quantized
    found: dict[str, list[float]] = {}
    for tensors in operands(model, task, step).values():
        for role, t in tensors.items():
            for elem, rule in formats:
                for metric, value in zip(("rel_mse", "flushed"), errors(t, elem, rule), strict=True):
                    found.setdefault(f"{metric}/{role}/{elem}/{rule}", []).append(value)
    row = {"step": step, **{k: float(np.nanmean(v)) for k, v in found.items()}}
    atomic_write(run_dir / OUT, dumps(row) + "\n")
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.tensor_error", description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="a run directory, or a sweep directory")
    p.add_argument("--precision", default="bf16", help="in a sweep, the runs of this label (default bf16)")
    a = p.parse_args(argv)
    runs, single = checkpoint.checkpointed_runs(a.path)
    if not single:
        runs = [d for d in runs if run_config(d).label == a.precision]
    if not runs:
        print(f"error: no {a.precision} run with a checkpoint under {a.path}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    for d in runs:
        tensor_errors(d)
        print(f"{d.name} → {d / OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
