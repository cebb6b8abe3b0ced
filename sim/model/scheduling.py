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
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from sim.model.input_batch import InputBatchRows, reorder_batch_to_split_decodes_and_prefills
from sim.model.params import Scenario
from sim.model.schedule import Schedule, StepRecord
from sim.model.workload import Request, draw_workload


@dataclass
class _ReqState:
    req: Request
    num_computed: int = 0  # scheduler's optimistic num_computed_tokens
    generated: int = 0  # output tokens confirmed by update_from_output
    spec_steps: int = 0  # drafted steps so far (index into req.accepted)
    prefill_target: int = 0  # tokens to compute before sampling (prompt, or recompute)
    prev_num_draft_len: int = 0  # worker's CachedRequestState.prev_num_draft_len
    epoch: int = 0  # bumped by preemption: outputs of steps before it are dropped
    preempted: bool = False

    @property
    def prefilling(self) -> bool:
        return self.num_computed < self.prefill_target


@dataclass
class _Scheduled:
    """One request's part in one step, kept until its output is processed."""

    state: _ReqState
    epoch: int
    num_tokens: int
    drafts: int
    accepted: int
    samples: bool  # False for a partial prefill chunk (discarded row)


def build_schedule(scenario: Scenario, seed: int, num_steps: int) -> Schedule:
    eng = scenario.engine
    k = eng.num_speculative_tokens
    lag = 2 if eng.async_scheduling else 1
    requests = draw_workload(scenario, seed, num_steps)
    arrivals = deque(requests)
    waiting: deque[_ReqState] = deque()
    running: list[_ReqState] = []
    in_flight: dict[int, list[_Scheduled]] = {}
    finished_at: dict[int, list[str]] = {}
    batch = InputBatchRows(eng.max_num_seqs)
    prev_map: dict[str, int] = {}
    prev_drafts = np.zeros(0, dtype=np.int64)
    steps: list[StepRecord] = []

    for step in range(num_steps):
        # update_from_output(step - lag): apply true accepted counts, detect finishes.
        for item in in_flight.pop(step - lag, []):
            st = item.state
            if item.epoch != st.epoch:
                continue  # preempted since: the recompute supersedes this output
            if item.drafts:
                st.num_computed -= item.drafts - (item.accepted - 1)
            if item.samples:
                st.generated += item.accepted
                if st.generated >= st.req.output_len and st in running:
                    running.remove(st)
                    finished_at.setdefault(step, []).append(st.req.req_id)
        finished = finished_at.pop(step, [])

        while arrivals and arrivals[0].arrival_step <= step:
            r = arrivals.popleft()
            waiting.append(
                _ReqState(r, num_computed=r.prefix_hit_tokens, prefill_target=r.prompt_len)
            )

        scheduled, new_ids = _schedule_step(running, waiting, eng, k)
        in_flight[step] = scheduled

        # ---- worker: _update_states(step) ----
        batch.ops = []
        for req_id in finished:
            batch.remove_request(req_id)
            prev_map.pop(req_id, None)
        sched_ids = {item.state.req.req_id: item for item in scheduled}
        # vLLM iterates a set difference here (hash order); removal order does not change
        # any row (the removed list is sorted), so we remove in row order.
        unscheduled = [r for r in batch.req_ids if r not in sched_ids]
        for req_id in unscheduled:
            batch.remove_request(req_id)
            prev_map.pop(req_id, None)
        prev_num_draft_tokens = np.zeros(len(prev_drafts), dtype=np.int64)
        to_add: list[_Scheduled] = [sched_ids[r] for r in new_ids]
        resumed: list[str] = []
        for item in scheduled:
            st = item.state
            rid = st.req.req_id
            if rid in new_ids:
                continue
            row = batch.req_id_to_index.get(rid)
            if row is None:
                st.prev_num_draft_len = 0
                to_add.append(item)
                resumed.append(rid)
                continue
            if st.prev_num_draft_len and eng.async_scheduling and rid in prev_map:
                prev_num_draft_tokens[prev_map[rid]] = st.prev_num_draft_len
            batch.num_computed_tokens_cpu[row] = item.state.num_computed
            st.prev_num_draft_len = item.drafts
        for item in to_add:
            st = item.state
            batch.add_request(st.req.req_id, st.req.prompt_len, item.state.num_computed)
            st.prev_num_draft_len = item.drafts
        batch.condense()
        num_sched = {rid: it.num_tokens for rid, it in sched_ids.items()}
        reorder_batch_to_split_decodes_and_prefills(batch, num_sched, eng.reorder_batch_threshold)
        batch.end_step()

        ids = batch.req_ids
        rows = [sched_ids[r] for r in ids]
        n = len(ids)
        rec = StepRecord(
            step=step,
            finished=finished,
            unscheduled=unscheduled,
            new=new_ids,
            resumed=resumed,
            ops=batch.ops,
            req_ids=ids,
            num_scheduled=np.array([it.num_tokens for it in rows], dtype=np.int64),
            num_computed=batch.num_computed_tokens_cpu[:n].copy(),
            num_prompt=batch.num_prompt_tokens[:n].copy(),
            drafts=np.array([it.drafts for it in rows], dtype=np.int64),
            accepted=np.array([it.accepted for it in rows], dtype=np.int64),
            discard=np.array([not it.samples for it in rows], dtype=bool),
            prev_positions=np.array([prev_map.get(r, -1) for r in ids], dtype=np.int64),
            prev_num_draft_tokens=prev_num_draft_tokens,
        )
        steps.append(rec)
        prev_map = rec.prev_req_id_to_index()
        prev_drafts = rec.drafts
        # The scheduler's num_computed advances by what it scheduled (optimistic).
        for item in scheduled:
            item.state.num_computed += item.num_tokens

    return Schedule(
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
        steps=steps,
    )


