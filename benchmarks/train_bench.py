"""Training-step time of the LM: unquantized vs full MX vs the hybrid policy, on CPU (or --device).

Run from the repository root::

    .venv/bin/python benchmarks/train_bench.py          # d=256, L=4, seq 256, batch 16; 5 rounds x 3 steps
    .venv/bin/python benchmarks/train_bench.py --quick  # d=128, L=2, seq 128, batch 8; 3 rounds (smoke)

Variants (the same seeded model, byte vocabulary, one fixed batch of random tokens):

* ``unquantized``: the plain LM, no ``quant.convert`` (fp32);
* ``full MX``: fp8_e4m3 (MXFP8, blocks of 32, E8M0 scales) for weights, activations and both gradient
  operands, i.e. every operand of all three GEMMs of every Linear;
* ``hybrid``: fp8_e4m3 weights, bf16 activations (gradients unquantized).

A step is what ``train.loop`` does per update: zero_grad, forward, cross-entropy, backward, grad-norm
clip, AdamW step. The quantizer picks its backend itself (``quant`` backend ``auto``: the
torch.compile'd path for tensors of at least ``quant.mx.COMPILE_MIN_NUMEL`` elements, which covers
every weight and activation here). Each variant first takes ``--warmup`` steps (compilation happens
there and is reported), then the variants are timed round-robin (``--rounds`` rounds of
``--steps`` steps each), so drifting load on a shared machine hits all of them alike; the table shows
the median, min and max seconds per step, and the ratios are of medians.

Target: full MX <= 1.5x the unquantized step on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import quant  # noqa: E402
from benchmarks._timing import cpu_model, round_robin, stats, warm_up  # noqa: E402
from models import LMConfig, build_lm  # noqa: E402
from train.config import TrainConfig  # noqa: E402
from train.objectives import LMTask  # noqa: E402
from train.optim import make_optimizer  # noqa: E402

TARGET_FULL_MX = 1.5  # full MX step may take at most this many unquantized steps

POLICIES: dict[str, quant.QuantPolicy | None] = {
    "unquantized": None,
    "full MX": quant.QuantPolicy(w="fp8_e4m3", a="fp8_e4m3", g_dgrad="fp8_e4m3", g_wgrad="fp8_e4m3"),
    "hybrid": quant.QuantPolicy(w="fp8_e4m3", a="bf16"),
}


class _Tokens:
    """A minimal token source: one fixed random batch (timing only)."""

    def __init__(self, batch: int, seq: int, vocab: int, device: str):
        g = torch.Generator().manual_seed(0)
        t = torch.randint(vocab, (batch, seq + 1), generator=g).to(device)
        self.pair = (t[:, :-1], t[:, 1:])
        self.tokens_per_step = batch * seq

    def get(self, step: int):
        return self.pair

    def val_batches(self, n: int):
        return [self.pair] * n

    def epoch(self, step: int) -> float:
        return 0.0


def make_step(cfg: LMConfig, policy: quant.QuantPolicy | None, args) -> Callable[[], float]:
    """A closure doing one full training step of a fresh seeded model under ``policy``."""
    model = build_lm(cfg, seed=0).to(args.device)
    if policy is not None:
        quant.convert(model, policy)
    task = LMTask(cfg, _Tokens(args.batch, args.seq, cfg.vocab_size, args.device), device=args.device)
    opt = make_optimizer(model, TrainConfig(), task)  # the optimizer a run gets by default
    inputs, targets = task.batch(0)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if args.device != "cpu":
            torch.cuda.synchronize()
        return loss.item()

    return step


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    p.add_argument("--steps", type=int, default=3, help="steps per variant per round (default 3)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per variant first (default 2)")
    p.add_argument("--quick", action="store_true", help="smoke run: d=128, L=2, seq 128, batch 8, 3 rounds")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="default: os.cpu_count()")
    p.add_argument("--json", type=Path, help="also write all numbers to this JSON file")
    args = p.parse_args(argv)
    if args.quick:
        args.d_model, args.depth, args.seq, args.batch, args.rounds, args.steps = 128, 2, 128, 8, 3, 2
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = LMConfig(depth=args.depth, d_model=args.d_model, vocab_size=256)
    print(f"python {platform.python_version()}  torch {torch.__version__}  quant {quant.get_backend()}")
    print(f"cpu: {cpu_model()}; os.cpu_count()={os.cpu_count()}; torch threads={torch.get_num_threads()}")
    print(
        f"LM d={cfg.width} L={cfg.depth} heads={cfg.heads} V={cfg.vocab_size} N={cfg.n_params:,}; "
        f"seq {args.seq} x batch {args.batch} = {args.seq * args.batch} tokens/step; device {args.device}"
    )
    print(f"target: full MX <= {TARGET_FULL_MX:g}x unquantized (median step)\n")

    steps, first = {}, {}
    for name, policy in POLICIES.items():
        steps[name] = make_step(cfg, policy, args)
        first[name] = sum(warm_up({name: steps[name]}, args.warmup)[name])
        print(f"  warm-up {name:12s} {args.warmup} steps in {first[name]:6.1f}s (compilation included)")

    def report(done: int, times: dict[str, list[float]]) -> None:
        print(f"  round {done}/{args.rounds}: " + "  ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items()))

    times = round_robin(steps, args.rounds, calls=args.steps, report=report)
    st = {k: stats(v) for k, v in times.items()}
    med = {k: s["median"] for k, s in st.items()}
    base = med["unquantized"]
    print(f"\n{'variant':14s} {'median':>9s} {'min':>9s} {'max':>9s} {'vs unquantized':>15s}")
    for k, s in st.items():
        print(f"{k:14s} {s['median']:8.3f}s {s['min']:8.3f}s {s['max']:8.3f}s {s['median'] / base:14.2f}x")
    ratio = med["full MX"] / base
    verdict = "PASS" if ratio <= TARGET_FULL_MX else "FAIL"
    print(f"\nfull MX / unquantized = {ratio:.2f}x (target <= {TARGET_FULL_MX:g}x): {verdict}")
    print(f"hybrid / unquantized = {med['hybrid'] / base:.2f}x")
    low = {k: s["min"] for k, s in st.items()}  # the least disturbed round: telling on a shared machine
    print(
        f"ratios of minimums: full MX {low['full MX'] / low['unquantized']:.2f}x, "
        f"hybrid {low['hybrid'] / low['unquantized']:.2f}x"
    )
    if args.json:
        out = {
            "torch": torch.__version__,
            "cpu": cpu_model(),
            "threads": torch.get_num_threads(),
            "shape": {"d": cfg.width, "L": cfg.depth, "seq": args.seq, "batch": args.batch},
            "seconds_per_step": times,
            "median": med,
            "full_mx_ratio": ratio,
            "warmup_seconds": first,
        }
        args.json.write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
