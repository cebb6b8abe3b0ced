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

Then it runs the obvious what-if on forward-28 (``what_if``): sim given the round's gauge with
the calibration's host jitter at a quarter, the entry share per configuration beside vLLM's.

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


def what_if(scale: float = 0.25) -> list[dict[str, float | str]]:
    """forward-28's 0.24.0 align configurations (first round): vLLM's entry share against sim's
    given the round's gauge (the factor ``vllm-outcome`` used), with the frozen calibration's
    host jitter as it is and times ``scale``. Nothing is written."""
    from dataclasses import replace

    from gpu_check.vllm.prereg_forecast import first_round_entries

    return first_round_entries(DATA / "preregistered" / "forward-28", "0.24.0", {
        "sim": lambda t: t,
        "sim_scaled": lambda t: replace(t, jitter_frac=t.jitter_frac * scale),
    })  # fmt: skip


def main() -> int:
    for label, xs in table().items():
        print(f"{label}: {', '.join(f'{x:.3f}' for x in xs)}")
    print("forward-28, 0.24.0 align, entry share: vLLM / sim given the gauge / sim with the "
          "host jitter x 0.25")  # fmt: skip
    for r in what_if():
        print(f"  {r['config']}: {r['vllm']:.2f} / {r['sim']:.2f} / {r['sim_scaled']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
