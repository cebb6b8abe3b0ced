"""The steps of a streamed run and the schedule file they are written to, from this process or
from a second one.

A streamed run (:func:`sim.runs.run.run_streaming`) takes its steps from a *source* (the
scheduler building them, or a schedule file read step by step), writes each to the run's
schedule file and simulates it. Building (or reading) the steps is about half of the work;
writing the schedule, the vector tier and its reads the other half; neither needs the other's
result to go on: :class:`StepsFromProcess` runs the source in a second process, which sends
the steps over a pipe a chunk at a time, so that on two cores the two halves overlap. The
schedule file is written here (:func:`writing_schedule`, either way): with it there, that
process had the larger half. The steps, the schedule file and so every output are the same
bytes either way (tests/sim/runs/test_run.py).

A chunk crosses the pipe as one pickle of :func:`pack_steps`: the per-row arrays of all its
steps concatenated field by field, so that a chunk is a few large arrays and lists rather
than thousands of small objects (a pickle of the records themselves costs about as much as
building them)."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import operator
import pickle
import queue
import resource
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import SpecraceError
from sim.model import schedule as schedule_mod
from sim.model.input_batch import RowOp
from sim.model.schedule import Schedule, StepRecord
from sim.model.scheduling import iter_schedule
from sim.runs import processes

Source = tuple[Schedule, Iterator[StepRecord], int]  # header (no steps), steps, their count
OpenSource = Callable[[], Source]  # a module-level function or a partial of one: it pickles

CHUNK_STEPS = 512  # steps per message: a chunk in flight is a few MB at 64 rows
STREAM_S_PER_STEP = 2.5e-4  # a streamed step in one process (64 rows), for the estimate
# StepRecord's per-row arrays, in its field order (they follow its lists: unpack_steps passes
# them by position)
_ARRAYS = tuple(f.name for f in dataclasses.fields(StepRecord) if f.type == "np.ndarray")
_GETTERS = [operator.attrgetter(f) for f in _ARRAYS]
QUEUE_CHUNKS = 8  # chunks built and not yet sent, at most (about 2 MB each)
_POLL_S = 0.5  # how often a wait for the other process checks that it is still there


def generated(scenario, seed: int, steps: int) -> Source:
    """The scheduler's steps (:func:`sim.model.scheduling.iter_schedule`) as a source."""
    head, it = iter_schedule(scenario, seed, steps)
    return head, it, steps


def stream_workers(workers: int, steps: int, cores: int | None = None) -> int:
    """The processes a streamed run of ``steps`` steps takes: ``workers`` (1: this one; 2 or
    more: the source in a second process), or with 0 two where there are two cores and the
    run is estimated at :data:`sim.runs.processes.AUTO_MIN_S` or more."""
    if workers > 0:
        return min(workers, 2)
    return processes.auto_workers(2, steps * STREAM_S_PER_STEP, cores)


# ---- the schedule file ------------------------------------------------------------------


@contextlib.contextmanager
def writing_schedule(
    fmt: str, path: Path, head: Schedule, steps: Iterable[StepRecord]
) -> Iterator[Iterator[StepRecord]]:
    """``steps``, each written to ``path`` as it passes: ``schedule.json`` (the bytes of
    :func:`sim.model.schedule.dumps`) or ``schedule.parquet``; the file is complete when the
    block ends after the last step."""
    if fmt == "json":
        with path.open("w") as f:
            yield _tee_json(head, steps, f)
    elif fmt == "parquet":
        from sim.model.schedule_parquet import ScheduleWriter, tee

        with ScheduleWriter(path, head) as w:
            yield tee(w, steps)
    else:
        raise ValueError(f"schedule format {fmt!r}")


def _tee_json(head: Schedule, steps: Iterable[StepRecord], f) -> Iterator[StepRecord]:
    """Yield ``steps`` while writing ``schedule_mod.dumps`` of the whole schedule to ``f``:
    the header line, one line per step, the closing line."""
    tail = "\n\n]}\n"  # what dumps() puts after the header line of a schedule without steps
    f.write(schedule_mod.dumps(head)[: -len(tail)] + "\n")
    for i, rec in enumerate(steps):
        body = json.dumps(rec.to_json(), sort_keys=True, separators=(",", ":"))
        f.write(body if i == 0 else ",\n" + body)
        yield rec
    f.write("\n]}\n")


# ---- steps over a pipe --------------------------------------------------------------------


def pack_steps(recs: Sequence[StepRecord]) -> tuple:
    """``recs`` as a few lists and arrays (:func:`unpack_steps` gives them back, equal field
    by field and of the same dtypes). A step whose ``req_ids`` equal the previous step's (the
    layout did not change: two steps in three of a steady run) sends None for them."""
    cols = [list(map(get, recs)) for get in _GETTERS]
    for col in cols:
        dtype = col[0].dtype
        if any(a.dtype != dtype for a in col):
            return ("records", list(recs))  # mixed dtypes (a hand-made schedule): as they are
    meta: list[tuple] = []
    prev = None
    for r in recs:
        ids = r.req_ids
        ops = [(o.kind, o.a, o.b, o.req_id) for o in r.ops] if r.ops else None
        meta.append((r.step, r.finished, r.unscheduled, r.new, r.resumed, ops,
                     None if ids == prev else ids))  # fmt: skip
        prev = ids
    lens = [list(map(len, col)) for col in cols]
    return ("packed", meta, lens, [np.concatenate(col) for col in cols])


