"""Running ``launch.py`` (and other entry points) in a child process, as the end-to-end tests do.

The child's environment: the native quantizer (``quant.native``'s C loop where it applies, the eager
reference elsewhere; bit-identical to eager, tested in tests/quant, no per-spec compiles, and what
``scripts/main.sh`` runs: about half the time of eager on the tiny MX runs these tests train), one
thread (CPU float results depend on the thread count, and several tests assert bit-identity), and
wandb off. ``HYDRA_FULL_ERROR`` is dropped so error messages are the one-line ones users see.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "MXSWEEP_QUANT_BACKEND": "native", "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    return {**env, **extra}


def launch(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python launch.py *args`` from the repository root, output captured."""
    return subprocess.run(
        [sys.executable, "launch.py", *args],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
