"""The engine core's ``schedule()`` of one step: which requests run, with how many tokens and
drafts, who is admitted and who is preempted (docs/mechanism.md §1.1). :mod:`sim.model.scheduling`
runs the steps around it (outputs, the worker's row bookkeeping); the per-request rules are
:mod:`sim.model.scheduler_rules`, each with its vLLM file and line."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from sim.model import scheduler_rules as rules
from sim.model.limits import PLAIN, Limits
from sim.model.params import EngineParams
from sim.model.scheduler_rules import (
    ReqStates,
    accept,
    accept_k,
    aligned_chunk,
    any_set,
    pad_new_decode,
    padded,
    preempt,
    steady_step,
)


class Running:
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

    def copy(self) -> Running:
        new = Running()
        new.ids = list(self.ids)
        new._arr = self._arr  # never written in place
        return new

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
class Batch:
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


def schedule_step(
    st: ReqStates,
    running: Running,
    waiting: deque[int],
    eng: EngineParams,
    k: int,
    out_arr: np.ndarray,
    limits: Limits = PLAIN,
) -> tuple[Batch, list[str], list[int]]:
    """FCFS: running requests first in admission order, then waiting ones. Returns the
    batch, the new requests' ids and their positions in it. ``out_arr``: every request's
    output_len; ``limits`` answers the comparisons against it and the KV capacity
    (:mod:`sim.model.limits`)."""
    if eng.kv_cache_capacity_tokens:
        return schedule_step_kv(st, running, waiting, eng, k, out_arr, limits)
    budget = eng.max_num_batched_tokens
    block = eng.mamba_block_size if eng.mamba_cache_mode == "align" else 0
    parts, budget, steady, prefill_sched = _schedule_running(
        st, running, eng, k, out_arr, budget, block, limits
    )
    pos = sum(len(p[0]) for p in parts)  # the next admitted request's position
    sched_running = pos > 0  # any running request scheduled (for pad_new_decode)
    admitted, new_ids, new_pos = _schedule_waiting(
        st, running, waiting, eng, k, budget, block, pos, sched_running, prefill_sched
    )
    if admitted:  # one part for all admitted requests (each request once: order-free draws)
        parts.append(_part(st, admitted))
    if not parts:
        return _empty_batch(), new_ids, new_pos
    if len(parts) == 1:  # running or admitted requests only: no concatenation
        idx, epoch, tokens, drafts, accepted, samples = parts[0]
    else:
        idx, epoch, tokens, drafts, accepted, samples = (
            np.concatenate(c) for c in zip(*parts, strict=True)
        )
    uniform = steady and not admitted
    return Batch(idx, epoch, tokens, drafts, accepted, samples, uniform), new_ids, new_pos


def _schedule_running(
    st: ReqStates,
    running: Running,
    eng: EngineParams,
    k: int,
    out_arr: np.ndarray,
    budget: int,
    block: int,
    limits: Limits,
) -> tuple[list[tuple[np.ndarray, ...]], int, bool, bool]:
    """``schedule()``'s pass over ``self.running`` without a KV limit (nothing is preempted,
    so every epoch stays 0): under async scheduling a request sure to finish is skipped;
    the others take their tokens while the token budget lasts, in one of three ways: the
    steady state (all decode with k drafts and all fit), mamba's align mode (``block``:
    its block size, else 0) with a prefill among them (:func:`_running_aligned`), or each
    its whole demand (:func:`_running_in_order`). Returns the batch parts (none or one),
    the budget left, whether it was the steady state with drafts, and whether a scheduled
    request is in prefill."""
    if not running:
        return [], budget, False, False
    r = running.array()
    if eng.async_scheduling:
        sure = rules.sure_to_finish(st, r, out_arr, limits)
        if sure is not None:
            r = r[~sure]
    if not len(r):
        return [], budget, False, False
    nc, tgt = st.num_computed[r], st.prefill_target[r]
    prefill = nc < tgt
    if len(r) * (1 + k) <= budget and not any_set(prefill):
        # The steady state: every running request decodes with k drafts, and all fit.
        budget -= len(r) * (1 + k)
        tokens, drafts, samples = steady_step(len(r), k)
        accepted = accept(st, r, drafts) if k == 0 else accept_k(st, r, k)
        return [(r, _zeros(r), tokens, drafts, accepted, samples)], budget, k > 0, False
    if block and any_set(prefill):
        cut = _running_aligned(r, nc, tgt, prefill, k, block, eng, budget)
    else:
        cut = _running_in_order(r, nc, tgt, prefill, k, budget)
    r, nc, tgt, prefill, tokens, budget = cut
    drafts = np.where(prefill, 0, tokens - 1)
    samples = ~prefill | (nc + tokens >= tgt)
    part = (r, _zeros(r), tokens, drafts, accept(st, r, drafts), samples)
    return [part], budget, False, any_set(prefill)


def _running_aligned(r, nc, tgt, prefill, k: int, block: int, eng: EngineParams, budget: int):
    """The running requests in mamba's align mode (``mamba_cache_mode == "align"``) with a
    prefill among them, one by one while the budget lasts: a decode takes 1 + k, a prefill
    the rest of its prompt, each at most what is left, a prefill cut to whole mamba blocks;
    a request cut to nothing waits and the next may still fit (vLLM). Returns the scheduled
    requests' ``r, nc, tgt, prefill``, their tokens, and the budget left."""
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
    tokens = np.array(tokens_l, dtype=np.int64)
    return r[sel], nc[sel], tgt[sel], prefill[sel], tokens, budget


