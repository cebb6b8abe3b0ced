"""Engine core + worker ``_update_states``, timing-free: scenario -> :class:`Schedule`.

The engine core (docs/mechanism.md §1.1) under async scheduling runs a batch queue of
two: ``schedule(N+1)`` happens after ``update_from_output(N-1)``, so it knows outputs up
to step N-1 only. A request whose last token is produced at step N-1 is therefore still
scheduled (optimistically) at N and appears in ``finished_req_ids`` of N+1. With async
off the lag is one step. The async scheduler gives every request that is not a prefill
chunk k placeholder drafts, so the first speculative step follows the final prefill
chunk immediately (1 + k tokens).

The worker's ``_update_states`` (§2) is replayed on :class:`InputBatchRows` in vLLM's
order: remove finished, remove unscheduled, the cached-request loop (num_computed,
``prev_num_draft_tokens``), add new then re-added requests, condense, reorder.

Under ``mamba_cache_mode = "align"`` with ``engine.mamba_block_size`` B > 0, prefill chunks are
cut as vLLM's ``_mamba_block_aligned_split`` cuts them, by the release's rule
(``engine.mamba_split_rule``, :func:`aligned_chunk`): in 0.24.0 to a multiple of B before the
last cache position, at that position when a chunk would cross it (so a 300-token prompt with
B = 80 and MTP prefills 160 tokens, then 140). A running request whose cut
leaves nothing waits a step and the next ones are served; a waiting request stops admission.

A request stops at ``max_tokens`` = its ``output_len`` (or, flagged ``eos``, on an EOS there).
vLLM's async scheduler sees a ``max_tokens`` stop coming: it skips a running request whose
in-flight step is sure to reach it ("avoid scheduling an extra step", v0.24.0
v1/core/sched/scheduler.py L435-449, every release 0.23.0-0.33.0;
:func:`sim.model.scheduler_rules.sure_to_finish`), so
the worker removes it as unscheduled a step before its ``finished`` entry. An EOS stop is not
foreseen: the request is scheduled optimistically until its output is processed.

Under a KV limit the scheduler runs vLLM's allocation loop request by request
(:func:`_schedule_step_kv`: whole blocks, lookahead slots, preemption of the last running
request, full-sequence admission); a preempted request recomputes its prompt and every token
appended so far, its in-flight output included.

Every rule here is held to vLLM's real Scheduler decision for decision by
tests/conformance/test_conformance_scheduler.py (docs/mechanism.md §11). Simplifications: no
long_prefill_token_threshold, no encoder budget, FCFS only, no block sharing through the prefix
cache (a request's prefix hit is its workload's ``prefix_hit_tokens``).

Speed: the scheduler's per-request state lives in arrays indexed by request (arrival order)
and a step's running requests are served with one cumulative sum (each takes its whole
demand until the token budget runs out, the next takes the rest); only the rare paths
(admission, preemption) loop in Python. The schedule is byte-identical to the per-object
version it replaced (tests/sim/model/test_scheduling.py's golden file; ``python -m sim bench``
runs both).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator

import numpy as np

from sim.model.input_batch import (
    InputBatchRows,
    RowOp,
    reorder_batch_to_split_decodes_and_prefills,
)
from sim.model.limits import PLAIN, Limits
from sim.model.params import EngineParams, Scenario
from sim.model.schedule import Schedule, StepRecord
from sim.model.scheduler_rules import ReqStates, all_set, any_set
from sim.model.scheduler_step import Batch, Running, schedule_step
from sim.model.workload import Request, draw_workload


def build_schedule(scenario: Scenario, seed: int, num_steps: int) -> Schedule:
    schedule, steps = iter_schedule(scenario, seed, num_steps)
    schedule.steps = list(steps)
    return schedule


def iter_schedule(
    scenario: Scenario, seed: int, num_steps: int
) -> tuple[Schedule, Iterator[StepRecord]]:
    """The schedule's header (``steps`` empty) and its steps one at a time, for runs too long
    to hold every step: the steps are those of :func:`build_schedule`."""
    requests = draw_workload(scenario, seed, num_steps)
    head = Schedule(
        scenario=scenario.to_dict(),
        seed=seed,
        requests=[
            {
                "req_id": r.req_id,
                "arrival_step": r.arrival_step,
                "prompt_len": r.prompt_len,
                "output_len": r.output_len,
                "prefix_hit_tokens": r.prefix_hit_tokens,
                **({"eos": True} if r.eos else {}),
            }
            for r in requests
            if r.arrival_step < num_steps
        ],
    )
    return head, _steps(scenario, requests, num_steps)


def _steps(scenario: Scenario, requests: list[Request], num_steps: int) -> Iterator[StepRecord]:
    run = EngineRun(scenario.engine, requests)
    for _ in range(num_steps):
        yield run.step()


_REBINDABLE = ("max_num_batched_tokens", "kv_cache_capacity_tokens")


class EngineRun:
    """The engine core and the worker between two steps: :meth:`step` runs the next one.
    :meth:`fork` copies the state, to go on from the same step with other inputs
    (sim.explore.check's search resumes each branch from its parent's step instead of from
    step 0)."""

    def __init__(
        self, eng: EngineParams, requests: list[Request], *, limits: Limits = PLAIN
    ) -> None:
        """``limits``: who answers the scheduler's comparisons against a request's
        ``max_tokens`` and the KV capacity (:mod:`sim.model.limits`; sim.explore.check gives
        one that records each value asked)."""
        self.limits = limits
        self.eng = eng
        self.k = eng.num_speculative_tokens
        self.lag = 2 if eng.async_scheduling else 1
        self.requests = requests
        self.st = st = ReqStates(requests)
        n_req = len(st.req_ids)
        self.id_index = {rid: i for i, rid in enumerate(st.req_ids)}
        self.out_arr = self._out_arr()
        self.can_preempt = bool(eng.kv_cache_capacity_tokens)
        self.step_no = 0
        self.next_arrival = 0
        self.waiting: deque[int] = deque()
        self.running = Running()
        self.in_flight: dict[int, Batch] = {}
        self.batch = InputBatchRows(eng.max_num_seqs)
        # The previous step's layout: row -> request (and its req_ids), and request -> row
        # (-1: no row) and request -> row if that row sampled (prev_req_id_to_index).
        self.prev_req_of_row = np.zeros(0, dtype=np.int64)
        self.prev_row_ids: list[str] = []
        self.row_arr = np.full(n_req, -1, dtype=np.int64)
        self.prev_arr = np.full(n_req, -1, dtype=np.int64)
        self.mark = np.zeros(n_req, dtype=bool)  # scratch: scheduled or finished this step
        self.prev_drafts_len = 0

    def fork(
        self,
        eng: EngineParams | None = None,
        requests: list[Request] | None = None,
        limits: Limits | None = None,
    ) -> EngineRun:
        """An independent copy at the same step, going on with ``eng``, ``requests`` and
        ``limits`` if given. The caller vouches that the steps run so far would have come out
        the same with them (sim.explore.check knows it: every comparison its limits recorded
        so far has the same outcome). What is checked here: only the token budget and the KV
        capacity change; the requests so far keep their id, arrival, prompt, prefix hit and
        stop kind, and their accepted counts only grow, by counts of drafted steps still in
        flight or not drawn yet; new requests come after the others and arrive at the step
        reached or later.
        Raises ValueError otherwise."""
        new = object.__new__(EngineRun)
        new.__dict__.update(self.__dict__)
        new.st = self.st.copy()
        new.waiting = deque(self.waiting)
        new.running = self.running.copy()
        new.in_flight = dict(self.in_flight)
        new.batch = self.batch.copy()
        new.row_arr = self.row_arr.copy()
        new.prev_arr = self.prev_arr.copy()
        new.mark = self.mark.copy()
        new.id_index = dict(self.id_index)
        if eng is not None and eng is not self.eng:
            for f in dataclasses.fields(eng):
                if f.name not in _REBINDABLE and getattr(eng, f.name) != getattr(self.eng, f.name):
                    raise ValueError(f"fork: engine.{f.name} cannot change within a run")
            new.eng = eng
            new.can_preempt = bool(eng.kv_cache_capacity_tokens)
        if requests is not None:
            new._rebind(requests)
        if limits is not None:
            new.limits = limits
        return new

    def _rebind(self, requests: list[Request]) -> None:
        old, st = self.requests, self.st
        if len(requests) < len(old):
            raise ValueError("fork: requests cannot be dropped within a run")
        grown = []  # requests whose accepted counts grew
        for i, (a, b) in enumerate(zip(old, requests)):  # noqa: B905 (requests may be longer)
            if a is b:
                continue
            if (a.req_id, a.arrival_step, a.prompt_len, a.prefix_hit_tokens, a.eos) != (
                b.req_id, b.arrival_step, b.prompt_len, b.prefix_hit_tokens, b.eos,
            ):  # fmt: skip
                raise ValueError(f"fork: request {a.req_id} changed more than its outcome")
            if a.accepted is not b.accepted:
                grown.append(i)
        added = requests[len(old) :]
        last = old[-1].arrival_step if old else 0
        for r in added:
            if r.arrival_step < max(self.step_no, last):
                raise ValueError(f"fork: request {r.req_id} arrives before the step reached")
            last = r.arrival_step
        if not grown and not added:
            st.output_len = [r.output_len for r in requests]
        else:
            old_lens = np.array([len(r.accepted) for r in old], dtype=np.int64)
            drawn = st.spec_pos - (st.accepted_end - old_lens)  # drafted steps so far
            for i in grown:
                self._accept_in_flight(i, old[i].accepted, requests[i].accepted, int(drawn[i]))
            if added:
                st.extend(added)
                for r in added:
                    self.id_index[r.req_id] = len(self.id_index)
                more = len(added)
                self.row_arr = np.concatenate([self.row_arr, np.full(more, -1, np.int64)])
                self.prev_arr = np.concatenate([self.prev_arr, np.full(more, -1, np.int64)])
                self.mark = np.concatenate([self.mark, np.zeros(more, dtype=bool)])
                drawn = np.concatenate([drawn, np.zeros(more, np.int64)])
            st.rebind_outcomes(requests, drawn)
        self.out_arr = self._out_arr()
        self.requests = requests

    def _out_arr(self) -> np.ndarray:
        """Every request's output length as one array."""
        return np.array(self.st.output_len, dtype=np.int64)

    def _accept_in_flight(self, i: int, was: np.ndarray, now: np.ndarray, drawn: int) -> None:
        """Request ``i``'s accepted counts grew from ``was`` to ``now``: the new counts of steps
        already drafted go into their in-flight batches (they were drawn as 1)."""
        if len(now) < len(was) or not np.array_equal(now[: len(was)], was):
            raise ValueError(f"fork: request {self.st.req_ids[i]}'s accepted counts changed")
        if len(now) == len(was):
            return
        occ = []  # (step, position) of i's drafted steps in flight, in step order
        for t in sorted(self.in_flight):
            b = self.in_flight[t]
            pos = np.flatnonzero((b.idx == i) & (b.drafts > 0))
            occ += [(t, int(p)) for p in pos]
        first = drawn - len(occ)  # the draw index of the first one
        for x in range(len(was), min(len(now), drawn)):
            if x < first:
                raise ValueError(
                    f"fork: request {self.st.req_ids[i]}'s step output was already processed"
                )
            t, p = occ[x - first]
            b = self.in_flight[t]
            acc = b.accepted.copy()
            acc[p] = min(int(now[x]), 1 + int(b.drafts[p]))
            self.in_flight[t] = dataclasses.replace(b, accepted=acc)

    def step(self) -> StepRecord:
        """Engine step ``step_no`` as vLLM runs it: the engine core's ``update_from_output``
        (of the step ``lag`` back) and ``schedule``, then the worker's ``_update_states``; its
        record."""
        step = self.step_no
        finished, done_rows = self._update_from_output(step)
        self._admit_arrivals(step)
        st = self.st
        sched, new_ids, new_pos = schedule_step(
            st, self.running, self.waiting, self.eng, self.k, self.out_arr, self.limits
        )
        self.in_flight[step] = sched
        if self.eng.async_scheduling:
            st.placeholders[sched.idx] += np.where(sched.samples, 1 + sched.drafts, 0)
        rec = self._update_states(step, sched, finished, done_rows, new_ids, new_pos)
        # The scheduler's num_computed advances by what it scheduled (optimistic).
        st.num_computed[sched.idx] += sched.num_tokens
        self.step_no = step + 1
        return rec

    # -- the engine core ------------------------------------------------------------------------
    def _update_from_output(self, step: int) -> tuple[list[str], list[int]]:
        """``update_from_output`` of step ``step - lag``: its true accepted counts applied, the
        requests they finish stopped. The finished request ids and their indices."""
        done = self.in_flight.pop(step - self.lag, None)
        if done is None or not len(done.idx):
            return [], []
        cand = self._apply_output(done)
        return self._finish(cand)

    def _apply_output(self, done: Batch) -> np.ndarray:
        """Rejected drafts uncomputed and accepted tokens appended, per request of ``done``;
        the requests whose output grew (candidates to finish)."""
        st, k = self.st, self.k
        i = done.idx
        if self.eng.async_scheduling:  # a preempted request's output is processed too
            st.placeholders[i] -= np.where(done.samples, 1 + done.drafts, 0)
        # else preempted since: the recompute supersedes (no KV limit: no preemption)
        live = st.epoch[i] == done.epoch if self.can_preempt else None
        if done.uniform and live is None:  # k drafts each, every row samples
            st.num_computed[i] -= (k + 1) - done.accepted  # the rejected drafts
            st.generated[i] += done.accepted
            return i
        if live is None or all_set(live):  # no preemption since: every row applies
            # rejected drafts are uncomputed (0 without drafts: accepted is then 1)
            st.num_computed[i] -= done.drafts - (done.accepted - 1)
            if all_set(done.samples):
                st.generated[i] += done.accepted
                return i
            st.generated[i] += np.where(done.samples, done.accepted, 0)
            return i[done.samples]
        # A request preempted since: its num_computed restarted at 0 and is left alone
        # (``if request.num_computed_tokens > 0``), but its tokens are appended and can
        # stop it (v0.24.0 scheduler.py L1562-1564, L1660-1668, L1713-1715).
        d = live & (done.drafts > 0)
        st.num_computed[i[d]] -= done.drafts[d] - (done.accepted[d] - 1)
        smp = done.samples
        st.generated[i[smp]] += done.accepted[smp]
        return i[smp]

    def _finish(self, cand: np.ndarray) -> tuple[list[str], list[int]]:
        """The candidates whose output reached its length stop: out of the running and
        waiting queues, their KV blocks freed."""
        st = self.st
        hit = self.limits.reached(cand, st.generated[cand], self.out_arr[cand]) & st.alive[cand]
        done_rows = cand[hit].tolist() if any_set(hit) else []
        if not done_rows:
            return [], []
        st.alive[done_rows] = False
        st.blocks[done_rows] = 0
        stopped_waiting = [j for j in done_rows if not st.running[j]]
        st.running[done_rows] = False
        self.running.drop(set(done_rows))
        for j in stopped_waiting:  # preempted, waiting to resume
            self.waiting.remove(j)
        return [self.st.req_ids[r] for r in done_rows], done_rows

    def _admit_arrivals(self, step: int) -> None:
        """Requests arriving by ``step`` join the waiting queue (a prefix-cache hit computed)."""
        st, n = self.st, self.next_arrival
        while n < len(st.req_ids) and st.arrival_step[n] <= step:
            r = self.requests[n]
            st.num_computed[n] = r.prefix_hit_tokens
            st.prefill_target[n] = r.prompt_len
            self.waiting.append(n)
            n += 1
        self.next_arrival = n

    # -- the worker: _update_states ---------------------------------------------------------------
    def _update_states(
        self,
        step: int,
        sched: Batch,
        finished: list[str],
        done_rows: list[int],
        new_ids: list[str],
        new_pos: list[int],
    ) -> StepRecord:
        """The worker's ``_update_states`` for ``sched``: finished and unscheduled requests
        removed, cached requests updated in place, new and resumed ones added, the batch
        condensed and reordered; the step's record."""
        batch, idx = self.batch, sched.idx
        batch.ops = []
        for req_id in finished:
            batch.remove_request(req_id)
        row_of = self.row_arr[idx]  # each scheduled request's row; removals move no row
        absent = row_of < 0
        unscheduled = self._remove_unscheduled(idx, done_rows, any_set(absent))
        prev_of = self.prev_arr[idx]  # each one's row in the previous step, -1 if none
        to_add, resumed, prev_num_draft_tokens = self._cached_loop(
            sched, row_of, absent, prev_of, new_ids, new_pos
        )
        ids, st = self.st.req_ids, self.st
        for j in to_add:
            a = int(idx[j])
            batch.add_request(ids[a], int(st.prompt_len[a]), int(st.num_computed[a]))
        # Every scheduled request's prev_num_draft_len is now this step's drafts (a resumed
        # one was reset to 0 first, then set on add).
        st.prev_num_draft_len[idx] = sched.drafts
        batch.condense()
        row_ids, req_of_row, row_of = self._relayout(sched, row_of)
        batch.end_step()
        return self._record(
            step, sched, finished, unscheduled, new_ids, resumed, row_ids, req_of_row, row_of,
            prev_of, prev_num_draft_tokens,
        )  # fmt: skip

    def _remove_unscheduled(
        self, idx: np.ndarray, done_rows: list[int], any_absent: bool
    ) -> list[str]:
        """Remove the rows of the previous layout whose request is neither scheduled nor
        finished, in row order. vLLM iterates a set difference here (hash order); removal
        order does not change any row (the removed list is sorted), so we remove in row order."""
        prev_req_of_row, prev_row_ids, mark = self.prev_req_of_row, self.prev_row_ids, self.mark
        if not (done_rows or any_absent or len(idx) != len(prev_row_ids)):
            return []  # the same requests as in the previous layout: nobody to remove
        mark[idx] = True
        mark[done_rows] = True
        gone_rows = np.flatnonzero(~mark[prev_req_of_row]).tolist()
        mark[idx] = False
        mark[done_rows] = False
        unscheduled = [prev_row_ids[j] for j in gone_rows]
        for req_id in unscheduled:
            self.batch.remove_request(req_id)
        return unscheduled

    def _cached_loop(
        self,
        sched: Batch,
        row_of: np.ndarray,
        absent: np.ndarray,
        prev_of: np.ndarray,
        new_ids: list[str],
        new_pos: list[int],
    ) -> tuple[list[int], list[str], np.ndarray]:
        """The cached-request loop: requests still in the batch update their row; the others
        (not new) were preempted and are re-added, as a new request is. The positions in
        ``sched`` to add, the resumed request ids, and ``prev_num_draft_tokens`` by previous row."""
        idx, st, ids = sched.idx, self.st, self.st.req_ids
        prev_num_draft_tokens = np.zeros(self.prev_drafts_len, dtype=np.int64)
        to_add: list[int] = list(new_pos)
        resumed: list[str] = []
        if any_set(absent):
            new_set = set(new_ids)
            for j in np.flatnonzero(absent).tolist():
                rid = ids[int(idx[j])]
                if rid not in new_set:
                    to_add.append(j)
                    resumed.append(rid)
            cached = ~absent
            any_cached = any_set(cached)
        else:
            cached = slice(None)  # type: ignore[assignment]
            any_cached = len(idx) > 0
        if any_cached:
            ci = idx[cached]
            prev_len = st.prev_num_draft_len[ci]
            if self.eng.async_scheduling:
                prev_row = prev_of[cached]
                use = (prev_len > 0) & (prev_row >= 0)
                prev_num_draft_tokens[prev_row[use]] = prev_len[use]
            self.batch.num_computed_tokens_cpu[row_of[cached]] = st.num_computed[ci]
        return to_add, resumed, prev_num_draft_tokens

    def _relayout(
        self, sched: Batch, row_of: np.ndarray
    ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Row -> request after the row ops and the decode/prefill reorder (every row holds a
        scheduled request now); each scheduled request's row."""
        batch, row_arr, id_index = self.batch, self.row_arr, self.id_index
        idx, n, prev_req_of_row = sched.idx, len(sched.idx), self.prev_req_of_row
        if batch.ops:  # the layout changed: replay the row ops on row -> request
            row_ids = batch.req_ids
            layout = _replay(prev_req_of_row.tolist(), batch.ops, id_index)
            req_of_row = np.array(layout[:n], dtype=np.int64)
            row_arr[prev_req_of_row] = -1
            row_arr[req_of_row] = np.arange(n)
            row_of = row_arr[idx]
        else:  # no row op: the previous layout, every scheduled request in its row
            row_ids, req_of_row = list(self.prev_row_ids), prev_req_of_row
        n_ops = len(batch.ops)
        if sched.uniform:  # one region (see Batch.uniform): the reorder moves nothing
            return row_ids, req_of_row, row_of
        if reorder_batch_to_split_decodes_and_prefills(
            batch, _by_row(sched.num_tokens, row_of), self.eng.reorder_batch_threshold
        ):
            row_ids = batch.req_ids
            row_arr[req_of_row] = -1
            req_of_row = np.array(
                _replay(req_of_row.tolist(), batch.ops[n_ops:], id_index), dtype=np.int64
            )
            row_arr[req_of_row] = np.arange(n)
            row_of = row_arr[idx]
        return row_ids, req_of_row, row_of

    def _record(
        self,
        step: int,
        sched: Batch,
        finished: list[str],
        unscheduled: list[str],
        new_ids: list[str],
        resumed: list[str],
        row_ids: list[str],
        req_of_row: np.ndarray,
        row_of: np.ndarray,
        prev_of: np.ndarray,
        prev_num_draft_tokens: np.ndarray,
    ) -> StepRecord:
        """The step's record by row, and the layout the next step starts from
        (``prev_req_id_to_index``: only rows that sample keep an index)."""
        n = len(sched.idx)
        batch, prev_arr = self.batch, self.prev_arr
        positions = np.arange(n)
        at = np.empty(n, dtype=np.int64)  # row -> position in sched
        at[row_of] = positions
        samples = sched.samples if sched.uniform else sched.samples[at]  # uniform: all True
        prev_arr[self.prev_req_of_row] = -1
        if sched.uniform or all_set(samples):
            prev_arr[req_of_row] = positions
        else:
            keep = np.flatnonzero(samples)
            prev_arr[req_of_row[keep]] = keep
        self.prev_req_of_row, self.prev_row_ids = req_of_row, row_ids
        self.prev_drafts_len = n
        return StepRecord(
            step=step,
            finished=finished,
            unscheduled=unscheduled,
            new=new_ids,
            resumed=resumed,
            ops=batch.ops,
            req_ids=row_ids,
            num_scheduled=sched.num_tokens[at],
            num_computed=batch.num_computed_tokens_cpu[:n].copy(),
            num_prompt=batch.num_prompt_tokens[:n].copy(),
            drafts=sched.drafts[at],
            accepted=sched.accepted[at],
            discard=~samples,
            prev_positions=prev_of[at],
            prev_num_draft_tokens=prev_num_draft_tokens,
        )


def _by_row(values: np.ndarray, row_of: np.ndarray) -> np.ndarray:
    """Per-position ``values`` laid out by row."""
    out = np.empty(len(values), dtype=values.dtype)
    out[row_of] = values
    return out


def _replay(layout: list[int], ops: list[RowOp], id_index: dict[str, int]) -> list[int]:
    """``layout`` (row -> request index, -1 for a hole) after ``ops``, as InputBatchRows
    applied them: a handful of ops instead of a lookup per row."""
    for op in ops:
        if op.kind == "remove":
            layout[op.a] = -1
        elif op.kind == "add":
            if op.a == len(layout):
                layout.append(id_index[op.req_id])
            else:
                layout[op.a] = id_index[op.req_id]
        elif op.kind == "move":
            layout[op.b], layout[op.a] = layout[op.a], -1
        else:
            layout[op.a], layout[op.b] = layout[op.b], layout[op.a]
    return layout
