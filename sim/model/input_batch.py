"""The row bookkeeping of vLLM v0.24.0's persistent batch (``gpu_input_batch.InputBatch``).

Only what decides *which row holds which request* and what each row operation writes
into the pinned counts buffer ``num_accepted_tokens_cpu`` is modelled (docs/mechanism.md
§2). Every mutating method appends :class:`RowOp` records to ``ops`` so a schedule can
replay the exact sequence of buffer writes:

=========  =======================================  ==========================================
op         vLLM method                              write to ``num_accepted_tokens_cpu``
=========  =======================================  ==========================================
remove     ``remove_request`` (IB L511-565)         none (the row keeps its stale value)
add        ``add_request`` (IB L336-482)            ``B[row] = 1`` (IB L467)
move       one step of ``condense`` (IB L684-810)   ``B[dst] = B[src]``; src is not cleared
swap       ``swap_states`` (IB L567-677)            exchange ``B[i]`` and ``B[j]``
=========  =======================================  ==========================================

The free-row rule is ``BatchUpdateBuilder.pop_removed``: removed rows are sorted once,
descending, and the lowest is taken first, for ``add_request`` and for ``condense`` alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

OpKind = Literal["remove", "add", "move", "swap"]


@dataclass(frozen=True, slots=True)
class RowOp:
    """One row operation in vLLM's order. ``a``/``b``: rows; ``req_id``: who it concerns.

    remove: a = row, b = -1; add: a = row, b = -1; move: a = src, b = dst (condense);
    swap: a = i1, b = i2 (``swap_states(i1, i2)``, req_id is the one that was at i1).
    """

    kind: OpKind
    a: int
    b: int
    req_id: str

    def to_json(self) -> list:
        return [self.kind, self.a, self.b, self.req_id]

    @staticmethod
    def from_json(item: list) -> RowOp:
        kind, a, b, req_id = item
        return RowOp(kind, int(a), int(b), str(req_id))

    def apply_to_rows(self, rows: list[str | None]) -> None:
        """The op on a layout (row -> request, None: empty), in place: who holds each row
        after it, as ``InputBatch`` leaves its ``_req_ids``."""
        a, b = self.a, self.b
        if self.kind == "remove":
            rows[a] = None
        elif self.kind == "add":
            rows[a] = self.req_id
        elif self.kind == "move":
            rows[b], rows[a] = rows[a], None
        else:
            rows[a], rows[b] = rows[b], rows[a]


class InputBatchRows:
    """Rows of the persistent batch: ``req_ids`` (row -> req_id) and the per-row fields
    that region classification needs, moved exactly as vLLM moves them.

    ``num_accepted_tokens_cpu`` is the CPU-only evolution of the counts buffer (what it
    would hold if no DMA ever landed); the timing model replays ``ops`` against a write
    log instead.
    """

    def __init__(self, max_num_reqs: int) -> None:
        self.max_num_reqs = max_num_reqs
        self._req_ids: list[str | None] = []  # row -> req_id
        self.req_id_to_index: dict[str, int] = {}  # req_id -> row
        self.num_computed_tokens_cpu = np.zeros(max_num_reqs, dtype=np.int64)
        self.num_prompt_tokens = np.zeros(max_num_reqs, dtype=np.int64)
        self.num_accepted_tokens_cpu = np.ones(max_num_reqs, dtype=np.int64)
        self._removed: list[int] = []
        self._removed_sorted = False
        self.ops: list[RowOp] = []

    def copy(self) -> InputBatchRows:
        new = object.__new__(InputBatchRows)
        new.max_num_reqs = self.max_num_reqs
        new._req_ids = list(self._req_ids)
        new.req_id_to_index = dict(self.req_id_to_index)
        new.num_computed_tokens_cpu = self.num_computed_tokens_cpu.copy()
        new.num_prompt_tokens = self.num_prompt_tokens.copy()
        new.num_accepted_tokens_cpu = self.num_accepted_tokens_cpu.copy()
        new._removed = list(self._removed)
        new._removed_sorted = self._removed_sorted
        new.ops = list(self.ops)
        return new

    # -- views -------------------------------------------------------------------------
    @property
    def num_reqs(self) -> int:
        return len(self.req_id_to_index)

    @property
    def req_ids(self) -> list[str]:
        """Requests in row order (holes left by removals skipped until condense)."""
        return [r for r in self._req_ids if r is not None]

    # -- BatchUpdateBuilder's removed list -----------------------------------------------
    def _sorted_removed(self) -> list[int]:
        if not self._removed_sorted:
            self._removed.sort(reverse=True)
            self._removed_sorted = True
        return self._removed

    def _pop_removed(self) -> int | None:
        removed = self._sorted_removed()
        return removed.pop() if removed else None

    # -- vLLM methods ------------------------------------------------------------------
    def remove_request(self, req_id: str) -> int | None:
        row = self.req_id_to_index.pop(req_id, None)
        if row is None:
            return None
        if self._removed_sorted:
            raise RuntimeError("remove after the removed list was read (vLLM raises too)")
        self._removed.append(row)
        self._req_ids[row] = None
        self.ops.append(RowOp("remove", row, -1, req_id))
        return row

    def add_request(self, req_id: str, num_prompt_tokens: int, num_computed_tokens: int) -> int:
        row = self._pop_removed()
        if row is None:
            row = self.num_reqs
        if row >= self.max_num_reqs:
            raise RuntimeError(f"add_request beyond max_num_reqs={self.max_num_reqs}")
        if row == len(self._req_ids):
            self._req_ids.append(req_id)
        else:
            self._req_ids[row] = req_id
        self.req_id_to_index[req_id] = row
        self.num_prompt_tokens[row] = num_prompt_tokens
        self.num_computed_tokens_cpu[row] = num_computed_tokens
        self.num_accepted_tokens_cpu[row] = 1
        self.ops.append(RowOp("add", row, -1, req_id))
        return row

    def condense(self) -> None:
        """Move the last occupied row into the lowest hole until no hole is below it."""
        num_reqs = self.num_reqs
        empty = self._sorted_removed()
        if not empty:
            return
        if num_reqs == 0:
            self._req_ids.clear()
            empty.clear()
            return
        last = num_reqs + len(empty) - 1
        while empty:
            while last in empty:
                last -= 1
            hole = empty[-1]
            if hole >= last:
                break
            empty.pop()
            req_id = self._req_ids[last]
            assert req_id is not None
            self._req_ids[hole] = req_id
            self._req_ids[last] = None
            self.req_id_to_index[req_id] = hole
            self.num_prompt_tokens[hole] = self.num_prompt_tokens[last]
            self.num_computed_tokens_cpu[hole] = self.num_computed_tokens_cpu[last]
            self.num_accepted_tokens_cpu[hole] = self.num_accepted_tokens_cpu[last]
            self.ops.append(RowOp("move", last, hole, req_id))
            last -= 1
        del self._req_ids[num_reqs:]

    def swap_states(self, i1: int, i2: int) -> None:
        id1, id2 = self._req_ids[i1], self._req_ids[i2]
        assert id1 is not None and id2 is not None
        self._req_ids[i1], self._req_ids[i2] = id2, id1
        self.req_id_to_index[id1], self.req_id_to_index[id2] = i2, i1
        for arr in (
            self.num_prompt_tokens,
            self.num_computed_tokens_cpu,
            self.num_accepted_tokens_cpu,
        ):
            arr[i1], arr[i2] = arr[i2], arr[i1]
        self.ops.append(RowOp("swap", i1, i2, id1))

    def end_step(self) -> None:
        """``batch_update_builder.reset()`` (called from ``refresh_metadata``)."""
        self._removed.clear()
        self._removed_sorted = False


def region_of(
    num_scheduled: np.ndarray, num_computed: np.ndarray, num_prompt: np.ndarray, threshold: int
) -> np.ndarray:
    """0 decode, 1 short_extend, 2 long_extend, 3 prefill (attention/backends/utils.py L663-681).

    "prefill" means no context (num_computed == 0) whatever is scheduled.
    """
    return _regions(num_computed < num_prompt, num_scheduled > threshold, num_computed <= 0)


def _regions(extend: np.ndarray, long_extend: np.ndarray, no_context: np.ndarray) -> np.ndarray:
    # No context -> 3; else above the threshold -> 2; else prompt not done -> 1; else 0:
    # later assignments win (this runs every step a batch is not all decodes).
    regions = extend.astype(np.int32)
    regions[long_extend] = 2
    regions[no_context] = 3
    return regions


def reorder_batch_to_split_decodes_and_prefills(
    batch: InputBatchRows,
    num_scheduled_tokens: dict[str, int] | np.ndarray,
    decode_threshold: int,
) -> bool:
    """vLLM's reorder: decode < short_extend < long_extend < prefill, by cycle-following
    ``swap_states``. Each cycle keeps a fixed pivot row, so its swaps are (p, d1), (p, d2),
    ...; the order inside a region is not kept. Returns whether the batch changed.

    ``num_scheduled_tokens``: by request id (vLLM's dict), or an array by row (faster).
    """
    n = batch.num_reqs
    if isinstance(num_scheduled_tokens, np.ndarray):
        sched = num_scheduled_tokens[:n]
    else:
        sched = np.array([num_scheduled_tokens[r] for r in batch.req_ids], dtype=np.int64)
    computed, prompt = batch.num_computed_tokens_cpu[:n], batch.num_prompt_tokens[:n]
    cnz = np.count_nonzero
    extend, long_extend, no_context = computed < prompt, sched > decode_threshold, computed <= 0
    if n == 0 or (cnz(long_extend) == 0 and cnz(no_context) == 0 and cnz(extend) == 0):
        return False  # every row decodes: one region, nothing to move (the common step)
    regions = _regions(extend, long_extend, no_context)  # = region_of(...)
    if cnz(regions[1:] < regions[:-1]) == 0:  # already sorted
        return False
    # Rows whose region differs from the sorted order's (orig), and the same rows ordered by
    # region, stably (argsort kind="stable" of their regions). Most rows decode (region 0):
    # the sorted order is n - len(other) zeros, then the other rows' regions sorted.
    regs = regions.tolist()
    other = np.flatnonzero(regions).tolist()
    n0 = n - len(other)
    tail = sorted(regs[i] for i in other)  # the sorted regions of rows n0..n-1
    orig = [i for i in other if i < n0]
    orig += [n0 + j for j, t in enumerate(tail) if regs[n0 + j] != t]
    src_indices = sorted(orig, key=regs.__getitem__)
    src_dest = dict(zip(src_indices, orig, strict=True))
    for src in list(src_dest):  # vLLM iterates the dict while updating values only
        dst = src_dest[src]
        while src != dst:
            batch.swap_states(src, dst)
            nxt = src_dest.get(dst, dst)
            src_dest[dst] = dst
            dst = nxt
    return True
