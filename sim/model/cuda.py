"""CUDA streams and events on a SimPy clock (integer nanoseconds).

A :class:`Stream` runs its work items strictly in enqueue order: an item starts at the
later of its enqueue time and the end of the previous item, and lasts its duration. A
:class:`CudaEvent` follows ``torch.cuda.Event``: ``record(stream)`` enqueues a marker that
completes when the stream reaches it; ``synchronize()`` waits for the *latest* record
(returns at once if never recorded); ``query()`` says whether the latest record is done.

**The one tie rule.** Events due at the same nanosecond run in SimPy's heap order
``(time, priority, insertion)``. Stream work completes with URGENT priority and CPU
timeouts with NORMAL priority, so at a tie **the GPU side wins**: a DMA that lands at the
very nanosecond a CPU row operation finishes is applied first, and the CPU write lands
on top of it. Among CPU-side events, the process that scheduled first runs first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import simpy
from simpy.core import URGENT


@dataclass(slots=True)
class WorkItem:
    name: str
    step: int
    duration_ns: int
    done: simpy.Event
    on_done: Callable[[int], None] | None = None
    wait_for: simpy.Event | None = None  # cross-stream dependency (wait_event/wait_stream)
    start_ns: int = -1
    end_ns: int = -1


class Stream:
    """An in-order GPU queue: one SimPy process per stream (``default_stream``, ...)."""

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        on_item: Callable[[Stream, WorkItem], None] | None = None,
    ) -> None:
        self.env = env
        self.name = name
        self.on_item = on_item  # called after each item completes (tracing)
        # A deque plus one wake-up event: cheaper than simpy.Store's put/get events.
        self._queue: deque[WorkItem] = deque()
        self._wakeup: simpy.Event | None = None
        env.process(self._run())

    def enqueue(
        self,
        name: str,
        step: int,
        duration_ns: int,
        on_done: Callable[[int], None] | None = None,
        wait_for: simpy.Event | None = None,
    ) -> WorkItem:
        item = WorkItem(name, step, int(duration_ns), self.env.event(), on_done, wait_for)
        self._queue.append(item)
        if self._wakeup is not None:
            wakeup, self._wakeup = self._wakeup, None
            wakeup.succeed()
        return item

    def _run(self):
        env = self.env
        while True:
            if not self._queue:
                self._wakeup = env.event()
                yield self._wakeup
            item = self._queue.popleft()
            if item.wait_for is not None and not item.wait_for.processed:
                yield item.wait_for
            item.start_ns = env.now
            if item.duration_ns:
                done_at = env.event()
                done_at._ok = True
                done_at._value = None
                env.schedule(done_at, URGENT, item.duration_ns)
                yield done_at
            item.end_ns = env.now
            if item.on_done is not None:
                item.on_done(env.now)
            if self.on_item is not None:
                self.on_item(self, item)
            item.done.succeed(env.now)


class CudaEvent:
    def __init__(self, env: simpy.Environment, name: str) -> None:
        self.env = env
        self.name = name
        self._latest: simpy.Event | None = None

    def record(self, stream: Stream, step: int) -> WorkItem:
        item = stream.enqueue(f"record:{self.name}", step, 0)
        self._latest = item.done
        return item

    def query(self) -> bool:
        return self._latest is None or self._latest.processed

    def synchronize(self) -> simpy.Event:
        """An event to ``yield`` on; already triggered if nothing is pending."""
        if self._latest is None:
            done = self.env.event()
            done.succeed(self.env.now)
            return done
        return self._latest
