"""``trace.parquet`` -> Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open.

One process per policy (named after the scenario and policy), one track per actor and CUDA
stream; spans for timed work. What the race needs on top of a plain trace:

- a flow arrow from each counts D2H landing to the read of the next step that it fed (a
  read before its landing gets no arrow: it was fed by an older copy);
- every wrong read as an instant on a ``wrong reads`` track, with what was read and the
  truth in its arguments;
- a counter track ``B[row]`` with the pinned buffer's value in each row of interest (the
  rows of the wrong reads, or the first rows), rebuilt from the trace.

Timestamps are microseconds (the format's unit); every process starts at the run's 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd

from sim.explore.timeline import policy_for, replay_buffer
from sim.model.schedule import Schedule
from sim.model.trace import EventKind, kind_of

TRACKS = [
    "engine_core",
    "worker_cpu",
    "default_stream",
    "valid_sampled_token_count_copy_stream",
    "async_output_copy_stream",
    "wrong reads",
]
MAX_COUNTER_ROWS = 8
READ_US = 0.5  # a read is an instant; a short slice gives the flow arrow something to bind to


def rows_of_interest(reads: pd.DataFrame, n_rows: int) -> list[int]:
    wrong = reads[reads["cpu_wrong"] | reads["gpu_wrong"]]
    rows = sorted(set(wrong["row"].astype(int)) | set(wrong["prev_row"].astype(int)))
    return rows[:MAX_COUNTER_ROWS] if rows else list(range(min(n_rows, 4)))


def to_trace_events(
    trace: pd.DataFrame,
    reads: pd.DataFrame | None = None,
    schedule: Schedule | None = None,
    policy: str = "",
    process: str = "specrace",
    pid: int = 1,
) -> list[dict]:
    """One process's events; with ``reads`` and ``schedule`` also flows, wrong reads and the
    buffer counters."""
    tids = {a: i + 1 for i, a in enumerate(TRACKS)}
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": process}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}},
    ]
    events += [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": actor}}
        for actor, tid in tids.items()
    ]
    events += [
        {
            "name": "thread_sort_index",
            "ph": "M",
            "pid": pid,
            "tid": tid,
            "args": {"sort_index": tid},
        }
        for tid in tids.values()
    ]
    land_us: dict[int, float] = {}
    read_us: dict[int, float] = {}
    for r in trace.itertuples(index=False):
        ts = r.time_ns / 1000.0
        ev = {
            "name": f"{r.event} [{r.step}]",
            "cat": r.actor,
            "pid": pid,
            "tid": tids.get(r.actor, len(tids) + 1),
            "ts": ts,
            "args": {"step": int(r.step), "row": int(r.row), "value": int(r.value),
                     "req_id": str(r.req_id)},
        }  # fmt: skip
        kind = kind_of(str(r.actor), str(r.event))
        if kind is EventKind.LANDING:
            land_us[int(r.step)] = ts
        if kind is EventKind.READ:
            read_us[int(r.step)] = ts
            ev.update(ph="X", dur=READ_US)
        elif r.dur_ns > 0:
            ev.update(ph="X", dur=r.dur_ns / 1000.0)
        else:
            ev.update(ph="i", s="t")
        events.append(ev)
    if reads is None or schedule is None:
        return events
    # Flows: the D2H of step N feeds the read of step N+1. The arrow starts inside the
    # counts_d2h slice (it ends at the landing) and ends inside the read slice.
    for step, land in sorted(land_us.items()):
        read = read_us.get(step + 1)
        if read is None or read < land:
            continue
        fid = pid * 1_000_000 + step
        events.append({"name": "counts", "cat": "counts", "ph": "s", "id": fid, "pid": pid,
                       "tid": tids["default_stream"], "ts": land - 0.001})  # fmt: skip
        end = read + READ_US / 2
        events.append({"name": "counts", "cat": "counts", "ph": "f", "bp": "e", "id": fid,
                       "pid": pid, "tid": tids["worker_cpu"], "ts": end})  # fmt: skip
    wrong = reads[reads["cpu_wrong"] | reads["gpu_wrong"]]
    for w in wrong.itertuples(index=False):
        ts = read_us.get(int(w.step), 0.0)
        what = "consumed wrong" if w.gpu_wrong else "CPU wrong"
        events.append(
            {
                "name": f"{what}: {w.req_id} read {w.cpu_value} (true {w.true_count})",
                "cat": "wrong",
                "ph": "i",
                "s": "t",
                "pid": pid,
                "tid": tids["wrong reads"],
                "ts": ts,
                "args": {k: _plain(getattr(w, k)) for k in (
                    "step", "req_id", "row", "prev_row", "true_count", "cpu_value",
                    "gpu_value", "kind", "margin_ns", "prompt_state_lost")},
            }
        )  # fmt: skip
    rep = replay_buffer(trace, schedule, policy_for(policy))
    rows = rows_of_interest(reads, schedule.max_num_reqs)
    w = rep.writes[rep.writes["row"].isin(rows)]
    for r in w.itertuples(index=False):
        events.append({"name": f"B[{r.row}]", "ph": "C", "pid": pid, "ts": r.time_ns / 1000.0,
                       "args": {"value": int(r.value)}})  # fmt: skip
    return events


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def dumps(runs: pd.DataFrame | Sequence[tuple], schedule: Schedule | None = None) -> str:
    """A trace table, or ``[(policy, scenario, trace, reads)]`` (one process each)."""
    if isinstance(runs, pd.DataFrame):
        events = to_trace_events(runs)
    else:
        events = []
        for pid, (policy, scenario, trace, reads) in enumerate(runs, start=1):
            events += to_trace_events(
                trace, reads, schedule, policy, f"{scenario} · {policy}", pid=pid
            )
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}, separators=(",", ":"))
