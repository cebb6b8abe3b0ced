"""The trace's events, typed: the names the SimPy tier logs, and how a reader finds them.

``trace.parquet`` keeps its string columns (``actor``, ``event``); this module is the one
place that knows which strings mean a row operation, the counts read, the copy's landing or
``_update_states``. The SimPy tier logs through these names and every reader (the timeline,
Perfetto, the hardware replay) asks :func:`kind_of`, :func:`select` or :func:`events`
instead of parsing an event name itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import pandas as pd

WORKER = "worker_cpu"
DEFAULT_STREAM = "default_stream"
ROW_OPS = ("remove", "add", "move", "swap")  # _update_states' row operations, by kind
UPDATE_STATES = "_update_states"
LANDING = "counts_d2h_land"  # step N's counts visible in host memory
READ_PREFIX = "read_counts"  # the read's event is "read_counts:<the policy's read mode>"


class EventKind(enum.Enum):
    ROW_OP = "row_op"
    READ = "read"
    LANDING = "landing"
    UPDATE_STATES = "update_states"


def read_event(read_mode: str) -> str:
    """The event name of the counts read of a policy whose read mode is ``read_mode``."""
    return f"{READ_PREFIX}:{read_mode}"


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One typed trace row: ``name`` is the row op's kind (``add``, ...), the read's mode, or
    the event's name for the other kinds."""

    kind: EventKind
    step: int
    time_ns: int  # start (a landing or a read is an instant)
    dur_ns: int
    row: int
    req_id: str
    name: str

    @property
    def end_ns(self) -> int:
        return self.time_ns + self.dur_ns


def kind_of(actor: str, event: str) -> EventKind | None:
    """The kind of a trace row, None for the events no reader needs typed."""
    if actor == WORKER:
        if event in ROW_OPS:
            return EventKind.ROW_OP
        if event.startswith(READ_PREFIX):
            return EventKind.READ
        if event == UPDATE_STATES:
            return EventKind.UPDATE_STATES
    elif actor == DEFAULT_STREAM and event == LANDING:
        return EventKind.LANDING
    return None


def _mask(trace: pd.DataFrame, kind: EventKind) -> np.ndarray:
    actor, event = trace["actor"], trace["event"]
    if kind is EventKind.ROW_OP:
        return ((actor == WORKER) & event.isin(ROW_OPS)).to_numpy(dtype=bool)
    if kind is EventKind.READ:
        return ((actor == WORKER) & event.str.startswith(READ_PREFIX)).to_numpy(dtype=bool)
    if kind is EventKind.UPDATE_STATES:
        return ((actor == WORKER) & (event == UPDATE_STATES)).to_numpy(dtype=bool)
    return ((actor == DEFAULT_STREAM) & (event == LANDING)).to_numpy(dtype=bool)


def select(trace: pd.DataFrame, kind: EventKind) -> pd.DataFrame:
    """The rows of a trace table of one kind, in table order."""
    return trace[_mask(trace, kind)]


def events(trace: pd.DataFrame) -> list[TraceEvent]:
    """The typed events of a trace table, in table order (untyped rows left out)."""
    out = []
    for r in trace.itertuples(index=False):
        kind = kind_of(str(r.actor), str(r.event))
        if kind is None:
            continue
        name = str(r.event)
        if kind is EventKind.READ:
            name = name.partition(":")[2]
        out.append(
            TraceEvent(kind, int(r.step), int(r.time_ns), int(r.dur_ns), int(getattr(r, "row", -1)),
                       str(getattr(r, "req_id", "")), name)
        )  # fmt: skip
    return out
