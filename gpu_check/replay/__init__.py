"""Replay a schedule's row operations on real pinned memory against a real non-blocking D2H.

For every step N+1 of a ``sim`` schedule, in isolation (device idle, buffer preset):

1. the pinned buffer ``num_accepted_tokens_cpu`` (int32, ``pin_memory``) is preset to what
   step N's gather left in it (or the private buffer of #51599, per policy);
2. on the default stream: a spin kernel whose length puts the landing at a drawn offset, then
   ``P[0 : 1 + n_N].copy_(counts_gpu, non_blocking=True)`` and an event record. ``P[0]`` is a
   landing tag carried by the *same* copy, so the host sees exactly when the counts landed;
3. the host thread performs step N+1's row operations on the real buffer (numpy on the pinned
   memory), each at its offset from the scenario's timing (busy-wait), reading the tag right
   before each store; then the policy's wait and read (gather, direct, private, fill 1).

The host polls the tag right before and right after each op's stores and around the read.
The observed landing position (the op before which the tag was first seen; ``n_ops`` after
the last; -1 not landed at the read) is fed to ``sim.model.verdict`` to predict what the read
returns; ``agree`` says whether real memory returned exactly that. A tag that turned visible
*between* the polls around one op (``land_during_op``: a window of a microsecond or two of
Python) leaves it open whether the store came before or after the landing; such reads are
reported apart, not scored.

Backends: :class:`CudaCounts` (torch, real pinned memory and streams) and
:class:`ScriptedCounts` (CPU, lands before a chosen op: tests the replay logic in CI).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from sim.model.counts_buffer import apply_op
from sim.model.params import TimingParams, row_op_ns
from sim.model.policies import Policy
from sim.model.schedule import Schedule, StepRecord
from sim.model.trace import EventKind, select
from sim.model.verdict import at_landing, judge, participating


class CountsDevice(Protocol):
    buf: np.ndarray  # the InputBatch buffer rows (view of pinned memory)
    private: np.ndarray  # #51599's runner-private target

    def reset(self, prior: np.ndarray, step: int) -> None: ...
    # The copy, in two halves: ``stage`` uploads step N's counts and waits for the upload (not
    # timed); ``fire`` enqueues the aim and the non-blocking copy. land_at_ns: a host instant
    # the copy should land at (``--aim device-clock``), else a spin of spin_ns.
    def stage(self, counts: np.ndarray, private: bool) -> None: ...
    def fire(self, spin_ns: int, land_at_ns: int | None = None) -> None: ...
    def track_clock(self) -> None: ...  # re-measure the device clock's offset (drift)
    def poll(self, op_index: int) -> bool: ...  # landed (tag visible) right now?
    def query(self) -> bool: ...  # the copy's event complete (never blocks)?
    def synchronize(self) -> None: ...


def launch(
    device: CountsDevice,
    counts: np.ndarray,
    spin_ns: int,
    private: bool,
    land_at_ns: int | None = None,
) -> None:
    """Stage and fire in one go (calibrations, where the upload's time does not matter)."""
    device.stage(counts, private)
    device.fire(spin_ns, land_at_ns)


class ScriptedCounts:
    """CPU stand-in: the copy lands right before op ``land_before`` (-1: never, before the
    read). Exercises every line of the replay except the hardware timing."""

    def __init__(self, max_num_reqs: int, land_before: list[int]) -> None:
        self.buf = np.ones(max_num_reqs, dtype=np.int32)
        self.private = np.ones(max_num_reqs, dtype=np.int32)
        self._plan = list(land_before)
        self._counts: np.ndarray | None = None
        self._landed = False

    def reset(self, prior: np.ndarray, step: int) -> None:
        self.buf[:] = prior
        self.private[:] = prior
        self._landed = False

    def stage(self, counts: np.ndarray, private: bool) -> None:
        self._counts, self._private = counts, private

    def fire(self, spin_ns: int, land_at_ns: int | None = None) -> None:
        self._target = self._plan.pop(0)

    def track_clock(self) -> None:
        pass

    def poll(self, op_index: int) -> bool:
        if not self._landed and self._target >= 0 and op_index >= self._target:
            self._land()
        return self._landed

    def synchronize(self) -> None:
        if not self._landed:
            self._land()

    def query(self) -> bool:  # a scripted copy completes when asked about
        self.synchronize()
        return True

    def _land(self) -> None:
        assert self._counts is not None, "land() before launch()"
        dst = self.private if self._private else self.buf
        dst[: len(self._counts)] = self._counts
        self._landed = True


class CudaCounts:
    """Real pinned memory, a real non-blocking D2H on the default stream, a real event."""

    def __init__(self, max_num_reqs: int) -> None:
        import torch

        self.torch = torch
        self.shared = torch.ones(1 + max_num_reqs, dtype=torch.int32, pin_memory=True)
        self.priv = torch.ones(1 + max_num_reqs, dtype=torch.int32, pin_memory=True)
        self.buf = self.shared.numpy()[1:]
        self.private = self.priv.numpy()[1:]
        self._tag_views = (self.shared.numpy(), self.priv.numpy())
        self.counts_gpu = torch.zeros(1 + max_num_reqs, dtype=torch.int32, device="cuda")
        self.event = torch.cuda.Event()
        self.ns_per_cycle = self._calibrate_spin()
        self.landing_fit: dict = {}  # set by the replay's landing calibration
        self.clock: Any = None  # gpu_check.replay.device_clock.DeviceClock, made on first use
        self._tag = 0

    def _calibrate_spin(self) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # warm-up
        start.record()
        torch.cuda._sleep(1_000_000)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e6 / 1_000_000

    def reset(self, prior: np.ndarray, step: int) -> None:
        self.torch.cuda.synchronize()
        self.buf[:] = prior
        self.private[:] = prior
        self._tag_views[0][0] = self._tag_views[1][0] = 0
        self._tag = step + 1

    def device_clock(self) -> Any:
        if self.clock is None:
            from gpu_check.replay.device_clock import DeviceClock

            self.clock = DeviceClock()
        return self.clock

    def stage(self, counts: np.ndarray, private: bool) -> None:
        torch = self.torch
        self._n = n = len(counts)
        host = torch.from_numpy(np.concatenate([[self._tag], counts]).astype(np.int32))
        self.counts_gpu[: 1 + n].copy_(host)  # upload first, then the race starts
        torch.cuda.synchronize()
        self._view = self._tag_views[1 if private else 0]
        self._dst = self.priv if private else self.shared

    def fire(self, spin_ns: int, land_at_ns: int | None = None) -> None:
        if land_at_ns is not None:
            self.device_clock().wait_until(land_at_ns)
        elif spin_ns > 0:
            self.torch.cuda._sleep(int(spin_ns / self.ns_per_cycle))
        self._dst[: 1 + self._n].copy_(self.counts_gpu[: 1 + self._n], non_blocking=True)
        self.event.record()

    def track_clock(self) -> None:
        self.device_clock().track()

    def poll(self, op_index: int) -> bool:
        return int(self._view[0]) == self._tag

    def query(self) -> bool:
        return bool(self.event.query())

    def synchronize(self) -> None:
        self.event.synchronize()


def clock_lags(device: CudaCounts, lead_ns: int, reps: int, n_counts: int = 1) -> list[int]:
    """Per repetition: the first sighting of ``n_counts`` counts copied behind a wait for the
    GPU clock to reach an instant ``lead_ns`` ahead, minus that instant (ns). The replay aims
    that much earlier; ``gpu_check calibrate`` records it as the model's landing delay."""
    samples = []
    for i in range(reps):
        device.reset(np.ones(len(device.buf), dtype=np.int32), 20_000 + i)
        device.stage(np.ones(n_counts, dtype=np.int32), private=False)
        device.track_clock()
        aim = time.perf_counter_ns() + lead_ns
        device.fire(0, land_at_ns=aim)
        while not device.poll(0):
            pass
        samples.append(time.perf_counter_ns() - aim)
    return samples


# observed.parquet: one row per replayed read (data/replay/README.md defines each column).
OBSERVED_COLUMNS = [
    "policy", "step", "req_id", "row", "prev_row", "prev_drafts", "true_count",
    "cpu_observed", "cpu_predicted", "agree", "gpu_consumed", "reads_buffer", "gpu_wrong",
    "land_pos", "land_during_op", "n_ops",
    # The step's timing, on the host clock after the launch returned (t0): the landing the
    # spin aimed at, the first sighting of the tag and the gap to the poll before it, and how
    # far the row ops' stores were from their scheduled times (worst, median, every op in
    # order) and the read, where the policy does not wait for the copy (-1 where it does).
    "land_predicted_ns", "land_seen_ns", "land_bracket_ns", "op_err_max_ns", "op_err_p50_ns",
    "op_errs_ns", "read_err_ns",
    # Where the aim put the landing among the step's events (ops stored before it; n_ops after
    # the last; -1 after the read) and how far it was from the nearest event whose order against
    # it decides a read (an op's store, the read where the policy does not wait): a landing
    # error or an op error larger than this margin can flip the step.
    "land_predicted_pos", "land_margin_ns",
]  # fmt: skip


@dataclass(frozen=True)
class ReplayConfig:
    timing: TimingParams
    seed: int = 0
    slack_ns: int = 40_000  # landing offsets drawn over the op window plus this on each side
    late_cap_ns: int = 250_000  # a model landing later than this after the read is aimed here
    launch_ns: int = 5_000  # launch return -> landing with no spin (calibrated on the GPU)
    # Measured on the device: requested spin (ns) -> landing seen after the launch returned
    # (ns), increasing; the spin for a target landing is read off it by interpolation.
    spin_table: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # "spin": a spin kernel of a calibrated length before the copy; "device-clock": a kernel
    # waiting for the GPU clock to reach the target (replay/device_clock.py), the step's t0
    # then set ``lead_ns`` ahead of the launch and the aim ``clock_lag_ns`` early (the lag from
    # the wait's end to the landing, measured in the replay's own launch path)
    aim: str = "spin"
    lead_ns: int = 200_000
    clock_lag_ns: int = 0

    def spin_for(self, target_ns: int) -> int:
        if self.spin_table is None:
            return max(target_ns - self.launch_ns, 0)
        spins, seen = self.spin_table
        if target_ns > seen[-1]:  # past the table: the spin runs at its last measured rate
            return spins[-1] + target_ns - seen[-1]
        return max(int(np.interp(target_ns, seen, spins)), 0)


def op_offsets(rec: StepRecord, t: TimingParams) -> np.ndarray:
    """End time of each row op after the launch, as the timing model lays them out."""
    dur = row_op_ns(t)
    n_cached = rec.num_reqs - len(rec.new) - len(rec.resumed)
    out, now, loop_done, reordered = [], 0, False, False
    for op in rec.ops:
        if op.kind != "remove" and not loop_done:
            now += t.worker_pre_add_ns + t.worker_cached_loop_ns_per_req * n_cached
            loop_done = True
        if op.kind == "swap" and not reordered:
            now += t.worker_reorder_ns
            reordered = True
        now += dur[op.kind]
        out.append(now)
    return np.asarray(out, dtype=np.int64)


def prior_buffer(schedule: Schedule, n: int) -> np.ndarray:
    """What step n-1's correct gather left in B: step n-2's counts in step n-1's layout."""
    buf = np.ones(schedule.max_num_reqs, dtype=np.int32)
    prev = schedule.steps[n - 1]
    if n >= 2:
        pp = prev.prev_positions
        ok = pp >= 0
        buf[: prev.num_reqs][ok] = schedule.steps[n - 2].accepted[pp[ok]]
    return buf


QUERY_EVERY_NS = 20_000  # a waiting policy asks the event this often, polling the tag between
SIGHT_AFTER_READ_NS = 100_000  # a landing after the read is watched for this much past its aim


class LandingClock:
    """When the host first saw the landing tag, and how sharp that sighting is.

    Polls the tag while the host waits for the next op, so the first sighting is bracketed by
    two polls a fraction of a microsecond apart (``bracket_ns``) instead of by two ops.
    """

    def __init__(self, device: CountsDevice, t0: int) -> None:
        self.device, self.t0 = device, t0
        self.seen_ns = -1  # first sighting, ns after t0
        self.bracket_ns = -1  # gap to the poll before it
        self._last = t0

    def poll(self, op_index: int) -> bool:
        now = time.perf_counter_ns()
        landed = self.device.poll(op_index)
        if landed and self.seen_ns < 0:
            self.seen_ns, self.bracket_ns = now - self.t0, now - self._last
        self._last = now
        return landed

    def wait_until(self, t_ns: int, op_index: int) -> None:
        while time.perf_counter_ns() < t_ns:
            if self.seen_ns < 0:
                self.poll(op_index)

    def watch_until(self, t_ns: int, op_index: int) -> None:
        """Poll until the landing is sighted or ``t_ns`` passes."""
        while self.seen_ns < 0 and time.perf_counter_ns() < t_ns:
            self.poll(op_index)

    def wait_landed(self, op_index: int) -> None:
        """A policy's wait for the copy's event, sighting the tag between the event queries: a
        query costs microseconds, so the tag is polled in between (a sighting bracketed by a
        query is as blunt as the query)."""
        next_query = 0
        while not self.poll(op_index):
            now = time.perf_counter_ns()
            if now >= next_query:
                if self.device.query():
                    return
                next_query = now + QUERY_EVERY_NS


def _read(policy: Policy, buf: np.ndarray, private: np.ndarray, cur: StepRecord) -> np.ndarray:
    """The policy's CPU read, on a copy: the real buffer is left as the row ops made it."""
    return policy.cpu_read(buf.astype(np.int64), private, cur.prev_positions, cur.num_reqs)


@dataclass(frozen=True)
class StepTimeline:
    """One step as the SimPy model timed it, relative to the start of ``_update_states``."""

    ops_end_ns: np.ndarray  # each row op's store
    land_ns: int  # step N's counts land (may be < 0: before; or after the read)
    read_ns: int  # the policy's read in ``_prepare_inputs``


def timeline_from_trace(trace: pd.DataFrame) -> dict[int, StepTimeline]:
    """Per step, from a ``sim run`` trace.parquet: the op stores, the landing, the read."""
    start = select(trace, EventKind.UPDATE_STATES).set_index("step")["time_ns"]
    read = select(trace, EventKind.READ).set_index("step")["time_ns"]
    land = select(trace, EventKind.LANDING).set_index("step")["time_ns"]
    ops = select(trace, EventKind.ROW_OP)
    ends = {s: (g["time_ns"] + g["dur_ns"]).to_numpy() for s, g in ops.groupby("step")}
    out = {}
    for step in start.index:
        if step == 0 or step - 1 not in land.index:
            continue
        t0 = int(start[step])
        out[int(step)] = StepTimeline(
            ops_end_ns=ends.get(step, np.zeros(0, dtype=np.int64)) - t0,
            land_ns=int(land[step - 1]) - t0,
            read_ns=int(read[step]) - t0,
        )
    return out


def replay(
    schedule: Schedule,
    policy: Policy,
    device: CountsDevice,
    cfg: ReplayConfig,
    steps: list[int] | None = None,
    timeline: dict[int, StepTimeline] | None = None,
) -> pd.DataFrame:
    """Drawn landings (``timeline`` None), or the model's own timing of every step."""
    rng = np.random.default_rng([cfg.seed, 0xD2])
    rows: list[dict] = []
    if timeline is not None and steps is None:
        steps = sorted(timeline)
    for n in steps if steps is not None else range(1, len(schedule.steps)):
        prev, cur = schedule.steps[n - 1], schedule.steps[n]
        prior = prior_buffer(schedule, n)
        if timeline is None:
            offsets = op_offsets(cur, cfg.timing)
            window = int(offsets[-1]) if len(offsets) else 0
            target = int(rng.integers(-cfg.slack_ns, window + cfg.slack_ns + 1))
            read_ns = 0
        else:
            offsets, target = timeline[n].ops_end_ns, timeline[n].land_ns
            read_ns = timeline[n].read_ns
            # A landing long after the read changes nothing: cap the wait, far enough past the
            # read that the replay's own errors cannot bring it before
            target = min(target, read_ns + cfg.late_cap_ns)
        spin_ns = cfg.spin_for(target)
        private = policy.dma_into_private
        device.reset(prior, n)
        counts = prev.accepted.astype(np.int32)
        device.stage(counts, private)
        if cfg.aim == "device-clock":  # the step's t0 set ahead, the wait aimed at the model's
            device.track_clock()
            t0 = time.perf_counter_ns() + cfg.lead_ns
            device.fire(0, land_at_ns=t0 + target - cfg.clock_lag_ns)
            if policy.waits_before_moves:
                device.synchronize()
                t0 = max(t0, time.perf_counter_ns())
        else:
            device.fire(spin_ns)
            if policy.waits_before_moves:
                device.synchronize()
            t0 = time.perf_counter_ns()
        clock = LandingClock(device, t0)
        op_err = np.zeros(len(cur.ops), dtype=np.int64)  # actual store time - scheduled
        land, during = -1, False  # during: the tag turned visible inside an op or the read
        for i, op in enumerate(cur.ops):
            clock.wait_until(t0 + int(offsets[i]), i)
            if land < 0 and clock.poll(i):
                land = i
            op_err[i] = time.perf_counter_ns() - t0 - int(offsets[i])
            apply_op(device.buf, op, i, None)
            if land < 0 and clock.poll(i):
                land, during = i, True
        clock.wait_until(t0 + read_ns, len(cur.ops))
        if policy.waits_before_read:
            clock.wait_landed(len(cur.ops))
            device.synchronize()
        if land < 0 and clock.poll(len(cur.ops)):
            land = len(cur.ops)
        read_at = max(read_ns, int(offsets[-1]) if len(offsets) else 0)  # after the last op
        read_err = -1
        if not policy.waits_before_read:  # the read is placed too (a waiting one follows the copy)
            read_err = abs(time.perf_counter_ns() - t0 - read_at)
        observed = _read(policy, device.buf, device.private, cur)
        if land < 0 and clock.poll(len(cur.ops)):
            land, during = len(cur.ops), True
        if clock.seen_ns < 0:  # landing after the read: still time it (the verdict is taken)
            clock.watch_until(t0 + max(target, read_ns) + SIGHT_AFTER_READ_NS, len(cur.ops))
        aimed = not policy.waits_before_moves
        pos, margin = _aimed_position(offsets, read_at, target, policy.waits_before_read)
        timing = {
            "land_predicted_ns": target if aimed else -1,
            "land_predicted_pos": pos if aimed else 0,
            "land_margin_ns": margin if aimed else -1,
            "land_seen_ns": clock.seen_ns,
            "land_bracket_ns": clock.bracket_ns,
            "op_err_max_ns": int(np.abs(op_err).max()) if len(op_err) else 0,
            "op_err_p50_ns": int(np.median(np.abs(op_err))) if len(op_err) else 0,
            "op_errs_ns": np.abs(op_err).tolist(),
            "read_err_ns": int(read_err),
        }
        for v in _verdicts(schedule, n, policy, prior, land, observed, during):
            rows.append(v | timing)
    return pd.DataFrame(rows, columns=OBSERVED_COLUMNS)


def _aimed_position(
    offsets: np.ndarray, read_at: int, target: int, waits_before_read: bool
) -> tuple[int, int]:
    """(ops stored before the aimed landing, or -1 if it falls after the read at ``read_at``;
    its distance to the nearest event whose order against it matters). A policy that waits
    before its read always reads landed counts: only the ops count for it."""
    after_read = not waits_before_read and target > read_at
    pos = -1 if after_read else int((offsets < target).sum())
    events = list(offsets) + ([] if waits_before_read else [read_at])
    margin = min((abs(target - int(t)) for t in events), default=-1)
    return pos, int(margin)


def _verdicts(
    schedule: Schedule,
    n: int,
    policy: Policy,
    prior: np.ndarray,
    land: int,
    observed: np.ndarray,
    during: bool = False,
) -> list[dict]:
    prev, cur = schedule.steps[n - 1], schedule.steps[n]
    predicted = at_landing(policy, prev.accepted, cur, prior, prior, land).cpu
    rows = np.flatnonzero(cur.prev_positions >= 0)
    src = cur.prev_positions[rows]
    true = prev.accepted[src]
    # What the GDN kernel consumes is judged on what real memory returned.
    gpu, _cpu_wrong, _gpu_wrong = judge(
        policy, observed[rows], true, participating(cur.prev_num_draft_tokens, src)
    )
    out = []
    for row, s, t, g in zip(rows, src, true, gpu, strict=True):
        out.append({
            "policy": policy.name, "step": n, "req_id": cur.req_ids[row], "row": int(row),
            "prev_row": int(s), "prev_drafts": int(prev.drafts[s]), "true_count": int(t),
            "cpu_observed": int(observed[row]), "cpu_predicted": int(predicted[row]),
            "agree": bool(observed[row] == predicted[row]), "gpu_consumed": int(g),
            "reads_buffer": policy.reads_buffer,
            "gpu_wrong": bool(g != t), "land_pos": land, "land_during_op": during,
            "n_ops": len(cur.ops),
        })  # fmt: skip
    return out