def _running_in_order(r, nc, tgt, prefill, k: int, budget: int):
    """The running requests, each taking its whole demand (the rest of its prefill, or
    1 + k) while the budget lasts; the first that does not fit takes what is left (a
    chunked prefill, or fewer drafts). Returns the scheduled requests' ``r, nc, tgt,
    prefill``, their tokens, and the budget left."""
    demand = np.where(prefill, tgt - nc, 1 + k)
    cum = np.cumsum(demand)
    n_full = int(np.searchsorted(cum, budget, side="right"))
    left = budget - (int(cum[n_full - 1]) if n_full else 0)
    n_take = n_full + (1 if n_full < len(r) and left > 0 else 0)
    tokens = demand[:n_take].copy()
    if n_take > n_full:
        tokens[-1] = left
    budget -= int(tokens.sum())
    return r[:n_take], nc[:n_take], tgt[:n_take], prefill[:n_take], tokens, budget


def _schedule_waiting(
    st: ReqStates,
    running: Running,
    waiting: deque[int],
    eng: EngineParams,
    k: int,
    budget: int,
    block: int,
    pos: int,
    sched_running: bool,
    prefill_sched: bool,
) -> tuple[list[tuple[int, int, int, bool]], list[str], list[int]]:
    """``schedule()``'s pass over the waiting queue without a KV limit: admit requests in
    order while the budget lasts and fewer than ``max_num_seqs`` run; each takes its prefill
    chunk (cut to whole mamba blocks in align mode), its decode with up to k drafts, or
    with ``pad_new_decode`` 1 + k padded tokens. Returns the admitted ``(request, drafts,
    tokens, samples)``, and the new (not resumed) requests' ids and batch positions."""
    new_ids: list[str] = []
    new_pos: list[int] = []
    admitted: list[tuple[int, int, int, bool]] = []  # (request, drafts, tokens, samples)
    while waiting and budget > 0 and len(running) < eng.max_num_seqs:
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
    return admitted, new_ids, new_pos


def schedule_step_kv(
    st: ReqStates,
    running: Running,
    waiting: deque[int],
    eng: EngineParams,
    k: int,
    out_arr: np.ndarray,
    limits: Limits = PLAIN,
) -> tuple[Batch, list[str], list[int]]:
    """:func:`schedule_step` under a KV limit, request by request as vLLM's ``schedule()``
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
    null block). ``limits.exceeds`` answers each comparison of a need with it
    (:mod:`sim.model.limits`). Prefix-cache sharing of blocks between requests is not counted.

    The running pass is :func:`_schedule_running_kv` (its preemption
    :func:`_preempt_until_fits`), the waiting pass :func:`_schedule_waiting_kv`."""
    budget = eng.max_num_batched_tokens
    block = eng.mamba_block_size if eng.mamba_cache_mode == "align" else 0
    used = int(st.blocks[running.ids].sum()) if running.ids else 0
    skip: set[int] = set()
    if eng.async_scheduling and running.ids:
        r = running.array()
        sure = rules.sure_to_finish(st, r, out_arr, limits)
        if sure is not None:
            skip = set(r[sure].tolist())
    items, prefill_sched, preempted, budget, used = _schedule_running_kv(
        st, running, waiting, eng, k, skip, budget, used, block, limits
    )
    new_ids: list[str] = []
    new_pos: list[int] = []
    if not preempted:  # a step that preempts admits nobody
        sched_running = bool(items)
        new_ids, new_pos = _schedule_waiting_kv(
            st, running, waiting, eng, k, budget, used, block, items, sched_running,
            prefill_sched, limits,
        )  # fmt: skip
    if not items:
        return _empty_batch(), new_ids, new_pos
    return Batch(*_part(st, items)), new_ids, new_pos


