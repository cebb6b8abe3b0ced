"""Why a scored read disagreed: landings the instrument's polls could not see.

``vllm-run`` places a step's landing by ``event.query()`` before and after each row op, so it
sees the copy's *event*, and an op as one indivisible moment. Two things fall between those
polls, and each reproduces a disagreement without touching the model:

``bytes before event``
    The copy's bytes were visible before its event said so (measured on the device:
    ``python -m gpu_check event-lag``, docs/timing.md). An op that wrote the buffer after the
    bytes landed but before the event completed is placed *after* the landing by the polls.
    The test: the landing one op earlier than the polls put it, with that op a writing op
    (add, condense move, swap), reproduces every scored read of the step.
``torn swap``
    ``swap_states`` swaps a row pair as ``a[i1], a[i2] = a[i2], a[i1]``: both loads, then both
    stores. Bytes landing between them leave the pair holding their pre-copy values swapped,
    over the copy. The test: the polls bracket the landing inside a swap (poll before false,
    after true), the policy's copy writes the buffer, and that torn swap reproduces every
    scored read of the step.

Anything else is ``unexplained``. The agreement's counts do not change: a disagreement stays one,
with the placement that reproduces it named beside it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.model.counts_buffer import apply_step
from sim.model.policies import Policy
from sim.model.verdict import at_seen_landing, judge

WRITING = ("add", "move", "swap")


def _scored_match(policy: Policy, cpu, gpu, group: pd.DataFrame) -> bool:
    rows = group["row"].to_numpy()
    ok = np.ones(len(rows), dtype=bool)
    if policy.reads_buffer:
        ok &= np.asarray(cpu)[rows] == group["cpu_value"].to_numpy()
    if not policy.consumes_cpu_value:
        ok &= np.asarray(gpu)[rows] == group["gpu_value"].to_numpy()
    return bool(ok.all())


def _at(policy: Policy, counts, cur, before: np.ndarray, pos: int):
    return at_seen_landing(policy, counts, cur, before, before, pos)


def torn_swap(policy: Policy, counts: np.ndarray, cur, before: np.ndarray, j: int):
    """(cpu, gpu) of the step when the copy lands between swap ``cur.ops[j]``'s loads and its
    stores. Landing just before the swap with the pair's rows carrying their pre-copy values is
    the same buffer (the swap then stores those values crossed); the truth is the copy's."""
    op = cur.ops[j]
    buf_j = apply_step(np.asarray(before, dtype=np.int64), list(cur.ops[:j]), None, 0)
    torn = np.asarray(counts, dtype=np.int64).copy()
    for r in (op.a, op.b):
        if 0 <= r < len(torn):
            torn[r] = buf_j[r]
    v_torn = _at(policy, torn, cur, before, j)
    v_true = _at(policy, counts, cur, before, j)
    gpu = judge(policy, v_torn.cpu, v_true.true, v_true.participating)[0]
    return v_torn.cpu, np.asarray(gpu)


def explain_step(
    policy: Policy, prev, cur, before: np.ndarray, lo: int, hi: int, group: pd.DataFrame
) -> str:
    """The kind of landing that reproduces every scored read of the step (see the module)."""
    counts = prev.accepted
    ops = cur.ops
    if 1 <= lo <= len(ops) and ops[lo - 1].kind in WRITING:
        v = _at(policy, counts, cur, before, lo - 1)
        if _scored_match(policy, v.cpu, v.gpu, group):
            return "bytes before event"
    if not policy.dma_into_private:
        for j in range(max(lo, 0), min(hi, len(ops))):
            if ops[j].kind == "swap":
                cpu, gpu = torn_swap(policy, counts, cur, before, j)
                if _scored_match(policy, cpu, gpu, group):
                    return "torn swap"
    return "unexplained"
