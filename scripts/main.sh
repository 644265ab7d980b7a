#!/usr/bin/env bash
# The README's main job: set up (idempotent), then
#   1. a small real precision_grid sweep on this machine (conf/experiment/precision_grid.yaml sliced to
#      3 × 3 MX weight × activation pairs over {fp8_e4m3, fp8_e5m2, bf16} at its smallest budget, 1e11
#      FLOPs, over its two shapes: 18 byte-level LMs on litmix, ~2-3 min on 2 cores). Re-running it
#      launches nothing already finished and resumes anything interrupted.
#   2. the sweep's status, then the analysis report (report.md, tables, fits, figures) if analysis/ has it.
# Extra arguments go to the sweep, e.g. `bash scripts/main.sh sweep.dry_run=true`.
# The whole study: .venv/bin/python launch.py -m experiment=precision_grid (150 runs, ~1.5 h).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Tiny models on 2 cores: one thread per process, and the C quantizer (eager where it does not apply:
# no compile time) are fastest.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MXSWEEP_QUANT_BACKEND="${MXSWEEP_QUANT_BACKEND:-native}"
name=main_precision_grid
sweep_dir="outputs/sweeps/$name"
start=$(date +%s)
.venv/bin/python launch.py -m experiment=precision_grid sweep.name="$name" logger=disabled \
  'sweep.w=[fp8_e4m3,fp8_e5m2,bf16]' 'sweep.a=[fp8_e4m3,fp8_e5m2,bf16]' 'budget.flops=[1e11]' "$@"
echo "sweep took $(($(date +%s) - start)) s"
[[ -d $sweep_dir ]] || exit 0 # a dry run writes nothing
.venv/bin/python launch.py --status "$sweep_dir"
.venv/bin/python -m analysis report "$sweep_dir"
echo "main job done in $(($(date +%s) - start)) s; report: $sweep_dir/report.md"
