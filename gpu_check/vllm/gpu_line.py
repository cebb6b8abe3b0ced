"""The GPU's step in sim's timing, fitted from vLLM's GPU-bound align passes
(:func:`gpu_check.vllm.calibrate.calibrate` selects them and gives each concurrency's host
gap). Past the CPU/GPU boundary align waits for the counts, so the interval from one read of
the counts to the next is the GPU's step plus that gap: per step, a line in the GPU delay and
the step's tokens, plus a fixed GPU time on a step with a prefill chunk
(docs/timing.md, docs/forward-prediction.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.model.params import TimingParams

MIN_MODE_STEPS = 10  # steps of one batch shape a spread is read from


def fit_gpu_line(
    bound: list[Any], spans: dict[Path, pd.DataFrame], prior: TimingParams, gap: dict[int, int]
) -> dict[str, Any]:
    """The line's coefficients, the GPU's own spread and the fit's residual, from the
    GPU-bound passes ``bound`` (``calibrate.Measured``), their step spans and ``gap``, the host
    gap per concurrency between the counts landing and the next forward's launch."""
    seqs = sorted(gap)
    # per step, from its read of the counts to the next's, less the host's gap: a line in the
    # delay and the step's tokens, plus a fixed GPU time on a step with a prefill chunk (the
    # median of all steps had folded it into every step); least absolute deviations, so that
    # the few host-paced intervals (slow phases) do not pull it
    d = pd.concat([spans[c.folder].dropna(subset=["gpu_interval_ns"]).assign(
        delay=c.gpu_delay_us * 1e3, y=lambda t, c=c: t["gpu_interval_ns"] - gap[c.max_num_seqs],
        seqs=c.max_num_seqs) for c in bound], ignore_index=True)  # fmt: skip
    x = np.column_stack([np.ones(len(d)), d["delay"], d["tokens"], d["prefill"].astype(float)])
    coef = lad(x, d["y"].to_numpy(np.float64))
    const, slope, per_token, prefill = (float(v) for v in coef)
    tokens = {s: float(d.loc[d["seqs"] == s, "tokens"].median()) for s in seqs}
    intercepts = {s: const + per_token * tokens[s] + gap[s] for s in seqs}
    # the drafter runs while the host prepares the next step (gap > drafter): not in the line
    fwd_base = const - prior.gpu_prep_ns - prior.gpu_sample_ns
    spread = []
    for c in bound:  # one batch shape: full decode-only steps (the prefill ones add tokens)
        one = spans[c.folder]
        full = one["num_reqs"] == c.max_num_seqs
        iv = one.loc[full & ~one["prefill"], "interval_ns"]
        if len(iv) < MIN_MODE_STEPS:  # 64 seqs: few full steps, nearly all with a prefill
            iv = one.loc[full, "interval_ns"]
        if len(iv) >= MIN_MODE_STEPS:
            p10_, p50_, p90_ = np.percentile(iv, [10, 50, 90])
            spread.append((p90_ - p10_) / (1.6 * p50_))
    return {
        "configs": [f"{c.run}/{c.folder.name}" for c in bound],
        # the tightest GPU-bound run bounds the GPU's own spread (elsewhere the host's slow
        # phases reach past the GPU step and widen the interval: 16 seqs, 0.18-0.21)
        "gpu_jitter_frac": round(min(float(np.min(spread)), 0.9), 4) if spread else -1.0,
        "slope": round(slope, 4),
        "intercept_ns": {str(s): int(round(v)) for s, v in intercepts.items()},
        "host_gap_ns": {str(s): int(v) for s, v in gap.items()},
        "tokens_per_step": {str(s): tokens[s] for s in seqs},
        "gpu_forward_ns_per_token": int(round(per_token)),
        "gpu_forward_ns_prefill": max(int(round(prefill)), 0),
        "gpu_forward_ns_base": int(round(fwd_base)),
        "residual_ms_median": round(float(np.median(np.abs(x @ coef - d["y"]))) / 1e6, 3),
    }


def lad(x: np.ndarray, y: np.ndarray, rounds: int = 50) -> np.ndarray:
    """Least absolute deviations by iteratively reweighted least squares (from the LS fit)."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    for _ in range(rounds):
        w = 1 / np.sqrt(np.maximum(np.abs(y - x @ coef), 1e3))  # 1 us floor
        coef, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
    return coef
