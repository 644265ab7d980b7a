#!/usr/bin/env bash
# Validate mxsweep's CUDA path on a machine with an NVIDIA GPU (about 8 minutes on one H200):
#   1. correctness: the suite's CUDA tests; quant.quantize on CUDA bit-identical to the CPU reference for
#      every element format x scale x rounding x dtype on edge-case inputs; a converted Linear's y, dx, dW
#      vs CPU; stochastic rounding reproducible for a fixed seed
#   2. speed: quantize-dequantize of a 16384 x 16384 tensor vs x.clone() (target >= 60 % of its
#      bandwidth) and the LM training step, full MX vs bf16 (target <= 1.3x)
#   3. the instability study's canonical proxy (experiment=proxy_canonical) on CUDA for what the time
#      budget leaves: divergence/spike steps, LN-gamma clip fraction, twin cosine (a time-out here is
#      "incomplete"; re-running with the same --out resumes it)
#   4. a tiny LM through torchrun (nccl) and the 4-run smoke sweep on CUDA
# Usage: bash scripts/gpu_check.sh [--out DIR] [--only STEPS] [--timeout STEP=S] ...  (--help: all options)
# Writes DIR/gpu_check.json, DIR/gpu_check.md (one row per step: status, key numbers, seconds) and
# DIR/logs/ (default DIR: outputs/gpu_check). The steps and why: benchmarks/gpu_check.py.
# Exit status: 0 every step passed (the proxy may be incomplete), 1 a step failed, 2 bad arguments,
# 3 no CUDA GPU: both files say status "no_gpu" and nothing was checked, 130 interrupted.
# MXSWEEP_SKIP_SETUP=1 skips scripts/setup.sh (an already set-up .venv, e.g. offline).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ ${MXSWEEP_SKIP_SETUP:-0} == 1 ]] || bash scripts/setup.sh
exec .venv/bin/python benchmarks/gpu_check.py "$@"
