"""``python -m train.probe <run or sweep dir>``: the quantization's own gradient error, read from a run's
checkpoints, at the run's own weights.

The fp32 twin's cosine (``twin_cos``) compares two runs on two trajectories: once they drift apart it
measures how far apart they are, not what quantization does to one gradient (at a high LR the proxy's
twin cosine is ≈ 0.1 after a few dozen steps, for every precision). The probe removes the trajectory:
at every checkpoint k it loads the run's weights w_k and its policy, takes the batch the run trained on
next (``task.batch(k)``, a pure function of the step), and computes on that one batch

    g_mx  = ∇L(w_k) with the run's policy (MX forward and backward, γ quantized as configured),
    g_32  = ∇L(w_k) with nothing quantized,
    probe_cos  = cos(g_mx, g_32),   probe_zeta = ‖g_mx − g_32‖² / ‖g_32‖²,

plus, per LayerNorm, the mean of γ and its clip fraction in γ's own format (``clip_ln/*``, as the run
logs it). A falling ``probe_cos`` means the quantized gradient itself turns away from the true one at
the same point, the multiplicative bias of the clamp at work. Rows go to ``<run>/probe.jsonl``
(written atomically, replaced on every call); ``analysis.proxy`` reads them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import yaml

import quant
from quant import QuantPolicy
from records import PROBE, atomic_write, dumps
from train import checkpoint
from train.config import LoggerConfig, PrecisionConfig, RunConfig, TrainConfig, WandbConfig


def run_config(run_dir: Path) -> RunConfig:
    """The ``RunConfig`` a run directory's ``config.yaml`` describes (its data, for an LM; its label;
    logging off)."""
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    return RunConfig(
        task=cfg["task"],
        model=cfg["model"],
        precision=PrecisionConfig(**cfg["precision"]),
        train=TrainConfig(**cfg["train"]),
        data=cfg.get("data"),
        out_dir=str(run_dir),
        logger=LoggerConfig(wandb=WandbConfig(mode="disabled"), label=(cfg.get("logger") or {}).get("label")),
    )


def _grad(model: nn.Module, task: Any, batch: Any) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    task.loss(model, batch).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]).double()


def probe_run(run_dir: str | Path) -> list[dict[str, Any]]:
    """Probe every checkpoint of one proxy run (see the module docstring); returns the rows written."""
    from train.tasks import make_task

    run_dir = Path(run_dir)
    run = run_config(run_dir)
    if run.task != "proxy":
        raise ValueError(f"{run_dir}: the probe reads proxy runs (task=proxy), not task={run.task}")
    task = make_task(run)
    model = task.build(run.train.seed)
    quant.convert(model, run.precision.policy(seed=run.train.seed))
    identity = QuantPolicy()
    rows = []
    for step, path in checkpoint.available(run_dir).items():
        state = checkpoint.load(path)
        model.load_state_dict(state["model"])
        policy = checkpoint.policy_from_dict(state["policy"])
        batch = task.batch(step)
        quant.set_policy(model, policy)
        g_mx = _grad(model, task, batch)
        quant.set_policy(model, identity)
        g_32 = _grad(model, task, batch)
        row: dict[str, Any] = {
            "step": step,
            "probe_cos": float(torch.dot(g_mx, g_32) / (g_mx.norm() * g_32.norm())),
            "probe_zeta": float((g_mx - g_32).square().sum() / g_32.square().sum()),
        }
        spec = policy.norm_spec()
        for name, m in model.named_modules():
            if isinstance(m, nn.LayerNorm | nn.RMSNorm) and m.weight is not None:
                row[f"gamma_mean/{name}"] = float(m.weight.detach().mean())
                if spec is not None and spec.block_size is not None:
                    row[f"clip_ln/{name}"] = quant.spec_clip_fraction(m.weight, spec)
        rows.append(row)
    text = "".join(dumps(r) + "\n" for r in rows)
    atomic_write(run_dir / PROBE, text)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.probe", description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="a run directory, or a sweep directory (every proxy run in it)")
    p.add_argument("--branches", action="store_true", help="in a sweep, probe branched runs too")
    a = p.parse_args(argv)
    runs, single = checkpoint.checkpointed_runs(a.path)
    if not single and not a.branches:  # the parents: where the mechanism is read (branches: --branches)
        runs = [d for d in runs if not run_config(d).train.branch_from]
    if not runs:
        print(f"error: no run with checkpoints under {a.path}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    for d in runs:
        try:
            rows = probe_run(d)
        except ValueError as e:
            print(f"skipped {d.name}: {e}", file=sys.stderr)
            continue
        print(f"{d.name}: {len(rows)} checkpoints → {d / PROBE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
