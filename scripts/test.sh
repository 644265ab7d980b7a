#!/usr/bin/env bash
# The README's test command: set up (idempotent), lint, then the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Two workers by default (MXSWEEP_TEST_WORKERS=0: one process); a file's tests stay on one worker, in
# order (--dist loadfile), so module fixtures and the SLURM cluster's session are shared as before;
# files in tests/conftest.py's order (longest first), not xdist's (most tests first).
exec .venv/bin/python -m pytest -q -n "${MXSWEEP_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
