#!/usr/bin/env bash
# The README's main job: set up (idempotent), then
#   1. a small complete LM precision study on this machine: experiment=lm_precisions (conf/experiment/)
#      sliced to four formats (bf16, MXFP8 E4M3, MXFP6 E2M3, MXFP4 E2M1; weights, activations and
#      gradients) × three of its four budgets (3e10, 1e11, 3e11 FLOPs: 10x apart; 2e11 is left out to
#      keep the job under 5 minutes on 2 cores without AVX-512) and their model sizes (7 runs each) × one
#      seed: 28 byte-level LMs on litmix, trained two at a time on the bounded local pool
#      (hydra/launcher=pool), ~3–4 min on 2 cores. Re-running it launches nothing already finished and
#      resumes anything interrupted.
#   2. the sweep's status, then the analysis report: the precision-aware law (one effective-parameter
#      multiplier per format, bootstrap intervals) first, Δ loss vs bf16, per-precision fits, figures.
# Extra arguments go to the sweep, e.g. `bash scripts/main.sh sweep.dry_run=true`.
# The whole study (9 formats × 3 seeds, 243 runs, ~40 min): .venv/bin/python launch.py -m experiment=lm_precisions
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Tiny models on 2 cores: one thread per process, and the C quantizer (eager where it does not apply:
# no compile time) are fastest.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MXSWEEP_QUANT_BACKEND="${MXSWEEP_QUANT_BACKEND:-native}"
name=main
sweep_dir="outputs/sweeps/$name"
start=$(date +%s)
formats='[{name:bf16,precision:bf16},{name:mxfp8_e4m3,precision:mxfp8_e4m3},'
formats+='{name:mxfp6_e2m3,precision:mxfp6_e2m3},{name:mxfp4_e2m1,precision:mxfp4_e2m1}]'
.venv/bin/python launch.py -m experiment=lm_precisions sweep.name="$name" logger=disabled \
  "sweep.precisions=$formats" 'sweep.seeds=[0]' 'budget.flops=[3e10,1e11,3e11]' "$@"
echo "sweep took $(($(date +%s) - start)) s"
[[ -d $sweep_dir ]] || exit 0 # a dry run writes nothing
.venv/bin/python launch.py --status "$sweep_dir"
.venv/bin/python -m analysis report "$sweep_dir"
echo "main job done in $(($(date +%s) - start)) s; report: $sweep_dir/report.md"
