#!/usr/bin/env bash
# Issue #15's held-out check on an H200, in one command: qwen35-mtp3 simulated by sim at four
# GPU forward times (4.5, 5, 5.5, 6 ms) and two seeds (7, 11), 425 steps each (3,400 in all),
# each replayed on the GPU with the model's own op and landing times, once per landing aim:
# the calibrated spin and the GPU clock (gpu_check/replay/device_clock.py). Then `sim compare` of
# each aim's eight tables pooled (landing error, op-placement error, verdicts on close calls).
# Each run's files are copied into OUT only once complete, so a killed call leaves whole runs.
#   SPECRACE_COMMIT=<commit> OUT=data/replay/heldout bash scripts/landing_heldout.sh [AIMS]
# AIMS: a space-separated list of spin and device-clock (default both). Needs simpy (or .whl/).
set -euo pipefail
if ! python3 -c "import simpy" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT="${OUT:-data/replay/heldout}"
AIMS="${1:-spin device-clock}"
py="${PYTHON:-python3}"
work="$(mktemp -d)"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
for fwd in 4500000 5000000 5500000 6000000; do
    for seed in 7 11; do
        name="fwd${fwd}_seed${seed}"
        "$py" -m sim run --scenario qwen35-mtp3 --policy all --steps 425 --seed "$seed" \
            --set "timing.gpu_forward_ns_base=$fwd" --out "$work/sim_$name" > /dev/null
        for aim in $AIMS; do
            "$py" -m gpu_check replay --device cuda --aim "$aim" --sim-run "$work/sim_$name" \
                --out "$work/rp_${aim}_$name" > /dev/null
            for f in observed.parquet replay_summary.json; do  # whole files only (cp, then mv)
                cp "$work/rp_${aim}_$name/$f" "$OUT/.partial"
                mv "$OUT/.partial" "$OUT/${f%%.*}_${aim}_$name.${f#*.}"
            done
        done
    done
done
for aim in $AIMS; do  # all eight runs of an aim pooled (sim compare keeps their steps apart)
    echo "== $aim: $OUT/observed_${aim}_*.parquet"
    "$py" -m sim compare "$OUT"/observed_"${aim}"_*.parquet | sed -n '/landing and op/,$p'
done | tee "$OUT/compare_${AIMS// /_}.txt"
