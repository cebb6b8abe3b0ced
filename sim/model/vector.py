"""The vector tier: the SimPy model as a per-step recurrence over arrays of timing points.

The same model as :mod:`sim.model.simulate` (the readable specification) for many timing
parameter sets at once: every quantity of a step is an array with one entry per point, and
one Python loop over steps replaces SimPy's event loop. Held to the SimPy tier read by read
(tests/test_vector.py): same landing and read times, same buffer content, same verdicts.

Why a recurrence is exact. Each actor is a sequential process whose every wait is on an
event of an *earlier* step or of the same step further up this loop, so each time is a
``max`` of ready times plus a jittered duration (both tiers draw the same numbers,
:mod:`sim.model.rng`). Per step N (S: start, E: end; ``w`` the worker's clock):

- engine core: ``e = max(e, output_at_engine[N - lag]) + update``; ``e += schedule``;
  ``sched_arrival[N] = e + input_ipc``;
- worker: ``w = max(w, sched_arrival[N]) + rpc``; ``w = max(w, prep_E[N-1])``; stall; the
  policy's wait ``w = max(w, land[N-1]) + event_sync``; row ops (their write times), refresh,
  half of _prepare_inputs, the policy's wait, **read**, the rest; prep and forward enqueued;
  under async ``w = max(w, valid_E[N-1])``; sample_tokens; with async off
  ``w = max(w, output_E[N])``;
- default stream (in enqueue order): ``prep_S = max(enqueue, drafter_E[N-1])``, forward,
  sample, ``land[N] = sample_E + d2h``, ``drafter_E = land + drafter``;
  valid-count stream ``max(enqueue, previous, land)``; output stream
  ``max(enqueue, previous, drafter_E)``; ``output_at_engine[N] = output_E + output_ipc``.

The buffer: step N-1's DMA always lands before step N+1's first row op (under async the
worker waits on ``valid_sampled_token_count_event(N-1)`` inside step N; with async off it
waited for the whole output), so within step N it lands before row op i iff
``land <= write_i`` and before the read iff ``land <= read`` (the tie rule of
:mod:`sim.model.cuda`: the GPU side first). That holds when the landing is a GPU
completion, i.e. sample(N-1) or its D2H has a non-zero duration; :func:`simulate_points`
refuses timing where both jitter to 0 rather than guess the heap order.

Buffers are ``(rows, points)`` arrays, so a row operation copies one contiguous row for all
points and the policy's own numpy functions (:mod:`sim.model.policies`) run unchanged on
them: a gather indexes rows, a write-back assigns rows.
"""

from __future__ import annotations

import dataclasses
import operator
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from sim.errors import SpecraceError
from sim.model.params import TimingParams, row_op_ns
from sim.model.point_reads import READ_COLUMNS_POINTS, Accumulator, OnePointAccumulator
from sim.model.policies import SYNC_SCHEDULING, Policy
from sim.model.rng import (
    Actor,
    EngineSlot,
    GpuSlot,
    StepDraws,
    WorkerSlot,
    jittered_ns,
    jittered_ns_array,
    scalar_jitter,
    slow_uniforms,
    slowed_ns,
    uniform,
    uniforms_py,
)
from sim.model.schedule import Schedule, StepRecord
from sim.model.verdict import KINDS  # kind codes 0..3

__all__ = ["READ_COLUMNS_POINTS", "PointsResult", "simulate_points"]

_FEW_OPS = 32  # up to this many row ops a step, their uniforms in Python (rng.uniforms_py)


