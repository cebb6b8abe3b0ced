"""Each runner step's interval (``t_enter`` to the next step's), split by whether the step
carries a prefill chunk: the median of each population and of all, per raw record; and the
``sample_tokens`` host span the same way (decode-only: the pass's gauge,
``gpu_check.vllm.gauge``; with a prefill chunk: its ratio to the gauge).

    python scripts/step_populations.py data/vllm/v0.24.0/raw/raw_align_s16_d0ms.json.gz ...

docs/forward-prediction.md ("A step gauge, tried on forward-25's first half") quotes it for
0.24.0 and 0.33.0, align and none, 16 sequences, 0 ms: the calibration's runs
(``data/vllm/v<release>/``) against forward-25's first processes on the H100.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

from gpu_check.vllm.gauge import decode_only, sample_spans_ns, step_populations


def populations(path: Path) -> dict[str, float | int]:
    raw = json.loads(gzip.decompress(path.read_bytes()))
    steps = [s for s in raw["steps"] if "req_ids" in s and "t_enter" in s and "num_computed" in s]
    pops = step_populations(raw)
    gauge = float(np.median(sample_spans_ns(steps))) / 1e6  # decode-only steps, 2 on
    prefill_span = [s["t_d2h_issued"] - s["t_read_end"] for s in steps[2:]
                    if "t_d2h_issued" in s and not decode_only(s)]  # fmt: skip
    return {**pops, "gauge_ms": gauge,
            "prefill_span_ms": float(np.median(prefill_span)) / 1e6}  # fmt: skip


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        p = populations(Path(arg))
        print(f"{arg}: decode-only {p['decode_steps']} steps, median {p['decode_ms']:.2f} ms; "
              f"with a prefill chunk {p['prefill_steps']}, {p['prefill_ms']:.2f} ms; "
              f"all {p['all_ms']:.2f} ms; sample_tokens span: gauge {p['gauge_ms']:.2f} ms, "
              f"with a prefill chunk {p['prefill_span_ms']:.2f} ms "
              f"({p['prefill_span_ms'] / p['gauge_ms']:.2f} x)")  # fmt: skip
