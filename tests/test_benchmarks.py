"""The benchmark scripts still run (a smoke run each; their numbers are for people, not asserted)."""

from __future__ import annotations

import subprocess
import sys

from launching import REPO, child_env


def test_train_bench_quick_runs():
    """train_bench builds the optimizer a run gets (it once crashed on a hand-copied config)."""
    cmd = [sys.executable, "benchmarks/train_bench.py", "--quick", "--rounds", "1", "--steps", "1"]
    cmd += ["--warmup", "1"]
    r = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "full MX" in r.stdout and "hybrid" in r.stdout
