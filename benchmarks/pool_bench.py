"""Wall time of a local sweep: the bounded process pool (``hydra/launcher=pool``) against one run after
another (``hydra/launcher=local``) and, optionally, submitit_local (every run of a phase at once).

Run from the repository root on an otherwise idle machine::

    .venv/bin/python benchmarks/pool_bench.py            # the 18-run slice of the old main job
    .venv/bin/python benchmarks/pool_bench.py --quick    # 4 runs (smoke)

The sweep is the main job's old slice: ``experiment=precision_grid`` with W × A over {fp8_e4m3,
fp8_e5m2, bf16} at 1e11 FLOPs over its two shapes (18 byte-level LMs on litmix), one thread per run
(``OMP_NUM_THREADS=1``), wandb off. Each launcher trains the same runs into a fresh sweep directory of
its own; the launchers alternate over ``--rounds`` rounds so drifting load hits each alike, and the
ratio is of medians. Target (issue 10): pool ≤ 0.6 × sequential on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks._timing import cpu_model, load_average  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SLICE = ["experiment=precision_grid", "sweep.w=[fp8_e4m3,fp8_e5m2,bf16]", "sweep.a=[fp8_e4m3,fp8_e5m2,bf16]",
         "budget.flops=[1e11]"]  # fmt: skip
QUICK = ["experiment=precision_grid", "sweep.w=[fp8_e4m3,bf16]", "sweep.a=[fp8_e4m3]", "budget.flops=[3e10]"]
LAUNCHERS = {"sequential": "hydra/launcher=local", "pool": "hydra/launcher=pool",
             "submitit_local": "hydra/launcher=submitit_local"}  # fmt: skip


def sweep_seconds(launcher: str, args: list[str], workdir: Path) -> float:
    """Wall seconds of one whole sweep (planning, launching, training, waiting) in a fresh directory."""
    out = workdir / launcher.split("=")[-1]
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MXSWEEP_QUANT_BACKEND": "native", "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "launch.py", "-m", *args, launcher, f"hydra.sweep.dir={out}", "logger=disabled",
           "sweep.progress=false"]  # fmt: skip
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{launcher} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return dt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="4 small runs instead of the 18-run slice")
    p.add_argument("--rounds", type=int, default=1, help="alternating rounds (medians over them)")
    p.add_argument("--submitit", action="store_true", help="also time submitit_local")
    p.add_argument("--json", type=Path, default=None, help="write the numbers here too")
    a = p.parse_args(argv)
    args = QUICK if a.quick else SLICE
    names = ["sequential", "pool"] + (["submitit_local"] if a.submitit else [])
    times: dict[str, list[float]] = {n: [] for n in names}
    subprocess.run([sys.executable, "-m", "corpora", "prepare"], cwd=REPO, check=True, capture_output=True)
    with tempfile.TemporaryDirectory(prefix="pool_bench_") as tmp:
        for r in range(a.rounds):
            for n in names if r % 2 == 0 else reversed(names):
                times[n].append(sweep_seconds(LAUNCHERS[n], args, Path(tmp)))
                print(f"round {r + 1}: {n:15s} {times[n][-1]:7.1f} s", flush=True)
    med = {n: statistics.median(t) for n, t in times.items()}
    print(f"\n{cpu_model()}, {os.cpu_count()} cores, load average at the end {load_average()}")
    print(f"{'launcher':15s} {'median s':>9s} {'ratio':>6s}")
    for n in names:
        print(f"{n:15s} {med[n]:9.1f} {med[n] / med['sequential']:6.2f}")
    ratio = med["pool"] / med["sequential"]
    print(f"pool / sequential = {ratio:.2f} (target <= 0.60): {'met' if ratio <= 0.6 else 'MISSED'}")
    if a.json:
        a.json.write_text(json.dumps({"seconds": times, "median": med, "ratio": ratio}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
