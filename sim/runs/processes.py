"""Independent work units over local processes, results in the units' order.

For commands whose work splits into CPU-bound units of a second or more (``risk``'s runs, a
sweep's schedules): :func:`map_units` runs them in this process or over a pool of worker
processes and returns the results in the order of the units, so a caller that combines them
in that order gets the same bytes whichever way they ran. A sweep goes to Dask only for a
cluster at an address (``sweep --scheduler``: ``sim.explore.sweep``).

Workers start from a fork server that has already imported what the units need
(``preload``), so a worker is ready in milliseconds rather than the second an import of the
simulator takes; where the platform has no fork server (Windows), they are spawned.

Ctrl-C is this process's alone. A process starts (:func:`start`) with SIGINT blocked here
until it has started, so it is born with SIGINT blocked (the mask passes through fork and
exec), and so are the fork server that the first start launches and every worker forked from
it: none takes a ``KeyboardInterrupt`` (a traceback on the terminal), and no start is cut off
half way (a process this one does not know of, waiting for work forever). The pool is a pipe
per worker and no thread: when the caller stops early, a unit fails or Ctrl-C comes, the
workers are killed rather than waited for (the units in flight are dropped). A command's
Ctrl-C handler calls :func:`stop_all`, which does the same for a pool that the interrupted
caller still holds and stops the fork server and the resource tracker, so that no process of
the command outlives it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, TypeVar

from sim.runs.ctrl_c import sigint_held

T = TypeVar("T")
R = TypeVar("R")

# Below this much serial work (seconds, the caller's estimate) a pool's start costs more than
# it saves on a small machine.
AUTO_MIN_S = 3.0
_JOIN_S = 5.0  # a worker told to end (its pipe closed) is killed if still there after this

# The pools open in this process: (worker, this process's end of its pipe) of each
_POOLS: dict[int, list[tuple[Any, Any]]] = {}


def auto_workers(
    units: int, serial_s: float, cores: int | None = None, min_s: float = AUTO_MIN_S
) -> int:
    """How many processes ``workers=0`` gets: one per core up to one per unit, or 1 (this
    process) with one core, one unit, or less than ``min_s`` of work."""
    n = cores if cores is not None else (os.cpu_count() or 1)
    if n < 2 or units < 2 or serial_s < min_s:
        return 1
    return min(n, units)


def map_units(
    fn: Callable[[T], R], units: Sequence[T], workers: int, preload: Sequence[str] = ()
) -> list[R]:
    """``[fn(u) for u in units]``, on ``workers`` processes when more than 1 (``fn`` and the
    units must pickle: a module-level function and plain data). An exception of a unit is
    raised here, as it would be in the loop."""
    return list(iter_units(fn, units, workers, preload))


def workers_can_start() -> bool:
    """Whether a spawned or fork-server worker can set up ``__main__`` as this process has it.
    Not for a script read from stdin (``python - <<EOF``): multiprocessing then imports
    ``__main__`` in each worker from the path ``<stdin>``, every worker dies and the pool is
    broken. A script file, ``python -m``, ``-c``, a notebook or a prompt are fine."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return True
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)


