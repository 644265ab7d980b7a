"""Fault injection on real processes: a run SIGKILLed at random moments (so also mid-step and
mid-checkpoint-write) and relaunched until it finishes ends bit-identical to an uninterrupted run.

The other faults of issue 11 are tested beside what they break: truncated and damaged checkpoints and
the temporaries a kill during a checkpoint write leaves (tests/test_train.py), corrupt records, two
launchers on one sweep, a full disk (tests/test_records.py), Ctrl-C (tests/test_launch.py), SLURM
cancel and requeue (tests/test_slurm.py, tests/test_sweeper.py) and bad input (tests/test_bad_input.py).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

from launching import REPO, child_env, launch

STEPS = 120
ARGS = ["task=proxy", "model.width=16", "model.depth=2", f"train.steps={STEPS}", "train.ckpt_every=7",
        "train.eval_every=50", "train.log_every=1", "train.twin_every=5", "logger=disabled",
        "logger.console_every_s=0"]  # fmt: skip
TIMING = {"step_time", "twin_time", "wall_time", "median_step_time", "median_step_time_with_twin"}


def _rows(run_dir) -> dict[int, dict]:
    """step → its metrics row (the last one written for the step), timing fields dropped."""
    rows = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows[row["step"]] = {k: v for k, v in row.items() if k not in TIMING}
    return rows


def _logged(run_dir) -> int:
    try:
        return len((run_dir / "metrics.jsonl").read_text().splitlines())
    except OSError:
        return 0


def test_sigkill_at_random_moments_then_relaunch_ends_bit_identical(tmp_path):
    reference = tmp_path / "reference"
    r = launch(*ARGS, f"out_dir={reference}")
    assert r.returncode == 0, r.stderr[-2000:]
    out, rng, kills = tmp_path / "killed", random.Random(1), 0
    # Three kills at random steps, one in each third of the run (so each relaunch resumes below the
    # next), each a few ms after that step's metrics row appeared: mid-step, between a row and its
    # checkpoint, or mid-checkpoint-write.
    for target in [rng.randint(10, 35), rng.randint(45, 70), rng.randint(80, 100)]:
        cmd = [sys.executable, "launch.py", *ARGS, f"out_dir={out}"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), **quiet)
        deadline = time.monotonic() + 300
        while proc.poll() is None and _logged(out) < target and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.01))
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.wait()
    assert kills >= 2, "the run finished before it could be killed twice: make it longer"
    r = launch(*ARGS, f"out_dir={out}")
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    expected = json.loads((reference / "summary.json").read_text())
    assert summary["status"] == expected["status"] == "done"
    # Every number bit-identical (timings aside). A kill after the last checkpoint and before the
    # summary used to resume into a summary with the previous eval's final_val_loss and no
    # final_train_loss (the Evaluator recorded its value after the Checkpointer had saved).
    same = {k: v for k, v in expected.items() if k not in TIMING | {"wall_time_total"}}
    assert {k: summary.get(k) for k in same} == same
    assert summary["median_step_time"] is not None
    assert _rows(out) == _rows(reference)
    assert not list((out / "ckpt").glob("*.tmp*")), "a kill during a checkpoint write left a temporary"
