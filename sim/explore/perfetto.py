"""``trace.parquet`` -> Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open.

One track per actor (engine core, worker CPU thread, each CUDA stream); spans for timed
work, instants for the DMA landing and buffer writes. Timestamps are microseconds.
"""

from __future__ import annotations

import json

import pandas as pd

TRACKS = [
    "engine_core",
    "worker_cpu",
    "default_stream",
    "valid_sampled_token_count_copy_stream",
    "async_output_copy_stream",
]


def to_trace_events(trace: pd.DataFrame) -> dict:
    tids = {a: i + 1 for i, a in enumerate(TRACKS)}
    events: list[dict] = [
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": actor}}
        for actor, tid in tids.items()
    ]
    for r in trace.itertuples(index=False):
        ev = {
            "name": f"{r.event} [{r.step}]",
            "cat": r.actor,
            "pid": 1,
            "tid": tids.get(r.actor, len(tids) + 1),
            "ts": r.time_ns / 1000.0,
            "args": {
                "step": int(r.step),
                "row": int(r.row),
                "value": int(r.value),
                "req_id": str(r.req_id),
            },
        }
        if r.dur_ns > 0:
            ev.update(ph="X", dur=r.dur_ns / 1000.0)
        else:
            ev.update(ph="i", s="t")
        events.append(ev)
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def dumps(trace: pd.DataFrame) -> str:
    return json.dumps(to_trace_events(trace), separators=(",", ":"))
