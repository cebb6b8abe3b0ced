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

from sim.errors import SpecraceError
from sim.model.params import TimingParams, row_op_ns
from sim.model.policies import SYNC_SCHEDULING, Policy
from sim.model.reads import READ_COLUMNS
from sim.model.rng import (
    Actor,
    EngineSlot,
    GpuSlot,
    StepDraws,
    WorkerSlot,
    jittered_ns,
    jittered_ns_array,
    slow_uniforms,
    slowed_ns,
    uniform,
)
from sim.model.schedule import Schedule, StepRecord
from sim.model.verdict import (
    KINDS,  # kind codes 0..3
    judge,
    kind_codes,
    margins,
    participating,
    prompt_state_lost,
)

READ_COLUMNS_POINTS = {"point": "int32", **READ_COLUMNS}  # reads.parquet with the point index


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

    def check(self) -> None:
        """TimingParams.check over every point at once (the rules the tiers rely on: no
        negative duration, so ``astype`` truncates as ``int`` does; jitter below 100 %)."""
        for f in dataclasses.fields(TimingParams):
            if f.name == "gpu_jitter_frac":  # -1 means "as jitter_frac"
                continue
            bad = np.flatnonzero(np.atleast_1d(np.asarray(getattr(self, f.name))) < 0)
            if bad.size:
                raise SpecraceError(f"timing point {bad[0]}: timing.{f.name} must be >= 0")
        frac = np.atleast_1d(np.asarray(self.jitter_frac))
        if ((frac < 0) | (frac >= 1)).any():
            raise SpecraceError(
                f"timing point {np.flatnonzero((frac < 0) | (frac >= 1))[0]}: "
                "timing.jitter_frac must be in [0, 1)"
            )
        prob = np.atleast_1d(np.asarray(self.worker_stall_prob))
        if ((prob < 0) | (prob > 1)).any():
            raise SpecraceError(
                f"timing point {np.flatnonzero((prob < 0) | (prob > 1))[0]}: "
                "timing.worker_stall_prob must be in [0, 1]"
            )

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
    on_reads: Callable[[pd.DataFrame], None] | None = None,
    batch_steps: int = 4096,
) -> PointsResult:
    """Simulate ``schedule`` under ``policy`` once per timing point (all with ``seed``).

    Point ``p`` equals ``simulate(schedule, timings[p], policy, seed)`` read by read.
    ``keep_reads``: the per-read table (one row per point and read: large); without it only
    the per-point summaries are built.

    Streaming (bounded memory, for long runs): pass the header as ``schedule``, the steps as
    an iterator ``steps`` (e.g. from :func:`sim.model.scheduling.iter_schedule`) with their
    count ``n_steps``, ``keep_timing=False``, and ``on_reads``: it receives the reads every
    ``batch_steps`` steps (sorted by point within a batch) and nothing is kept; state is
    O(points x rows) whatever the step count.
    """
    _check(timings)
    if steps is None:
        steps, n_steps = schedule.steps, len(schedule.steps)
    elif n_steps is None:
        raise SpecraceError("simulate_points: give n_steps with a step iterator")
    P = len(timings)
    m = _Means(timings)
    m.check()
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
    acc = _Accumulator(pol, P, keep_reads or on_reads is not None)
    recent: deque[StepRecord] = deque(maxlen=lag + 1)  # steps N - lag .. N
    fwd_first = fwd_last = zero
    wait_sum = zero

    # slow phases of the host (worker_slow_*): every worker mean of a slow step scaled
    slow_u = slow_uniforms(seed, n_steps).tolist() if np.any(m.worker_slow_prob) else None
    slow_arrays = isinstance(m.worker_slow_prob, np.ndarray) or isinstance(
        m.worker_slow_factor, np.ndarray
    )
    scale: Any = None

    def wj(mean, u: float):
        return m.jit(mean, u) if scale is None else m.jit(slowed_ns(mean, scale), u)

    for n, rec in enumerate(steps):
        recent.append(rec)
        ue, uw, ug = draw_e.get(n), draw_w.get(n), draw_g.get(n)
        if slow_u is not None:
            if slow_arrays:
                scale = np.where(slow_u[n] < m.worker_slow_prob, m.worker_slow_factor, 1.0)
            else:
                scale = m.worker_slow_factor if slow_u[n] < m.worker_slow_prob else 1.0
        if rec.ops:  # the row ops' slots follow the fixed ones (same keys as the SimPy tier)
            slots = WorkerSlot.OP_BASE + np.arange(len(rec.ops), dtype=np.int64)
            uw = uw + uniform(seed, n, Actor.WORKER, slots).tolist()
        # -- engine core ---------------------------------------------------------------
        if n >= lag:
            n_prev = recent[0].num_reqs
            e = mx(e, out_at_engine[0]) + m.jit(
                m.engine_update_ns_per_req * max(n_prev, 1), ue[EngineSlot.UPDATE]
            )
        sched_ns = m.engine_schedule_ns_base + m.engine_schedule_ns_per_req * rec.num_reqs
        e = e + m.jit(sched_ns, ue[EngineSlot.SCHEDULE])
        arrival = e + m.jit(m.engine_input_ipc_ns, ue[EngineSlot.INPUT_IPC])
        sim_end = mx(sim_end, arrival)
        # -- worker: scheduler output, synchronize_input_prep, stall ----------------------
        w = mx(w, arrival) + wj(m.worker_rpc_dispatch_ns, uw[WorkerSlot.RPC_DISPATCH])
        if n > 0:
            w = mx(w, prep_end_prev)
        stall = draw_s.get(n)[0] < np.asarray(m.worker_stall_prob)
        if stall.any():
            d_stall = wj(m.worker_stall_ns, uw[WorkerSlot.STALL])
            w = w + (d_stall if scalar else np.where(stall, d_stall, 0))
        wait = zero
        if pol.waits_before_moves and n > 0:
            w0 = w
            w = mx(w, land_prev) + m.worker_event_sync_ns
            wait = w - w0
        # -- _update_states: the row ops, with step N-1's DMA landing among them -----------
        pending = np.ones(P, dtype=bool) if n > 0 else np.zeros(P, dtype=bool)
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
        cpu = np.broadcast_to(cpu, (rec.num_reqs, P))
        if n > 0:
            acc.step(n, rec, prev_rec, cpu, land_prev, read, writes)
            # The rest land before step N+1's first row op (see the module docstring).
            if any_pending:
                _land(buf, private, prev_acc, pending, pending)
        prep2_ns = m.worker_copy_to_gpu_ns + m.worker_prepare_inputs_ns // 2
        w = w + wj(prep2_ns, uw[WorkerSlot.PREPARE_2])
        # -- launch: prep, prepare_inputs_event, forward -----------------------------------
        prep_end = mx(w, d_free) + m.jit_gpu(m.gpu_prep_ns, ug[GpuSlot.PREP])
        w = w + wj(m.worker_launch_ns, uw[WorkerSlot.LAUNCH])
        fwd_ns = m.gpu_forward_ns_base + m.gpu_forward_ns_per_token * int(rec.num_scheduled.sum())
        fwd_start = mx(w, prep_end)
        fwd_end = fwd_start + m.jit_gpu(fwd_ns, ug[GpuSlot.FORWARD])
        if async_sched and n > 0:
            w = mx(w, valid_end_prev)
        sample_ns = m.worker_sample_tokens_ns
        if rec.has_prefill:
            sample_ns = sample_ns + m.worker_sample_tokens_ns_prefill
        w = w + wj(sample_ns, uw[WorkerSlot.SAMPLE_TOKENS])
        # -- sample_tokens(N): sampler, counts D2H, event records, drafter, output copy -----
        d_sample = m.jit_gpu(m.gpu_sample_ns, ug[GpuSlot.SAMPLE])
        d_d2h = m.jit_gpu(m.dma_land_delay_ns, ug[GpuSlot.COUNTS_D2H])
        if np.any((np.asarray(d_sample) == 0) & (np.asarray(d_d2h) == 0)):
            raise SpecraceError(
                f"step {n}: gpu_sample_ns and dma_land_delay_ns both jitter to 0 ns; the vector "
                "tier needs the landing to be a GPU completion (use the SimPy tier: --engine simpy)"
            )
        land = mx(w, fwd_end) + d_sample + d_d2h
        valid_end = mx(mx(w, valid_free), land) + m.jit_gpu(
            m.dma_land_delay_ns, ug[GpuSlot.VALID_COUNT_D2H]
        )
        drafter_end = land + m.jit_gpu(m.gpu_drafter_ns, ug[GpuSlot.DRAFTER])
        out_end = mx(mx(w, out_free), drafter_end) + m.jit_gpu(
            m.dma_land_delay_ns, ug[GpuSlot.OUTPUT_D2H]
        )
        out_eng = out_end + m.jit(m.engine_output_ipc_ns, ue[EngineSlot.OUTPUT_IPC])
        out_at_engine.append(out_eng)
        if not async_sched:
            w = mx(w, out_end)
        d_free, valid_free, out_free = drafter_end, valid_end, out_end
        prep_end_prev, land_prev, valid_end_prev = prep_end, land, valid_end
        sim_end = mx(mx(sim_end, out_eng), mx(valid_end, w))
        acc.add_step(rec)
        if on_reads is not None and (n + 1) % batch_steps == 0 and acc.parts:
            on_reads(acc.table())
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
    if on_reads is not None:
        if acc.parts:
            on_reads(acc.table())
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


