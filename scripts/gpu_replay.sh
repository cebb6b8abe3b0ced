#!/usr/bin/env bash
# The hardware replay on an H200: real pinned memory, real non-blocking D2H, real GDN kernels.
# Writes under $OUT (default data/replay): observed tables, summaries, the GPU test log.
#   SPECRACE_COMMIT=<commit> OUT=data/replay bash scripts/gpu_replay.sh
set -euo pipefail
OUT="${OUT:-data/replay}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1
py="${PYTHON:-python3}"
"$py" -m pytest -q -p no:cacheprovider -m gpu tests/gpu_check/test_replay.py 2>&1 \
    | tee "$OUT/pytest_replay_gpu.log"
for sc in minimal-race qwen35-mtp3; do
    case "$sc" in
        minimal-race) extra=(--reps 500) ;;
        qwen35-mtp3) extra=(--steps 200 --gdn) ;;
    esac
    "$py" -m gpu_check replay --device cuda --scenario "$sc" --policy all "${extra[@]}" \
        --out "$OUT/$sc"
    mv "$OUT/$sc/observed.parquet" "$OUT/observed_$sc.parquet"
    mv "$OUT/$sc/replay_summary.json" "$OUT/replay_summary_$sc.json"
    rmdir "$OUT/$sc"
done
"$py" -m sim compare "$OUT" --req-id R --step 4 2>/dev/null || true
ls -la "$OUT"
