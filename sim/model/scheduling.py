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

Scheduler simplifications (none changes the row model): no long_prefill_token_threshold,
no encoder budget, FCFS only; a preempted request recomputes prompt + generated tokens
and the output of its in-flight step is dropped; KV capacity is counted in tokens
(``engine.kv_cache_capacity_tokens``).

Speed: the scheduler's per-request state lives in arrays indexed by request (arrival order)
and a step's running requests are served with one cumulative sum (each takes its whole
demand until the token budget runs out, the next takes the rest); only the rare paths
(admission, preemption) loop in Python. The schedule is byte-identical to the per-object
version it replaced (tests/test_schedule.py's golden file; ``python -m sim bench`` runs both).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sim.model.input_batch import InputBatchRows, reorder_batch_to_split_decodes_and_prefills
from sim.model.params import EngineParams, Scenario
from sim.model.schedule import Schedule, StepRecord
from sim.model.workload import Request, draw_workload


class _ReqStates:
    """Every request's scheduler and worker state, one array entry per request."""

    def __init__(self, requests: list[Request]) -> None:
        n = len(requests)
        self.req_ids = [r.req_id for r in requests]
        self.arrival_step = [r.arrival_step for r in requests]
        self.prompt_len = np.array([r.prompt_len for r in requests], dtype=np.int64)
        # The values themselves (not an array), compared in Python where a request finishes:
        # sim.explore.check passes int subclasses that record what the scheduler compares.
        self.output_len = [r.output_len for r in requests]
        # req.accepted of every request back to back: request i's j-th speculative step
        # is accepted_flat[accepted_off[i] + j] while j < accepted_len[i], else 1.
        lens = [len(r.accepted) for r in requests]
        self.accepted_len = np.array(lens, dtype=np.int64)
        self.accepted_off = np.cumsum(self.accepted_len) - self.accepted_len
        self.accepted_flat = (
            np.concatenate([r.accepted for r in requests]).astype(np.int8)  # 1..k+1 <= 16
            if n
            else np.zeros(0, np.int8)
        )
        self.num_computed = np.zeros(n, dtype=np.int64)  # scheduler's optimistic view
        self.generated = np.zeros(n, dtype=np.int64)  # confirmed by update_from_output
        self.spec_steps = np.zeros(n, dtype=np.int64)  # drafted steps so far
        self.prefill_target = np.zeros(n, dtype=np.int64)  # prompt, or recompute
        self.prev_num_draft_len = np.zeros(n, dtype=np.int64)  # CachedRequestState's
        self.epoch = np.zeros(n, dtype=np.int64)  # bumped by preemption
        self.preempted = np.zeros(n, dtype=bool)
        self.running = np.zeros(n, dtype=bool)


@dataclass
class _Batch:
    """One step's scheduled requests (in scheduling order), kept until their output."""

    idx: np.ndarray  # request index
    epoch: np.ndarray  # the request's epoch when scheduled
    num_tokens: np.ndarray
    drafts: np.ndarray
    accepted: np.ndarray
    samples: np.ndarray  # False for a partial prefill chunk (discarded row)


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
            }
            for r in requests
            if r.arrival_step < num_steps
        ],
    )
    return head, _steps(scenario, requests, num_steps)


