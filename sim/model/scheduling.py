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
version it replaced (tests/test_schedule.py's golden file; ``python -m sim bench`` runs both).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sim.model import scheduler_rules as rules
from sim.model.input_batch import (
    InputBatchRows,
    RowOp,
    reorder_batch_to_split_decodes_and_prefills,
)
from sim.model.params import EngineParams, Scenario
from sim.model.schedule import Schedule, StepRecord
from sim.model.scheduler_rules import (
    ReqStates,
    accept,
    accept_k,
    aligned_chunk,
    all_set,
    any_set,
    pad_new_decode,
    padded,
    preempt,
    steady_step,
)
from sim.model.workload import Request, draw_workload


class _Running:
    """The running requests (indices, in admission order) and, built once per change, the
    same as an array."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self._arr: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def array(self) -> np.ndarray:
        if self._arr is None:
            self._arr = np.array(self.ids, dtype=np.int64)
        return self._arr

    def append(self, i: int) -> None:
        self.ids.append(i)
        self._arr = None

    def truncate(self, m: int) -> list[int]:
        """Drop the requests from position ``m`` on; returns them."""
        gone = self.ids[m:]
        del self.ids[m:]
        self._arr = None
        return gone

    def drop(self, gone: set[int]) -> None:
        self.ids = [r for r in self.ids if r not in gone]
        self._arr = None


@dataclass(slots=True)
class _Batch:
    """One step's scheduled requests (in scheduling order), kept until their output."""

    idx: np.ndarray  # request index
    epoch: np.ndarray  # the request's epoch when scheduled
    num_tokens: np.ndarray
    drafts: np.ndarray
    accepted: np.ndarray
    samples: np.ndarray  # False for a partial prefill chunk (discarded row)
    # Every request was running, decodes with k drafts and nobody was admitted: one region
    # in the reorder (decode, or long_extend under threshold 1), every row samples.
    uniform: bool = False


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
    eng = scenario.engine
    k = eng.num_speculative_tokens
    lag = 2 if eng.async_scheduling else 1
    st = ReqStates(requests)
    ids = st.req_ids
    n_req = len(ids)
    id_index = {rid: i for i, rid in enumerate(ids)}
    # Finishes by one array comparison where output_len are plain ints; sim.explore.check's
    # probes (int subclasses that record each comparison) take the per-request loop.
    out_arr = (
        np.array(st.output_len, dtype=np.int64)
        if all(type(x) is int for x in st.output_len)
        else None
    )
    can_preempt = bool(eng.kv_cache_capacity_tokens)
    next_arrival = 0
    waiting: deque[int] = deque()
    running = _Running()
    in_flight: dict[int, _Batch] = {}
    batch = InputBatchRows(eng.max_num_seqs)
    # The previous step's layout: row -> request (and its req_ids), and request -> row
    # (-1: no row) and request -> row if that row sampled (prev_req_id_to_index).
    prev_req_of_row = np.zeros(0, dtype=np.int64)
    prev_row_ids: list[str] = []
    row_arr = np.full(n_req, -1, dtype=np.int64)
    prev_arr = np.full(n_req, -1, dtype=np.int64)
    mark = np.zeros(n_req, dtype=bool)  # scratch: scheduled or finished this step
    prev_drafts_len = 0

    for step in range(num_steps):
        # update_from_output(step - lag): apply true accepted counts, detect finishes.
        finished: list[str] = []
        done_rows: list[int] = []
        done = in_flight.pop(step - lag, None)
        if done is not None and len(done.idx):
            i = done.idx
            if eng.async_scheduling:  # a preempted request's output is processed too
                st.placeholders[i] -= np.where(done.samples, 1 + done.drafts, 0)
            # else preempted since: the recompute supersedes (no KV limit: no preemption)
            live = st.epoch[i] == done.epoch if can_preempt else None
            if done.uniform and live is None:  # k drafts each, every row samples
                st.num_computed[i] -= (k + 1) - done.accepted  # the rejected drafts
                st.generated[i] += done.accepted
                cand = i
            elif live is None or all_set(live):  # no preemption since: every row applies
                # rejected drafts are uncomputed (0 without drafts: accepted is then 1)
                st.num_computed[i] -= done.drafts - (done.accepted - 1)
                if all_set(done.samples):
                    st.generated[i] += done.accepted
                    cand = i
                else:
                    st.generated[i] += np.where(done.samples, done.accepted, 0)
                    cand = i[done.samples]
            else:
                assert live is not None
                # A request preempted since: its num_computed restarted at 0 and is left alone
                # (``if request.num_computed_tokens > 0``), but its tokens are appended and can
                # stop it (v0.24.0 scheduler.py L1562-1564, L1660-1668, L1713-1715).
                d = live & (done.drafts > 0)
                st.num_computed[i[d]] -= done.drafts[d] - (done.accepted[d] - 1)
                smp = done.samples
                st.generated[i[smp]] += done.accepted[smp]
                cand = i[smp]
            if out_arr is not None:
                hit = (st.generated[cand] >= out_arr[cand]) & st.alive[cand]
                done_rows = cand[hit].tolist() if any_set(hit) else []
            else:
                out = st.output_len
                done_rows = [
                    r
                    for r, g in zip(cand.tolist(), st.generated[cand].tolist(), strict=True)
                    if g >= out[r] and st.alive[r]
                ]
            if done_rows:
                st.alive[done_rows] = False
                st.blocks[done_rows] = 0
                gone = set(done_rows)
                stopped_waiting = [j for j in done_rows if not st.running[j]]
                st.running[done_rows] = False
                running.drop(gone)
                for j in stopped_waiting:  # preempted, waiting to resume
                    waiting.remove(j)
                finished = [ids[r] for r in done_rows]

        while next_arrival < len(ids) and st.arrival_step[next_arrival] <= step:
            r = requests[next_arrival]
            st.num_computed[next_arrival] = r.prefix_hit_tokens
            st.prefill_target[next_arrival] = r.prompt_len
            waiting.append(next_arrival)
            next_arrival += 1

        sched, new_ids, new_pos = _schedule_step(st, running, waiting, eng, k, out_arr)
        in_flight[step] = sched
        if eng.async_scheduling:
            st.placeholders[sched.idx] += np.where(sched.samples, 1 + sched.drafts, 0)
        idx = sched.idx
        n = len(idx)

        # ---- worker: _update_states(step) ----
        batch.ops = []
        for req_id in finished:
            batch.remove_request(req_id)
        # Rows of the previous layout whose request is neither scheduled nor finished, in row
        # order. vLLM iterates a set difference here (hash order); removal order does not
        # change any row (the removed list is sorted), so we remove in row order.
        row_of = row_arr[idx]  # each scheduled request's row; removals move no row
        absent = row_of < 0
        any_absent = any_set(absent)
        if done_rows or any_absent or n != len(prev_row_ids):
            mark[idx] = True
            mark[done_rows] = True
            gone_rows = np.flatnonzero(~mark[prev_req_of_row]).tolist()
            mark[idx] = False
            mark[done_rows] = False
            unscheduled = [prev_row_ids[j] for j in gone_rows]
            for req_id in unscheduled:
                batch.remove_request(req_id)
        else:  # the same requests as in the previous layout: nobody to remove
            unscheduled = []
        prev_num_draft_tokens = np.zeros(prev_drafts_len, dtype=np.int64)
        # Each scheduled request's row in the previous step (prev_req_id_to_index), -1 if none.
        prev_of = prev_arr[idx]
        to_add: list[int] = list(new_pos)  # positions in sched
        resumed: list[str] = []
        # The cached-request loop: requests still in the batch update their row; the others
        # (not new) were preempted and are re-added. A new request has no row either.
        if any_absent:
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
            any_cached = n > 0
        if any_cached:
            ci = idx[cached]
            prev_len = st.prev_num_draft_len[ci]
            if eng.async_scheduling:
                prev_row = prev_of[cached]
                use = (prev_len > 0) & (prev_row >= 0)
                prev_num_draft_tokens[prev_row[use]] = prev_len[use]
            batch.num_computed_tokens_cpu[row_of[cached]] = st.num_computed[ci]
        for j in to_add:
            a = int(idx[j])
            batch.add_request(ids[a], int(st.prompt_len[a]), int(st.num_computed[a]))
        # Every scheduled request's prev_num_draft_len is now this step's drafts (a resumed
        # one was reset to 0 first, then set on add).
        st.prev_num_draft_len[idx] = sched.drafts
        batch.condense()
        # Every row holds a scheduled request now: the reorder gets tokens per row.
        if batch.ops:  # the layout changed: replay the row ops on row -> request
            row_ids = batch.req_ids
            layout = _replay(prev_req_of_row.tolist(), batch.ops, id_index)
            req_of_row = np.array(layout[:n], dtype=np.int64)
            row_arr[prev_req_of_row] = -1
            row_arr[req_of_row] = np.arange(n)
            row_of = row_arr[idx]
        else:  # no row op: the previous layout, every scheduled request in its row
            row_ids, req_of_row = list(prev_row_ids), prev_req_of_row
        n_ops = len(batch.ops)
        if sched.uniform:  # one region (see _Batch.uniform): the reorder moves nothing
            pass
        elif reorder_batch_to_split_decodes_and_prefills(
            batch, _by_row(sched.num_tokens, row_of), eng.reorder_batch_threshold
        ):
            row_ids = batch.req_ids
            row_arr[req_of_row] = -1
            req_of_row = np.array(
                _replay(req_of_row.tolist(), batch.ops[n_ops:], id_index), dtype=np.int64
            )
            row_arr[req_of_row] = np.arange(n)
            row_of = row_arr[idx]
        batch.end_step()

        positions = np.arange(n)
        at = np.empty(n, dtype=np.int64)  # row -> position in sched
        at[row_of] = positions
        samples = sched.samples if sched.uniform else sched.samples[at]  # uniform: all True
        # prev_req_id_to_index for the next step (StepRecord.prev_req_id_to_index).
        prev_arr[prev_req_of_row] = -1
        if sched.uniform or all_set(samples):
            prev_arr[req_of_row] = positions
        else:
            keep = np.flatnonzero(samples)
            prev_arr[req_of_row[keep]] = keep
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
        prev_req_of_row, prev_row_ids = req_of_row, row_ids
        prev_drafts_len = n
        # The scheduler's num_computed advances by what it scheduled (optimistic).
        st.num_computed[idx] += sched.num_tokens


def _schedule_step(
    st: ReqStates,
    running: _Running,
    waiting: deque[int],
    eng: EngineParams,
    k: int,
    out_arr: np.ndarray | None = None,
) -> tuple[_Batch, list[str], list[int]]:
    """FCFS: running requests first in admission order, then waiting ones. Returns the
    batch, the new requests' ids and their positions in it. ``out_arr``: every request's
    output_len as an array (None: compare the values one by one, see
    :func:`sim.model.scheduler_rules.sure_to_finish`)."""
    if eng.kv_cache_capacity_tokens:
        return _schedule_step_kv(st, running, waiting, eng, k, out_arr)
    budget = eng.max_num_batched_tokens
    preempted: list[int] = []
    parts: list[tuple[np.ndarray, ...]] = []
    steady = False
    block = eng.mamba_block_size if eng.mamba_cache_mode == "align" else 0
    epoch_of = _zeros  # without a KV limit nothing is preempted: every epoch stays 0
    if running:
        r = running.array()
        if eng.async_scheduling:
            sure = rules.sure_to_finish(st, r, out_arr)
            if sure is not None:
                r = r[~sure]
    if running and len(r):
        nc, tgt = st.num_computed[r], st.prefill_target[r]
        prefill = nc < tgt
        if len(r) * (1 + k) <= budget and not any_set(prefill):
            # The steady state: every running request decodes with k drafts, and all fit.
            budget -= len(r) * (1 + k)
            steady = k > 0
            tokens, drafts, samples = steady_step(len(r), k)
            accepted = accept(st, r, drafts) if k == 0 else accept_k(st, r, k)
            parts.append((r, epoch_of(r), tokens, drafts, accepted, samples))
        elif block and any_set(prefill):
            tokens_l, take = [], []
            for j, (nc_j, tgt_j) in enumerate(zip(nc.tolist(), tgt.tolist(), strict=True)):
                if budget <= 0:
                    break
                want = min(tgt_j - nc_j if nc_j < tgt_j else 1 + k, budget)
                if nc_j < tgt_j:
                    want = aligned_chunk(nc_j, want, tgt_j, block, k > 0, eng)
                if want:  # a cut to nothing: this request waits, the next may fit (vLLM)
                    take.append(j)
                    tokens_l.append(want)
                    budget -= want
            sel = np.array(take, dtype=np.int64)
            r, nc, tgt, prefill = r[sel], nc[sel], tgt[sel], prefill[sel]
            tokens = np.array(tokens_l, dtype=np.int64)
            drafts = np.where(prefill, 0, tokens - 1)
            samples = ~prefill | (nc + tokens >= tgt)
            parts.append((r, epoch_of(r), tokens, drafts, accept(st, r, drafts), samples))
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
            parts.append((r, epoch_of(r), tokens, drafts, accept(st, r, drafts), samples))
    new_ids: list[str] = []
    new_pos: list[int] = []
    pos = sum(len(p[0]) for p in parts)  # the next admitted request's position
    # any running request scheduled, any of them in prefill (for pad_new_decode)
    sched_running = pos > 0
    prefill_sched = sched_running and not steady and any_set(prefill)
    admitted: list[tuple[int, int, int, bool]] = []  # (request, drafts, tokens, samples)
    while waiting and not preempted and budget > 0 and len(running) < eng.max_num_seqs:
        nc_w, tgt_w = int(st.num_computed[waiting[0]]), int(st.prefill_target[waiting[0]])
        pad = pad_new_decode(eng, k, nc_w, tgt_w, sched_running, prefill_sched)
        if pad and 1 + k > budget:
            break  # vLLM prefers not scheduling it to scheduling it unpadded
        # the cut comes before admission: a request cut to nothing stays waiting
        cut = block and not pad and nc_w < tgt_w
        if cut and not aligned_chunk(nc_w, min(tgt_w - nc_w, budget), tgt_w, block, k > 0, eng):
            break
        i = waiting.popleft()
        running.append(i)
        st.running[i] = True
        if not st.preempted[i]:
            new_ids.append(st.req_ids[i])
            new_pos.append(pos)
        pos += 1
        st.preempted[i] = False
        nc_i, tgt_i = int(st.num_computed[i]), int(st.prefill_target[i])
        item: tuple[int, int, int, bool]
        if pad:
            item = padded(nc_i, tgt_i, block, k, eng)
            item = (i, *item[1:])
        elif nc_i < tgt_i:
            tokens_i = min(tgt_i - nc_i, budget)
            if block:
                tokens_i = aligned_chunk(nc_i, tokens_i, tgt_i, block, k > 0, eng)
            item = (i, 0, tokens_i, nc_i + tokens_i >= tgt_i)
        else:
            nd = min(k, budget - 1)
            item = (i, nd, 1 + nd, True)
        admitted.append(item)
        budget -= item[2]
    if admitted:  # one part for all admitted requests (each request once: order-free draws)
        a_idx, a_drafts, a_tokens, a_samples = (list(c) for c in zip(*admitted, strict=True))
        one = np.array(a_idx, dtype=np.int64)
        drafts_a = np.array(a_drafts, dtype=np.int64)
        parts.append(
            (
                one,
                st.epoch[one],
                np.array(a_tokens, dtype=np.int64),
                drafts_a,
                accept(st, one, drafts_a),
                np.array(a_samples, dtype=bool),
            )
        )
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return _Batch(z, z, z, z, z, np.zeros(0, dtype=bool)), new_ids, new_pos
    if len(parts) == 1:  # running or admitted requests only: no concatenation
        idx, epoch, tokens, drafts, accepted, samples = parts[0]
    else:
        idx, epoch, tokens, drafts, accepted, samples = (
            np.concatenate(c) for c in zip(*parts, strict=True)
        )
    uniform = steady and not admitted
    return _Batch(idx, epoch, tokens, drafts, accepted, samples, uniform), new_ids, new_pos


def _schedule_step_kv(
    st: ReqStates,
    running: _Running,
    waiting: deque[int],
    eng: EngineParams,
    k: int,
    out_arr: np.ndarray | None,
) -> tuple[_Batch, list[str], list[int]]:
    """:func:`_schedule_step` under a KV limit, request by request as vLLM's ``schedule()``
    (v0.24.0 v1/core/sched/scheduler.py L430-580, L640-960) with full-attention blocks of
    ``engine.kv_block_size`` tokens (kv_cache_manager.py ``allocate_slots``):

    - a running request needs ``ceil((num_computed + new + k) / B)`` blocks (k lookahead slots
      for an EAGLE/MTP drafter); blocks are kept until it finishes or is preempted;
    - if they do not fit, the last running request is preempted (``self.running.pop()``,
      prepended to the waiting queue, num_computed 0), until they fit or the request itself
      was preempted, which ends the running pass; a step that preempts admits nobody;
    - a waiting request is admitted only if its whole sequence so far fits
      (``scheduler_reserve_full_isl``: ``full_sequence_must_fit``), then its chunk + k;
      the first that does not fit stops admission;
    - a resumed request recomputes its prompt and every token appended so far.

    Capacity ``engine.kv_cache_capacity_tokens`` = usable blocks * B (vLLM's pool less its
    null block). Every comparison is ``tokens > capacity`` so sim.explore.check's probe sees
    each sum. Prefix-cache sharing of blocks between requests is not counted."""
    budget = eng.max_num_batched_tokens
    cap = eng.kv_cache_capacity_tokens
    bs = eng.kv_block_size
    block = eng.mamba_block_size if eng.mamba_cache_mode == "align" else 0
    used = int(st.blocks[running.ids].sum()) if running.ids else 0
    skip: set[int] = set()
    if eng.async_scheduling and running.ids:
        r = running.array()
        sure = rules.sure_to_finish(st, r, out_arr)
        if sure is not None:
            skip = set(r[sure].tolist())
    items: list[tuple[int, int, int, bool]] = []  # (request, drafts, tokens, samples)
    was_prefill: list[bool] = []  # per scheduled running request
    preempted = False
    ids = running.ids
    j = 0
    while j < len(ids) and budget > 0:
        i = ids[j]
        if i in skip:
            j += 1
            continue
        nc, tgt = int(st.num_computed[i]), int(st.prefill_target[i])
        want = min(tgt - nc if nc < tgt else 1 + k, budget)
        if block and nc < tgt:
            want = aligned_chunk(nc, want, tgt, block, k > 0, eng)
        if not want:
            j += 1
            continue
        need = max(0, -(-(nc + want + k) // bs) - int(st.blocks[i]))
        fits = True
        while (used + need) * bs > cap:
            v = ids.pop()
            running._arr = None
            used -= int(st.blocks[v])
            preempt(st, v)
            waiting.appendleft(v)
            preempted = True
            if v == i:
                fits = False
                break
        if not fits:
            break
        st.blocks[i] += need
        used += need
        prefill = nc < tgt
        was_prefill.append(prefill)
        items.append((i, 0 if prefill else want - 1, want, not prefill or nc + want >= tgt))
        budget -= want
        j += 1
    new_ids: list[str] = []
    new_pos: list[int] = []
    sched_running = bool(items)
    prefill_sched = any(was_prefill)
    while waiting and not preempted and budget > 0 and len(running) < eng.max_num_seqs:
        i = waiting[0]
        if st.preempted[i]:  # recompute everything appended so far
            st.prefill_target[i] = st.prompt_len[i] + st.generated[i]
        nc, tgt = int(st.num_computed[i]), int(st.prefill_target[i])
        pad = pad_new_decode(eng, k, nc, tgt, sched_running, prefill_sched)
        if pad and 1 + k > budget:
            break
        want = min(tgt - nc, budget)
        if pad:
            _, pad_drafts, want, _ = padded(nc, tgt, block, k, eng)
        elif block:
            want = aligned_chunk(nc, want, tgt, block, k > 0, eng)
            if not want:
                break
        full = -(-int(st.prompt_len[i] + st.generated[i]) // bs)
        if (used + full) * bs > cap:
            break
        need = -(-(nc + want + k) // bs)
        if (used + need) * bs > cap:
            break
        waiting.popleft()
        st.blocks[i] = need
        used += need
        running.append(i)
        st.running[i] = True
        if not st.preempted[i]:
            new_ids.append(st.req_ids[i])
            new_pos.append(len(items))
        st.preempted[i] = False
        items.append((i, pad_drafts if pad else 0, want, nc + want >= tgt))
        budget -= want
    if not items:
        z = np.zeros(0, dtype=np.int64)
        return _Batch(z, z, z, z, z, np.zeros(0, dtype=bool)), new_ids, new_pos
    a_idx, a_drafts, a_tokens, a_samples = (list(c) for c in zip(*items, strict=True))
    idx = np.array(a_idx, dtype=np.int64)
    drafts = np.array(a_drafts, dtype=np.int64)
    batch = _Batch(
        idx,
        st.epoch[idx],
        np.array(a_tokens, dtype=np.int64),
        drafts,
        accept(st, idx, drafts),
        np.array(a_samples, dtype=bool),
    )
    return batch, new_ids, new_pos


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


def _zeros(r: np.ndarray) -> np.ndarray:
    return steady_step(len(r), 0)[1]  # k = 0 drafts: zeros
