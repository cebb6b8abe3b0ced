"""The verdict: what step N+1's reads return, given where step N's counts' copy landed.

The one oracle of the project (TigerBeetle's state checker is the model): both timing tiers,
``sim check``, the timeline, the hardware replay and the vLLM agreement ask this module; none
judges a read itself. It owns where the copy lands (:func:`land_copy`), which landing
positions a policy can see (:func:`landing_positions`), the reads of one step at one landing
(:func:`at_landing`), the per-read judgement (:func:`judge`: consumed value, CPU-wrong,
GPU-wrong, on one step's reads or on a (reads, points) array), the participating rows, the
hazard kind (:class:`HazardKind`) and the margin, from landing positions or from times
(docs/glossary.md defines the words; docs/mechanism.md §11 the oracle).

A landing position ``p`` in ``0..len(ops)`` means the copy lands right before ``ops[p]``
(``len(ops)``: after the last op); :data:`NOT_LANDED` (-1) means not before the read (it lands
right after it, before the next step's operations). In time, the copy lands before op ``i``
iff ``land_ns <= write_ns[i]`` (the GPU side wins a tie, :mod:`sim.model.cuda`).

Where the copy lands: the runner-private buffer always receives it (nothing else writes it,
and only a policy that reads it looks at it); the pinned InputBatch buffer receives it unless
the policy's D2H targets the private one (:attr:`Policy.dma_into_private`, #51599, #13865).
The timing tiers simplify here and land it in both (see :mod:`sim.model.policies`); no read
of any policy depends on that.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sim.model.counts_buffer import apply_step
from sim.model.input_batch import RowOp
from sim.model.policies import Policy

NOT_LANDED = -1
WRITE_OPS = ("add", "move", "swap")  # the row ops that write B (remove writes nothing)
# A close call: step N's copy lands at most this little before a writing row op or the read
# (0 <= margin_ns < CLOSE_CALL_NS), so a timing error of that size could flip the verdict. Strictly
# within, in integer ns: the meaning the vLLM-side measurement (gpu_check.vllm.agreement and
# export, margins of whole nanoseconds from vLLM's own `_update_states`) gave it first; the
# replay comparison (sim.hardware.compare) shares it.
CLOSE_CALL_NS = 100_000


def is_close_call(margin_ns):
    """Whether a landing margin (ns; an int or an array or Series of them) is a close call."""
    return (margin_ns >= 0) & (margin_ns < CLOSE_CALL_NS)


class HazardKind(enum.StrEnum):
    """The kind of a wrong read; the values are the strings of reads.parquet's ``kind``."""

    NONE = ""
    UNLANDED = "unlanded"  # read before step N's copy landed
    OWNERSHIP = "ownership"  # landed after a writing row op (#45100)
    DOUBLE_PERMUTE = "double-permute"  # landed before every writing row op (#53919)


KINDS: tuple[str, ...] = tuple(k.value for k in HazardKind)  # kind codes 0..3, in this order
KIND_CODE = {k: i for i, k in enumerate(HazardKind)}
HAZARD_KINDS: tuple[str, ...] = KINDS[1:]  # the kinds a wrong read can have


class StepRows(Protocol):
    """What a verdict needs of step N+1 (a :class:`sim.model.schedule.StepRecord` has it)."""

    @property
    def ops(self) -> Sequence[RowOp]: ...
    @property
    def prev_positions(self) -> np.ndarray: ...  # step N+1 row -> step N row, -1 for a new row
    @property
    def prev_num_draft_tokens(self) -> np.ndarray: ...  # by step N row
    @property
    def num_reqs(self) -> int: ...


@dataclass(frozen=True)
class Transition:
    """A :class:`StepRows` from bare arrays (the checker's search builds no StepRecord)."""

    ops: Sequence[RowOp]
    prev_positions: np.ndarray
    prev_num_draft_tokens: np.ndarray
    num_reqs: int


# -- where the copy lands, and where it can ----------------------------------------------------
def land_copy(policy: Policy, buf: np.ndarray, private: np.ndarray, counts: np.ndarray) -> None:
    """Step N's counts land: ``private[:n] = counts`` always, ``buf[:n] = counts`` unless the
    policy's D2H targets the private buffer. In place; ``buf``/``private`` may be
    (rows, points) arrays with ``counts`` broadcast over points."""
    k = len(counts)
    private[:k] = counts
    if not policy.dma_into_private:
        buf[:k] = counts