def unpack_steps(packed: tuple) -> list[StepRecord]:
    if packed[0] == "records":
        return packed[1]
    _, meta, lens, arrays = packed
    fields = []  # per array field, each step's part
    for a, sizes in zip(arrays, lens, strict=True):
        parts, start = [], 0
        for end in itertools.accumulate(sizes):
            parts.append(a[start:end])
            start = end
        fields.append(parts)
    out = []
    ids: list[str] = []
    for (step, finished, unscheduled, new, resumed, ops, req_ids), *v in zip(
        meta, *fields, strict=True
    ):
        ids = list(ids) if req_ids is None else req_ids  # a list of its own, as sent
        out.append(
            StepRecord(
                step,
                finished,
                unscheduled,
                new,
                resumed,
                [RowOp(*op) for op in ops] if ops else [],
                ids,
                *v,
            )  # fmt: skip
        )
    return out


def _produce(conn, open_source: OpenSource) -> None:
    """The second process: open the source, send its header, then its steps a chunk at a
    time; last ``done`` and this process's peak RSS (KiB), or the error that stopped it.
    Ctrl-C is the parent's to take (it ends this process).

    A thread sends, from a queue of up to :data:`QUEUE_CHUNKS` chunks, so that building goes
    on while the parent is busy with earlier ones. The sending is here, not a receiving
    thread there: a pipe write of a whole chunk is one system call without the GIL, where a
    reader takes it a pipe's buffer at a time and would wait for the GIL after each (up to
    the 5 ms switch interval while the other thread simulates)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out: queue.Queue[bytes | None] = queue.Queue(QUEUE_CHUNKS)
    gone = threading.Event()  # the parent's end is closed: nobody to send to

    def sender() -> None:
        while (item := out.get()) is not None:
            try:
                conn.send_bytes(item)
            except (BrokenPipeError, ConnectionResetError):
                gone.set()
                return

    def put(item: bytes | None) -> bool:
        """Queue ``item`` for the sender; False if the parent has gone first."""
        while not gone.is_set():
            try:
                out.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                pass
        return False

    def send(msg: tuple) -> None:
        if not put(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)):
            raise BrokenPipeError

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    try:
        head, steps, n = open_source()
        send(("head", head, n))
        while chunk := list(itertools.islice(steps, CHUNK_STEPS)):
            send(("steps", pack_steps(chunk)))
        send(("done", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
    except (BrokenPipeError, ConnectionResetError):  # the parent has gone: nobody to tell
        pass
    except BaseException as e:  # noqa: BLE001 (the parent raises it)
        try:
            pickle.dumps(e)
        except Exception:  # an exception that does not pickle: its text
            e = SpecraceError(f"{type(e).__name__}: {e}")
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            send(("error", e))
    finally:
        if put(None):  # everything queued is sent before the pipe closes
            thread.join()
        conn.close()


class StepsFromProcess:
    """``with StepsFromProcess(open_source) as (head, steps, n):`` the source's header, steps
    and count, the steps built (or read) in a second process. An error there is raised here
    (a :class:`SpecraceError` stays one); leaving the block early stops the other process."""

    def __init__(self, open_source: OpenSource) -> None:
        self.open_source = open_source
        self.child_peak_rss_kib = 0  # the other process's peak RSS, known once done
        self._proc: Any = None
        self._conn: Any = None

    def __enter__(self) -> Source:
        ctx = processes.context(["sim.runs.step_source"])
        recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_produce, args=(send, self.open_source), daemon=True)
        self._conn = recv
        try:
            try:
                processes.start(self._proc)  # Ctrl-C held until it has started
            finally:
                send.close()  # ours: the pipe reads EOF once the child's end is closed too
            _, head, n = self._expect("head")
        except BaseException:  # Ctrl-C included: the other process goes too
            self._stop()
            raise
        return head, self._steps(), n

    def __exit__(self, *exc) -> None:
        self._stop()

    def _steps(self) -> Iterator[StepRecord]:
        while True:
            msg = self._expect("steps", "done")
            if msg[0] == "done":
                self.child_peak_rss_kib = int(msg[1])
                self._proc.join()
                return
            yield from unpack_steps(msg[1])

    def _expect(self, *kinds: str) -> tuple:
        conn, proc = self._conn, self._proc
        while not conn.poll(_POLL_S):
            if not proc.is_alive() and not conn.poll():
                raise self._stopped()
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):  # its end closed, at a message or within one: it stopped
            raise self._stopped() from None
        if msg[0] == "error":
            raise msg[1]
        assert msg[0] in kinds, msg[0]
        return msg

    def _stopped(self) -> SpecraceError:
        self._proc.join()
        return SpecraceError(
            f"the process building the schedule stopped (exit code {self._proc.exitcode})"
        )

    def _stop(self) -> None:
        if self._proc is not None and self._proc.pid is not None:  # started
            if self._proc.is_alive():
                self._proc.terminate()
            self._proc.join()
        if self._conn is not None:
            self._conn.close()
