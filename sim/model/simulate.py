"""The SimPy model: *when* everything in a schedule happens, and so what every read returns.

One generator per actor, named after it: :meth:`Model.engine_core`, :meth:`Model.worker_cpu`,
and the GPU streams of :mod:`sim.model.cuda` (``default_stream``, the side copy streams
``valid_sampled_token_count_copy_stream`` and ``async_output_copy_stream``). The pinned
counts buffer is a numpy array that every writer updates at its SimPy time, with a write
log in the trace; a read returns the buffer's content at the read's time, so the outcome of
every interleaving is computed, not guessed. Tie rule: see :mod:`sim.model.cuda`.

Every duration is ``mean * (1 + jitter)`` with the jitter (and whether the worker stalls)
drawn from counter-based streams keyed by (seed, step, actor, slot) (:mod:`sim.model.rng`),
so a draw does not depend on when it is made. :mod:`sim.model.vector` is the same model as a
per-step recurrence over many timing points, held to this one read by read.

Per step N (docs/mechanism.md §1, §8, §11):

- engine core: ``schedule(N)`` -> input IPC; under async scheduling ``schedule(N+1)``
  waits for ``get_output(N-1)`` (GPU drafter(N-1) + output copy + IPC) and
  ``update_from_output(N-1)``; with async off it waits for step N's output.
- worker CPU: scheduler output N, ``synchronize_input_prep`` (prepare_inputs_event(N-1)),
  ``_update_states`` micro-operations in the schedule's order (removes, the cached-request
  loop with the fixed time before the adds, adds, condense moves, the reorder's own time,
  swaps, refresh), ``_prepare_inputs`` with the policy's event
  wait and read, prep + launch of the forward, the deferred correction (waits on
  valid_sampled_token_count_event(N-1)), then ``sample_tokens(N)`` which enqueues sampler,
  the counts D2H, the event record and the drafter without waiting (async) or waits for
  the outputs (async off).
- default stream: prep(N), forward(N), sample(N), D2H(N) (lands ``dma_land_delay_ns``
  after sample(N) ends), drafter(N).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from sim.model.counts_buffer import apply_op
from sim.model.cuda import CudaEvent, Stream
from sim.model.params import TimingParams, row_op_ns
from sim.model.policies import SYNC_SCHEDULING, Policy
from sim.model.rng import (
    Actor,
    EngineSlot,
    GpuSlot,
    StepDraws,
    WorkerSlot,
    slow_steps,
    slowed_ns,
)
from sim.model.schedule import Schedule
from sim.model.trace import DEFAULT_STREAM, LANDING, UPDATE_STATES, WORKER, read_event
from sim.model.verdict import WRITE_OPS


@dataclass
class StepTiming:
    """What the worker saw in one step, in ns; filled as the simulation runs."""

    op_write_ns: list[int] = field(default_factory=list)
    op_is_write: list[bool] = field(default_factory=list)
    read_ns: int = -1
    wait_ns: int = 0  # time the worker spent blocked on num_accepted_tokens_event
    forward_start_ns: int = -1
    land_ns: int = -1
    cpu_counts: np.ndarray | None = None  # what the CPU put into num_accepted_tokens


class Jitter:
    """One actor's jittered durations: ``j(step, slot, mean_ns)``, from the counter-based
    streams of :mod:`sim.model.rng` keyed by (seed, step, actor, slot), so the draw does not
    depend on when the actor draws (the vector tier draws the very same numbers)."""

    def __init__(self, draws: StepDraws, frac: float, scale: list[float] | None = None) -> None:
        self.draws = draws
        self.frac = frac
        self.scale = scale  # per step: the host's speed (worker_slow_*), None: always 1

    def __call__(self, step: int, slot: int, mean_ns: int) -> int:
        if mean_ns <= 0:
            return 0
        if self.scale is not None:
            mean_ns = slowed_ns(mean_ns, self.scale[step])
        # rng.jittered_ns inlined (the hot path of the SimPy tier): the very same float ops.
        u = self.draws.get(step)[slot]
        return int(mean_ns * (1.0 + self.frac * (2.0 * u - 1.0)))


class Model:
    def __init__(
        self,
        schedule: Schedule,
        timing: TimingParams,
        policy: Policy,
        seed: int,
        trace: bool = True,
        env: simpy.Environment | None = None,  # a fresh one unless given (the bench counts)
    ) -> None:
        self.schedule = schedule
        self.t = timing
        self.async_scheduling = schedule.async_scheduling
        self.policy = policy if self.async_scheduling else SYNC_SCHEDULING
        self.env = simpy.Environment() if env is None else env
        env = self.env
        self.trace_rows: list[tuple] | None = [] if trace else None
        n_steps = len(schedule.steps)
        self.timing = [StepTiming() for _ in range(n_steps)]
        self.buf = np.ones(schedule.max_num_reqs, dtype=np.int64)  # num_accepted_tokens_cpu
        self.private = np.ones(schedule.max_num_reqs, dtype=np.int64)  # #51599's buffer
        frac = timing.jitter_frac
        n_ops = np.array([len(s.ops) for s in schedule.steps], dtype=np.int64)
        self.jit_engine = Jitter(StepDraws(seed, Actor.ENGINE, EngineSlot.COUNT, n_steps), frac)
        scale = None
        if timing.worker_slow_prob > 0:
            prob, rho = timing.worker_slow_prob, timing.worker_slow_persistence
            slow = slow_steps(seed, n_steps, prob, rho).tolist()
            f = timing.worker_slow_factor
            scale = [f if s else 1.0 for s in slow]
        self.jit_worker = Jitter(
            StepDraws(seed, Actor.WORKER, WorkerSlot.OP_BASE, n_steps, n_ops), frac, scale
        )
        self.jit_gpu = Jitter(StepDraws(seed, Actor.GPU, GpuSlot.COUNT, n_steps), timing.gpu_frac)
        self.stall_draws = StepDraws(seed, Actor.STALL, 1, n_steps)
        on_item = self._log_stream_item if trace else None
        self.default_stream = Stream(env, "default_stream", on_item)
        self.valid_count_stream = Stream(env, "valid_sampled_token_count_copy_stream", on_item)
        self.output_copy_stream = Stream(env, "async_output_copy_stream", on_item)
        self.prepare_inputs_event = CudaEvent(env, "prepare_inputs_event")
        self.num_accepted_tokens_event = CudaEvent(env, "num_accepted_tokens_event")
        self.valid_sampled_token_count_event = CudaEvent(env, "valid_sampled_token_count_event")
        self.sched_arrival = [env.event() for _ in range(n_steps)]
        self.output_at_engine = [env.event() for _ in range(n_steps)]
        self.output_on_cpu = [env.event() for _ in range(n_steps)]
        env.process(self.engine_core())
        env.process(self.worker_cpu())

    # -- helpers ---------------------------------------------------------------------
    def log(
        self,
        actor: str,
        event: str,
        step: int,
        row: int = -1,
        value: int = -1,
        req_id: str = "",
        start: float | None = None,
    ) -> None:
        """One trace row; with ``start`` it is a span from ``start`` to now."""
        if self.trace_rows is not None:
            t0 = self.env.now if start is None else start
            self.trace_rows.append((t0, self.env.now - t0, step, actor, event, row, value, req_id))

    def _log_stream_item(self, stream: Stream, item) -> None:
        if self.trace_rows is not None and item.duration_ns:
            self.trace_rows.append(
                (
                    item.start_ns,
                    item.end_ns - item.start_ns,
                    item.step,
                    stream.name,
                    item.name,
                    -1,
                    -1,
                    "",
                )
            )

    def _after(self, delay_ns: int, target: simpy.Event) -> None:
        """Succeed ``target`` ``delay_ns`` from now (a message in flight)."""

        def fire(_e: simpy.Event) -> None:
            target.succeed()

        self.env.timeout(delay_ns).callbacks.append(fire)

    # -- engine core -----------------------------------------------------------------
    def engine_core(self):
        env, t, j = self.env, self.t, self.jit_engine
        lag = 2 if self.async_scheduling else 1
        for step, rec in enumerate(self.schedule.steps):
            if step >= lag:  # schedule(step) needs update_from_output(step - lag) first
                done = step - lag
                yield self.output_at_engine[done]
                n_prev = self.schedule.steps[done].num_reqs
                t0 = env.now
                yield env.timeout(
                    j(step, EngineSlot.UPDATE, t.engine_update_ns_per_req * max(n_prev, 1))
                )
                self.log("engine_core", "update_from_output", done, start=t0)
            t0 = env.now
            sched_ns = t.engine_schedule_ns_base + t.engine_schedule_ns_per_req * rec.num_reqs
            yield env.timeout(j(step, EngineSlot.SCHEDULE, sched_ns))
            self.log("engine_core", "schedule", step, start=t0)
            self._after(
                j(step, EngineSlot.INPUT_IPC, t.engine_input_ipc_ns), self.sched_arrival[step]
            )

    # -- worker CPU thread -----------------------------------------------------------
    def worker_cpu(self):
        env, t, j, jg = self.env, self.t, self.jit_worker, self.jit_gpu
        W, G = WorkerSlot, GpuSlot
        pol = self.policy
        steps = self.schedule.steps
        for step, rec in enumerate(steps):
            tim = self.timing[step]
            t0 = env.now
            yield self.sched_arrival[step]
            self.log("worker_cpu", "wait_scheduler_output", step, start=t0)
            rpc_ns = t.worker_rpc_dispatch_ns + t.worker_rpc_dispatch_ns_per_req * rec.num_reqs
            yield env.timeout(j(step, W.RPC_DISPATCH, rpc_ns))
            t0 = env.now
            yield self.prepare_inputs_event.synchronize()
            self.log("worker_cpu", "synchronize_input_prep", step, start=t0)
            if t.worker_stall_prob and self.stall_draws.get(step)[0] < t.worker_stall_prob:
                t0 = env.now
                yield env.timeout(j(step, W.STALL, t.worker_stall_ns))
                self.log("worker_cpu", "stall", step, start=t0)
            if pol.waits_before_moves and step > 0:
                yield from self._wait_counts(step)
            yield from self._update_states(step, rec, tim)
            # _prepare_inputs: prev_positions, then the accepted-count block.
            t0 = env.now
            yield env.timeout(j(step, W.PREPARE_1, t.worker_prepare_inputs_ns // 2))
            if pol.waits_before_read and step > 0:
                yield from self._wait_counts(step)
            self._read_counts(step, rec, tim)
            prep2_ns = t.worker_copy_to_gpu_ns + t.worker_prepare_inputs_ns // 2
            yield env.timeout(j(step, W.PREPARE_2, prep2_ns))
            self.log("worker_cpu", "_prepare_inputs", step, start=t0)
            # Launch: prep H2D copies, prepare_inputs_event, then the forward.
            self.default_stream.enqueue("prep", step, jg(step, G.PREP, t.gpu_prep_ns))
            self.prepare_inputs_event.record(self.default_stream, step)
            t0 = env.now
            yield env.timeout(j(step, W.LAUNCH, t.worker_launch_ns))
            self.log("worker_cpu", "launch", step, start=t0)
            fwd = t.gpu_forward_ns_base + t.gpu_forward_ns_per_token * int(rec.num_scheduled.sum())
            if rec.has_prefill:
                fwd += t.gpu_forward_ns_prefill
            item = self.default_stream.enqueue("forward", step, jg(step, G.FORWARD, fwd))
            item.done.callbacks.append(
                lambda _e, tim=tim, item=item: setattr(tim, "forward_start_ns", item.start_ns)
            )
            if self.async_scheduling and step > 0:
                # correct_spec_decode_token_counts: the one remaining per-step sync.
                t0 = env.now
                yield self.valid_sampled_token_count_event.synchronize()
                self.log("worker_cpu", "correct_spec_decode_token_counts", step, start=t0)
            t0 = env.now
            sample_ns = t.worker_sample_tokens_ns
            if t.worker_sample_tokens_ns_prefill and rec.has_prefill:
                sample_ns += t.worker_sample_tokens_ns_prefill
            yield env.timeout(j(step, W.SAMPLE_TOKENS, sample_ns))
            self._enqueue_sample(step, rec, tim)
            self.log("worker_cpu", "sample_tokens", step, start=t0)
            if not self.async_scheduling:
                yield self.output_on_cpu[step]

    def _wait_counts(self, step: int):
        start = self.env.now
        yield self.num_accepted_tokens_event.synchronize()
        yield self.env.timeout(self.t.worker_event_sync_ns)
        self.timing[step].wait_ns += int(self.env.now - start)
        self.log("worker_cpu", "num_accepted_tokens_event.synchronize", step, start=start)

    def _update_states(self, step: int, rec, tim: StepTiming):
        env, t, j = self.env, self.t, self.jit_worker
        n_cached = rec.num_reqs - len(rec.new) - len(rec.resumed)
        cached_loop_done = False
        dur = row_op_ns(t)
        t_update = env.now
        reordered = False
        for i, op in enumerate(rec.ops):
            if op.kind != "remove" and not cached_loop_done:
                yield from self._cached_loop(step, n_cached)
                cached_loop_done = True
            if op.kind == "swap" and not reordered:
                yield from self._reorder(step)
                reordered = True
            t0 = env.now
            yield env.timeout(j(step, WorkerSlot.OP_BASE + i, dur[op.kind]))
            apply_op(self.buf, op, i, None)
            tim.op_write_ns.append(int(env.now))
            tim.op_is_write.append(op.kind in WRITE_OPS)
            row = op.b if op.kind == "move" else op.a
            self.log("worker_cpu", op.kind, step, row, int(self.buf[row]), op.req_id, start=t0)
        if not cached_loop_done:
            yield from self._cached_loop(step, n_cached)
        if not reordered:
            yield from self._reorder(step)
        yield env.timeout(j(step, WorkerSlot.REFRESH, t.worker_refresh_metadata_ns))
        self.log(WORKER, UPDATE_STATES, step, start=t_update)

    def _cached_loop(self, step: int, n_cached: int):
        t0 = self.env.now
        mean_ns = self.t.worker_pre_add_ns + self.t.worker_cached_loop_ns_per_req * n_cached
        yield self.env.timeout(self.jit_worker(step, WorkerSlot.CACHED_LOOP, mean_ns))
        self.log("worker_cpu", "cached_request_loop", step, value=n_cached, start=t0)

    def _reorder(self, step: int):
        """``_may_reorder_batch`` up to its first swap. It shares refresh_metadata's draw (one
        host speed for the tail of ``_update_states``); at 0 it yields nothing, so a timing
        without it runs event for event as before."""
        if self.t.worker_reorder_ns:
            mean_ns = self.t.worker_reorder_ns
            yield self.env.timeout(self.jit_worker(step, WorkerSlot.REFRESH, mean_ns))

    def _read_counts(self, step: int, rec, tim: StepTiming) -> None:
        tim.read_ns = int(self.env.now)
        tim.cpu_counts = self.policy.cpu_read(
            self.buf, self.private, rec.prev_positions, rec.num_reqs
        )
        self.log(WORKER, read_event(self.policy.read_mode), step, value=rec.num_reqs)

    def _enqueue_sample(self, step: int, rec, tim: StepTiming) -> None:
        t, jg = self.t, self.jit_gpu
        counts = rec.accepted.copy()
        s = self.default_stream

        def landed(now: int) -> None:
            tim.land_ns = now
            self.buf[: len(counts)] = counts
            self.private[: len(counts)] = counts
            self.log(DEFAULT_STREAM, LANDING, step, value=len(counts))

        G = GpuSlot
        s.enqueue("sample", step, jg(step, G.SAMPLE, t.gpu_sample_ns))
        s.enqueue("counts_d2h", step, jg(step, G.COUNTS_D2H, t.dma_land_delay_ns), on_done=landed)
        self.num_accepted_tokens_event.record(s, step)
        marker = s.enqueue("prepare_next_token_ids", step, 0)
        self.valid_count_stream.enqueue(
            "valid_count_d2h",
            step,
            jg(step, G.VALID_COUNT_D2H, t.dma_land_delay_ns),
            wait_for=marker.done,
        )
        self.valid_sampled_token_count_event.record(self.valid_count_stream, step)
        drafter = s.enqueue("drafter", step, jg(step, G.DRAFTER, t.gpu_drafter_ns))
        out = self.output_copy_stream.enqueue(
            "output_d2h", step, jg(step, G.OUTPUT_D2H, t.dma_land_delay_ns), wait_for=drafter.done
        )
        on_cpu = self.output_on_cpu[step]

        def output_on_cpu(_e: simpy.Event) -> None:
            on_cpu.succeed()

        out.done.callbacks.append(output_on_cpu)
        ipc_ns = self.jit_engine(step, EngineSlot.OUTPUT_IPC, t.engine_output_ipc_ns)
        out.done.callbacks.append(lambda _e: self._after(ipc_ns, self.output_at_engine[step]))

    def run(self) -> None:
        self.env.run()


def simulate(
    schedule: Schedule, timing: TimingParams, policy: Policy, seed: int, trace: bool = True
) -> Model:
    model = Model(schedule, timing, policy, seed, trace)
    model.run()
    return model