def _land(buf, private, counts, pending: np.ndarray, due) -> bool:
    """Step N-1's DMA (``B[:n] = counts``) for the points where it is pending and due;
    returns whether any point is still pending."""
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


def _nonzero_2d(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.nonzero`` of a C-contiguous 2-D bool mask with few True entries, in the same
    (row-major) order: the mask is scanned eight bytes at a time, and only the words that
    hold a True are looked into (several times faster on a sparse mask)."""
    flat = mask.reshape(-1)
    words = np.zeros(0, dtype=np.intp)
    if flat.size % 8 == 0 and mask.flags.c_contiguous:
        words = np.flatnonzero(flat.view(np.uint64))
    if flat.size % 8 or not mask.flags.c_contiguous or words.size * 64 > flat.size:
        rows, cols = np.nonzero(mask)  # not sparse, or not viewable as words
        return rows, cols
    w_i, b_i = np.nonzero(flat.reshape(-1, 8)[words])
    return np.divmod(words[w_i] * 8 + b_i, mask.shape[1])


def _count(mask: np.ndarray) -> np.ndarray:
    """True entries per point of a (reads, points) mask: a row-wise sum in the narrowest
    dtype that cannot overflow (count_nonzero along an axis casts every element to intp)."""
    dtype = np.uint8 if len(mask) < 256 else np.int64
    return np.add.reduce(mask.view(np.uint8), axis=0, dtype=dtype)


class _Accumulator:
    """The per-read verdicts of each step (sim.model.reads), kept as a table or as counts."""

    def __init__(self, pol: Policy, P: int, keep_reads: bool) -> None:
        self.pol = pol
        self.steps = 0
        self.tokens = 0  # accepted tokens of rows that sample, over all steps
        self.P = P
        self.keep = keep_reads
        self.parts: list[dict[str, np.ndarray]] = []
        self.n_reads = 0
        self.cpu_wrong = np.zeros(P, np.int64)
        self.gpu_wrong = np.zeros(P, np.int64)
        self.lost = np.zeros(P, np.int64)
        self.by_kind = np.zeros((len(KINDS), P), np.int64)
        self.gpu_kind = np.zeros((len(KINDS), P), np.int64)  # GPU-wrong reads by kind
        self.gpu_steps = np.zeros(P, np.int64)  # steps with a GPU-wrong read
        self.points = np.arange(P)
        self.req_index: dict[str, int] = {}
        self.corrupted: list[np.ndarray] = []  # (point, request index) pairs, GPU-wrong

    def add_step(self, rec: StepRecord) -> None:
        self.steps += 1
        self.tokens += int(rec.accepted[~rec.discard].sum())

    def step(self, n, cur, prev, cpu_all, land, read, writes: list[np.ndarray]) -> None:
        pp = cur.prev_positions
        rows = np.flatnonzero(pp >= 0)
        if rows.size == 0:
            return
        P, nr = self.P, rows.size
        src = pp[rows]
        true = prev.accepted[src]
        prev_drafts = prev.drafts[src]
        part = participating(cur.prev_num_draft_tokens, src)
        # The step's hazard kind, per point (the verdict's); the margin only when kept.
        kind, unlanded = kind_codes(land, read, writes)
        kind = np.broadcast_to(kind, (P,))
        self.n_reads += nr
        cpu_rows = cpu_all if nr == len(cpu_all) else cpu_all[rows]
        if not self.keep and self._sparse_step(cur, rows, cpu_rows, true, part, prev_drafts, kind):
            return
        # Dense: every (read, point) through the policy's functions, in int8 (counts are
        # 1..k+1 <= 16; a narrow dtype is what makes 10^4 points cheap).
        cpu = cpu_rows.astype(np.int8)
        true_c = true.astype(np.int8)[:, None]
        gpu, cpu_wrong, gpu_wrong = judge(self.pol, cpu, true_c, part[:, None])
        gpu = np.broadcast_to(gpu, (nr, P))
        cpu_wrong = np.asarray(cpu_wrong)
        if cpu_wrong.shape != (nr, P):  # a policy that reads no buffer: one answer per read
            cpu_wrong = np.broadcast_to(cpu_wrong.reshape(nr, -1), (nr, P))
        gpu_wrong = np.ascontiguousarray(np.broadcast_to(gpu_wrong, (nr, P)))
        wrong = cpu_wrong | gpu_wrong
        first = np.flatnonzero(prev_drafts == 0)  # only these can lose the prompt state
        lost_first = gpu_wrong[first] & (gpu[first] > 1)
        self.cpu_wrong += _count(cpu_wrong)
        n_gpu_wrong = _count(gpu_wrong)
        self.gpu_wrong += n_gpu_wrong
        self.lost += _count(lost_first)
        n_wrong = _count(wrong)
        self.by_kind[kind, self.points] += n_wrong  # one (kind, point) per point: no repeats
        self.gpu_kind[kind, self.points] += n_gpu_wrong
        self.gpu_steps += n_gpu_wrong > 0
        if n_gpu_wrong.any():
            r_idx, p_idx = np.nonzero(gpu_wrong)
            self._corrupt(cur, rows[r_idx], p_idx)
        if self.keep:
            margin = margins(land, read, writes, unlanded)
            lost = np.zeros((nr, P), dtype=bool)
            lost[first] = lost_first
            # Point-major, so a point's reads are contiguous as in the SimPy tier.
            self.parts.append(
                {
                    "point": np.repeat(np.arange(P), nr),
                    "step": np.full(P * nr, n),
                    "req_id": np.tile(np.asarray(cur.req_ids, dtype=object)[rows], P),
                    "row": np.tile(rows, P),
                    "prev_row": np.tile(src, P),
                    "prev_drafts": np.tile(prev_drafts, P),
                    "true_count": np.tile(true, P),
                    "cpu_value": cpu.T.ravel(),
                    "gpu_value": gpu.T.ravel(),
                    "cpu_wrong": cpu_wrong.T.ravel(),
                    "gpu_wrong": gpu_wrong.T.ravel(),
                    "kind": np.asarray(KINDS, dtype=object)[np.where(wrong, kind, 0).T.ravel()],
                    "gdn_slot": gpu.T.ravel().astype(np.int32) - 1,
                    "prompt_state_lost": lost.T.ravel(),
                    "margin_ns": np.repeat(margin, nr),
                }
            )

    SPARSE_MAX = 0.05  # above this fraction of wrong CPU values the dense path is cheaper

    def _sparse_step(self, cur, rows, cpu_rows, true, part, prev_drafts, kind) -> bool:
        """The step's counts from its wrong CPU values only, if that is exact and cheaper.

        The policy functions are elementwise; where a CPU value equals the truth a policy
        (checked on this step's rows) consumes the truth and calls nothing wrong, so only the
        mismatched (read, point) pairs can be wrong. Returns False to take the dense path.
        """
        P, nr = self.P, len(rows)
        _g, probe_cpu_wrong, probe_gpu_wrong = judge(self.pol, true, true, part)
        if np.asarray(probe_gpu_wrong).any() or np.asarray(probe_cpu_wrong).any():
            return False
        mis = cpu_rows != true.astype(cpu_rows.dtype)[:, None]  # int8: no widening
        n_mis = int(np.count_nonzero(mis))
        if n_mis > self.SPARSE_MAX * nr * P:
            return False
        if n_mis == 0:
            return True
        r_idx, p_idx = _nonzero_2d(mis)
        c, t = cpu_rows[r_idx, p_idx], true[r_idx]
        g, cw, gw = judge(self.pol, c, t, part[r_idx])
        g = np.asarray(g)
        cw = np.broadcast_to(np.asarray(cw), (n_mis,))
        lost = prompt_state_lost(gw, prev_drafts[r_idx], g)
        self.cpu_wrong += np.bincount(p_idx[cw], minlength=P)
        n_gw = np.bincount(p_idx[gw], minlength=P)
        self.gpu_wrong += n_gw
        self.gpu_kind[kind, self.points] += n_gw
        self.gpu_steps += n_gw > 0
        self.lost += np.bincount(p_idx[lost], minlength=P)
        self.by_kind[kind, self.points] += np.bincount(p_idx[cw | gw], minlength=P)
        if gw.any():
            self._corrupt(cur, rows[r_idx[gw]], p_idx[gw])
        return True

    def _corrupt(self, cur, rows: np.ndarray, points: np.ndarray) -> None:
        """Remember (point, request) of GPU-wrong reads: corrupted_requests counts them."""
        ids = [self.req_index.setdefault(cur.req_ids[r], len(self.req_index)) for r in rows]
        self.corrupted.append(np.stack([points, np.asarray(ids, dtype=np.int64)], axis=1))

    def table(self) -> pd.DataFrame:
        """The reads kept so far (and forget them)."""
        if not self.parts:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in READ_COLUMNS_POINTS.items()})
        cols = {c: np.concatenate([p[c] for p in self.parts]) for c in READ_COLUMNS_POINTS}
        self.parts = []
        order = np.argsort(cols["point"], kind="stable")  # (step, point, row) -> (point, ...)
        df = pd.DataFrame({c: v[order] for c, v in cols.items()})
        return df.astype(READ_COLUMNS_POINTS)

    def summaries(self, fwd_first, fwd_last, wait_sum, sim_time) -> list[dict]:
        steps, tokens = self.steps, self.tokens
        pairs = np.concatenate(self.corrupted) if self.corrupted else np.zeros((0, 2), np.int64)
        corrupted = np.zeros(self.P, np.int64)
        if len(pairs):
            uniq = np.unique(pairs, axis=0)
            corrupted = np.bincount(uniq[:, 0], minlength=self.P)
        order = sorted(range(1, len(KINDS)), key=lambda k: KINDS[k])  # as value_counts sorts
        cols = zip(
            self.by_kind.T.tolist(),
            self.cpu_wrong.tolist(),
            self.gpu_wrong.tolist(),
            self.lost.tolist(),
            corrupted.tolist(),
            np.asarray(fwd_first).tolist(),
            np.asarray(fwd_last).tolist(),
            np.asarray(wait_sum).tolist(),
            np.asarray(sim_time).tolist(),
            strict=True,
        )  # Python ints: one conversion per column, not per point
        out = []
        for kinds, cw, gw, lost, corrupt, first, last, wait, end in cols:
            step_ns = (last - first) / (steps - 1) if steps > 1 else 0.0
            out.append(
                {
                    "policy": self.pol.name,
                    "steps": steps,
                    "reads": int(self.n_reads),
                    "cpu_wrong": cw,
                    "gpu_wrong": gw,
                    "prompt_state_lost": lost,
                    "corrupted_requests": corrupt,
                    "by_kind": {KINDS[k]: kinds[k] for k in order if kinds[k]},
                    "mean_step_ns": round(step_ns, 1),
                    "tokens_per_s": round(tokens / max(end, 1) * 1e9, 1),
                    "event_wait_ns_mean": round(wait / steps, 1) if steps else 0.0,
                    "sim_time_ns": end,
                }
            )
        return out
