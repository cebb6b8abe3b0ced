"""``python -m gpu_check calibrate``: measure on this GPU the timing parameters the model
takes from hardware, and write them as a ``[timing]`` file for ``python -m sim run --timing``.

Measured (docs/timing.md §3 methods, on the default stream as vLLM's count copy is):

- ``dma_land_delay_ns``: a 1 KiB ``non_blocking`` D2H queued behind a kernel becomes visible
  in pinned memory this long after the kernel ends. The kernel waits for the GPU clock
  (``%globaltimer``) to reach an instant the host chose (replay/device_clock.py), so its end
  is known on the host clock; the delay is the host's first sighting minus that instant. The
  stamp offset it rests on leaves out a zero-copy write's visibility (well under a µs), so this
  reads low by at most that. Recorded beside it, not used: ``dma_land_delay_upper_ns``, the
  earlier method's (visible - issue start) - kernel duration by CUDA events, an upper bound
  (launch latency and polling included) that put the landing 10 µs late on the H200.
- ``worker_event_sync_ns``: ``event.synchronize()`` on an already completed event.
- ``worker_copy_to_gpu_ns``: issuing a small H2D copy (256 int32, ``non_blocking``).
"""

from __future__ import annotations

import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from gpu_check.environment import environment
from gpu_check.store import write_csv
from sim.model.params import TimingParams
from sim.runs.io import atomic_write_text
from sim.runs.outputs import claim_dir

N = 256
TIMING_KEYS = {f.name for f in fields(TimingParams)}


def spin_ns_per_cycle() -> float:
    """Nanoseconds per ``torch.cuda._sleep`` cycle on this GPU (timed with CUDA events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(100_000)
    start.record()
    torch.cuda._sleep(2_000_000)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e6 / 2_000_000


def measure(reps: int = 200) -> dict[str, list[int]]:
    pinned = torch.zeros(1 + N, dtype=torch.int32, pin_memory=True)
    view = pinned.numpy()
    src = torch.zeros(1 + N, dtype=torch.int32, device="cuda")
    cycles = int(2_000_000 / spin_ns_per_cycle())  # ~2 ms
    samples: dict[str, list[int]] = {"dma_land_delay_ns": [], "worker_event_sync_ns": [],
                                     "worker_copy_to_gpu_ns": []}  # fmt: skip
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    done = torch.cuda.Event()
    host = torch.ones(N, dtype=torch.int32, pin_memory=True)
    for i in range(reps):
        tag = i + 1
        src.fill_(tag)
        torch.cuda.synchronize()
        view[0] = 0
        t0 = time.perf_counter_ns()  # issue start: the kernel can start from here on
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        pinned.copy_(src, non_blocking=True)
        done.record()
        while view[0] != tag:
            pass
        visible = time.perf_counter_ns() - t0
        done.synchronize()
        kernel_ns = int(start.elapsed_time(end) * 1e6)
        samples["dma_land_delay_ns"].append(visible - kernel_ns)
        t1 = time.perf_counter_ns()
        done.synchronize()
        samples["worker_event_sync_ns"].append(time.perf_counter_ns() - t1)
        t2 = time.perf_counter_ns()
        src[:N].copy_(host, non_blocking=True)
        samples["worker_copy_to_gpu_ns"].append(time.perf_counter_ns() - t2)
    torch.cuda.synchronize()
    samples["dma_land_delay_upper_ns"] = samples.pop("dma_land_delay_ns")
    samples["dma_land_delay_ns"] = clock_landing_delays(reps)
    return samples


def clock_landing_delays(reps: int) -> list[int]:
    """Kernel end (the GPU clock reaching a host-chosen instant) -> the copy behind it seen,
    through the replay's own launch path (:func:`gpu_check.replay.clock_lags`)."""
    from gpu_check.replay import CudaCounts, clock_lags

    return clock_lags(CudaCounts(N), 300_000, reps, n_counts=N)


def calibrate(out_dir: Path, name: str) -> str:
    samples = measure()
    env = environment("cuda")
    rows = [{"quantity": q, "ns": v} for q, xs in samples.items() for v in xs]
    claim_dir(out_dir, "calibrate")
    write_csv(rows, out_dir / f"{name}.csv")
    med = {q: int(np.median(xs)) for q, xs in samples.items()}
    p90 = {q: int(np.percentile(xs, 90)) for q, xs in samples.items()}
    timing = {q: v for q, v in med.items() if q in TIMING_KEYS}
    lines = [
        f"# Measured by `python -m gpu_check calibrate` on {env['device']}, driver "
        f"{env['driver']}, torch {env['torch']}, triton {env['triton']},",
        f"# {env['date_utc']}, commit {env['git_commit']}. Medians of {len(rows) // len(med)} "
        f"repetitions; raw samples in {name}.csv.",
        "# p90: " + ", ".join(f"{q} {v}" for q, v in p90.items()),
        *(f"# not a parameter: {q} median {v}" for q, v in med.items() if q not in timing),
        "[timing]",
        *(f"{q} = {v}" for q, v in timing.items()),
    ]
    text = "\n".join(lines) + "\n"
    atomic_write_text(out_dir / f"{name}.toml", text)
    return text
