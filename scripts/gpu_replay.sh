#!/usr/bin/env bash
# The hardware replay on an H200: real pinned memory, real non-blocking D2H, real GDN kernels.
# Writes under $OUT (default data/replay): observed tables, summaries, the GPU test log.
#   SPECRACE_COMMIT=<commit> OUT=data/replay bash scripts/gpu_replay.sh [all|drawn|simrun]
# drawn:  landings drawn over the row-op window (minimal-race x500, qwen35-mtp3 with --gdn)
# simrun: qwen35-mtp3 simulated by sim (1000 steps, every policy), then replayed with the
#         model's own op and landing times; the model's verdict sits beside the hardware's
# Needs simpy (and torch, triton): installed, or as wheels in .whl/ (installed to /tmp/site),
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl simpy==4.1.2 fla-core==0.6.0
set -euo pipefail
if ! python3 -c "import simpy" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
OUT="${OUT:-data/replay}"
MODE="${1:-all}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1
py="${PYTHON:-python3}"
if [ "$MODE" != simrun ]; then
    "$py" -m pytest -q -p no:cacheprovider -m gpu tests/gpu_check/replay/test_replay.py 2>&1 \
        | tee "$OUT/pytest_replay_gpu.log"
    for sc in minimal-race qwen35-mtp3; do
        case "$sc" in
            minimal-race) extra=(--reps 500) ;;
            qwen35-mtp3) extra=(--steps 200 --gdn) ;;
        esac
        "$py" -m gpu_check replay --device cuda --aim spin --scenario "$sc" --policy all "${extra[@]}" \
            --out "$OUT/$sc"
        mv "$OUT/$sc/observed.parquet" "$OUT/observed_$sc.parquet"
        mv "$OUT/$sc/replay_summary.json" "$OUT/replay_summary_$sc.json"
        rmdir "$OUT/$sc"
    done
fi
if [ "$MODE" != drawn ]; then
    sim_run="$(mktemp -d)/qwen35-mtp3"
    "$py" -m sim run --scenario qwen35-mtp3 --policy all --steps 1000 --seed 0 \
        --out "$sim_run" > /dev/null
    "$py" -m gpu_check replay --device cuda --aim spin --sim-run "$sim_run" \
        --out "$OUT/simrun"
    mv "$OUT/simrun/observed.parquet" "$OUT/observed_simrun_qwen35-mtp3.parquet"
    mv "$OUT/simrun/replay_summary.json" "$OUT/replay_summary_simrun_qwen35-mtp3.json"
    rmdir "$OUT/simrun"
fi
ls -la "$OUT"
