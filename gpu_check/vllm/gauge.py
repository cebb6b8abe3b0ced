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
data/vllm/gauge`` shows from every committed pass how it tracks the pass's step time.

**When it measures the host alone** (``host_gauge_pure``): align waits for the copy before the
span (in ``_prepare_inputs``), so its span is host work at any GPU delay; ``none``'s sampler
synchronises with the GPU, so its span is host work only at delay 0. A gauge that is not pure
still counts, but includes GPU time and is not a host speed.

**Reading it from a vLLM log**: a user can take the same number from their own vLLM with
``VLLM_TORCH_PROFILER_DIR`` or an NVTX trace: the median, over decode-only steps, of the span
from ``GPUModelRunner._prepare_inputs`` returning to ``GPUModelRunner.sample_tokens`` issuing
the counts copy (``num_accepted_tokens`` ``copy_(non_blocking=True)``); ``python -m sim risk
--host-gauge MS`` takes it in milliseconds for the batch size the user runs.
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


# -- the evidence: does the gauge track the pass's speed? ----------------------------------------
def gauge_rows(roots: list[Any]) -> list[dict[str, Any]]:
    """One row per exported V1 pass under ``roots``: its configuration group
    (:func:`gpu_check.vllm.repeatability.pass_key`), gauge, median step and copy-at-entry share."""
    import json

    from gpu_check.vllm.repeatability import find_passes

    rows = []
    for key, passes in find_passes(roots).items():
        cfg = json.loads(key)
        for folder, gauge in passes.items():
            exp = json.loads((folder / "export.json").read_text())
            steps = max(int(exp["steps"]), 1)
            rows.append({
                "pass": str(folder), "vllm": cfg["vllm"], "mode": cfg["mode"],
                "k": cfg["k"], "max_num_seqs": int(exp["max_num_seqs"]),
                "gpu_delay_ms": int(exp["gpu_delay_us"]) / 1000, "group": key,
                "host_gauge_ms": gauge,
                "host_gauge_pure": exp["mode"] == "align" or int(exp["gpu_delay_us"]) == 0,
                "step_ms": exp["step_interval_ms_median"],
                "entry_share": round(int(exp["steps_landed_at_update_states"]) / steps, 4),
            })  # fmt: skip
    return rows


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 3 or np.std(x) == 0 or np.std(y) == 0:
        return None
    return round(float(np.corrcoef(x, y)[0, 1]), 3)


def gauge_evidence(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How the gauge tracks step time, and how far it spreads.

    - ``host_only``: passes whose step is host work alone (delay 0: the copy lands at entry in
      >= 95 % of steps): Pearson r of log gauge against log median step, across passes and
      within configurations (each pass over its configuration's median, groups of >= 2).
    - ``spread``: the gauge of each pure pass over the median of its (release, mode, seqs, k)
      group's pure passes: quantiles of that ratio, per release and pooled; the host speeds a
      forecast must treat as plausible."""
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df[df["host_gauge_ms"].notna() & df["step_ms"].notna()]
    host = df[(df["gpu_delay_ms"] == 0) & (df["entry_share"] >= 0.95) & df["host_gauge_pure"]]
    lg, ls = np.log(host["host_gauge_ms"].to_numpy(float)), np.log(host["step_ms"].to_numpy(float))
    within = host.groupby("group").filter(lambda g: len(g) >= 2)
    wg = np.log(within["host_gauge_ms"]) - within.groupby("group")["host_gauge_ms"].transform(
        lambda s: np.log(s).median()
    )
    ws = np.log(within["step_ms"]) - within.groupby("group")["step_ms"].transform(
        lambda s: np.log(s).median()
    )
    pure = df[df["host_gauge_pure"]].copy()
    shape = ["vllm", "mode", "max_num_seqs", "k"]
    pure["ratio"] = pure["host_gauge_ms"] / pure.groupby(shape)["host_gauge_ms"].transform("median")
    multi = pure[pure.groupby(shape)["ratio"].transform("size") >= 2]

    def q(s: Any) -> dict[str, Any]:
        a = s.to_numpy(float)
        return {"passes": int(a.size), **{f"q{p:02d}": round(float(np.quantile(a, p / 100)), 3)
                                          for p in (5, 10, 50, 90, 95)},
                "min": round(float(a.min()), 3), "max": round(float(a.max()), 3)}  # fmt: skip

    return {
        "definition": "median sample_tokens host span (prepare_inputs end -> counts D2H issued) "
        "over decode-only steps, ms (gpu_check.vllm.gauge)",
        "host_only": {
            "passes": int(len(host)),
            "r_log_gauge_log_step_across": _pearson(lg, ls),
            "within_configuration_passes": int(len(within)),
            "within_configuration_groups": int(within["group"].nunique()),
            "r_log_gauge_log_step_within": _pearson(wg.to_numpy(float), ws.to_numpy(float)),
            "slope_log_step_on_log_gauge_within": (
                round(float(np.polyfit(wg, ws, 1)[0]), 3) if len(within) >= 3 else None
            ),
        },
        "spread": {
            "pooled": q(multi["ratio"]),
            "per_release": {v: q(g["ratio"]) for v, g in multi.groupby("vllm")},
        },
    }


def write_gauge(roots: list[Any], out: Any) -> dict[str, Any]:
    """``vllm-gauge``: ``gauge.csv`` (one row per pass) and ``summary.json`` under ``out``."""
    import pandas as pd

    from sim.runs.io import atomic_write_text, write_json
    from sim.runs.outputs import claim_dir

    rows = gauge_rows(roots)
    doc = gauge_evidence(rows)
    claim_dir(out, "vllm-gauge")
    atomic_write_text(
        out / "gauge.csv",
        pd.DataFrame(rows).drop(columns="group").to_csv(index=False, lineterminator="\n"),
    )
    write_json(out / "summary.json", doc)
    return doc
