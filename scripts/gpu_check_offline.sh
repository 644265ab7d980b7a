#!/usr/bin/env bash
# scripts/gpu_check.sh for a GPU machine that reaches no package registry: no .venv is built; the
# machine's own python3 (which must hold a CUDA build of torch, numpy, pandas, scipy, matplotlib, pyyaml,
# filelock, tqdm, safetensors, threadpoolctl, joblib, cloudpickle) runs the check, and mxsweep's
# pure-Python dependencies that such images lack (hydra-core, omegaconf, antlr4-python3-runtime,
# submitit and the two Hydra launcher plugins) come as wheels from a folder you carry there.
# Prepare the folder where pip works (pure-Python wheels, any platform):
#   pip download --no-deps -d .whl hydra-core==1.3.8 omegaconf==2.3.1 submitit==1.5.4 \
#       hydra-submitit-launcher==1.2.0 hydra-joblib-launcher==1.2.0
#   pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3   # published as an sdist only
# then on the GPU machine, from the repository root:
#   MXSWEEP_WHEELS=.whl bash scripts/gpu_check_offline.sh --out DIR [gpu_check options]
# wandb is not needed: the check disables the logger, and tests/test_wandb.py skips without it.
# Exit status: gpu_check.py's, or 2 when the wheels are missing or mxsweep does not import.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=${MXSWEEP_WHEELS:-.whl}
python=${PYTHON:-python3}
site=${MXSWEEP_SITE:-/tmp/mxsweep-site}
if ! compgen -G "$wheels/*.whl" >/dev/null; then
    echo "gpu_check_offline: no wheels in $wheels (set MXSWEEP_WHEELS; see this script's header)" >&2
    exit 2
fi
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$wheels"/*.whl
# The repository root too: launch.py's children import mxsweep's packages from the source tree.
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Fail in seconds, not after a step's time-out, when something the check needs does not import.
if ! "$python" -c "import hydra, omegaconf, submitit, launch, quant, train.loop, analysis" 2>&1; then
    echo "gpu_check_offline: mxsweep does not import with $python and $wheels" >&2
    exit 2
fi
exec "$python" benchmarks/gpu_check.py "$@"
