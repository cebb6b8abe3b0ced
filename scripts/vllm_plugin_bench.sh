#!/usr/bin/env bash
# On the GPU machine, from the folder scripts/vllm_inputs.sh built (copied there as bench.sh):
# `python -m gpu_check vllm-plugin-bench` (issue 46: what the plugin costs) in one device call.
#   T0=$(date +%s) ... cd /tmp/specrace-carry-<V> && VLLM_VERSION=<V> T0=$T0 bash bench.sh
#   T0       the call's start (epoch s), so the payload's unpacking counts (default: now)
#   DEADLINE seconds from T0 the whole call may take (default 545, for a 560 s call)
#   ROUNDS (default 8; the time limit may stop it earlier), CONFIGS (16:0), ARMS (the
#   command's default), NREQ (192), BENCH_ARGS (more options), TAG (names the results)
# $OUT gets at most 5 files: summary_<TAG>.json, rounds_<TAG>.csv, bench_<TAG>.log, and
# plugin_bench_<TAG>.tgz (the whole --out folder: watch/ JSONL included).
set -o pipefail
export PYTHONUNBUFFERED=1
here="$(cd "$(dirname "$0")" && pwd)"
t0="${T0:-$(date +%s)}"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
tag="${TAG:-${VLLM_VERSION:-newest}}"
res="/tmp/specrace-plugin-bench-$tag"; rm -rf "$res"  # a fresh machine: this is its own
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"
export SPECRACE_COMMIT="$(cat "$here/COMMIT" 2>/dev/null || echo unknown)"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/specrace-triton}" VLLM_CACHE_ROOT=/tmp/specrace-vcache
if [[ -f "$here/triton_cache.tgz" ]]; then mkdir -p "$TRITON_CACHE_DIR"; tar -C "$TRITON_CACHE_DIR" -xzf "$here/triton_cache.tgz"; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
left=$(( ${DEADLINE:-545} - ($(date +%s) - t0) - 15 ))  # 15 s to pack the results
limit=$(( left - 45 ))  # the bench starts no round it would not end in by then
echo "vllm-plugin-bench: ${left} s to run, rounds start until ${limit} s"
timeout -k 10 "$left" python3 -m gpu_check vllm-plugin-bench --carry "$here" \
    --vllm-version "${VLLM_VERSION:-}" --rounds "${ROUNDS:-8}" --configs "${CONFIGS:-16:0}" \
    ${ARMS:+--arms "$ARMS"} --num-requests "${NREQ:-192}" --time-limit "$limit" --out "$res" \
    ${BENCH_ARGS:-} 2>&1 | grep -v "jit_monitor\|interface.py:358" | tee "$OUT/bench_$tag.log"
rc=${PIPESTATUS[0]}
echo "vllm-plugin-bench rc=$rc after $(( $(date +%s) - t0 )) s"
cp "$res/summary.json" "$OUT/summary_$tag.json" 2>/dev/null
cp "$res/rounds.csv" "$OUT/rounds_$tag.csv" 2>/dev/null
tar -C "$res" -czf "$OUT/plugin_bench_$tag.tgz" . 2>/dev/null
ls -la "$OUT"
exit $rc