def context(preload: Sequence[str] = ()) -> Any:
    """The multiprocessing context workers start from: a fork server that imports ``preload``
    once (where the platform has one), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    ctx: Any = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods and preload:
        ctx.set_forkserver_preload(list(preload))
    return ctx


# ---- Ctrl-C around process starts ------------------------------------------------------------


def start(proc: Any) -> None:
    """``proc.start()`` with Ctrl-C held until the process has started. Cut off half way,
    a start leaves a process this one does not know (it waits for work forever) or one that
    reads half its arguments and prints a traceback. The process, and the fork server that
    the first start launches, are born with SIGINT blocked."""
    with sigint_held():
        if hasattr(signal, "pthread_sigmask"):
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()  # its first start unblocks SIGINT as it ends
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        proc.start()


@contextlib.contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Ctrl-C ignored for the block (in the main thread; its handler set back after): for the
    way out once one has come, so that a second one adds no line and no traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if handler is not None:  # None: set outside Python, not ours to set back
            signal.signal(signal.SIGINT, handler)


def stop_all() -> None:
    """After Ctrl-C: kill the workers of every pool still open (a caller interrupted while it
    combined a result holds its pool until it is collected) and stop the fork server, which
    would otherwise end only once this process has, a moment later."""
    for key in list(_POOLS):
        _close(key, kill=True)
    _stop_fork_server()
    _stop_resource_tracker()


def _stop_fork_server() -> None:
    """Kill the fork server this process started, if any (it holds nothing to clean up), and
    have multiprocessing forget it: a later pool starts another."""
    try:
        from multiprocessing import forkserver
    except ImportError:  # no fork server on this platform
        return
    server: Any = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None or not hasattr(server, "_stop"):
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):  # ChildProcessError included
        server._stop()  # closes its pipe, reaps it and forgets it


def _stop_resource_tracker() -> None:
    """Stop multiprocessing's resource tracker, which the first process start launched: it
    would end a moment after this process, and then wait for someone to reap it. Only while
    it has nothing to clean up (the pools and the schedule's second process use pipes; no
    semaphore or shared memory was ever made here) and no child of this process holds its
    pipe (stopping waits until it has read the pipe's end)."""
    if (
        multiprocessing.active_children()
        or "multiprocessing.synchronize" in sys.modules  # a lock, a queue, a semaphore
        or "multiprocessing.shared_memory" in sys.modules
    ):
        return
    try:
        from multiprocessing import resource_tracker
    except ImportError:  # not on this platform
        return
    tracker: Any = getattr(resource_tracker, "_resource_tracker", None)
    if getattr(tracker, "_pid", None) is not None and hasattr(tracker, "_stop"):
        with contextlib.suppress(OSError):
            tracker._stop()  # closes its pipe and reaps it


# ---- the pool ---------------------------------------------------------------------------------


class _RemoteTraceback(Exception):
    """The traceback of a unit's exception in its worker: the exception's cause here."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


def _serve(conn: Any, fn: Callable[[Any], Any]) -> None:
    """A worker: ``fn`` of each unit it is sent, sent back as ``(True, result)`` or ``(False,
    exception, traceback)``, until its pipe closes. Ctrl-C is ignored (it is born with SIGINT
    blocked where :func:`start` started its fork server)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            msg = conn.recv_bytes()
        except (EOFError, OSError):  # the pool is done, or this process's parent has gone
            return
        try:
            out = pickle.dumps((True, fn(pickle.loads(msg))), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as e:  # noqa: BLE001 (raised in the caller)
            tb = "".join(traceback.format_exception(e))
            try:
                out = pickle.dumps((False, e, tb), protocol=pickle.HIGHEST_PROTOCOL)
                pickle.loads(out)
            except Exception:  # one that does not pickle (or unpickle): its text
                out = pickle.dumps((False, RuntimeError(f"{type(e).__name__}: {e}"), tb))
        try:
            conn.send_bytes(out)
        except OSError:
            return


def iter_units(
    fn: Callable[[T], R], units: Sequence[T], workers: int, preload: Sequence[str] = ()
) -> Generator[R, None, None]:
    """:func:`map_units` as results come, in the units' order: the caller can combine each
    while later units run. Each worker takes its units in their order. Where workers cannot
    start (:func:`workers_can_start`), the units run in this process: the same results.

    When the caller stops early (or is interrupted, or a unit fails), the workers are killed:
    the units in flight are dropped, no others start."""
    if workers <= 1 or len(units) <= 1 or not workers_can_start():
        yield from (fn(u) for u in units)
        return
    ctx = context(preload)
    pool: list[tuple[Any, Any]] = []
    key = id(pool)
    _POOLS[key] = pool
    finished = False
    try:
        for _ in range(min(workers, len(units))):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(theirs, fn), daemon=True)
            pool.append((proc, mine))
            try:
                start(proc)
            finally:
                theirs.close()
        yield from _results(pool, units)
        finished = True
    finally:
        _close(key, kill=not finished)


def _results(pool: list[tuple[Any, Any]], units: Sequence[Any]) -> Iterator[Any]:
    """The units' results in their order, each unit given to the next worker that is free."""
    from multiprocessing.connection import wait

    ahead = iter(enumerate(units))
    busy: dict[Any, tuple[Any, int]] = {}  # a worker's pipe end: the worker, its unit
    got: dict[int, tuple] = {}  # results that came before their turn

    def give(proc: Any, conn: Any) -> None:
        nxt = next(ahead, None)
        if nxt is not None:
            data = pickle.dumps(nxt[1], protocol=pickle.HIGHEST_PROTOCOL)
            busy[conn] = (proc, nxt[0])
            with contextlib.suppress(OSError):  # it has died: its pipe reads EOF below
                conn.send_bytes(data)

    for proc, conn in pool:
        give(proc, conn)
    for i in range(len(units)):
        while i not in got:
            assert busy, i  # unit i is with a worker, or came back
            sentinels = {proc.sentinel: conn for conn, (proc, _) in busy.items()}
            for ready in wait([*busy, *sentinels]):
                conn = sentinels.get(ready, ready)
                if conn not in busy:  # both its pipe and its sentinel were ready
                    continue
                proc, j = busy.pop(conn)
                try:
                    got[j] = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    from concurrent.futures.process import BrokenProcessPool

                    proc.join(_JOIN_S)
                    raise BrokenProcessPool(
                        f"a worker process stopped (exit code {proc.exitcode}) in unit {j}"
                    ) from None
                give(proc, conn)
        ok, value, *tb = got.pop(i)
        if not ok:
            value.__cause__ = _RemoteTraceback(tb[0])
            raise value
        yield value


def _close(key: int, kill: bool) -> None:
    """End a pool's workers: each reads EOF and ends, or with ``kill`` is killed (its unit
    dropped). Waits until they have gone; Ctrl-C meanwhile is taken once they have (and a
    pool cut off half way is still listed, for :func:`stop_all`)."""
    pool = _POOLS.get(key, [])
    with sigint_held():
        for proc, conn in pool:
            conn.close()
            if kill and proc.pid is not None:
                proc.kill()
        for proc, _ in pool:
            if proc.pid is not None:
                proc.join(_JOIN_S)
                if proc.exitcode is None:  # still there after its pipe closed
                    proc.kill()
                    proc.join(_JOIN_S)
        _POOLS.pop(key, None)
