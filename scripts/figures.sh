#!/usr/bin/env bash
# Regenerates docs/images/ from scratch (the README's pictures), with the commands a user runs.
# Deterministic: same commit -> same PNG/SVG bytes. About 2 minutes on 2 cores.
#   scripts/figures.sh            # PY=.venv/bin/python scripts/figures.sh to pick the interpreter
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
OUT=docs/images
WORKERS=${WORKERS:-0}   # 0: a Dask LocalCluster where it pays (sweep --workers), 1: serial
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$OUT"
rm -f "$OUT"/*.png "$OUT"/*.svg

# 1. The minimal race of docs/mechanism.md §9: step 4, R, under v0.23.0's synchronised gather
#    (`sim timeline` without --policy stacks every policy: too tall for a page, not drawn here).
$PY -m sim run --scenario minimal-race --out "$tmp/mr" > /dev/null
$PY -m sim timeline "$tmp/mr" --policy synced-gather --out "$OUT/timeline"

# 2. Phase diagram: consumed wrong counts over GPU forward time x worker launch cost.
$PY -m sim sweep --scenario qwen35-mtp3 --policy all --steps 1000 --seeds 2 --quiet \
    --vary timing.gpu_forward_ns_base=2000000,4000000,6000000,8000000,10000000 \
    --vary timing.worker_launch_ns=500000,1000000,1500000,2000000,3000000 \
    --workers "$WORKERS" --out "$tmp/phase"
$PY -m sim plot "$tmp/phase" --x set.timing.gpu_forward_ns_base \
    --y set.timing.worker_launch_ns --svg --out "$OUT/phase.png"

# 3. Hazard plot over the GPU forward time alone (the default launch cost).
$PY -m sim sweep --scenario qwen35-mtp3 --policy all --steps 1000 --seeds 2 --quiet \
    --vary timing.gpu_forward_ns_base=2000000,4000000,6000000,8000000,10000000 \
    --workers "$WORKERS" --out "$tmp/hazard"
$PY -m sim plot "$tmp/hazard" --svg --out "$OUT/hazard.png"

# 4. `make demo`'s run: its hazard summary (run --picture) and the margins of its wrong reads.
$PY -m sim run --policy all --seed 0 --steps 2000 --no-trace --picture --out "$tmp/demo" > /dev/null
# copied signed: outside a run folder, a picture carries its own proof that specrace wrote it
$PY -c 'import sys; from pathlib import Path; from sim.runs.io import atomic_write
data = Path(sys.argv[1]).read_bytes()
atomic_write(Path(sys.argv[2]), lambda tmp: tmp.write_bytes(data), sign=True)' \
    "$tmp/demo/hazard_summary.png" "$OUT/demo.png"
$PY -m sim plot "$tmp/demo" --svg --out "$OUT/margins.png"

# 5. The H200 replay of the minimal race, by landing position (committed data/replay).
$PY -m sim plot data/replay/observed_minimal-race.parquet --req R --step 4 --svg \
    --out "$OUT/landing.png"
# 6. One observed wrong read of #45100's A/B in vLLM 0.23.0 (committed data/vllm/ab).
$PY -m gpu_check vllm-figure data/vllm/ab/v0.23.0/none_s64_d20ms --out "$OUT/vllm-wrong-read.png"
ls -l "$OUT"