class _Means:
    """Each timing field as a Python number when every point has the same value (the common
    sweep: one or two fields vary), else as an array over points; durations follow suit."""

    def __init__(self, timings: Sequence[TimingParams]) -> None:
        for f in dataclasses.fields(TimingParams):
            vals = list(map(operator.attrgetter(f.name), timings))
            if vals.count(vals[0]) == len(vals):
                setattr(self, f.name, vals[0])
            else:
                dtype = np.float64 if any(isinstance(v, float) for v in vals) else np.int64
                setattr(self, f.name, np.asarray(vals, dtype=dtype))
        self.uniform_frac = not isinstance(self.jitter_frac, np.ndarray)
        gj = self.gpu_jitter_frac  # -1: as jitter_frac (TimingParams.gpu_frac)
        self.gpu_frac = (
            (self.jitter_frac if gj < 0 else gj)
            if not isinstance(gj, np.ndarray)
            else np.where(gj < 0, self.jitter_frac, gj)
        )

    def __getattr__(self, name: str) -> Any:  # the fields set in __init__, for the type checker
        raise AttributeError(name)

    def jit(self, mean, u: float):
        """The jittered duration of every point: ``int(mean * factor)`` as in the SimPy tier."""
        if self.uniform_frac and not isinstance(mean, np.ndarray):
            return jittered_ns(int(mean), u, self.jitter_frac)
        return jittered_ns_array(mean, u, self.jitter_frac)

    def jit_gpu(self, mean, u: float):
        """:meth:`jit` with the GPU's jitter (``gpu_jitter_frac``)."""
        frac = self.gpu_frac
        if not isinstance(frac, np.ndarray) and not isinstance(mean, np.ndarray):
            return jittered_ns(int(mean), u, frac)
        return jittered_ns_array(mean, u, frac)


@dataclass
class PointsResult:
    """What :func:`simulate_points` computed for ``n_points`` timing points of one schedule."""

    policy: str
    n_points: int
    steps: int
    # (steps, points) int64, with keep_timing: the DMA landing of step N's counts, the read of
    # step N, the forward start of step N, the time step N waited on the counts event.
    land_ns: np.ndarray | None = None
    read_ns: np.ndarray | None = None
    forward_start_ns: np.ndarray | None = None
    wait_ns: np.ndarray | None = None
    op_write_ns: list[np.ndarray] | None = None  # per step: (ops, points)
    sim_time_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    reads: pd.DataFrame | None = None  # READ_COLUMNS_POINTS, sorted by (point, step, row)
    summaries: list[dict] = field(default_factory=list)  # per point, as reads.summarize
    # Per point, for rates over steps (sim.resolve.risk): steps with a GPU-wrong read, and
    # GPU-wrong reads by hazard kind (sorted by kind, zeros left out).
    gpu_wrong_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gpu_wrong_by_kind: list[dict[str, int]] = field(default_factory=list)


def _check(timings: Sequence[TimingParams]) -> None:
    if not timings:
        raise SpecraceError("simulate_points needs at least one timing point")
    for t in timings:
        if not isinstance(t, TimingParams):
            raise SpecraceError(f"timing points are TimingParams, got {type(t).__name__}")


