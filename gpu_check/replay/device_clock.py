"""A landing aimed by the GPU's own clock (``%globaltimer``) instead of a host-timed spin.

The replay's spin kernel (``torch.cuda._sleep``) runs a number of cycles whose length depends on
the GPU's state, so a landing aimed with it misses by 20-100 µs (data/replay/landing/). Here the
stream instead runs a kernel that waits until the device's nanosecond clock reaches a target,
then the copy follows. The target is the host instant the landing should happen at, moved onto
the device clock by an offset measured on this machine:

- :func:`fit_offset` turns stamping rounds into the offset: the host notes its clock, launches
  a kernel that writes ``%globaltimer`` into pinned host memory (a zero-copy CUDA view of it),
  and notes its clock again when the stamp appears. The stamp was taken inside that round trip,
  so each round bounds the offset from both sides; the offset is the tightest lower bound
  (stamp - sighting: only the write's visibility, a near-constant microsecond, lies between),
  its uncertainty the width of what all rounds leave open;
- the two clocks drift apart by a few µs per second (H200: about 3 ppm, a 4-6 µs slide over
  one policy's 400-step replay before this tracking), more than the aim's budget, so
  :meth:`DeviceClock.track` stamps a couple of rounds before every step and follows the drift
  with the median of the last steps' bounds;
- :class:`DeviceClock` holds the kernels (Triton, inline PTX) and the offset; ``wait_until``
  enqueues the wait for a host instant. What lies between the wait's end and the bytes landing
  (the copy's launch and transfer, and the visibility above) is a constant the replay measures
  in its own context (``replay.clock_lags``) and aims that much earlier.

Only :func:`fit_offset` runs without a GPU (tests); the kernels need CUDA.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

now = time.perf_counter_ns


@dataclass(frozen=True)
class ClockMap:
    offset_ns: int  # device clock minus host clock, less the stamp's visibility latency
    uncertainty_ns: int  # what the rounds leave open: tightest upper bound - offset
    rounds: int


def fit_offset(samples: list[tuple[int, int, int]]) -> ClockMap:
    """``(host_before_launch, device_stamp, host_saw_stamp)`` per round -> the offset.

    A stamp taken at host instant h (h0 <= h <= h1) says offset = stamp - h, so it lies in
    ``[stamp - h1, stamp - h0]``: the largest lower bound is the estimate, the smallest upper
    bound closes the interval."""
    if not samples:
        raise ValueError("fit_offset: no stamping rounds")
    for h0, _, h1 in samples:
        if h1 < h0:
            raise ValueError(f"fit_offset: a round ends before it starts ({h0} > {h1})")
    low = max(stamp - h1 for _, stamp, h1 in samples)
    high = min(stamp - h0 for h0, stamp, _ in samples)
    return ClockMap(low, max(high - low, 0), len(samples))


_KERNELS: dict[str, Any] = {}


def _kernels() -> dict[str, Any]:
    if _KERNELS:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def stamp(out_ptr):
        t = tl.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )
        tl.store(out_ptr, t)

    @triton.jit(do_not_specialize=["target"])
    def wait_until(target):
        t = tl.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )
        while t < target:
            t = tl.inline_asm_elementwise(
                "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
            )

    _KERNELS.update(stamp=stamp, wait_until=wait_until)
    return _KERNELS


class DeviceClock:
    """The device clock, mapped onto ``time.perf_counter_ns`` (CUDA)."""

    def __init__(self, rounds: int = 64) -> None:
        import torch

        from gpu_check.vllm.c_ops import get_cuda_view_from_cpu_tensor

        self.torch = torch
        self.k = _kernels()
        self.host = torch.zeros(1, dtype=torch.int64, pin_memory=True)
        self.view = get_cuda_view_from_cpu_tensor(self.host)  # the kernel writes host memory
        self._np = self.host.numpy()
        self.k["wait_until"][(1,)](0)  # compile both before anything is timed
        self.map = self.calibrate(rounds)
        self._recent: deque[int] = deque([self.map.offset_ns], maxlen=16)

    def stamp_round(self) -> tuple[int, int, int]:
        self.torch.cuda.synchronize()
        self._np[0] = 0
        h0 = now()
        self.k["stamp"][(1,)](self.view)
        while self._np[0] == 0:
            pass
        h1 = now()
        return h0, int(self._np[0]), h1

    def calibrate(self, rounds: int = 64) -> ClockMap:
        self.stamp_round()  # warm-up
        self.map = fit_offset([self.stamp_round() for _ in range(rounds)])
        return self.map

    def track(self, rounds: int = 2) -> ClockMap:
        """Follow the drift: a few rounds now, the offset the median of the last steps'."""
        self._recent.append(fit_offset([self.stamp_round() for _ in range(rounds)]).offset_ns)
        offset = int(sorted(self._recent)[len(self._recent) // 2])
        self.map = ClockMap(offset, self.map.uncertainty_ns, self.map.rounds)
        return self.map

    def wait_until(self, host_ns: int) -> None:
        """Enqueue, on the current stream, a wait until the host instant ``host_ns``."""
        self.k["wait_until"][(1,)](int(host_ns) + self.map.offset_ns)
