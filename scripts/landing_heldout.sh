#!/usr/bin/env bash
# Issue #15's held-out check on an H200, in one command: qwen35-mtp3 simulated by sim at four
# GPU forward times (4.5, 5, 5.5, 6 ms) and two seeds (7, 11), 425 steps each (3,400 in all),
# each replayed on the GPU with the model's own op and landing times, once per landing aim:
# the calibrated spin and the GPU clock (gpu_check/device_clock.py). Then `sim compare` of
# every observed table (landing error, op-placement error, verdicts on close calls).
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
            cp "$work/rp_${aim}_$name/observed.parquet" "$OUT/observed_${aim}_$name.parquet"
            cp "$work/rp_${aim}_$name/replay_summary.json" "$OUT/replay_summary_${aim}_$name.json"
        done
    done
done
for aim in $AIMS; do  # all eight runs of an aim in one table: the figures the issue asks for
    "$py" - "$OUT" "$aim" <<'PY'
import sys
from pathlib import Path

import pandas as pd

out, aim = Path(sys.argv[1]), sys.argv[2]
parts = []
for f in sorted(out.glob(f"observed_{aim}_fwd*.parquet")):
    df = pd.read_parquet(f)
    df["step"] = df["step"] + 100_000 * len(parts)  # steps of different runs stay apart
    parts.append(df)
pd.concat(parts, ignore_index=True).to_parquet(out / f"pooled_{aim}.parquet", index=False)
PY
done
for aim in $AIMS; do
    for f in "$OUT/pooled_${aim}.parquet" "$OUT"/observed_"${aim}"_*.parquet; do
        echo "== $f"
        "$py" -m sim compare "$f" | tail -n 12
    done
done | tee "$OUT/compare_${AIMS// /_}.txt"
