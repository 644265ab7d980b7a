#!/usr/bin/env bash
# The README's main job: set up (idempotent), then
#   1. the MX numerics demo (format table, LayerNorm clamping, block-size effect, gradient fidelity),
#   2. one short real training run through launch.py (the proxy, full MX E4M3 incl. LN-γ, fp32 twin),
#   3. the quantizer benchmark in its quick form (full size: .venv/bin/python benchmarks/quant_bench.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m quant.demo
.venv/bin/python launch.py task=proxy model.width=128 model.depth=4 train.steps=300 \
  precision.w=fp8_e4m3 precision.a=fp8_e4m3 precision.norm_affine=fp8_e4m3 \
  out_dir="outputs/main/proxy-mxfp8-$(date +%Y%m%d-%H%M%S)"
exec .venv/bin/python benchmarks/quant_bench.py --quick "$@"
