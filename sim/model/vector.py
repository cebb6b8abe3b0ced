"""The vector tier: the SimPy model as a per-step recurrence over arrays of timing points.

The same model as :mod:`sim.model.simulate` (the readable specification) for many timing
parameter sets at once: every quantity of a step is an array with one entry per point, and
one Python loop over steps replaces SimPy's event loop. Held to the SimPy tier read by read
(tests/sim/model/test_vector.py): same landing and read times, same buffer content, same verdicts.

Why a recurrence is exact. Each actor is a sequential process whose every wait is on an
event of an *earlier* step or of the same step further up this loop, so each time is a
``max`` of ready times plus a jittered duration (both tiers draw the same numbers,
:mod:`sim.model.rng`). Per step N (S: start, E: end; ``w`` the worker's clock):

- engine core: ``e = max(e, output_at_engine[N - lag]) + update``; ``e += schedule``;
  ``sched_arrival[N] = e + input_ipc``;
- worker: ``w = max(w, sched_arrival[N]) + rpc``; ``w = max(w, prep_E[N-1])``; stall; the
  policy's wait ``w = max(w, land[N-1]) + event_sync``; row ops (their write times; the
  cached loop before the first add, the reorder's time before the first swap), refresh,
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
    slow_steps,
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

    The loop below is one step of every actor in turn (the module docstring's order): each
    is a method of :class:`_Recurrence`, which carries their clocks from step N-1 to step N.
    """
    _check(timings)
    if steps is None:
        steps, n_steps = schedule.steps, len(schedule.steps)
    elif n_steps is None:
        raise SpecraceError("simulate_points: give n_steps with a step iterator")
    run = _Recurrence(schedule, timings, policy, seed, n_steps)
    pol, P, zero = run.pol, run.P, run.zero
    res = _new_result(pol.name, P, n_steps, keep_timing)
    keep = keep_reads or on_reads is not None
    acc = OnePointAccumulator(pol, keep) if run.scalar else Accumulator(pol, P, keep)
    recent: deque[StepRecord] = deque(maxlen=run.lag + 1)  # steps N - lag .. N
    fwd_first = fwd_last = zero
    wait_sum = zero

    for n, rec in enumerate(steps):
        recent.append(rec)
        prev_rec = recent[-2] if n > 0 else None
        ue, uw, ug = run.uniforms(n, rec)
        arrival = run.engine_core(n, rec, recent[0], ue)
        wait = run.execute_model_start(n, rec, arrival, uw)
        writes, op_times = run.update_states(n, rec, prev_rec, uw, keep_timing)
        read, wait = run.prepare_inputs(n, rec, prev_rec, uw, wait, writes, acc)
        fwd_start, fwd_end = run.launch(n, rec, uw, ug)
        land = run.sample_tokens(n, ue, ug, fwd_end)
        acc.add_step(rec)
        if on_reads is not None and (n + 1) % batch_steps == 0 and acc.judged():
            on_reads(acc.arrow_table())
        fwd_first = fwd_start if n == 0 else fwd_first
        fwd_last = fwd_start
        wait_sum = wait_sum + wait
        if keep_timing:
            _record_timing(res, n, land, read, fwd_start, wait, op_times, len(rec.ops))

    res.sim_time_ns = np.broadcast_to(run.sim_end, (P,)).copy()
    _collect(res, acc, keep_reads, on_reads, fwd_first, fwd_last, wait_sum)
    return res