def simulate_points(
    schedule: Schedule,
    timings: Sequence[TimingParams],
    policy: Policy,
    seed: int,
    *,
    keep_reads: bool = True,
    keep_timing: bool = True,
    steps: Iterable[StepRecord] | None = None,
    n_steps: int | None = None,
    on_reads: Callable[[pa.Table], None] | None = None,
    batch_steps: int = 4096,
) -> PointsResult:
    """Simulate ``schedule`` under ``policy`` once per timing point (all with ``seed``).

    Point ``p`` equals ``simulate(schedule, timings[p], policy, seed)`` read by read.
    ``keep_reads``: the per-read table (one row per point and read: large); without it only
    the per-point summaries are built.

    Streaming (bounded memory, for long runs): pass the header as ``schedule``, the steps as
    an iterator ``steps`` (e.g. from :func:`sim.model.scheduling.iter_schedule`) with their
    count ``n_steps``, ``keep_timing=False``, and ``on_reads``: it receives the reads every
    ``batch_steps`` steps as a pyarrow Table (the columns of ``PointsResult.reads``, sorted by point
    within a batch) and nothing is kept; state is
    O(points x rows) whatever the step count.
    """
    _check(timings)
    if steps is None:
        steps, n_steps = schedule.steps, len(schedule.steps)
    elif n_steps is None:
        raise SpecraceError("simulate_points: give n_steps with a step iterator")
    P = len(timings)
    m = _Means(timings)
    async_sched = schedule.async_scheduling
    pol = policy if async_sched else SYNC_SCHEDULING
    lag = 2 if async_sched else 1
    draw_e = StepDraws(seed, Actor.ENGINE, EngineSlot.COUNT, n_steps)
    draw_w = StepDraws(seed, Actor.WORKER, WorkerSlot.OP_BASE, n_steps)  # + row ops per step
    draw_g = StepDraws(seed, Actor.GPU, GpuSlot.COUNT, n_steps)
    draw_s = StepDraws(seed, Actor.STALL, 1, n_steps)
    op_mean = row_op_ns(m)

    R = schedule.max_num_reqs
    # num_accepted_tokens_cpu and #51599's buffer, one column per point; int8 holds every
    # count (1..k+1, k <= 15) and moves an eighth of the bytes of the SimPy tier's int64.
    buf = np.ones((R, P), dtype=np.int8)
    private = np.ones((R, P), dtype=np.int8)
    # One point: every time is a Python int and ``max`` the maximum (a numpy call on a
    # one-element array costs ~20x an int operation); the same integers either way.
    scalar = P == 1
    mx: Callable[[Any, Any], Any] = max if scalar else np.maximum
    zero: Any = 0 if scalar else np.zeros(P, dtype=np.int64)
    e = w = d_free = valid_free = out_free = zero
    prep_end_prev = land_prev = valid_end_prev = zero
    out_at_engine: deque[np.ndarray] = deque(maxlen=lag)  # steps N - lag .. N - 1
    sim_end = zero

    res = PointsResult(pol.name, P, n_steps)
    if keep_timing:
        res.land_ns = np.zeros((n_steps, P), np.int64)
        res.read_ns = np.zeros((n_steps, P), np.int64)
        res.forward_start_ns = np.zeros((n_steps, P), np.int64)
        res.wait_ns = np.zeros((n_steps, P), np.int64)
        res.op_write_ns = []
    keep = keep_reads or on_reads is not None
    acc = OnePointAccumulator(pol, keep) if scalar else Accumulator(pol, P, keep)
    recent: deque[StepRecord] = deque(maxlen=lag + 1)  # steps N - lag .. N
    fwd_first = fwd_last = zero
    wait_sum = zero

    # slow phases of the host (worker_slow_*): every worker mean of a slow step scaled
    slow_u = slow_uniforms(seed, n_steps).tolist() if np.any(m.worker_slow_prob) else None
    slow_arrays = isinstance(m.worker_slow_prob, np.ndarray) or isinstance(
        m.worker_slow_factor, np.ndarray
    )
    scale: Any = None

    jit: Callable[[Any, float], Any] = m.jit
    jit_gpu: Callable[[Any, float], Any] = m.jit_gpu
    if scalar:  # every mean and fraction a Python number: the jitter's calls inlined
        jit, jit_gpu = scalar_jitter(float(m.jitter_frac)), scalar_jitter(float(m.gpu_frac))

    def slowed_jit(mean, u: float):
        return jit(mean, u) if scale is None else jit(slowed_ns(mean, scale), u)

    wj = jit if slow_u is None else slowed_jit  # a worker duration (slow phases scale it)

    for n, rec in enumerate(steps):
        recent.append(rec)
        ue, uw, ug = draw_e.get(n), draw_w.get(n), draw_g.get(n)
        if slow_u is not None:
            if slow_arrays:
                scale = np.where(slow_u[n] < m.worker_slow_prob, m.worker_slow_factor, 1.0)
            else:
                scale = m.worker_slow_factor if slow_u[n] < m.worker_slow_prob else 1.0
        if rec.ops:  # the row ops' slots follow the fixed ones (same keys as the SimPy tier)
            k_ops = len(rec.ops)
            if k_ops <= _FEW_OPS:
                slots = range(WorkerSlot.OP_BASE, WorkerSlot.OP_BASE + k_ops)
                uw = uw + uniforms_py(seed, n, Actor.WORKER, slots)
            else:
                slots_a = WorkerSlot.OP_BASE + np.arange(k_ops, dtype=np.int64)
                uw = uw + uniform(seed, n, Actor.WORKER, slots_a).tolist()
        # -- engine core ---------------------------------------------------------------
        if n >= lag:
            n_prev = recent[0].num_reqs
            e = mx(e, out_at_engine[0]) + jit(
                m.engine_update_ns_per_req * max(n_prev, 1), ue[EngineSlot.UPDATE]
            )
        sched_ns = m.engine_schedule_ns_base + m.engine_schedule_ns_per_req * rec.num_reqs
        e = e + jit(sched_ns, ue[EngineSlot.SCHEDULE])
        arrival = e + jit(m.engine_input_ipc_ns, ue[EngineSlot.INPUT_IPC])
        sim_end = mx(sim_end, arrival)
        # -- worker: scheduler output, synchronize_input_prep, stall ----------------------
        w = mx(w, arrival) + wj(m.worker_rpc_dispatch_ns, uw[WorkerSlot.RPC_DISPATCH])
        if n > 0:
            w = mx(w, prep_end_prev)
        stall_p = m.worker_stall_prob
        stall = draw_s.get(n)[0] < (stall_p if scalar else np.asarray(stall_p))
        if stall if scalar else stall.any():
            d_stall = wj(m.worker_stall_ns, uw[WorkerSlot.STALL])
            w = w + (d_stall if scalar else np.where(stall, d_stall, 0))
        wait = zero
        if pol.waits_before_moves and n > 0:
            w0 = w
            w = mx(w, land_prev) + m.worker_event_sync_ns
            wait = w - w0
        # -- _update_states: the row ops, with step N-1's DMA landing among them -----------
        # the points whose copy of step N-1 is still in flight (one point: any_pending says it)
        pending = None if scalar else np.full(P, n > 0)
        prev_rec = recent[-2] if n > 0 else None
        prev_acc = prev_rec.accepted.astype(np.int8) if prev_rec is not None else None
        writes: list[np.ndarray] = []  # write times of the writing ops, in order
        any_pending = n > 0
        n_cached = rec.num_reqs - len(rec.new) - len(rec.resumed)
        cached_done = False
        op_times: list[np.ndarray] | None = [] if keep_timing else None
        for i, op in enumerate(rec.ops):
            if op.kind != "remove" and not cached_done:
                w = w + wj(m.worker_cached_loop_ns_per_req * n_cached, uw[WorkerSlot.CACHED_LOOP])
                cached_done = True
            w = w + wj(op_mean[op.kind], uw[WorkerSlot.OP_BASE + i])
            if any_pending:
                any_pending = _land(buf, private, prev_acc, pending, land_prev <= w)
            _apply_op(buf, op)
            if op_times is not None:
                op_times.append(w)
            if op.kind != "remove":
                writes.append(w)
        if not cached_done:
            w = w + wj(m.worker_cached_loop_ns_per_req * n_cached, uw[WorkerSlot.CACHED_LOOP])
        w = w + wj(m.worker_refresh_metadata_ns, uw[WorkerSlot.REFRESH])
        # -- _prepare_inputs: the policy's wait and read -----------------------------------
        w = w + wj(m.worker_prepare_inputs_ns // 2, uw[WorkerSlot.PREPARE_1])
        if pol.waits_before_read and n > 0:
            w0 = w
            w = mx(w, land_prev) + m.worker_event_sync_ns
            wait = wait + (w - w0)
        read = w
        if any_pending:
            any_pending = _land(buf, private, prev_acc, pending, land_prev <= read)
        cpu = pol.cpu_read(buf, private, rec.prev_positions, rec.num_reqs)
        if cpu.ndim == 1:  # a build that reads no buffer (fill 1) is the same for every point
            cpu = cpu[:, None]
        if not scalar:
            cpu = np.broadcast_to(cpu, (rec.num_reqs, P))
        if n > 0:
            acc.step(n, rec, prev_rec, cpu, land_prev, read, writes)
            # The rest land before step N+1's first row op (see the module docstring).
            if any_pending:
                _land(buf, private, prev_acc, pending, True)
        prep2_ns = m.worker_copy_to_gpu_ns + m.worker_prepare_inputs_ns // 2
        w = w + wj(prep2_ns, uw[WorkerSlot.PREPARE_2])
        # -- launch: prep, prepare_inputs_event, forward -----------------------------------
        prep_end = mx(w, d_free) + jit_gpu(m.gpu_prep_ns, ug[GpuSlot.PREP])
        w = w + wj(m.worker_launch_ns, uw[WorkerSlot.LAUNCH])
        fwd_ns = m.gpu_forward_ns_base + m.gpu_forward_ns_per_token * int(rec.num_scheduled.sum())
        fwd_start = mx(w, prep_end)
        fwd_end = fwd_start + jit_gpu(fwd_ns, ug[GpuSlot.FORWARD])
        if async_sched and n > 0:
            w = mx(w, valid_end_prev)
        sample_ns = m.worker_sample_tokens_ns
        if rec.has_prefill:
            sample_ns = sample_ns + m.worker_sample_tokens_ns_prefill
        w = w + wj(sample_ns, uw[WorkerSlot.SAMPLE_TOKENS])
        # -- sample_tokens(N): sampler, counts D2H, event records, drafter, output copy -----
        d_sample = jit_gpu(m.gpu_sample_ns, ug[GpuSlot.SAMPLE])
        d_d2h = jit_gpu(m.dma_land_delay_ns, ug[GpuSlot.COUNTS_D2H])
        if (
            d_sample == 0 and d_d2h == 0
            if scalar
            else np.any((np.asarray(d_sample) == 0) & (np.asarray(d_d2h) == 0))
        ):
            raise SpecraceError(
                f"step {n}: gpu_sample_ns and dma_land_delay_ns both jitter to 0 ns; the vector "
                "tier needs the landing to be a GPU completion (use the SimPy tier: --engine simpy)"
            )
        land = mx(w, fwd_end) + d_sample + d_d2h
        valid_end = mx(mx(w, valid_free), land) + jit_gpu(
            m.dma_land_delay_ns, ug[GpuSlot.VALID_COUNT_D2H]
        )
        drafter_end = land + jit_gpu(m.gpu_drafter_ns, ug[GpuSlot.DRAFTER])
        out_end = mx(mx(w, out_free), drafter_end) + jit_gpu(
            m.dma_land_delay_ns, ug[GpuSlot.OUTPUT_D2H]
        )
        out_eng = out_end + jit(m.engine_output_ipc_ns, ue[EngineSlot.OUTPUT_IPC])
        out_at_engine.append(out_eng)
        if not async_sched:
            w = mx(w, out_end)
        d_free, valid_free, out_free = drafter_end, valid_end, out_end
        prep_end_prev, land_prev, valid_end_prev = prep_end, land, valid_end
        sim_end = mx(mx(sim_end, out_eng), mx(valid_end, w))
        acc.add_step(rec)
        if on_reads is not None and (n + 1) % batch_steps == 0 and acc.judged():
            on_reads(acc.arrow_table())
        fwd_first = fwd_start if n == 0 else fwd_first
        fwd_last = fwd_start
        wait_sum = wait_sum + wait
        if keep_timing:
            assert res.land_ns is not None and res.read_ns is not None
            assert res.forward_start_ns is not None and res.wait_ns is not None
            assert res.op_write_ns is not None
            res.land_ns[n] = land
            res.read_ns[n] = read
            res.forward_start_ns[n] = fwd_start
            res.wait_ns[n] = wait
            res.op_write_ns.append(np.array(op_times, dtype=np.int64).reshape(len(rec.ops), P))

    res.sim_time_ns = np.broadcast_to(sim_end, (P,)).copy()
    acc.judged()
    if on_reads is not None:
        if acc.parts:
            on_reads(acc.arrow_table())
    else:
        res.reads = acc.table() if keep_reads else None
    res.gpu_wrong_steps = acc.gpu_steps
    order = sorted(range(1, len(KINDS)), key=lambda k: KINDS[k])
    res.gpu_wrong_by_kind = [
        {KINDS[k]: col[k] for k in order if col[k]} for col in acc.gpu_kind.T.tolist()
    ]
    res.summaries = acc.summaries(
        np.broadcast_to(fwd_first, (P,)),
        np.broadcast_to(fwd_last, (P,)),
        np.broadcast_to(wait_sum, (P,)),
        res.sim_time_ns,
    )
    return res


def _land(buf, private, counts, pending: np.ndarray | None, due) -> bool:
    """Step N-1's DMA (``B[:n] = counts``) for the points where it is pending and due;
    returns whether any point is still pending. ``pending`` None: one point, pending."""
    if pending is None:
        if due:
            buf[: len(counts), 0] = counts
            private[: len(counts), 0] = counts
        return not due
    hit = pending & due
    if not hit.any():
        return True
    k = len(counts)
    if hit.all():
        buf[:k] = counts[:, None]
        private[:k] = counts[:, None]
    else:  # integer column indices: several times faster than a mask or copyto(where=)
        cols = np.flatnonzero(hit)
        buf[:k, cols] = counts[:, None]
        private[:k, cols] = counts[:, None]
    pending &= ~hit
    return bool(pending.any())


def _apply_op(buf: np.ndarray, op) -> None:
    """:func:`sim.model.counts_buffer.apply_op` on a (rows, points) buffer."""
    if op.kind == "add":
        buf[op.a] = 1
    elif op.kind == "move":
        buf[op.b] = buf[op.a]
    elif op.kind == "swap":
        buf[[op.a, op.b]] = buf[[op.b, op.a]]  # fancy index: a copy, so no aliasing
