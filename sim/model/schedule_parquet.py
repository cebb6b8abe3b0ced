"""``schedule.parquet``: the compact binary form of ``schedule.json``, for long runs.

The same schedule (schema ``specrace.schedule`` version :data:`SCHEMA_VERSION`) as the JSON,
one Parquet row per step, written and read a row group of steps at a time so neither side
holds the whole schedule. The header (schema, version, scenario, seed, requests) is the
file's key-value metadata under ``specrace.schedule``, as zlib-compressed JSON (the requests
of a 10^6-step run are ~10^5 entries). Columns, each a list per step:

- ``step`` (int64); ``finished``, ``unscheduled``, ``new``, ``resumed``, ``req_ids``
  (request ids);
- ``ops_kind`` (int8 code into :data:`sim.model.schedule.OP_KINDS`), ``ops_a``, ``ops_b``
  (int32 rows), ``ops_req`` (request id);
- ``num_scheduled``, ``num_computed``, ``num_prompt``, ``prev_num_draft_tokens`` (int64),
  ``drafts``, ``accepted`` (int8), ``discard`` (bool), ``prev_positions`` (int32).

Reading checks every step as :func:`sim.model.schedule.check_schedule` does. Same
schedule -> same bytes (no creation metadata, zstd, no statistics).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sim.errors import SpecraceError
from sim.model.input_batch import OpKind, RowOp
from sim.model.schedule import (
    OP_KINDS,
    Schedule,
    StepRecord,
    checked_steps,
    header,
    read_header,
)
from sim.model.schedule_check import meaning_checked

META_KEY = b"specrace.schedule"
STEPS_PER_GROUP = 4096  # steps per row group: what a reader or writer holds at once

_IDS = ("finished", "unscheduled", "new", "resumed", "req_ids")
_INTS: dict[str, Any] = {  # per-row integer columns and their stored type
    "num_scheduled": pa.int64(),
    "num_computed": pa.int64(),
    "num_prompt": pa.int64(),
    "drafts": pa.int8(),
    "accepted": pa.int8(),
    "prev_positions": pa.int32(),
    "prev_num_draft_tokens": pa.int64(),
}
SCHEMA_ARROW = pa.schema(
    [
        ("step", pa.int64()),
        *[(c, pa.list_(pa.string())) for c in _IDS],
        ("ops_kind", pa.list_(pa.int8())),
        ("ops_a", pa.list_(pa.int32())),
        ("ops_b", pa.list_(pa.int32())),
        ("ops_req", pa.list_(pa.string())),
        *[(c, pa.list_(t)) for c, t in _INTS.items()],
        ("discard", pa.list_(pa.bool_())),
    ]
)
_KIND_CODE = {k: i for i, k in enumerate(OP_KINDS)}
_ROW_COLUMNS = [c for c in _INTS if c != "prev_num_draft_tokens"]  # one entry per row


def _header(head: Schedule) -> bytes:
    d = header(head)
    return zlib.compress(json.dumps(d, sort_keys=True, separators=(",", ":")).encode(), 6)


def _offsets(sizes: list[int]) -> pa.Array:
    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.array(offsets)


def _lists(parts: list[Any], value_type, known: tuple[list[int], pa.Array] | None = None):
    """A list column from one Python list or array per step. ``known``: sizes and offsets
    computed for another column, used if these parts have the same sizes. Strings go to
    Arrow as the lists themselves (converted in C++: a third of the time of a flattened
    list)."""
    if value_type == pa.string():
        return pa.array(parts, type=pa.list_(pa.string()))
    sizes = list(map(len, parts))
    offsets = known[1] if known is not None and known[0] == sizes else _offsets(sizes)
    if parts:
        values = pa.array(np.concatenate(parts).astype(value_type.to_pandas_dtype()))
    else:
        values = pa.array([], type=value_type)
    return pa.ListArray.from_arrays(offsets, values)


def _table(recs: list[StepRecord]) -> pa.Table:
    cols: dict[str, pa.Array] = {"step": pa.array([r.step for r in recs], type=pa.int64())}
    for c in _IDS:
        cols[c] = _lists(list(map(attrgetter(c), recs)), pa.string())
    # the ops of every step in one list, their four columns sharing one offsets array
    per_step = list(map(attrgetter("ops"), recs))
    ops = [o for p in per_step for o in p]
    op_offsets = _offsets(list(map(len, per_step)))
    for c, vals, t in (
        ("ops_kind", [_KIND_CODE[o.kind] for o in ops], pa.int8()),
        ("ops_a", [o.a for o in ops], pa.int32()),
        ("ops_b", [o.b for o in ops], pa.int32()),
        ("ops_req", [o.req_id for o in ops], pa.string()),
    ):
        cols[c] = pa.ListArray.from_arrays(op_offsets, pa.array(vals, type=t))
    row_sizes = list(map(len, map(attrgetter("req_ids"), recs)))
    rows = (row_sizes, _offsets(row_sizes))  # the per-row columns' usual sizes
    for c, t in (*_INTS.items(), ("discard", pa.bool_())):
        cols[c] = _lists(list(map(attrgetter(c), recs)), t, rows)
    return pa.Table.from_pydict(cols, schema=SCHEMA_ARROW)


class ScheduleWriter:
    """Writes ``path`` a row group at a time: ``with ScheduleWriter(p, head) as w: w.add(rec)``."""

    def __init__(self, path: Path, head: Schedule) -> None:
        schema = SCHEMA_ARROW.with_metadata({META_KEY: _header(head)})
        self._writer = pq.ParquetWriter(path, schema, compression="zstd", write_statistics=False)
        self._pending: list[StepRecord] = []
        self._groups = 0

    def add(self, rec: StepRecord) -> None:
        self._pending.append(rec)
        if len(self._pending) >= STEPS_PER_GROUP:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(_table(self._pending))
            self._pending = []
            self._groups += 1

    def __enter__(self) -> ScheduleWriter:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self._flush()
            if not self._groups:
                self._writer.write_table(_table([]))  # no step at all: still a valid file
        self._writer.close()


def tee(writer: ScheduleWriter, steps: Iterable[StepRecord]) -> Iterator[StepRecord]:
    """Yield ``steps`` while writing each to ``writer``."""
    for rec in steps:
        writer.add(rec)
        yield rec


def write_schedule_parquet(path: Path, schedule: Schedule) -> None:
    with ScheduleWriter(path, schedule) as w:
        for rec in schedule.steps:
            w.add(rec)


def open_schedule_parquet(path: Path) -> tuple[Schedule, Iterator[StepRecord], int]:
    """The header (``steps`` empty), the checked steps one at a time, and their count."""
    origin = str(path)
    if path.exists() and not path.is_file():  # a FIFO would block pyarrow's open: never opened
        raise SpecraceError(f"schedule {path} is not a regular file (a FIFO, device or folder)")
    try:
        f = pq.ParquetFile(path)
        meta = (f.schema_arrow.metadata or {}).get(META_KEY)
        if meta is None:
            raise ValueError("no specrace.schedule header")
        d = json.loads(zlib.decompress(meta))
        missing = [n for n in SCHEMA_ARROW.names if n not in f.schema_arrow.names]
        if missing:
            raise ValueError(f"missing columns {missing}")
    except FileNotFoundError:
        raise SpecraceError(f"cannot read schedule {path}: no such file") from None
    except (OSError, ValueError, zlib.error, pa.ArrowException) as e:
        raise SpecraceError(f"{origin}: not a specrace schedule.parquet ({e})") from None
    head = read_header(d, origin)
    n_steps = f.metadata.num_rows
    checked = checked_steps(head, _read_steps(f, origin), origin)
    return head, meaning_checked(head, checked, origin), n_steps


def _read_steps(f: pq.ParquetFile, origin: str) -> Iterator[StepRecord]:
    for g in range(f.num_row_groups):
        try:
            t = f.read_row_group(g, columns=SCHEMA_ARROW.names)
            yield from _records(t)
        except (OSError, ValueError, TypeError, KeyError, AttributeError, pa.ArrowException) as e:
            raise SpecraceError(f"{origin}: malformed schedule.parquet: {e}") from None


def _records(t: pa.Table) -> Iterator[StepRecord]:
    def col(name: str) -> tuple[np.ndarray, list | np.ndarray]:
        arr = t.column(name).combine_chunks()
        if arr.null_count or arr.values.null_count:
            raise ValueError(f"{name}: null values")
        offsets = arr.offsets.to_numpy()
        values = (
            arr.values.to_pylist()
            if pa.types.is_string(arr.type.value_type)
            else (arr.values.to_numpy(zero_copy_only=False))
        )
        return offsets, values

    steps = t.column("step").to_pylist()
    cols = {name: col(name) for name in SCHEMA_ARROW.names if name != "step"}

    def part(name: str, i: int):
        offsets, values = cols[name]
        return values[offsets[i] : offsets[i + 1]]

    for i, step in enumerate(steps):
        kinds = part("ops_kind", i).tolist()
        if any(not 0 <= k < len(OP_KINDS) for k in kinds):
            raise ValueError(f"step {step}: ops_kind: unknown code")
        ops = [
            RowOp(cast(OpKind, OP_KINDS[k]), a, b, r)
            for k, a, b, r in zip(
                kinds, part("ops_a", i).tolist(), part("ops_b", i).tolist(), part("ops_req", i),
                strict=True,
            )
        ]  # fmt: skip
        rec = StepRecord(
            step=step,
            finished=part("finished", i),
            unscheduled=part("unscheduled", i),
            new=part("new", i),
            resumed=part("resumed", i),
            ops=ops,
            req_ids=part("req_ids", i),
            **{c: part(c, i).astype(np.int64) for c in _INTS},
            discard=part("discard", i).astype(bool),
        )
        for c in (*_ROW_COLUMNS, "discard"):
            if len(getattr(rec, c)) != rec.num_reqs:
                raise ValueError(f"step {step}: {c}: has {len(getattr(rec, c))} rows, req_ids "
                                 f"has {rec.num_reqs}")  # fmt: skip
        yield rec


def read_schedule_parquet(path: Path) -> Schedule:
    head, steps, _ = open_schedule_parquet(path)
    head.steps = list(steps)
    return head
