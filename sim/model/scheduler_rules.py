"""What vLLM's scheduler decides about one request, rule by rule, each with its vLLM file and
line: the request's state arrays (:class:`ReqStates`), the padded new decode, align mode's
mamba-block chunk cut, the avoided extra step, preemption, and the accepted count a drafted
step draws. :mod:`sim.model.scheduling` runs the steps that call these rules."""

from __future__ import annotations

import functools

import numpy as np

from sim.model.limits import PLAIN, Limits
from sim.model.params import EngineParams
from sim.model.workload import Request


# any()/all() of a small bool array by count_nonzero: the methods cost four times as much
# (a Python-level wrapper), and this runs several times per step.
def any_set(mask: np.ndarray) -> bool:
    return bool(np.count_nonzero(mask))


def all_set(mask: np.ndarray) -> bool:
    return np.count_nonzero(mask) == mask.size


class ReqStates:
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
        # is accepted_flat[spec_pos[i]] (spec_pos[i] = its offset + j) while spec_pos[i] <
        # accepted_end[i], else 1.
        self._set_accepted(requests, np.zeros(n, dtype=np.int64))
        self.num_computed = np.zeros(n, dtype=np.int64)  # scheduler's optimistic view
        self.generated = np.zeros(n, dtype=np.int64)  # confirmed by update_from_output
        self.prefill_target = np.zeros(n, dtype=np.int64)  # prompt, or recompute
        self.prev_num_draft_len = np.zeros(n, dtype=np.int64)  # CachedRequestState's
        # Request.num_output_placeholders (async scheduling): 1 + drafts of every in-flight
        # step that samples (AsyncScheduler._update_after_schedule adds them, update_from_output
        # takes them back: v0.24.0 v1/core/sched/async_scheduler.py L19-44, scheduler.py
        # L1564-1568, async_scheduler.py L58-66).
        self.placeholders = np.zeros(n, dtype=np.int64)
        self.length_stop = np.array([not r.eos for r in requests], dtype=bool)
        self.epoch = np.zeros(n, dtype=np.int64)  # bumped by preemption
        self.preempted = np.zeros(n, dtype=bool)
        self.running = np.zeros(n, dtype=bool)
        self.alive = np.ones(n, dtype=bool)  # not finished
        self.blocks = np.zeros(n, dtype=np.int64)  # KV blocks held (KV-limited runs)

    def copy(self) -> ReqStates:
        new = object.__new__(ReqStates)
        new.__dict__.update(self.__dict__)
        for name in _ARRAYS:
            setattr(new, name, getattr(self, name).copy())
        new.req_ids, new.arrival_step = list(self.req_ids), list(self.arrival_step)
        new.output_len = list(self.output_len)
        return new

    def extend(self, requests: list[Request]) -> None:
        """Requests arriving later, appended (their accepted counts: :meth:`rebind_outcomes`)."""
        more = ReqStates(requests)
        for name in _ARRAYS:
            if name not in _ACCEPTED:
                setattr(self, name, np.concatenate([getattr(self, name), getattr(more, name)]))
        self.req_ids = self.req_ids + more.req_ids
        self.arrival_step = self.arrival_step + more.arrival_step
        self.output_len = self.output_len + more.output_len

    def rebind_outcomes(self, requests: list[Request], drawn: np.ndarray) -> None:
        """Every request's output length and accepted counts from ``requests``; ``drawn``: the
        drafted steps each has taken so far (its next draw is its ``drawn``-th count)."""
        self.output_len = [r.output_len for r in requests]
        self._set_accepted(requests, drawn)

    def _set_accepted(self, requests: list[Request], drawn: np.ndarray) -> None:
        lens = np.array([len(r.accepted) for r in requests], dtype=np.int64)
        self.accepted_end = np.cumsum(lens)
        self.accepted_flat = _back_to_back([r.accepted for r in requests], lens)
        self.accepted_max = int(self.accepted_flat.max()) if len(self.accepted_flat) else 1
        # each request's offset + its drafted steps so far
        self.spec_pos = self.accepted_end - lens + drawn


