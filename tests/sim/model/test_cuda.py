"""Ordered-log tests of stream and event semantics (as SimPy tests itself)."""

from __future__ import annotations

import simpy

from sim.model.cuda import CudaEvent, Stream


def test_stream_runs_in_order_and_waits_for_enqueue() -> None:
    env = simpy.Environment()
    s = Stream(env, "default_stream")
    log: list[tuple[str, int]] = []

    def cpu():
        s.enqueue("k1", 0, 100, on_done=lambda t: log.append(("k1", t)))
        s.enqueue("k2", 0, 50, on_done=lambda t: log.append(("k2", t)))
        yield env.timeout(500)  # the stream is idle from 150 to 500
        s.enqueue("k3", 0, 10, on_done=lambda t: log.append(("k3", t)))

    env.process(cpu())
    env.run()
    assert log == [("k1", 100), ("k2", 150), ("k3", 510)]


def test_event_record_synchronize_query() -> None:
    env = simpy.Environment()
    s = Stream(env, "default_stream")
    ev = CudaEvent(env, "e")
    log: list[tuple[str, int, bool]] = []

    def cpu():
        log.append(("never recorded", env.now, ev.query()))
        yield ev.synchronize()  # returns at once
        s.enqueue("kernel", 0, 1000)
        ev.record(s, 0)
        log.append(("after record", env.now, ev.query()))
        yield env.timeout(400)
        log.append(("mid kernel", env.now, ev.query()))
        yield ev.synchronize()
        log.append(("synchronized", env.now, ev.query()))

    env.process(cpu())
    env.run()
    assert log == [
        ("never recorded", 0, True),
        ("after record", 0, False),
        ("mid kernel", 400, False),
        ("synchronized", 1000, True),
    ]


def test_non_blocking_copy_after_kernel_lands_after_it() -> None:
    """A D2H queued behind a kernel lands at kernel end + copy time, whatever the CPU does."""
    env = simpy.Environment()
    s = Stream(env, "default_stream")
    pinned = [0]
    log: list[tuple[str, int, int]] = []

    def cpu():
        s.enqueue("forward", 0, 2000)
        s.enqueue("d2h", 0, 20, on_done=lambda t: pinned.__setitem__(0, 4))
        yield env.timeout(10)  # non_blocking: the CPU goes on at once
        log.append(("read early", env.now, pinned[0]))
        yield env.timeout(2010)
        log.append(("read late", env.now, pinned[0]))

    env.process(cpu())
    env.run()
    assert log == [("read early", 10, 0), ("read late", 2020, 4)]


def test_tie_gpu_write_lands_before_cpu_write_at_same_ns() -> None:
    env = simpy.Environment()
    s = Stream(env, "default_stream")
    order: list[str] = []

    def cpu():
        yield env.timeout(100)
        order.append("cpu")

    env.process(cpu())
    s.enqueue("dma", 0, 100, on_done=lambda t: order.append("gpu"))
    env.run()
    assert order == ["gpu", "cpu"]


def test_cross_stream_wait() -> None:
    env = simpy.Environment()
    main, side = Stream(env, "default_stream"), Stream(env, "copy")
    log: list[tuple[str, int]] = []
    k = main.enqueue("kernel", 0, 300)
    side.enqueue("copy", 0, 20, wait_for=k.done, on_done=lambda t: log.append(("copy", t)))
    env.run()
    assert log == [("copy", 320)]
