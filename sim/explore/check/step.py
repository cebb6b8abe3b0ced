"""The bounded check's step evaluation: one step transition at one landing, by the verdict."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.errors import SpecraceError
from sim.model.policies import Policy
from sim.model.verdict import Transition, at_landing, landing_positions

# -- the evaluator ----------------------------------------------------------------------------

State = tuple[tuple[int, ...], tuple[int, ...]]  # (pinned buffer B, private buffer)


@dataclass(frozen=True)
class Wrong:
    row: int
    prev_row: int
    true: int
    cpu: int
    gpu: int


@dataclass(frozen=True)
class Outcome:
    landing: int
    state: State | None  # None: the interleaving ended in a counterexample
    kind: str
    wrong: tuple[Wrong, ...]  # GPU-consumed wrong reads
    repaired: int  # CPU-wrong reads the correction kernel repaired


def landings(policy: Policy, async_scheduling: bool, ops) -> list[tuple[int, int]]:
    """:func:`sim.model.verdict.landing_positions` as (position, how many positions it stands
    for), the usual one (after every op) first. Positions only a ``remove`` apart (it writes
    nothing) give the same buffer and kind: one evaluation, the later position speaking."""
    out: list[tuple[int, int]] = []
    for p in landing_positions(policy, len(ops), async_scheduling):
        if out and p >= 0 and ops[p].kind == "remove":
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


def _verdict(policy, state, ops, dma, prev_positions, prev_num_draft_tokens, num_reqs, landing):
    cur = Transition(ops, prev_positions, prev_num_draft_tokens, num_reqs)
    return at_landing(policy, dma, cur, np.asarray(state[0]), np.asarray(state[1]), landing)


def _read(policy, state, ops, dma, prev_positions, prev_num_draft_tokens, num_reqs, landing):
    """The buffers after the step and the read; per read row: source row, true, CPU, GPU,
    CPU-wrong, from :func:`sim.model.verdict.at_landing` (None: nothing read)."""
    v = _verdict(policy, state, ops, dma, prev_positions, prev_num_draft_tokens, num_reqs, landing)
    rows = v.rows
    if not rows.size:
        return v.buffer, v.private, None
    r = (rows, v.prev_rows[rows], v.true[rows], v.cpu[rows], v.gpu[rows], v.cpu_wrong[rows])
    return v.buffer, v.private, r


def evaluate(
    policy: Policy,
    state: State,
    ops,
    dma: np.ndarray | None,
    prev_positions: np.ndarray,
    prev_num_draft_tokens: np.ndarray,
    num_reqs: int,
    landing: int,
) -> Outcome:
    """One step's row operations with step n-1's copy landing at ``landing``, then the read."""
    v = _verdict(policy, state, ops, dma, prev_positions, prev_num_draft_tokens, num_reqs, landing)
    wrong = tuple(
        Wrong(int(r), int(v.prev_rows[r]), int(v.true[r]), int(v.cpu[r]), int(v.gpu[r]))
        for r in np.flatnonzero(v.gpu_wrong)
    )
    repaired = int((v.cpu_wrong & ~v.gpu_wrong).sum())
    new_state = (
        None if wrong else (tuple(int(x) for x in v.buffer), tuple(int(x) for x in v.private))
    )
    return Outcome(landing, new_state, v.kind.value, wrong, repaired)


TAG = 1000  # symbolic count of step n-1's row q: TAG + q (real counts are <= 16)


def all_counts(bounds: tuple[int, ...]) -> np.ndarray:
    """Every count tuple (1 <= c[q] <= bounds[q]) as rows of a matrix, ascending."""
    if not bounds:
        return np.zeros((1, 0), dtype=np.int64)
    grids = np.meshgrid(*(np.arange(1, b + 1) for b in bounds), indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)


def symbolic_masks(policy, state, ops, n_prev, prev_positions, pnd, num_reqs, landing, counts):
    """GPU-wrong and repaired-CPU-wrong per count tuple (rows of ``counts``), from one run of the
    step on symbolic counts (tags): a read returns a tag (another row's count) or a number.

    Valid for a policy that only copies counts (never computes with them); every result is
    verified against a concrete run by the caller."""
    tags = np.arange(TAG, TAG + n_prev, dtype=np.int64)
    _buf, _priv, r = _read(policy, state, ops, tags, prev_positions, pnd, num_reqs, landing)
    m = len(counts)
    if r is None:
        return np.zeros(m, dtype=bool), np.zeros(m, dtype=np.int64), []
    rows, src, _true, cpu_r, gpu, cpu_wrong = r
    fail = np.zeros(m, dtype=bool)
    repaired = np.zeros(m, dtype=np.int64)
    per_row = []
    for i in range(len(rows)):
        t = counts[:, src[i]]
        g = _differs(gpu[i], t, counts, n_prev)
        c = _differs(cpu_r[i], t, counts, n_prev) & bool(cpu_wrong[i])
        fail |= g
        repaired += c & ~g
        per_row.append(g)
    return fail, repaired, per_row


def _differs(value: int, true: np.ndarray, counts: np.ndarray, n_prev: int) -> np.ndarray:
    value = int(value)
    if TAG <= value < TAG + n_prev:
        return counts[:, value - TAG] != true
    if value >= TAG:
        raise SpecraceError(f"symbolic evaluation: unexpected tag {value}")
    return true != value