def _back_to_back(arrays: list[np.ndarray], lens: np.ndarray) -> np.ndarray:
    """``arrays`` end to end as int8 (counts 1..k+1 <= 16). Where they already lie so, views of
    one int8 array in order (what :func:`sim.model.workload.draw_workload` draws), that
    array's span itself, read-only here: a 10^6-step run's counts are 200 MB, and a copy
    costs more than the check of every view's address."""
    if not arrays:
        return np.zeros(0, np.int8)
    base = arrays[0].base
    if (
        isinstance(base, np.ndarray)
        and base.dtype == np.int8
        and base.ndim == 1
        and base.flags.c_contiguous
        and all(a.base is base and a.dtype == np.int8 and a.flags.c_contiguous for a in arrays)
    ):
        addr = np.fromiter((a.ctypes.data for a in arrays), np.int64, len(arrays))
        start = int(addr[0]) - base.ctypes.data
        if np.array_equal(np.diff(addr), lens[:-1]):
            span = base[start : start + int(lens.sum())]
            span.flags.writeable = False  # the workload's own counts
            return span
    return np.concatenate(arrays).astype(np.int8)


_ACCEPTED = ("accepted_end", "accepted_flat", "spec_pos")
_ARRAYS = (
    *_ACCEPTED,
    "prompt_len", "num_computed", "generated", "prefill_target", "prev_num_draft_len",
    "placeholders", "length_stop", "epoch", "preempted", "running", "alive", "blocks",
)  # fmt: skip


def pad_new_decode(
    eng: EngineParams, k: int, nc: int, tgt: int, sched_running: bool, prefill_sched: bool
) -> bool:
    """Whether a waiting request with one token left is padded to ``1 + k`` (k placeholder
    drafts) "to preserve full cudagraph for this step" (release fact ``pad_new_decode``,
    ``engine.pad_new_decode``): from 0.25.0 when running requests were scheduled and none is
    in prefill (v0.28.0 scheduler.py L934-950); from 0.30.0 also with none running if it has
    computed tokens (a prefix hit; v0.33.0 L1308-1330)."""
    if eng.pad_new_decode == "off" or not k or tgt - nc != 1 or prefill_sched:
        return False
    return sched_running or (eng.pad_new_decode == "running_or_hit" and nc > 0)


def padded(nc: int, tgt: int, block: int, k: int, eng: EngineParams) -> tuple[int, int, int, bool]:
    """(-, drafts, tokens, samples) of a padded admission; in align mode a cut that clips the
    padded rows drops the padding (v0.33.0 scheduler.py L1358-1370)."""
    if block and aligned_chunk(nc, 1 + k, tgt, block, k > 0, eng) != 1 + k:
        return (-1, 0, 1, True)
    return (-1, k, 1 + k, True)


def preempt(st: ReqStates, v: int) -> None:
    """``_preempt_request``: blocks freed, num_computed 0; its in-flight output still comes."""
    st.preempted[v] = True
    st.running[v] = False
    st.num_computed[v] = 0
    st.blocks[v] = 0
    st.epoch[v] += 1


def sure_to_finish(
    st: ReqStates, r: np.ndarray, out_arr: np.ndarray, limits: Limits = PLAIN
) -> np.ndarray | None:
    """Running requests ``r`` that the async scheduler skips because their in-flight step is
    sure to reach ``max_tokens`` (here ``output_len``), or None if none is: "Avoid scheduling an
    extra step", v0.24.0 vllm/v1/core/sched/scheduler.py L435-449 (every release 0.23.0-0.33.0,
    sim.resolve.release_facts ``avoid_extra_step``): ``num_output_placeholders > 0 and
    num_computed_tokens + 2 - num_output_placeholders >= num_prompt_tokens + max_tokens``, i.e.
    the tokens confirmed plus the one the in-flight step samples at least (its drafts may all be
    rejected) reach ``max_tokens``. The worker then removes it as unscheduled, a step before its
    ``finished`` entry (docs/mechanism.md §1.1).

    Asked of ``limits`` (:mod:`sim.model.limits`) for the requests with a step in flight only,
    as vLLM's ``and`` asks it."""
    ph = st.placeholders[r]
    has = (ph > 0) & st.length_stop[r]  # an EOS stop comes unannounced
    if not any_set(has):
        return None
    asked = np.flatnonzero(has)
    rows = r[asked]
    reach = st.num_computed[rows] + 2 - ph[asked] - st.prompt_len[rows]  # vs max_tokens
    sure = np.zeros(len(r), dtype=bool)
    sure[asked] = limits.reached(rows, reach, out_arr[rows])
    return sure if any_set(sure) else None