def _steps(scenario: Scenario, requests: list[Request], num_steps: int) -> Iterator[StepRecord]:
    eng = scenario.engine
    k = eng.num_speculative_tokens
    lag = 2 if eng.async_scheduling else 1
    st = _ReqStates(requests)
    ids = st.req_ids
    next_arrival = 0
    waiting: deque[int] = deque()
    running: list[int] = []
    in_flight: dict[int, _Batch] = {}
    batch = InputBatchRows(eng.max_num_seqs)
    prev_map: dict[str, int] = {}
    prev_drafts_len = 0

    for step in range(num_steps):
        # update_from_output(step - lag): apply true accepted counts, detect finishes.
        finished: list[str] = []
        done = in_flight.pop(step - lag, None)
        if done is not None and len(done.idx):
            i = done.idx
            live = st.epoch[i] == done.epoch  # else preempted since: the recompute supersedes
            if live.all():  # no preemption since: every row applies (the common step)
                # rejected drafts are uncomputed (0 without drafts: accepted is then 1)
                st.num_computed[i] -= done.drafts - (done.accepted - 1)
                st.generated[i] += np.where(done.samples, done.accepted, 0)
                smp = done.samples
            else:
                d = live & (done.drafts > 0)
                st.num_computed[i[d]] -= done.drafts[d] - (done.accepted[d] - 1)
                smp = live & done.samples
                st.generated[i[smp]] += done.accepted[smp]
            out = st.output_len
            done_rows = [
                r
                for r, g in zip(i[smp].tolist(), st.generated[i[smp]].tolist(), strict=True)
                if g >= out[r] and st.running[r]
            ]
            if done_rows:
                st.running[done_rows] = False
                gone = set(done_rows)
                running = [r for r in running if r not in gone]
                finished = [ids[r] for r in done_rows]

        while next_arrival < len(ids) and st.arrival_step[next_arrival] <= step:
            r = requests[next_arrival]
            st.num_computed[next_arrival] = r.prefix_hit_tokens
            st.prefill_target[next_arrival] = r.prompt_len
            waiting.append(next_arrival)
            next_arrival += 1

        sched, new_ids = _schedule_step(st, running, waiting, eng, k)
        in_flight[step] = sched
        sched_idx = sched.idx.tolist()
        sched_rids = [ids[r] for r in sched_idx]

        # ---- worker: _update_states(step) ----
        batch.ops = []
        for req_id in finished:
            batch.remove_request(req_id)
            prev_map.pop(req_id, None)
        pos = {rid: j for j, rid in enumerate(sched_rids)}  # req_id -> position in sched
        # vLLM iterates a set difference here (hash order); removal order does not change
        # any row (the removed list is sorted), so we remove in row order.
        unscheduled = [r for r in batch.req_ids if r not in pos]
        for req_id in unscheduled:
            batch.remove_request(req_id)
            prev_map.pop(req_id, None)
        prev_num_draft_tokens = np.zeros(prev_drafts_len, dtype=np.int64)
        # Each scheduled request's row in the previous step (prev_req_id_to_index), -1 if none.
        get_prev = prev_map.get
        prev_of = np.array([get_prev(rid, -1) for rid in sched_rids], dtype=np.int64)
        new_set = set(new_ids)
        to_add: list[int] = [pos[r] for r in new_ids]  # positions in sched
        resumed: list[str] = []
        # The cached-request loop: requests still in the batch update their row; the others
        # (not new) were preempted and are re-added. A new request has no row either.
        get_row = batch.req_id_to_index.get
        row_of = np.array([get_row(rid, -1) for rid in sched_rids], dtype=np.int64)
        absent = row_of < 0
        if absent.any():
            for j in np.flatnonzero(absent).tolist():
                if sched_rids[j] not in new_set:
                    to_add.append(j)
                    resumed.append(sched_rids[j])
        cached = ~absent
        if cached.any():
            ci = sched.idx[cached]
            prev_len = st.prev_num_draft_len[ci]
            if eng.async_scheduling:
                prev_row = prev_of[cached]
                use = (prev_len > 0) & (prev_row >= 0)
                prev_num_draft_tokens[prev_row[use]] = prev_len[use]
            batch.num_computed_tokens_cpu[row_of[cached]] = st.num_computed[ci]
        for j in to_add:
            r = sched_idx[j]
            batch.add_request(ids[r], int(st.prompt_len[r]), int(st.num_computed[r]))
        # Every scheduled request's prev_num_draft_len is now this step's drafts (a resumed
        # one was reset to 0 first, then set on add).
        st.prev_num_draft_len[sched.idx] = sched.drafts
        batch.condense()
        # Every row holds a scheduled request now: the reorder gets tokens per row.
        index = batch.req_id_to_index
        row_of = np.array([index[rid] for rid in sched_rids], dtype=np.int64)
        n = len(row_of)
        tokens_by_row = np.empty(n, dtype=np.int64)
        tokens_by_row[row_of] = sched.num_tokens
        if reorder_batch_to_split_decodes_and_prefills(
            batch, tokens_by_row, eng.reorder_batch_threshold
        ):
            row_of = np.array([index[rid] for rid in sched_rids], dtype=np.int64)
        batch.end_step()

        row_ids = batch.req_ids
        at = np.empty(n, dtype=np.int64)  # row -> position in sched
        at[row_of] = np.arange(n)
        samples = sched.samples[at]
        # prev_req_id_to_index for the next step (StepRecord.prev_req_id_to_index).
        if samples.all():
            next_map = dict(zip(row_ids, range(n), strict=True))
        else:
            keep = samples.tolist()
            next_map = {r: i for i, (r, ok) in enumerate(zip(row_ids, keep, strict=True)) if ok}
        rec = StepRecord(
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
        yield rec
        prev_map = next_map
        prev_drafts_len = n
        # The scheduler's num_computed advances by what it scheduled (optimistic).
        st.num_computed[sched.idx] += sched.num_tokens


def _schedule_step(
    st: _ReqStates, running: list[int], waiting: deque[int], eng: EngineParams, k: int
) -> tuple[_Batch, list[str]]:
    """FCFS: running requests first in admission order, then waiting ones."""
    budget = eng.max_num_batched_tokens
    preempted: list[int] = []
    if eng.kv_cache_capacity_tokens and running:
        # Preempt the newest running requests until the next step fits (vLLM FCFS). A
        # victim leaves the sum, nobody else's need changes: prefix sums decide how many.
        r = np.array(running, dtype=np.int64)
        nc = st.num_computed[r]
        need = nc + np.where(nc < st.prefill_target[r], 0, 1 + k)
        total = np.cumsum(need).tolist()
        m = len(running)
        while m and total[m - 1] > eng.kv_cache_capacity_tokens:
            m -= 1
        for v in running[m:][::-1]:  # popped newest first
            st.preempted[v] = True
            st.num_computed[v] = 0
            st.prefill_target[v] = st.prompt_len[v] + st.generated[v]
            st.epoch[v] += 1
            preempted.append(v)
        del running[m:]
        for v in reversed(preempted):
            waiting.appendleft(v)

    parts: list[tuple[np.ndarray, ...]] = []
    if running:
        r = np.array(running, dtype=np.int64)
        nc, tgt = st.num_computed[r], st.prefill_target[r]
        prefill = nc < tgt
        if len(r) * (1 + k) <= budget and not prefill.any():
            # The steady state: every running request decodes with k drafts, and all fit.
            budget -= len(r) * (1 + k)
            drafts = np.full(len(r), k, dtype=np.int64)
            samples = np.ones(len(r), dtype=bool)
            parts.append((r, st.epoch[r], drafts + 1, drafts, _accept(st, r, drafts), samples))
        else:
            # Each running request takes its whole demand (the rest of its prefill, or
            # 1 + k) while the budget lasts; the first that does not fit takes what is left.
            demand = np.where(prefill, tgt - nc, 1 + k)
            cum = np.cumsum(demand)
            n_full = int(np.searchsorted(cum, budget, side="right"))
            left = budget - (int(cum[n_full - 1]) if n_full else 0)
            n_take = n_full + (1 if n_full < len(r) and left > 0 else 0)
            tokens = demand[:n_take].copy()
            if n_take > n_full:
                tokens[-1] = left
            r, nc, tgt, prefill = r[:n_take], nc[:n_take], tgt[:n_take], prefill[:n_take]
            budget -= int(tokens.sum())
            drafts = np.where(prefill, 0, tokens - 1)
            samples = ~prefill | (nc + tokens >= tgt)
            parts.append((r, st.epoch[r], tokens, drafts, _accept(st, r, drafts), samples))
    new_ids: list[str] = []
    while waiting and not preempted and budget > 0 and len(running) < eng.max_num_seqs:
        i = waiting.popleft()
        running.append(i)
        st.running[i] = True
        if not st.preempted[i]:
            new_ids.append(st.req_ids[i])
        st.preempted[i] = False
        nc_i, tgt_i = int(st.num_computed[i]), int(st.prefill_target[i])
        item: tuple[int, int, bool]
        if nc_i < tgt_i:
            tokens_i = min(tgt_i - nc_i, budget)
            item = (0, tokens_i, nc_i + tokens_i >= tgt_i)
        else:
            nd = min(k, budget - 1)
            item = (nd, 1 + nd, True)
        one = np.array([i], dtype=np.int64)
        drafts_a = np.array([item[0]], dtype=np.int64)
        parts.append(
            (
                one,
                st.epoch[one],
                np.array([item[1]], dtype=np.int64),
                drafts_a,
                _accept(st, one, drafts_a),
                np.array([item[2]], dtype=bool),
            )
        )
        budget -= item[1]
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return _Batch(z, z, z, z, z, np.zeros(0, dtype=bool)), new_ids
    cols = [np.concatenate(c) if len(parts) > 1 else c[0] for c in zip(*parts, strict=True)]
    return _Batch(*cols), new_ids


def _accept(st: _ReqStates, r: np.ndarray, drafts: np.ndarray) -> np.ndarray:
    """True accepted counts (Request.accepted_at) of requests ``r`` taking ``drafts`` drafts;
    a drafted step advances the request's speculative-step index."""
    has = drafts > 0
    if len(r) and has.all():  # the steady state: every request drafts
        ss = st.spec_steps[r]
        st.spec_steps[r] = ss + 1
        drawn = ss < st.accepted_len[r]
        if drawn.all():
            return np.minimum(st.accepted_flat[st.accepted_off[r] + ss], 1 + drafts)
        accepted = np.ones(len(r), dtype=np.int64)
        flat = st.accepted_flat[st.accepted_off[r[drawn]] + ss[drawn]]
        accepted[drawn] = np.minimum(flat, 1 + drafts[drawn])
        return accepted
    accepted = np.ones(len(r), dtype=np.int64)
    if has.any():
        ss = st.spec_steps[r]
        drawn = has & (ss < st.accepted_len[r])
        flat = st.accepted_flat[st.accepted_off[r[drawn]] + ss[drawn]]
        accepted[drawn] = np.minimum(flat, 1 + drafts[drawn])
        st.spec_steps[r[has]] += 1
    return accepted
