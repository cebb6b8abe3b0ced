"""The host-speed gauge of a vLLM pass, defined once (issue #44).

**Definition.** ``host_gauge_ms``: the median, over the pass's decode-only steps (no request
with a prefill chunk; steps 2 on), of the worker's ``sample_tokens`` host span, from
``_prepare_inputs`` end to the accepted counts' D2H being issued (``t_d2h_issued -
t_read_end`` in the raw record): the eager forward launch plus the sampler. It is the same span
``gpu_check.vllm.calibrate`` takes as ``worker_sample_tokens_ns``.

**Why this span.** It is the largest host span of a step (7-12 ms of a 15-40 ms step on the
H200), it has one tight mode on decode-only steps (p10-p90 within +-5 % of its median outside
the slow phases, data/vllm/README.md), k leaves it alone (the drafter's span grows with k, this
one does not: ``calibration.rpc_per_k``), and every other host span slows with it (correlation
0.90 with the drafter gap, issue #44). ``python -m gpu_check vllm-gauge data/vllm --out
data/vllm/gauge`` (:mod:`gpu_check.vllm.gauge_evidence`) shows from every committed pass how
it tracks the pass's step time.

**When it measures the host alone** (``host_gauge_pure``): align waits for the copy before the
span (in ``_prepare_inputs``), so its span is host work at any GPU delay; ``none``'s sampler
synchronises with the GPU, so its span is host work only at delay 0. A gauge that is not pure
still counts, but includes GPU time and is not a host speed.

**Reading it from a vLLM log**: a user can take the same number from their own vLLM with
``VLLM_TORCH_PROFILER_DIR`` or an NVTX trace: the median, over decode-only steps, of the span
from ``GPUModelRunner._prepare_inputs`` returning to ``GPUModelRunner.sample_tokens`` issuing
the counts copy (``num_accepted_tokens`` ``copy_(non_blocking=True)``); ``python -m sim risk
--host-gauge MS`` takes it in milliseconds for the batch size the user runs. Read it from the
same deployment the question is about: the span differs between align and none (0.95 x align's
on the H100s of forward-28 and forward-29), and a gauge taken in one mode and applied to the
other's timing put 0.24.0's none about 10 % fast (docs/forward-prediction.md, "Gauged by
mode").
"""

from __future__ import annotations

from typing import Any

import numpy as np

GAUGE_KEYS = ("host_gauge_ms", "host_gauge_steps", "host_gauge_pure")
MIN_STEPS = 5  # fewer decode-only steps than this: no gauge (None)


def decode_only(step: dict[str, Any]) -> bool:
    """No request of the step is still in its prompt (no prefill chunk)."""
    return not any(c < p for c, p in zip(step["num_computed"], step["num_prompt"], strict=True))


def sample_spans_ns(steps: list[dict[str, Any]]) -> np.ndarray:
    """The sample_tokens host span (ns) of every decode-only step from step 2 on."""
    out = [
        int(s["t_d2h_issued"]) - int(s["t_read_end"])
        for s in steps[2:]
        if "t_d2h_issued" in s and "t_read_end" in s and "num_computed" in s and decode_only(s)
    ]
    return np.asarray(out, dtype=np.float64)


def host_gauge(raw: dict[str, Any]) -> dict[str, Any]:
    """``host_gauge_ms`` (None where fewer than :data:`MIN_STEPS` decode-only steps carry the
    span), the steps it is the median of, and whether it is host work alone."""
    steps = [s for s in raw.get("steps", []) if "req_ids" in s]
    spans = sample_spans_ns(steps)
    pure = raw.get("mode") == "align" or int(raw.get("config", {}).get("gpu_delay_us", 0)) == 0
    gauge = round(float(np.median(spans)) / 1e6, 3) if spans.size >= MIN_STEPS else None
    return {"host_gauge_ms": gauge, "host_gauge_steps": int(spans.size), "host_gauge_pure": pure}


def sample_tokens_ms(raw: dict[str, Any]) -> float:
    """The pass's host speed without :data:`MIN_STEPS`: the median sample_tokens host span
    over its decode-only steps, ms (what :func:`host_gauge` reports where enough steps carry it)."""
    spans = sample_spans_ns([s for s in raw["steps"] if "req_ids" in s])
    return round(float(np.median(spans)) / 1e6, 3)


def step_populations(raw: dict[str, Any]) -> dict[str, Any]:
    """The pass's step durations split by whether the step carries a prefill chunk: a step
    lasts from its ``t_enter`` to the next step's (steps 1 on). ``decode_ms`` / ``prefill_ms``:
    each population's median (None where it has no step), with its count; ``all_ms``: the
    median of every step, #23's statistic, which on align falls at the edge of the prefill
    population (docs/forward-prediction.md, "A fit per window")."""
    steps = [s for s in raw.get("steps", []) if "req_ids" in s and "t_enter" in s
             and "num_computed" in s]  # fmt: skip
    dec: list[float] = []
    pre: list[float] = []
    for a, b in zip(steps[1:], steps[2:], strict=False):
        (dec if decode_only(a) else pre).append((int(b["t_enter"]) - int(a["t_enter"])) / 1e6)
    return {
        "decode_ms": float(np.median(dec)) if dec else None, "decode_steps": len(dec),
        "prefill_ms": float(np.median(pre)) if pre else None, "prefill_steps": len(pre),
        "all_ms": float(np.median(dec + pre)) if dec or pre else None,
    }  # fmt: skip