def landing_positions(policy: Policy, n_ops: int, async_scheduling: bool = True) -> list[int]:
    """Every landing position a policy can see among ``n_ops`` row ops, the usual one (after
    every op) first: a policy that waits before the moves, and async scheduling off (the copy
    landed before ``_update_states``), see only 0; a policy that never waits also sees
    :data:`NOT_LANDED`."""
    if not async_scheduling or policy.waits_before_moves:
        return [0]
    out = list(range(n_ops, -1, -1))
    return out if policy.waits else [*out, NOT_LANDED]


def seen_landing(policy: Policy, land_pos: int, n_ops: int) -> int:
    """The landing a policy's read sees when the copy landed at ``land_pos`` (observed: -1 is
    "not landed at the read"): a wait before the moves puts it at 0, a wait before the read
    after the last op at the latest."""
    if policy.waits_before_moves:
        return 0
    if land_pos < 0 and policy.waits:
        return n_ops
    return land_pos


def landing_position(land_ns: int, read_ns: int, write_ns: Sequence[int]) -> int:
    """The landing position of a copy that landed at ``land_ns`` (< 0: never) among ops whose
    stores happened at ``write_ns``, with the read at ``read_ns``."""
    if land_ns < 0 or land_ns > read_ns:
        return NOT_LANDED
    return sum(1 for t in write_ns if t < land_ns)


# -- the kind and the margin ----------------------------------------------------------------------
def hazard_kind(ops: Sequence[RowOp], land_pos: int) -> HazardKind:
    """The kind a wrong read of the step gets, from the landing position."""
    if land_pos < 0:
        return HazardKind.UNLANDED
    if any(op.kind in WRITE_OPS for op in ops[:land_pos]):
        return HazardKind.OWNERSHIP
    return HazardKind.DOUBLE_PERMUTE


def kind_and_margin(land_ns: int, read_ns: int, write_ns: Sequence[int]) -> tuple[HazardKind, int]:
    """The kind, from times, and the margin: the distance from the landing to the nearest
    writing row op's store (no writing op: to the read); for ``unlanded`` the landing minus
    the read (positive), -1 if it never landed. ``write_ns``: the writing ops' stores only."""
    if land_ns < 0 or land_ns > read_ns:
        return HazardKind.UNLANDED, (land_ns - read_ns if land_ns >= 0 else -1)
    kind = HazardKind.OWNERSHIP if any(t < land_ns for t in write_ns) else HazardKind.DOUBLE_PERMUTE
    return kind, min((abs(land_ns - t) for t in write_ns), default=read_ns - land_ns)


def kind_codes(
    land_ns: np.ndarray, read_ns: np.ndarray, write_ns: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`kind_and_margin`'s kind over points, as codes into :data:`KINDS`, and whether
    each point is unlanded. ``write_ns``: the writing ops' stores per point, in op order (so
    the first is the earliest)."""
    unlanded = (land_ns < 0) | (land_ns > read_ns)
    landed: np.ndarray | int
    if not write_ns:
        landed = KIND_CODE[HazardKind.DOUBLE_PERMUTE]
    else:
        landed = np.where(
            write_ns[0] < land_ns,
            KIND_CODE[HazardKind.OWNERSHIP],
            KIND_CODE[HazardKind.DOUBLE_PERMUTE],
        )
    return np.where(unlanded, KIND_CODE[HazardKind.UNLANDED], landed), unlanded


def margins(land_ns, read_ns, write_ns: Sequence[np.ndarray], unlanded: np.ndarray) -> np.ndarray:
    """:func:`kind_and_margin`'s margin over points (``unlanded`` from :func:`kind_codes`)."""
    if not write_ns:
        landed = read_ns - land_ns
    else:
        landed = np.min([np.abs(land_ns - t) for t in write_ns], axis=0)
    return np.where(unlanded, np.where(land_ns >= 0, land_ns - read_ns, -1), landed)


# -- the judgement of reads -------------------------------------------------------------------
def participating(prev_num_draft_tokens: np.ndarray, prev_rows: np.ndarray) -> np.ndarray:
    """Rows the correction kernel repairs: the read's step-N row had drafts
    (``prev_num_draft_tokens[prev_pos] > 0``, spec_decode/utils.py L565-595)."""
    return np.asarray(prev_num_draft_tokens)[prev_rows] > 0


