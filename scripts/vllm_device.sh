#!/usr/bin/env bash
# On the GPU machine, from the folder scripts/vllm_inputs.sh built (carried as .vllmcarry):
#   cd .vllmcarry && MODES=align,none CONFIGS=16:0,64:0 bash run.sh
#   RUN_TIMEOUT bounds vllm-run (s, default 590; leave time for the exports); TAG names the results (default the version);
#   RUN_ARGS adds vllm-run options (--runner v2: MRv2, the only runner from vLLM 0.34.0); SAVE_TRITON=1 returns the Triton cache;
#   EXPORT=0 skips the exports here (each is a process of its own, a few seconds of device time)
# Runs `python -m gpu_check vllm-run` with this folder's code, then exports every raw record
# and packs results into $OUT (8 files at most come back: the raw records travel as one tar).
set -o pipefail
export PYTHONUNBUFFERED=1
here="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
tag="${TAG:-${VLLM_VERSION:-newest}}"  # names this call's results (two runs of one release)
res="${RES:-/tmp/specrace-vllm-$tag}"; mkdir -p "$res"
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"
export SPECRACE_COMMIT="$(cat "$here/COMMIT" 2>/dev/null || echo unknown)"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/specrace-triton}" VLLM_CACHE_ROOT=/tmp/specrace-vcache
if [[ -f "$here/triton_cache.tgz" ]]; then mkdir -p "$TRITON_CACHE_DIR"; tar -C "$TRITON_CACHE_DIR" -xzf "$here/triton_cache.tgz"; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
timeout -k 10 "${RUN_TIMEOUT:-590}" python3 -m gpu_check vllm-run --carry "$here" --modes "${MODES:-align,none}" --vllm-version "${VLLM_VERSION:-}" \
    --configs "${CONFIGS:-16:0,64:0}" --num-requests "${NREQ:-192}" --out "$res" ${RUN_ARGS:-} \
    2>&1 | grep -v "jit_monitor\|interface.py:358" | tee "$res.log"  # vllm-run wants --out empty
rc=${PIPESTATUS[0]}
cp "$res.log" "$res/run.log" 2>/dev/null
echo "vllm-run rc=$rc after $(( $(date +%s) - t0 )) s"
for raw in "$res"/raw_*.json; do
    [[ -f "$raw" && "${EXPORT:-1}" != 0 ]] || continue  # EXPORT=0: export on the workstation
    name="$(basename "$raw" .json)"; name="${name#raw_}"
    python3 -m gpu_check vllm-export "$raw" --out "$res/$name" > /dev/null || echo "export $name failed"
done
cp "$res/summary.json" "$OUT/summary_$tag.json" 2>/dev/null
tar -C "$res" -czf "$OUT/results_$tag.tgz" .
if [[ -n "${SAVE_TRITON:-}" ]]; then tar -C "$TRITON_CACHE_DIR" -czf "$OUT/triton_cache.tgz" .; fi
ls -la "$OUT"
exit $rc
