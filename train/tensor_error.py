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

and computes, per block quantization of a set (``MX``: every element format in blocks of 32 with E8M0
scales under the floor and ceil rules; ``FP4_BLOCKS``: E2M1 under every block size and scale format
of study 2),

    rel_mse = ‖Q(t) − t‖² / ‖t‖²     (Q: ``quant.quantize``, round to nearest even)
    flushed = #{t ≠ 0 : Q(t) = 0} / #{t ≠ 0}
    norm    = ‖Q(t)‖ / ‖t‖

The first is the tensor's own relative MSE (the Gaussian one where t's blocks are Gaussian). The
second counts values lost outright: a block whose max sits far above its other values leaves them
below the element grid's smallest subnormal, where they round to 0 — more of them in a narrow-range
format (E2M1, E2M3), and more under the ceil rule, which gives up up to one binade of range so that the
max never clamps. The third is the quantizer's bias in size, which the MSE does not sign: rounding to
nearest keeps a tensor's norm, clamping shrinks it (under the floor rule a block max in E2M1's
[6, 8) clamps to 6, and a small block has more maxima), and so does flushing. One row, each metric
averaged over the model's Linears (keys ``<metric>/<operand>/<format>/<rule>``, the metrics.jsonl
convention), goes to ``<run>/tensor_error.jsonl``, written atomically; a call replaces its set's keys
and keeps the other set's (measured at the same checkpoint); ``analysis`` reads it.

Study 2's inversion lives in the gradients here: a loss averaged over thousands of tokens gives dY
an rms of 1e-5–1e-4, below the range of UE4M3 scales (all of dY flushes without NVFP4's per-tensor
scale) and at the bottom of UE5M3's, where a small block's scale is subnormal or 0 and finer blocks
lose more, as they do for weights of σ ≲ 0.02 under UE4M3.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn

import quant
from records import TENSOR_ERROR, atomic_write, dumps, read_metrics
from records.precision import block_name
from train import checkpoint
from train.probe import run_config


@dataclass(frozen=True)
class Measured:
    """One block quantization to measure: ``elem`` in blocks of ``block_size`` along the contraction,
    ``scale`` block scales set by ``rule``, under a per-tensor fp32 scale where ``global_scale``."""

    elem: str
    rule: str = "floor"
    block_size: int = 32
    scale: str = "e8m0"
    global_scale: bool = False

    @property
    def name(self) -> str:
        """The format part of the row's keys (``records.precision.block_name``)."""
        return block_name(self.elem, self.block_size, self.scale, self.global_scale)

    def key(self, metric: str, operand: str) -> str:
        return f"{metric}/{operand}/{self.name}/{self.rule}"


MX = tuple(
    Measured(elem, rule)
    for elem in ("fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1")
    for rule in ("floor", "ceil")
)
"""Every MX element format (blocks of 32, E8M0) under both scale rules."""

FP4_BLOCKS = tuple(
    Measured("fp4_e2m1", "floor", block, scale, glob)
    for scale, glob in (("e8m0", False), ("ue4m3", True), ("ue5m3", False), ("ue4m3", False), ("ue5m3", True))
    for block in (8, 16, 32)
) + tuple(Measured("fp4_e2m1", "ceil", block) for block in (8, 16, 32))
"""FP4 E2M1 in blocks of 8, 16 and 32 under each block-scale format of study 2: E8M0 (MXFP4's),
UE4M3 under a per-tensor scale (NVFP4's two levels), UE5M3 and UE4M3 alone (whose range the tensor's
magnitude must fit: study 2's inversion, where small blocks' scales underflow), and UE5M3 under a
per-tensor scale (the tensor's max mapped to UE5M3's top, 6 · 61440: its range then reaches 2⁸ further
below the tensor's max than NVFP4's, with the same 3 mantissa bits); and E8M0 under the ceil rule,
whose block max never clamps (it lands in (3, 6] of E2M1's units, where floor's lands in [4, 8) and
clamps above 6), so a smaller block's larger share of maxima costs no clamping error."""

SETS = {"mx": MX, "fp4_blocks": FP4_BLOCKS}
"""The sets ``--formats`` names; each call adds its set's keys to the run's row."""


METRICS = ("rel_mse", "flushed", "norm")
"""What ``errors`` returns, in order: the ``<metric>`` part of the row's keys."""


def errors(t: torch.Tensor, m: Measured) -> tuple[float, float, float]:
    """(rel_mse, flushed, norm) of ``t`` quantized as ``m`` says along its last axis, rounding to
    nearest (see the module docstring); NaN for an all-zero tensor."""
    t = t.detach().float().reshape(-1, t.shape[-1])
    energy, nonzero = float(t.square().sum()), t != 0
    if energy == 0.0:
        return float("nan"), float("nan"), float("nan")
    q = quant.quantize(
        t.contiguous(),
        m.elem,
        block_size=m.block_size,
        scale=m.scale,
        scale_rule=m.rule,
        global_scale=m.global_scale,
    )
    flushed = float(((q == 0) & nonzero).sum()) / float(nonzero.sum())
    return float((q - t).square().sum()) / energy, flushed, (float(q.square().sum()) / energy) ** 0.5


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


def tensor_errors(run_dir: str | Path, formats: tuple[Measured, ...] = MX) -> dict[str, Any]:
    """Measure one run (see the module docstring); returns the row it wrote to ``<run>/tensor_error.jsonl``
    (``records.TENSOR_ERROR``): the step and, per ``<metric>/<operand>/<format>/<rule>``, the mean over
    the model's Linears, beside the keys an earlier call wrote at the same step for other formats."""
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
            for m in formats:
                for metric, value in zip(METRICS, errors(t, m), strict=True):
                    found.setdefault(m.key(metric, role), []).append(value)
    earlier = read_metrics(run_dir / TENSOR_ERROR) if (run_dir / TENSOR_ERROR).exists() else []
    kept = earlier[-1] if earlier and earlier[-1].get("step") == step else {}
    row = {**kept, "step": step, **{k: float(np.nanmean(v)) for k, v in found.items()}}
    atomic_write(run_dir / TENSOR_ERROR, dumps(row) + "\n")
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.tensor_error", description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="a run directory, or a sweep directory")
    p.add_argument("--precision", default="bf16", help="in a sweep, the runs of this label (default bf16)")
    p.add_argument(
        "--formats",
        choices=SETS,
        default="mx",
        help="mx: every MX element format under floor and ceil (default); fp4_blocks: E2M1 in blocks of "
        "8/16/32 under E8M0 (floor and ceil), UE4M3 and UE5M3 with a per-tensor scale, UE5M3 and UE4M3 "
        "alone",
    )
    a = p.parse_args(argv)
    runs, single = checkpoint.checkpointed_runs(a.path)
    if not single:
        runs = [d for d in runs if run_config(d).label == a.precision]
    if not runs:
        print(f"error: no {a.precision} run with a checkpoint under {a.path}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    for d in runs:
        tensor_errors(d, SETS[a.formats])
        print(f"{d.name} → {d / TENSOR_ERROR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
