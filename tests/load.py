"""Time limits of tests that wait on a real process, held under load.

A limit is written as what the wait takes on an idle 2-core machine, with room; :func:`limit_s`
scales it by how slow this machine is when the tests start (a fixed pure-Python loop, timed
against the same loop on the idle machine) and by at least :data:`LOAD_FACTOR_MIN`, the slowdown
of a process sharing 2 cores at a load average of 8. A slow machine makes a test slower, never
a failure; a real hang is still caught, later.
"""

from __future__ import annotations

import time

REFERENCE_S = 0.08  # the loop below on the idle 2-core development machine (best of 3)
LOAD_FACTOR_MIN = 4.0  # load 8 on 2 cores: a quarter of a core each
SCALE_MAX = 50.0


def _loop_s() -> float:
    t = time.perf_counter()
    s = 0
    for i in range(1_000_000):
        s += i * i
    return time.perf_counter() - t


def _scale() -> float:
    measured = min(_loop_s() for _ in range(3))
    return min(SCALE_MAX, max(LOAD_FACTOR_MIN, measured / REFERENCE_S * 2))


SCALE = _scale()


def limit_s(idle_s: float) -> float:
    """A time limit for a wait that takes under ``idle_s`` on the idle machine."""
    return idle_s * SCALE