def _schedule_running_kv(
    st: ReqStates,
    running: Running,
    waiting: deque[int],
    eng: EngineParams,
    k: int,
    skip: set[int],
    budget: int,
    used: int,
    block: int,
    limits: Limits,
) -> tuple[list[tuple[int, int, int, bool]], bool, bool, int, int]:
    """``schedule()``'s pass over ``self.running`` under a KV limit, in order while the token
    budget lasts: each request (but those in ``skip``, sure to finish under async
    scheduling) wants the rest of its prefill (cut to whole mamba blocks in align mode) or
    1 + k, and allocates the KV blocks it lacks, preempting from the end of the running list
    if they do not fit (:func:`_preempt_until_fits`). Returns the scheduled ``(request,
    drafts, tokens, samples)``, whether one of them is in prefill, whether any request was
    preempted, and the token budget and the KV blocks used after the pass."""
    bs, cap = eng.kv_block_size, eng.kv_cache_capacity_tokens
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
        if limits.exceeds((used + need) * bs, cap):
            preempted = True
            used, fits = _preempt_until_fits(st, running, waiting, i, need, used, bs, cap, limits)
            if not fits:
                break
        st.blocks[i] += need
        used += need
        prefill = nc < tgt
        was_prefill.append(prefill)
        items.append((i, 0 if prefill else want - 1, want, not prefill or nc + want >= tgt))
        budget -= want
        j += 1
    return items, any(was_prefill), preempted, budget, used


def _preempt_until_fits(
    st: ReqStates,
    running: Running,
    waiting: deque[int],
    i: int,
    need: int,
    used: int,
    bs: int,
    cap: int,
    limits: Limits,
) -> tuple[int, bool]:
    """vLLM's preemption for running request ``i``, whose ``need`` new blocks do not fit:
    the last running request is preempted (``self.running.pop()``, its blocks freed, prepended
    to the waiting queue, num_computed 0) until they fit or ``i`` itself was preempted.
    Returns the blocks used after it, and whether ``i`` is still running."""
    while limits.exceeds((used + need) * bs, cap):
        v = running.ids.pop()
        running._arr = None
        used -= int(st.blocks[v])
        preempt(st, v)
        waiting.appendleft(v)
        if v == i:
            return used, False
    return used, True


def _schedule_waiting_kv(
    st: ReqStates,
    running: Running,
    waiting: deque[int],
    eng: EngineParams,
    k: int,
    budget: int,
    used: int,
    block: int,
    items: list[tuple[int, int, int, bool]],
    sched_running: bool,
    prefill_sched: bool,
    limits: Limits,
) -> tuple[list[str], list[int]]:
    """``schedule()``'s pass over the waiting queue under a KV limit: admit requests in order
    while the budget lasts and fewer than ``max_num_seqs`` run, each only if its whole
    sequence so far fits (``full_sequence_must_fit``) and then its chunk + k; a resumed
    request recomputes everything appended so far; the first that does not fit stops
    admission. Appends the admitted to ``items``; returns the new (not resumed) requests'
    ids and batch positions."""
    bs, cap = eng.kv_block_size, eng.kv_cache_capacity_tokens
    new_ids: list[str] = []
    new_pos: list[int] = []
    while waiting and budget > 0 and len(running) < eng.max_num_seqs:
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
        if limits.exceeds((used + full) * bs, cap):
            break
        need = -(-(nc + want + k) // bs)
        if limits.exceeds((used + need) * bs, cap):
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
    return new_ids, new_pos


def _part(st: ReqStates, items: list[tuple[int, int, int, bool]]) -> tuple:
    """Batch columns of ``(request index, drafts, tokens, samples)`` items: the requests, their
    epochs, tokens, drafts, accepted counts (drawn here, once per request) and samples."""
    a_idx, a_drafts, a_tokens, a_samples = (list(c) for c in zip(*items, strict=True))
    idx = np.array(a_idx, dtype=np.int64)
    drafts = np.array(a_drafts, dtype=np.int64)
    return (
        idx,
        st.epoch[idx],
        np.array(a_tokens, dtype=np.int64),
        drafts,
        accept(st, idx, drafts),
        np.array(a_samples, dtype=bool),
    )


def _empty_batch() -> Batch:
    """The batch of a step that schedules nobody."""
    z = np.zeros(0, dtype=np.int64)
    return Batch(z, z, z, z, z, np.zeros(0, dtype=bool))


def _zeros(r: np.ndarray) -> np.ndarray:
    return steady_step(len(r), 0)[1]  # k = 0 drafts: zeros
