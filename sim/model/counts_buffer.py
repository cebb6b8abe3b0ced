"""The pinned buffer ``input_batch.num_accepted_tokens_cpu`` and everything that writes it.

Writers (docs/mechanism.md §2, §11): the D2H copy of step N's counts (``B[:n_N] = cnt_N``),
``add_request`` (``B[row] = 1``), a condense move (``B[dst] = B[src]``), ``swap_states``
(exchange) and the gather write-back of ``_prepare_inputs`` (``B[:n] = G``).
``remove_request`` writes nothing.

:func:`apply_step` replays one step's row operations with the DMA landing at a chosen
position among them; it returns the buffer and a write log, so what any later read sees
is computed, not guessed. The DMA is applied atomically (docs/timing.md §2 saw one
torn read of a 1 KiB copy in 5000: an approximation we keep).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.model.input_batch import RowOp


@dataclass(frozen=True, slots=True)
class BufferWrite:
    """One write into B: ``writer`` is dma | add | move | swap | gather; ``op_index`` is the
    position of the row operation in the step (-1 for the DMA and the gather)."""

    writer: str
    op_index: int
    row: int
    value: int


def apply_op(buf: np.ndarray, op: RowOp, index: int, log: list[BufferWrite] | None) -> None:
    if op.kind == "add":
        buf[op.a] = 1
        if log is not None:
            log.append(BufferWrite("add", index, op.a, 1))
    elif op.kind == "move":
        buf[op.b] = buf[op.a]
        if log is not None:
            log.append(BufferWrite("move", index, op.b, int(buf[op.b])))
    elif op.kind == "swap":
        buf[op.a], buf[op.b] = buf[op.b], buf[op.a]
        if log is not None:
            log.append(BufferWrite("swap", index, op.a, int(buf[op.a])))
            log.append(BufferWrite("swap", index, op.b, int(buf[op.b])))
    # remove: no write


def apply_dma(buf: np.ndarray, counts: np.ndarray, log: list[BufferWrite] | None) -> None:
    buf[: len(counts)] = counts
    if log is not None:
        log.extend(BufferWrite("dma", -1, r, int(v)) for r, v in enumerate(counts))


def apply_step(
    buf: np.ndarray,
    ops: list[RowOp],
    dma_counts: np.ndarray | None,
    land_before: int,
    log: list[BufferWrite] | None = None,
) -> np.ndarray:
    """Apply ``ops`` to a copy of ``buf`` with the DMA landing just before ``ops[land_before]``.

    ``land_before`` = 0: before the first op; ``len(ops)``: after the last; ``dma_counts``
    None: no DMA in this step (nothing in flight).
    """
    out = buf.copy()
    if not 0 <= land_before <= len(ops):
        raise ValueError(f"land_before={land_before} outside 0..{len(ops)}")
    for i, op in enumerate(ops):
        if i == land_before and dma_counts is not None:
            apply_dma(out, dma_counts, log)
        apply_op(out, op, i, log)
    if land_before == len(ops) and dma_counts is not None:
        apply_dma(out, dma_counts, log)
    return out


def gather(buf: np.ndarray, prev_positions: np.ndarray) -> np.ndarray:
    """The pre-fix gather of ``_prepare_inputs``: ``G[r] = B[prev_positions[r]]``, 1 if new."""
    new = prev_positions < 0
    g = buf[np.where(new, 0, prev_positions)]  # fancy indexing: already a copy
    g[new] = 1
    return g
