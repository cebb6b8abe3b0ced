"""Independent work units over local processes, results in the units' order.

For commands whose work splits into CPU-bound units of a second or more (``risk``'s runs, a
sweep's schedules): :func:`map_units` runs them in this process or over a pool of worker
processes and returns the results in the order of the units, so a caller that combines them
in that order gets the same bytes whichever way they ran. A sweep goes to Dask only for a
cluster at an address (``sweep --scheduler``: ``sim.explore.sweep``).

Workers start from a fork server that has already imported what the units need
(``preload``), so a worker is ready in milliseconds rather than the second an import of the
simulator takes; where the platform has no fork server (Windows), they are spawned. A worker
ignores Ctrl-C: the parent takes it, the units in flight finish and the pool is shut down.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Below this much serial work (seconds, the caller's estimate) a pool's start costs more than
# it saves on a small machine.
AUTO_MIN_S = 3.0


def auto_workers(
    units: int, serial_s: float, cores: int | None = None, min_s: float = AUTO_MIN_S
) -> int:
    """How many processes ``workers=0`` gets: one per core up to one per unit, or 1 (this
    process) with one core, one unit, or less than ``min_s`` of work."""
    n = cores if cores is not None else (os.cpu_count() or 1)
    if n < 2 or units < 2 or serial_s < min_s:
        return 1
    return min(n, units)


def _quiet_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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


def iter_units(
    fn: Callable[[T], R], units: Sequence[T], workers: int, preload: Sequence[str] = ()
) -> Generator[R, None, None]:
    """:func:`map_units` as results come, in the units' order: the caller can combine each
    while later units run. Each worker takes its units in their order. Where workers cannot
    start (:func:`workers_can_start`), the units run in this process: the same results."""
    if workers <= 1 or len(units) <= 1 or not workers_can_start():
        yield from (fn(u) for u in units)
        return
    ex = ProcessPoolExecutor(
        max_workers=min(workers, len(units)), mp_context=context(preload), initializer=_quiet_worker
    )
    try:
        yield from ex.map(fn, units)
    finally:  # also when the caller stops early: the units in flight finish, no others start
        ex.shutdown(wait=True, cancel_futures=True)
