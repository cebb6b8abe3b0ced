#!/usr/bin/env bash
# Everything gpu_check measures on an H200, in one run; results under $OUT (8 files, the
# layout of data/bench/; default out/gpu_run).
#
#   OUT=data/bench bash scripts/gpu_run.sh   # full run: GPU tests, recall, padding graphs,
#                                            # benchmark and the 36-config kernel sweep
#   bash scripts/gpu_run.sh smoke            # no sweep, benchmark at N = 64 only
#   bash scripts/gpu_run.sh nosweep          # everything but the 36-config sweep
#
# Needs fla-core 0.6.0: installed, or as a wheel in .whl/ (installed to /tmp/site here).
# Never touches GPU clocks or settings. Exits non-zero if any stage failed; later stages still run.
set -uo pipefail
OUT=${OUT:-out/gpu_run}
MODE=${1:-full}
mkdir -p "$OUT"
export FLA_DISABLE_BACKEND_DISPATCH=1 FLA_CACHE_RESULTS=0 PYTHONUNBUFFERED=1
if ! python3 -c "import fla" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
failed=()

stage() {  # stage NAME SECONDS CMD...: run under a time limit, time it, remember failures
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  echo "=== $name"
  timeout "$limit" "$@" || failed+=("$name")
  echo "=== $name: $((SECONDS - t0)) s"
}

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import sys, torch, triton, fla; print(sys.version.split()[0], torch.__version__, \
triton.__version__, fla.__version__, torch.cuda.get_device_name())"
} 2>&1

PYTEST="python3 -m pytest tests/gpu_check -p no:cacheprovider -q"
stage pytest-gpu 240 bash -c "set -o pipefail; $PYTEST -m gpu -rA 2>&1 | tee '$OUT/pytest_gpu.log'"
stage pytest-rest 150 bash -c "set -o pipefail; $PYTEST -m 'not gpu' 2>&1 \
  | tee '$OUT/pytest_device_not_gpu.log' | tail -n 3"
stage recall 120 bash -c "python3 -m gpu_check recall --device cuda --json > '$OUT/recall.json' \
  && python3 -m gpu_check recall --device cuda"
stage padding 120 bash -c "python3 -m gpu_check padding --num-reqs 72 --k 3 --device cuda --json \
  > '$OUT/padding.json' && python3 -m gpu_check padding --num-reqs 72 --k 3 --device cuda"
if [ "$MODE" = smoke ]; then
  stage bench 300 python3 -m gpu_check bench --out "$OUT" --ns 64
elif [ "$MODE" = nosweep ]; then
  stage bench 300 python3 -m gpu_check bench --out "$OUT"
else
  stage sweep 300 python3 -m gpu_check bench --sweep --ns 8,64,256 --out "$OUT" --name sweep
  stage bench 300 python3 -m gpu_check bench --out "$OUT"
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED stages: ${failed[*]}"
  exit 1
fi
echo "all stages passed"