def aligned_chunk(
    nc: int, tokens: int, num_tokens: int, block: int, eagle: bool, eng: EngineParams | None = None
) -> int:
    """A prefill chunk of ``tokens`` from ``nc`` cut as vLLM's align mode cuts it
    (``_mamba_block_aligned_split``): the state is cached at multiples of ``block`` up to the
    last cache position (one block earlier with an EAGLE-type drafter such as MTP, whose full
    attention prunes the last matching block), by the release's rule (release fact
    ``mamba_split_rule``, ``engine.mamba_split_rule``):

    - ``"chunk"`` (0.23.0-0.25.1; v0.24.0 v1/core/sched/scheduler.py L330-391): a chunk ending
      before the last cache position is floored to whole blocks (to 0 if shorter than one:
      the request waits), one crossing it ends there;
    - ``"boundary"`` (0.26.0-0.32.0; v0.28.0 scheduler.py L366-437): a chunk that does not end
      the prefill ends on a block boundary, unless that leaves nothing and a block is wider
      than the token budget (then it advances within the block); a chunk starting inside a
      block stops at the next boundary; none runs past the last cache position;
    - ``"lookahead"`` (0.33.0; scheduler.py L342-345, kv_cache_interface.py L1169-1186): as
      "boundary", but with prefix caching on the block hashes look one token ahead instead of
      EAGLE dropping the last block: the last cache position is ``(num_tokens - 1)`` floored
      to a block (sim assumes prefix caching on in align mode, which is what selects align)."""
    rule = eng.mamba_split_rule if eng is not None else "chunk"
    if rule == "lookahead":
        last = (num_tokens - 1) // block * block
    else:
        last = num_tokens - num_tokens % block
        if eagle:
            last = max(last - block, 0)
    if rule == "chunk" or eng is None:
        if nc + tokens < last:
            return tokens // block * block
        if nc < last < nc + tokens:
            return last - nc
        return tokens
    end = nc + tokens
    if nc >= num_tokens:
        return tokens
    if end < num_tokens:
        aligned = end // block * block
        if aligned > nc or block <= eng.max_num_batched_tokens:
            end = aligned
    stops = ((nc // block + 1) * block if nc % block else 0, last)
    end = min((x for x in stops if nc < x < end), default=end)
    return max(end - nc, 0)


@functools.cache
def steady_step(n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A steady step's tokens (1 + k), drafts (k) and samples (all) for ``n`` requests:
    built once per size, read-only (every user copies or indexes them)."""
    out = (np.full(n, 1 + k, np.int64), np.full(n, k, np.int64), np.ones(n, dtype=bool))
    for a in out:
        a.flags.writeable = False
    return out


def accept_k(st: ReqStates, r: np.ndarray, k: int) -> np.ndarray:
    """:func:`accept` of requests that all take ``k`` > 0 drafts."""
    at = st.spec_pos[r]
    st.spec_pos[r] = at + 1
    drawn = at < st.accepted_end[r]
    if all_set(drawn):
        if st.accepted_max <= 1 + k:  # drawn with k drafts: nothing to cap
            return st.accepted_flat[at].astype(np.int64)
        return np.minimum(st.accepted_flat[at], np.int64(1 + k))
    accepted = np.ones(len(r), dtype=np.int64)
    accepted[drawn] = np.minimum(st.accepted_flat[at[drawn]], 1 + k)
    return accepted


def accept(st: ReqStates, r: np.ndarray, drafts: np.ndarray) -> np.ndarray:
    """True accepted counts (Request.accepted_at) of requests ``r`` taking ``drafts`` drafts;
    a drafted step advances the request's speculative-step index."""
    accepted = np.ones(len(r), dtype=np.int64)
    has = drafts > 0
    if any_set(has):
        at = st.spec_pos[r]
        drawn = has & (at < st.accepted_end[r])
        accepted[drawn] = np.minimum(st.accepted_flat[at[drawn]], 1 + drafts[drawn])
        st.spec_pos[r[has]] += 1
    return accepted
