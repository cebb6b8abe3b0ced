"""How long after a D2H copy's bytes are visible in pinned memory does its event say so?

``vllm-run`` places each step's landing among the row ops by ``event.query()`` polled before
and after every op: it sees the event, not the bytes. If the bytes are visible earlier, an op
that ran between the bytes and the event's completion is placed after the landing when it in
fact ran after it. This measures that lag on the device:

- the GPU spins a random 20-200 us (``torch.cuda._sleep``) so the copy lands while the host
  polls; then fills a device buffer with a new tag, copies it non-blocking into a pinned
  buffer and records an event, as vLLM records ``num_accepted_tokens_event`` right after the
  accepted-count D2H;
- the host alternates reading the tag from the pinned memory (a load, about 0.1 us) with
  ``event.query()`` (about 1 us), stamping each with ``time.perf_counter_ns``.

Per iteration, the bytes became visible in ``(data_prev_ns, data_ns]`` and the event completed
in ``(false_start_ns, true_end_ns]`` (``false_start_ns``: the start of the last query that said
"not yet"). So the event lagged the bytes by at least ``lag_lo = false_start_ns - data_ns``
(when positive the lag is certain) and at most ``lag_hi = true_end_ns - data_prev_ns``.
``event_first`` counts iterations whose event said "landed" before any poll saw the tag: the
bytes lagging the event would break every synchronising fix, so it must be 0.

Variants: ``busy`` (the spin before the copy), ``followed`` (also 300 us of GPU work enqueued
after the event, as the drafter follows the D2H in vLLM) and ``idle`` (no spin).

    python3 -m gpu_check.event_lag DEST [ITERATIONS]    # on the GPU machine (torch, no sim)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

VARIANTS = ("idle", "busy", "followed")
COLUMNS = (
    "variant", "i", "spin_us", "issued_ns", "data_prev_ns", "data_ns",
    "false_start_ns", "true_start_ns", "true_end_ns", "queries",
)  # fmt: skip
SPIN_US = (20.0, 200.0)
FOLLOW_US = 300.0
N_ELEMS = 64  # int32: the accepted counts of 64 rows


def measure(iterations: int = 5000, seed: int = 0) -> pd.DataFrame:
    """Every variant ``iterations`` times on the current CUDA device (times in ns after each
    iteration's issue started)."""
    import torch

    dev = torch.device("cuda")
    src = torch.zeros(N_ELEMS, dtype=torch.int32, device=dev)
    pinned = torch.zeros(N_ELEMS, dtype=torch.int32).pin_memory()
    view = pinned.numpy()
    event = torch.cuda.Event()
    rng = np.random.default_rng(seed)
    cycles_per_us = _cycles_per_us(torch)
    rows: list[tuple[Any, ...]] = []
    tag = 0
    now = time.perf_counter_ns
    for variant in VARIANTS:
        for i in range(iterations):
            tag += 1
            spin = 0.0 if variant == "idle" else float(rng.uniform(*SPIN_US))
            torch.cuda.synchronize()
            t0 = now()
            if spin:
                torch.cuda._sleep(int(spin * cycles_per_us))
            src.fill_(tag)
            pinned.copy_(src, non_blocking=True)
            event.record()
            if variant == "followed":
                torch.cuda._sleep(int(FOLLOW_US * cycles_per_us))
            issued = now()
            data_prev = data = false_start = true_start = true_end = -1
            last_poll = issued
            queries = 0
            while data < 0 or true_end < 0:
                if data < 0:
                    t = now()
                    if int(view[0]) == tag and int(view[-1]) == tag:
                        data, data_prev = t, last_poll
                    last_poll = t
                if true_end < 0:
                    qs = now()
                    done = event.query()
                    qe = now()
                    queries += 1
                    if done:
                        true_start, true_end = qs, qe
                    else:
                        false_start = qs
            rows.append(
                (variant, i, spin, issued - t0, data_prev - t0, data - t0,
                 false_start - t0 if false_start >= 0 else -1, true_start - t0,
                 true_end - t0, queries)
            )  # fmt: skip
    torch.cuda.synchronize()
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _cycles_per_us(torch: Any) -> float:
    """The GPU's spin rate: ``_sleep`` of a known cycle count, timed by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 10_000_000
    torch.cuda._sleep(n)  # warm-up
    start.record()
    torch.cuda._sleep(n)
    end.record()
    end.synchronize()
    return n / (start.elapsed_time(end) * 1000.0)


def with_bounds(df: pd.DataFrame) -> pd.DataFrame:
    """``lag_lo_ns``/``lag_hi_ns`` (the event after the bytes, bounds) and ``event_first``."""
    out = df.copy()
    has_false = out["false_start_ns"] >= 0
    out["lag_lo_ns"] = np.where(has_false, out["false_start_ns"] - out["data_ns"], -(10**12))
    out["lag_hi_ns"] = out["true_end_ns"] - out["data_prev_ns"]
    out["event_first"] = out["true_end_ns"] < out["data_prev_ns"]
    return out


def summary(df: pd.DataFrame) -> dict[str, Any]:
    """Per variant: how many iterations, how many with a certain lag, its quantiles (us)."""
    b = with_bounds(df)
    out: dict[str, Any] = {}
    for variant, g in b.groupby("variant", sort=False):
        certain = g[g["lag_lo_ns"] > 0]["lag_lo_ns"] / 1000.0
        hi = g["lag_hi_ns"] / 1000.0
        out[str(variant)] = {
            "iterations": len(g),
            "lag_certain": len(certain),
            "lag_certain_share": round(len(certain) / len(g), 4) if len(g) else 0.0,
            "lag_lo_us_quantiles": _quantiles(certain),
            "lag_hi_us_quantiles": _quantiles(hi),
            "event_first": int(g["event_first"].sum()),
            "queries_median": float(g["queries"].median()),
        }
    return out


def _quantiles(s: pd.Series) -> dict[str, float]:
    if s.empty:
        return {}
    q = s.quantile([0.5, 0.9, 0.99]).to_numpy()
    return {"p50": round(float(q[0]), 2), "p90": round(float(q[1]), 2),
            "p99": round(float(q[2]), 2), "max": round(float(s.max()), 2)}  # fmt: skip


def summary_text(summ: dict[str, Any]) -> str:
    lines = ["variant   iterations  event after bytes (certain)  its lag us p50/p99/max"
             "  bound us p50/p99  event first"]  # fmt: skip
    for v, s in summ.items():
        lo, hi = s["lag_lo_us_quantiles"], s["lag_hi_us_quantiles"]
        lag = f"{lo['p50']}/{lo['p99']}/{lo['max']}" if lo else "-"
        lines.append(
            f"{v:<9} {s['iterations']:>10}  {s['lag_certain']:>7} ({s['lag_certain_share']:.3f})"
            f"{'':>12}  {lag:<22} {hi['p50']}/{hi['p99']:<10}  {s['event_first']}"
        )
    return "\n".join(lines)


def read_raw(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "event_lag.csv.gz")


def write(folder: Path, df: pd.DataFrame, env: dict[str, Any]) -> dict[str, Any]:
    """The raw table and its summary with the device header (the GPU machine has no pyarrow)."""
    folder.mkdir(parents=True, exist_ok=True)
    df.to_csv(folder / "event_lag.csv.gz", index=False)
    summ = {**env, "spin_us": list(SPIN_US), "follow_us": FOLLOW_US, "variants": summary(df)}
    (folder / "summary.json").write_text(json.dumps(summ, indent=2) + "\n")
    return summ


if __name__ == "__main__":  # on the GPU machine without sim's dependencies: python3 -m ...
    import sys

    from gpu_check.environment import environment

    dest = Path(sys.argv[1] if len(sys.argv) > 1 else "event_lag")
    frame = measure(int(sys.argv[2]) if len(sys.argv) > 2 else 5000)
    print(summary_text(write(dest, frame, environment())["variants"]))