def judge(policy: Policy, cpu, true, participating: np.ndarray):
    """(consumed value, CPU-wrong, GPU-wrong) of reads whose CPU value is ``cpu``; elementwise,
    so ``cpu`` may be one step's reads or a (reads, points) array (``true`` and
    ``participating`` then (reads, 1))."""
    gpu = policy.gpu_consumed(cpu, true, participating)
    return gpu, policy.cpu_wrong(cpu, true), np.asarray(gpu) != true


def consumed_wrong(policy: Policy, cpu, gpu, true, consumed: np.ndarray) -> np.ndarray:
    """Whether each read's consumed count is wrong: align's family restores the GDN state from
    the CPU value itself (every read); the others consume the GPU value, on rows that consume
    (what vLLM's measured runs are scored on, gpu_check.vllm.agreement and export_v2)."""
    if policy.consumes_cpu_value:
        return policy.cpu_wrong(cpu, true)
    return np.asarray(consumed) & (np.asarray(gpu) != true)


def prompt_state_lost(gpu_wrong, prev_drafts, gpu):
    """A wrong count at the first speculative step (no drafts at step N) restores the GDN
    state from a slot the prefill never wrote."""
    return gpu_wrong & (prev_drafts == 0) & (gpu > 1)


@dataclass(frozen=True)
class StepVerdict:
    """Step N+1's reads at one landing, per row of step N+1 (``read`` marks the rows that
    consume a previous count; the other rows are new, true count 1, and judged nothing)."""

    land_pos: int
    kind: HazardKind  # the kind a wrong read of this step gets
    read: np.ndarray  # bool
    prev_rows: np.ndarray  # step N row of each row (-1: new)
    true: np.ndarray
    participating: np.ndarray
    cpu: np.ndarray  # what the CPU put into num_accepted_tokens
    gpu: np.ndarray  # what the GDN kernel consumes
    cpu_wrong: np.ndarray
    gpu_wrong: np.ndarray
    buffer: np.ndarray  # the pinned buffer after the step (a late copy landed after the read)
    private: np.ndarray

    @property
    def rows(self) -> np.ndarray:
        return np.flatnonzero(self.read)


def at_landing(
    policy: Policy,
    counts: np.ndarray | None,
    cur: StepRows,
    buffer: np.ndarray,
    private: np.ndarray,
    land_pos: int,
) -> StepVerdict:
    """Step N+1's row ops on ``buffer``/``private`` (as step N's read left them) with step N's
    ``counts`` (None: no copy in flight) landing at ``land_pos``, then the policy's read.
    Inputs are not modified."""
    buf = np.asarray(buffer, dtype=np.int64)
    priv = np.asarray(private, dtype=np.int64).copy()
    ops = list(cur.ops)
    into_buf = None if counts is None or policy.dma_into_private else counts
    if land_pos >= 0:
        buf = apply_step(buf, ops, into_buf, land_pos)
        if counts is not None:
            priv[: len(counts)] = counts
    else:
        buf = apply_step(buf, ops, None, 0)
    n = cur.num_reqs
    pp = np.asarray(cur.prev_positions)[:n]
    cpu = np.asarray(policy.cpu_read(buf, priv, cur.prev_positions, n))
    if land_pos < 0 and counts is not None:  # lands right after the read
        land_copy(policy, buf, priv, counts)
    read = pp >= 0 if counts is not None else np.zeros(n, dtype=bool)
    true = np.ones(n, dtype=np.int64)
    part = np.zeros(n, dtype=bool)
    if read.any():
        assert counts is not None
        src = pp[read]
        true[read] = np.asarray(counts)[src]
        part[read] = participating(cur.prev_num_draft_tokens, src)
    gpu, cpu_wrong, gpu_wrong = judge(policy, cpu, true, part)
    gpu = np.asarray(gpu)
    return StepVerdict(
        land_pos=land_pos,
        kind=hazard_kind(ops, land_pos),
        read=read,
        prev_rows=pp,
        true=true,
        participating=part,
        cpu=cpu,
        gpu=gpu,
        cpu_wrong=np.asarray(cpu_wrong) & read,
        gpu_wrong=gpu_wrong & read,
        buffer=buf,
        private=priv,
    )


def at_seen_landing(
    policy: Policy,
    counts: np.ndarray | None,
    cur: StepRows,
    buffer: np.ndarray,
    private: np.ndarray,
    land_pos: int,
) -> StepVerdict:
    """:func:`at_landing` where the copy was observed to land at ``land_pos`` (-1: not before
    the read), placed where the policy's read sees it (:func:`seen_landing`)."""
    seen = seen_landing(policy, land_pos, len(cur.ops))
    return at_landing(policy, counts, cur, buffer, private, seen)
