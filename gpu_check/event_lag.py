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

    python -m gpu_check event-lag --out DEST            # on the GPU machine (CUDA)
    python -m gpu_check event-lag data/bench/event_lag  # here: the summary again, from the table
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import SpecraceError
from sim.runs.io import atomic_write, atomic_write_text
from sim.runs.outputs import claim_dir

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
    out["lag_lo_ns"] = (out["false_start_ns"] - out["data_ns"]).where(has_false)  # NaN: none
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


def _quantiles(s: pd.Series) -> dict[str, float | None]:
    if s.empty:  # the same keys, so that every variant's row has the same columns
        return {"p50": None, "p90": None, "p99": None, "max": None}
    q = s.quantile([0.5, 0.9, 0.99]).to_numpy()
    return {"p50": round(float(q[0]), 2), "p90": round(float(q[1]), 2),
            "p99": round(float(q[2]), 2), "max": round(float(s.max()), 2)}  # fmt: skip


def summary_text(summ: dict[str, Any]) -> str:
    lines = ["variant   iterations  event after bytes (certain)  its lag us p50/p99/max"
             "  bound us p50/p99  event first"]  # fmt: skip
    for v, s in summ.items():
        lo, hi = s["lag_lo_us_quantiles"], s["lag_hi_us_quantiles"]
        lag = f"{lo['p50']}/{lo['p99']}/{lo['max']}" if lo["max"] is not None else "-"
        lines.append(
            f"{v:<9} {s['iterations']:>10}  {s['lag_certain']:>7} ({s['lag_certain_share']:.3f})"
            f"{'':>12}  {lag:<22} {hi['p50']}/{hi['p99']:<10}  {s['event_first']}"
        )
    return "\n".join(lines)


def read_raw(folder: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A measured folder's raw table and its summary's header (device, versions, commit)."""
    raw, summ = folder / "event_lag.csv.gz", folder / "summary.json"
    if not raw.is_file() or not summ.is_file():
        raise SpecraceError(f"{folder}: no event_lag.csv.gz and summary.json (measure writes them)")
    df = pd.read_csv(raw)
    if list(df.columns) != list(COLUMNS):
        raise SpecraceError(f"{raw}: not event_lag's table (columns {list(df.columns)[:4]} ...)")
    header = json.loads(summ.read_text())
    return df, {k: v for k, v in header.items() if k not in ("variants", "spin_us", "follow_us")}


def write(out: Path, df: pd.DataFrame, env: dict[str, Any]) -> dict[str, Any]:
    """The raw table and its summary with the device header, into a folder the caller checked
    (``prepare_dir``), marked as specrace's at the first write (CSV: the GPU machine has no
    pyarrow)."""
    summ = {**env, "spin_us": list(SPIN_US), "follow_us": FOLLOW_US, "variants": summary(df)}
    claim_dir(out, "event-lag")
    table = gzip.compress(df.to_csv(index=False).encode(), mtime=0)  # no name or time: same bytes

    def put(tmp: Path) -> None:
        tmp.write_bytes(table)

    atomic_write(out / "event_lag.csv.gz", put)
    atomic_write_text(out / "summary.json", json.dumps(summ, indent=2) + "\n")
    return summ
