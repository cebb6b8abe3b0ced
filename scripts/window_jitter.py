"""How much the host's step-to-step spread differs between windows: the calibration's H200
passes against the pre-registered H100 rounds.

sim spreads the landing by the host's jitter (``jitter_frac``, fitted by
``gpu_check.vllm.calibrate`` on the H200's delay-0 passes). forward-28 found vLLM's CPU/GPU
boundary on the H100 steeper than the model's; a host that spreads less moves the landing less
from step to step. This prints, for every align pass at 0 ms with 16 sequences, the spread of
its ``sample_tokens`` host span: ``(p90 - p10) / (1.6 p50)`` over the decode-only steps whose copy
landed at entry, at the full batch, without the steps over 1.25 x the median (slow phases). It
is calibrate's statistic with a simpler slow-phase cut, so it is computed the same way on every
pass here, calibration included.

    python scripts/window_jitter.py

docs/forward-prediction.md ("forward-28") quotes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from gpu_check.vllm.calibrate import step_spans
from gpu_check.vllm.export import load_raw

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm"
PASSES = {  # label -> raw records (align, 16 sequences, 0 ms)
    "H200 calibration 0.24.0": ["v0.24.0", "v0.24.0-repeat"],
    "H200 calibration 0.33.0": ["v0.33.0"],
    **{f"H100 {r} {v}": [f"{r}/v{v}"] for r in ("forward-26", "forward-27", "forward-28")
       for v in ("0.24.0", "0.33.0")},
}  # fmt: skip


def host_spread(raw: Path, seqs: int = 16) -> float:
    """The pass's host jitter, as the module docstring defines it."""
    sp = step_spans(load_raw(raw))
    mode = sp["entry"] & ~sp["prefill"]
    mode &= sp["launch_to_d2h_ns"] <= 1.25 * sp.loc[mode, "launch_to_d2h_ns"].median()
    full = mode & (sp["num_reqs"] == seqs)
    p10, p50, p90 = np.percentile(sp.loc[full if full.sum() >= 10 else mode, "launch_to_d2h_ns"],
                                  [10, 50, 90])  # fmt: skip
    return float((p90 - p10) / (1.6 * p50))


def table() -> dict[str, list[float]]:
    """Per label, the spread of each of its passes, in file order."""
    return {
        label: [round(host_spread(f), 3) for run in runs
                for f in sorted((DATA / run / "raw").glob("raw_align_s16_d0ms*.json.gz"))]
        for label, runs in PASSES.items()
    }  # fmt: skip


def main() -> int:
    for label, xs in table().items():
        print(f"{label}: {', '.join(f'{x:.3f}' for x in xs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