class _Recurrence:
    """One run of the recurrence over ``P`` timing points: the per-run constants (the
    scalar/array dual mode, the jitter, the draws, the counts buffers) and what each actor
    carries from step N-1 to step N. Every time is a Python int with one point, else an int64
    array over points. Each method is one actor's part of step N, called in the module
    docstring's order; ``w`` (the worker's clock) passes from one to the next."""

    __slots__ = (
        *("m", "P", "pol", "seed", "async_sched", "lag", "op_mean"),  # constants
        *("scalar", "mx", "zero", "jit", "jit_gpu", "wj"),  # the dual mode and the jitter
        *("draw_e", "draw_w", "draw_g", "draw_s", "slow_at", "slow_arrays", "scale"),  # draws
        *("e", "out_at_engine", "sim_end", "w"),  # the engine core's and the worker's clocks
        *("d_free", "valid_free", "out_free"),  # when each GPU stream is free
        *("prep_end_prev", "land_prev", "valid_end_prev"),  # step N-1's events
        *("buf", "private", "pending", "prev_acc", "any_pending"),  # the buffers and the DMA
    )

    def __init__(
        self,
        schedule: Schedule,
        timings: Sequence[TimingParams],
        policy: Policy,
        seed: int,
        n_steps: int,
    ) -> None:
        """Everything fixed for the run, and every clock at 0 before step 0."""
        self.P = P = len(timings)
        self.m = m = _Means(timings)
        self.seed = seed
        self.async_sched = async_sched = schedule.async_scheduling
        self.pol = policy if async_sched else SYNC_SCHEDULING
        self.lag = lag = 2 if async_sched else 1
        self.draw_e = StepDraws(seed, Actor.ENGINE, EngineSlot.COUNT, n_steps)
        self.draw_w = StepDraws(seed, Actor.WORKER, WorkerSlot.OP_BASE, n_steps)  # + row ops
        self.draw_g = StepDraws(seed, Actor.GPU, GpuSlot.COUNT, n_steps)
        self.draw_s = StepDraws(seed, Actor.STALL, 1, n_steps)
        self.op_mean = row_op_ns(m)

        R = schedule.max_num_reqs
        # num_accepted_tokens_cpu and #51599's buffer, one column per point; int8 holds every
        # count (1..k+1, k <= 15) and moves an eighth of the bytes of the SimPy tier's int64.
        self.buf = np.ones((R, P), dtype=np.int8)
        self.private = np.ones((R, P), dtype=np.int8)
        self.pending: np.ndarray | None = None  # step N-1's DMA: the points it has not reached
        self.prev_acc: np.ndarray | None = None  # and the counts it carries
        self.any_pending = False
        # One point: every time is a Python int and ``max`` the maximum (a numpy call on a
        # one-element array costs ~20x an int operation); the same integers either way.
        self.scalar = scalar = P == 1
        self.mx = max if scalar else np.maximum
        self.zero = zero = 0 if scalar else np.zeros(P, dtype=np.int64)
        self.e = self.w = self.d_free = self.valid_free = self.out_free = zero
        self.prep_end_prev = self.land_prev = self.valid_end_prev = zero
        self.out_at_engine: deque[Any] = deque(maxlen=lag)  # steps N - lag .. N - 1
        self.sim_end = zero

        # slow phases of the host (worker_slow_*): every worker mean of a slow step scaled
        self.slow_at: Any = None  # per step: whether slow (a bool, or one per point)
        if np.any(m.worker_slow_prob):
            slow = slow_steps(seed, n_steps, m.worker_slow_prob, m.worker_slow_persistence)
            self.slow_at = list(slow) if slow.ndim > 1 else slow.tolist()
        self.slow_arrays = any(
            isinstance(x, np.ndarray)
            for x in (m.worker_slow_prob, m.worker_slow_factor, m.worker_slow_persistence)
        )
        self.scale: Any = None  # this step's factor of every worker mean (None: no slow phases)

        jit: Callable[[Any, float], Any] = m.jit
        jit_gpu: Callable[[Any, float], Any] = m.jit_gpu
        if scalar:  # every mean and fraction a Python number: the jitter's calls inlined
            jit, jit_gpu = scalar_jitter(float(m.jitter_frac)), scalar_jitter(float(m.gpu_frac))
        self.jit, self.jit_gpu = jit, jit_gpu

        def slowed_jit(mean, u: float):
            scale = self.scale
            return jit(mean, u) if scale is None else jit(slowed_ns(mean, scale), u)

        self.wj = jit if self.slow_at is None else slowed_jit  # a worker duration (slow phases)

    def uniforms(self, n: int, rec: StepRecord) -> tuple[list[float], list[float], list[float]]:
        """Step N's uniforms of the engine core, the worker and the GPU (:mod:`sim.model.rng`):
        the worker's row ops' slots follow its fixed ones (same keys as the SimPy tier). In a
        slow phase of the host, sets the step's ``scale`` of every worker mean."""
        ue, uw, ug = self.draw_e.get(n), self.draw_w.get(n), self.draw_g.get(n)
        if self.slow_at is not None:
            m, slow = self.m, self.slow_at[n]
            if self.slow_arrays:
                self.scale = np.where(slow, m.worker_slow_factor, 1.0)
            else:
                self.scale = m.worker_slow_factor if slow else 1.0
        if rec.ops:
            k_ops = len(rec.ops)
            if k_ops <= _FEW_OPS:
                slots = range(WorkerSlot.OP_BASE, WorkerSlot.OP_BASE + k_ops)
                uw = uw + uniforms_py(self.seed, n, Actor.WORKER, slots)
            else:
                slots_a = WorkerSlot.OP_BASE + np.arange(k_ops, dtype=np.int64)
                uw = uw + uniform(self.seed, n, Actor.WORKER, slots_a).tolist()
        return ue, uw, ug

    def engine_core(self, n: int, rec: StepRecord, lagged: StepRecord, ue: list[float]) -> Any:
        """EngineCore's busy loop: ``update_from_output`` of step N - lag's ModelRunnerOutput
        (``lagged``: it waits for that output to reach the engine), ``schedule()`` of step N,
        and the SchedulerOutput's IPC to the worker. Returns its arrival at the worker."""
        m, jit, mx = self.m, self.jit, self.mx
        e = self.e
        if n >= self.lag:
            n_prev = lagged.num_reqs
            e = mx(e, self.out_at_engine[0]) + jit(
                m.engine_update_ns_per_req * max(n_prev, 1), ue[EngineSlot.UPDATE]
            )
        sched_ns = m.engine_schedule_ns_base + m.engine_schedule_ns_per_req * rec.num_reqs
        self.e = e = e + jit(sched_ns, ue[EngineSlot.SCHEDULE])
        arrival = e + jit(m.engine_input_ipc_ns, ue[EngineSlot.INPUT_IPC])
        self.sim_end = mx(self.sim_end, arrival)
        return arrival

    def execute_model_start(self, n: int, rec: StepRecord, arrival: Any, uw: list[float]) -> Any:
        """The worker's ``execute_model`` up to ``_update_states``: the RPC of the scheduler
        output, ``synchronize_input_prep`` (step N-1's prepare_inputs_event), a host stall,
        and a policy that waits before the row moves waiting on step N-1's counts event.
        Returns that wait (0 for a policy without it)."""
        m, mx, wj, scalar = self.m, self.mx, self.wj, self.scalar
        rpc_ns = m.worker_rpc_dispatch_ns + m.worker_rpc_dispatch_ns_per_req * rec.num_reqs
        w = mx(self.w, arrival) + wj(rpc_ns, uw[WorkerSlot.RPC_DISPATCH])
        if n > 0:
            w = mx(w, self.prep_end_prev)
        stall_p = m.worker_stall_prob
        stall = self.draw_s.get(n)[0] < (stall_p if scalar else np.asarray(stall_p))
        if stall if scalar else stall.any():
            d_stall = wj(m.worker_stall_ns, uw[WorkerSlot.STALL])
            w = w + (d_stall if scalar else np.where(stall, d_stall, 0))
        wait = self.zero
        if self.pol.waits_before_moves and n > 0:
            w0 = w
            w = mx(w, self.land_prev) + m.worker_event_sync_ns
            wait = w - w0
        self.w = w
        return wait

    def update_states(
        self,
        n: int,
        rec: StepRecord,
        prev_rec: StepRecord | None,
        uw: list[float],
        keep_timing: bool,
    ) -> tuple[list[Any], list[Any] | None]:
        """``_update_states``: the persistent batch's row ops (remove, add, move, swap) on
        num_accepted_tokens_cpu, the cached requests' loop (and ``worker_pre_add_ns``) before
        the first op that is not a remove, ``_may_reorder_batch``'s own time before the first
        swap (or after the ops), ``refresh_metadata`` after. Step N-1's counts DMA
        (``prev_rec.accepted``) is in flight: it lands (:func:`_land`) before the first op it
        precedes, point by point.
        Returns the writing ops' write times, in order, and with ``keep_timing`` every op's."""
        m, wj, w, op_mean = self.m, self.wj, self.w, self.op_mean
        buf, private = self.buf, self.private
        # the points whose copy of step N-1 is still in flight (one point: any_pending says it)
        self.pending = pending = None if self.scalar else np.full(self.P, n > 0)
        prev_acc = prev_rec.accepted.astype(np.int8) if prev_rec is not None else None
        self.prev_acc = prev_acc
        land_prev = self.land_prev
        writes: list[Any] = []  # write times of the writing ops, in order
        any_pending = n > 0
        n_cached = rec.num_reqs - len(rec.new) - len(rec.resumed)
        cached_done = False
        op_times: list[Any] | None = [] if keep_timing else None
        pre_add = m.worker_pre_add_ns + m.worker_cached_loop_ns_per_req * n_cached
        reordered = False
        for i, op in enumerate(rec.ops):
            if op.kind != "remove" and not cached_done:
                w = w + wj(pre_add, uw[WorkerSlot.CACHED_LOOP])
                cached_done = True
            if op.kind == "swap" and not reordered:  # _may_reorder_batch, refresh's draw
                w = w + wj(m.worker_reorder_ns, uw[WorkerSlot.REFRESH])
                reordered = True
            w = w + wj(op_mean[op.kind], uw[WorkerSlot.OP_BASE + i])
            if any_pending:
                any_pending = _land(buf, private, prev_acc, pending, land_prev <= w)
            _apply_op(buf, op)
            if op_times is not None:
                op_times.append(w)
            if op.kind != "remove":
                writes.append(w)
        if not cached_done:
            w = w + wj(pre_add, uw[WorkerSlot.CACHED_LOOP])
        if not reordered:
            w = w + wj(m.worker_reorder_ns, uw[WorkerSlot.REFRESH])
        self.w = w + wj(m.worker_refresh_metadata_ns, uw[WorkerSlot.REFRESH])
        self.any_pending = any_pending
        return writes, op_times

    def prepare_inputs(
        self,
        n: int,
        rec: StepRecord,
        prev_rec: StepRecord | None,
        uw: list[float],
        wait: Any,
        writes: list[Any],
        acc: Accumulator,
    ) -> tuple[Any, Any]:
        """``_prepare_inputs``: its first half, a policy's wait on step N-1's counts event,
        the **read** of the counts (the policy's ``cpu_read``, after the DMA's landing if it
        precedes the read) judged by ``acc``, then the rest and the copy to the GPU. Whatever
        of the DMA is still in flight lands now (before step N+1's first row op, see the
        module docstring). Returns the read time and the step's wait so far."""
        m, wj, pol = self.m, self.wj, self.pol
        w = self.w + wj(m.worker_prepare_inputs_ns // 2, uw[WorkerSlot.PREPARE_1])
        if pol.waits_before_read and n > 0:
            w0 = w
            w = self.mx(w, self.land_prev) + m.worker_event_sync_ns
            wait = wait + (w - w0)
        read = w
        buf, private, prev_acc, pending = self.buf, self.private, self.prev_acc, self.pending
        any_pending = self.any_pending
        if any_pending:
            any_pending = _land(buf, private, prev_acc, pending, self.land_prev <= read)
        cpu = pol.cpu_read(buf, private, rec.prev_positions, rec.num_reqs)
        if cpu.ndim == 1:  # a build that reads no buffer (fill 1) is the same for every point
            cpu = cpu[:, None]
        if not self.scalar:
            cpu = np.broadcast_to(cpu, (rec.num_reqs, self.P))
        if n > 0:
            acc.step(n, rec, prev_rec, cpu, self.land_prev, read, writes)
            # The rest land before step N+1's first row op (see the module docstring).
            if any_pending:
                _land(buf, private, prev_acc, pending, True)
        prep2_ns = m.worker_copy_to_gpu_ns + m.worker_prepare_inputs_ns // 2
        self.w = w + wj(prep2_ns, uw[WorkerSlot.PREPARE_2])
        return read, wait

    def launch(self, n: int, rec: StepRecord, uw: list[float], ug: list[float]) -> tuple:
        """The launch on the default stream: prep (after step N-1's drafter), its
        prepare_inputs_event, the forward; then the worker's ``sample_tokens`` call, which
        under async scheduling first waits on step N-1's valid_sampled_token_count_event.
        Returns the forward's start and end."""
        m, mx, wj, jit_gpu = self.m, self.mx, self.wj, self.jit_gpu
        w = self.w
        self.prep_end_prev = prep_end = mx(w, self.d_free) + jit_gpu(
            m.gpu_prep_ns, ug[GpuSlot.PREP]
        )
        w = w + wj(m.worker_launch_ns, uw[WorkerSlot.LAUNCH])
        fwd_ns = m.gpu_forward_ns_base + m.gpu_forward_ns_per_token * int(rec.num_scheduled.sum())
        if rec.has_prefill:
            fwd_ns += m.gpu_forward_ns_prefill
        fwd_start = mx(w, prep_end)
        fwd_end = fwd_start + jit_gpu(fwd_ns, ug[GpuSlot.FORWARD])
        if self.async_sched and n > 0:
            w = mx(w, self.valid_end_prev)
        sample_ns = m.worker_sample_tokens_ns
        if rec.has_prefill:
            sample_ns = sample_ns + m.worker_sample_tokens_ns_prefill
        self.w = w + wj(sample_ns, uw[WorkerSlot.SAMPLE_TOKENS])
        return fwd_start, fwd_end

    def sample_tokens(self, n: int, ue: list[float], ug: list[float], fwd_end: Any) -> Any:
        """``sample_tokens(N)`` on the GPU streams: the sampler and the counts' D2H on the
        default stream (``land``: the DMA into num_accepted_tokens_cpu), the
        valid_sampled_token_count D2H on its stream, the drafter, the output copy on the
        output stream and the ModelRunnerOutput's IPC to the engine core; with async
        scheduling off the worker waits for the whole output. Returns the landing."""
        m, mx, jit_gpu, w = self.m, self.mx, self.jit_gpu, self.w
        d_sample = jit_gpu(m.gpu_sample_ns, ug[GpuSlot.SAMPLE])
        d_d2h = jit_gpu(m.dma_land_delay_ns, ug[GpuSlot.COUNTS_D2H])
        if (
            d_sample == 0 and d_d2h == 0
            if self.scalar
            else np.any((np.asarray(d_sample) == 0) & (np.asarray(d_d2h) == 0))
        ):
            raise SpecraceError(
                f"step {n}: gpu_sample_ns and dma_land_delay_ns both jitter to 0 ns; the vector "
                "tier needs the landing to be a GPU completion (use the SimPy tier: --engine simpy)"
            )
        land = mx(w, fwd_end) + d_sample + d_d2h
        valid_end = mx(mx(w, self.valid_free), land) + jit_gpu(
            m.dma_land_delay_ns, ug[GpuSlot.VALID_COUNT_D2H]
        )
        drafter_end = land + jit_gpu(m.gpu_drafter_ns, ug[GpuSlot.DRAFTER])
        out_end = mx(mx(w, self.out_free), drafter_end) + jit_gpu(
            m.dma_land_delay_ns, ug[GpuSlot.OUTPUT_D2H]
        )
        out_eng = out_end + self.jit(m.engine_output_ipc_ns, ue[EngineSlot.OUTPUT_IPC])
        self.out_at_engine.append(out_eng)
        if not self.async_sched:
            w = mx(w, out_end)
        self.w = w
        self.d_free, self.valid_free, self.out_free = drafter_end, valid_end, out_end
        self.land_prev, self.valid_end_prev = land, valid_end
        self.sim_end = mx(mx(self.sim_end, out_eng), mx(valid_end, w))
        return land


def _new_result(policy: str, P: int, n_steps: int, keep_timing: bool) -> PointsResult:
    """The empty result; with ``keep_timing`` its (steps, points) timing arrays allocated."""
    res = PointsResult(policy, P, n_steps)
    if keep_timing:
        res.land_ns = np.zeros((n_steps, P), np.int64)
        res.read_ns = np.zeros((n_steps, P), np.int64)
        res.forward_start_ns = np.zeros((n_steps, P), np.int64)
        res.wait_ns = np.zeros((n_steps, P), np.int64)
        res.op_write_ns = []
    return res


def _record_timing(res: PointsResult, n, land, read, fwd_start, wait, op_times, n_ops) -> None:
    """Step N's row of the timing arrays (``keep_timing``): the counts' landing, the read, the
    forward's start, the wait on the counts event, and the row ops' times."""
    assert res.land_ns is not None and res.read_ns is not None
    assert res.forward_start_ns is not None and res.wait_ns is not None
    assert res.op_write_ns is not None
    res.land_ns[n] = land
    res.read_ns[n] = read
    res.forward_start_ns[n] = fwd_start
    res.wait_ns[n] = wait
    res.op_write_ns.append(np.array(op_times, dtype=np.int64).reshape(n_ops, res.n_points))


def _collect(res: PointsResult, acc: Accumulator, keep_reads: bool, on_reads, fwd_first,
             fwd_last, wait_sum) -> None:  # fmt: skip
    """The accumulator's verdicts into ``res`` once the last step is judged: the reads (or,
    streaming, the last batch to ``on_reads``), GPU-wrong steps and kinds, the summaries."""
    P = res.n_points
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