def _schedule_step(
    running: list[_ReqState], waiting: deque[_ReqState], eng, k: int
) -> tuple[list[_Scheduled], list[str]]:
    """FCFS: running requests first in admission order, then waiting ones."""
    budget = eng.max_num_batched_tokens
    preempted: list[_ReqState] = []
    if eng.kv_cache_capacity_tokens:
        # Preempt the newest running requests until the next step fits (vLLM FCFS).
        def need(st: _ReqState) -> int:
            return st.num_computed + (1 + k if not st.prefilling else 0)

        while running and sum(need(s) for s in running) > eng.kv_cache_capacity_tokens:
            victim = running.pop()
            victim.preempted = True
            victim.num_computed = 0
            victim.prefill_target = victim.req.prompt_len + victim.generated
            victim.epoch += 1
            preempted.append(victim)
        for victim in reversed(preempted):
            waiting.appendleft(victim)

    scheduled: list[_Scheduled] = []
    for st in running:
        if budget <= 0:
            break
        scheduled.append(_take(st, budget, k))
        budget -= scheduled[-1].num_tokens
    new_ids: list[str] = []
    while waiting and not preempted and budget > 0 and len(running) < eng.max_num_seqs:
        st = waiting.popleft()
        running.append(st)
        if not st.preempted:
            new_ids.append(st.req.req_id)
        st.preempted = False
        scheduled.append(_take(st, budget, k))
        budget -= scheduled[-1].num_tokens
    return scheduled, new_ids


def _take(st: _ReqState, budget: int, k: int) -> _Scheduled:
    if st.prefilling:
        chunk = min(st.prefill_target - st.num_computed, budget)
        final = st.num_computed + chunk >= st.prefill_target
        return _Scheduled(st, st.epoch, chunk, 0, 1, samples=final)
    drafts = min(k, budget - 1)
    accepted = st.req.accepted_at(st.spec_steps, drafts)
    if drafts:
        st.spec_steps += 1
    return _Scheduled(st, st.epoch, 1 + drafts, drafts, accepted, samples=True)
