"""The vector tier's reads: each step's verdicts (sim.model.verdict) over timing points,
kept as the reads table or as counts per point.

:class:`Accumulator` judges a step's (reads, points) array as the step ends: the dense path
runs the policy's functions on every pair, the sparse one only on the wrong CPU values, where
that is exact and cheaper. :class:`OnePointAccumulator` is the same for one timing point
(``sim risk``, ``sim run --stream``): it remembers each step's reads and judges a batch of
steps in one call, because at one point the per-step numpy calls of the other cost more than
the work. The two give the same table and the same counts (tests/sim/model/test_vector.py
holds a point run alone to the same point among others).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from sim.model.policies import Policy
from sim.model.reads import READ_COLUMNS, judged_reads
from sim.model.schedule import StepRecord
from sim.model.verdict import (
    KIND_CODE,
    KINDS,  # kind codes 0..3
    judge,
    kind_and_margin,
    kind_codes,
    margins,
    participating,
    prompt_state_lost,
)

READ_COLUMNS_POINTS = {"point": "int32", **READ_COLUMNS}  # reads.parquet with the point index
# READ_COLUMNS_POINTS as Arrow types, as pa.Table.from_pandas converts them (no metadata)
ARROW_READS_POINTS = pa.Table.from_pandas(
    pd.DataFrame({c: pd.Series(dtype=t) for c, t in READ_COLUMNS_POINTS.items()}),
    preserve_index=False,
).schema.remove_metadata()


def _nonzero_2d(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.nonzero`` of a C-contiguous 2-D bool mask with few True entries, in the same
    (row-major) order: the mask is scanned eight bytes at a time, and only the words that
    hold a True are looked into (several times faster on a sparse mask)."""
    flat = mask.reshape(-1)
    words = np.zeros(0, dtype=np.intp)
    if flat.size % 8 == 0 and mask.flags.c_contiguous:
        words = np.flatnonzero(flat.view(np.uint64))
    if flat.size % 8 or not mask.flags.c_contiguous or words.size * 64 > flat.size:
        rows, cols = np.nonzero(mask)  # not sparse, or not viewable as words
        return rows, cols
    w_i, b_i = np.nonzero(flat.reshape(-1, 8)[words])
    return np.divmod(words[w_i] * 8 + b_i, mask.shape[1])


def _count(mask: np.ndarray) -> np.ndarray:
    """True entries per point of a (reads, points) mask: a row-wise sum in the narrowest
    dtype that cannot overflow (count_nonzero along an axis casts every element to intp)."""
    dtype = np.uint8 if len(mask) < 256 else np.int64
    return np.add.reduce(mask.view(np.uint8), axis=0, dtype=dtype)


class Accumulator:
    """The per-read verdicts of each step (sim.model.reads), kept as a table or as counts."""

    def __init__(self, pol: Policy, P: int, keep_reads: bool) -> None:
        self.pol = pol
        self.steps = 0
        self.tokens = 0  # accepted tokens of rows that sample, over all steps
        self.P = P
        self.keep = keep_reads
        self.parts: list[dict[str, np.ndarray]] = []
        self.n_reads = 0
        self.cpu_wrong = np.zeros(P, np.int64)
        self.gpu_wrong = np.zeros(P, np.int64)
        self.lost = np.zeros(P, np.int64)
        self.by_kind = np.zeros((len(KINDS), P), np.int64)
        self.gpu_kind = np.zeros((len(KINDS), P), np.int64)  # GPU-wrong reads by kind
        self.gpu_steps = np.zeros(P, np.int64)  # steps with a GPU-wrong read
        self.points = np.arange(P)
        self.req_index: dict[str, int] = {}
        self.corrupted: list[np.ndarray] = []  # (point, request index) pairs, GPU-wrong

    def judged(self) -> bool:
        """Judge what is still pending (here: nothing, every step is judged as it ends);
        whether reads are kept for :meth:`table`."""
        return bool(self.parts)

    def add_step(self, rec: StepRecord) -> None:
        self.steps += 1
        self.tokens += int(rec.accepted[~rec.discard].sum())

    def step(self, n, cur, prev, cpu_all, land, read, writes: list[np.ndarray]) -> None:
        pp = cur.prev_positions
        rows = np.flatnonzero(pp >= 0)
        if rows.size == 0:
            return
        P, nr = self.P, rows.size
        src = pp[rows]
        true = prev.accepted[src]
        prev_drafts = prev.drafts[src]
        part = participating(cur.prev_num_draft_tokens, src)
        # The step's hazard kind, per point (the verdict's); the margin only when kept.
        kind, unlanded = kind_codes(land, read, writes)
        kind = np.broadcast_to(kind, (P,))
        self.n_reads += nr
        cpu_rows = cpu_all if nr == len(cpu_all) else cpu_all[rows]
        if not self.keep and self._sparse_step(cur, rows, cpu_rows, true, part, prev_drafts, kind):
            return
        # Dense: every (read, point) through the policy's functions, in int8 (counts are
        # 1..k+1 <= 16; a narrow dtype is what makes 10^4 points cheap).
        cpu = cpu_rows.astype(np.int8)
        true_c = true.astype(np.int8)[:, None]
        gpu, cpu_wrong, gpu_wrong = judge(self.pol, cpu, true_c, part[:, None])
        gpu = np.broadcast_to(gpu, (nr, P))
        cpu_wrong = np.asarray(cpu_wrong)
        if cpu_wrong.shape != (nr, P):  # a policy that reads no buffer: one answer per read
            cpu_wrong = np.broadcast_to(cpu_wrong.reshape(nr, -1), (nr, P))
        gpu_wrong = np.ascontiguousarray(np.broadcast_to(gpu_wrong, (nr, P)))
        wrong = cpu_wrong | gpu_wrong
        first = np.flatnonzero(prev_drafts == 0)  # only these can lose the prompt state
        lost_first = gpu_wrong[first] & (gpu[first] > 1)
        self.cpu_wrong += _count(cpu_wrong)
        n_gpu_wrong = _count(gpu_wrong)
        self.gpu_wrong += n_gpu_wrong
        self.lost += _count(lost_first)
        n_wrong = _count(wrong)
        self.by_kind[kind, self.points] += n_wrong  # one (kind, point) per point: no repeats
        self.gpu_kind[kind, self.points] += n_gpu_wrong
        self.gpu_steps += n_gpu_wrong > 0
        if n_gpu_wrong.any():
            r_idx, p_idx = np.nonzero(gpu_wrong)
            self._corrupt(cur, rows[r_idx], p_idx)
        if self.keep:
            margin = margins(land, read, writes, unlanded)
            lost = np.zeros((nr, P), dtype=bool)
            lost[first] = lost_first
            # Point-major, so a point's reads are contiguous as in the SimPy tier.
            self.parts.append(
                {
                    "point": np.repeat(np.arange(P), nr),
                    "step": np.full(P * nr, n),
                    "req_id": np.tile(np.asarray(cur.req_ids, dtype=object)[rows], P),
                    "row": np.tile(rows, P),
                    "prev_row": np.tile(src, P),
                    "prev_drafts": np.tile(prev_drafts, P),
                    "true_count": np.tile(true, P),
                    "cpu_value": cpu.T.ravel(),
                    "gpu_value": gpu.T.ravel(),
                    "cpu_wrong": cpu_wrong.T.ravel(),
                    "gpu_wrong": gpu_wrong.T.ravel(),
                    "kind": np.asarray(KINDS, dtype=object)[np.where(wrong, kind, 0).T.ravel()],
                    "gdn_slot": gpu.T.ravel().astype(np.int32) - 1,
                    "prompt_state_lost": lost.T.ravel(),
                    "margin_ns": np.repeat(margin, nr),
                }
            )

    SPARSE_MAX = 0.05  # above this fraction of wrong CPU values the dense path is cheaper

    def _sparse_step(self, cur, rows, cpu_rows, true, part, prev_drafts, kind) -> bool:
        """The step's counts from its wrong CPU values only, if that is exact and cheaper.

        The policy functions are elementwise; where a CPU value equals the truth a policy
        (checked on this step's rows) consumes the truth and calls nothing wrong, so only the
        mismatched (read, point) pairs can be wrong. Returns False to take the dense path.
        """
        P, nr = self.P, len(rows)
        _g, probe_cpu_wrong, probe_gpu_wrong = judge(self.pol, true, true, part)
        if np.asarray(probe_gpu_wrong).any() or np.asarray(probe_cpu_wrong).any():
            return False
        mis = cpu_rows != true.astype(cpu_rows.dtype)[:, None]  # int8: no widening
        n_mis = int(np.count_nonzero(mis))
        if n_mis > self.SPARSE_MAX * nr * P:
            return False
        if n_mis == 0:
            return True
        r_idx, p_idx = _nonzero_2d(mis)
        c, t = cpu_rows[r_idx, p_idx], true[r_idx]
        g, cw, gw = judge(self.pol, c, t, part[r_idx])
        g = np.asarray(g)
        cw = np.broadcast_to(np.asarray(cw), (n_mis,))
        lost = prompt_state_lost(gw, prev_drafts[r_idx], g)
        self.cpu_wrong += np.bincount(p_idx[cw], minlength=P)
        n_gw = np.bincount(p_idx[gw], minlength=P)
        self.gpu_wrong += n_gw
        self.gpu_kind[kind, self.points] += n_gw
        self.gpu_steps += n_gw > 0
        self.lost += np.bincount(p_idx[lost], minlength=P)
        self.by_kind[kind, self.points] += np.bincount(p_idx[cw | gw], minlength=P)
        if gw.any():
            self._corrupt(cur, rows[r_idx[gw]], p_idx[gw])
        return True

    def _corrupt(self, cur, rows: np.ndarray, points: np.ndarray) -> None:
        """Remember (point, request) of GPU-wrong reads: corrupted_requests counts them."""
        ids = [self.req_index.setdefault(cur.req_ids[r], len(self.req_index)) for r in rows]
        self.corrupted.append(np.stack([points, np.asarray(ids, dtype=np.int64)], axis=1))

    def table(self) -> pd.DataFrame:
        """The reads kept so far (and forget them)."""
        if not self.parts:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in READ_COLUMNS_POINTS.items()})
        cols = {c: np.concatenate([p[c] for p in self.parts]) for c in READ_COLUMNS_POINTS}
        self.parts = []
        order = np.argsort(cols["point"], kind="stable")  # (step, point, row) -> (point, ...)
        df = pd.DataFrame({c: v[order] for c, v in cols.items()})
        return df.astype(READ_COLUMNS_POINTS)

    def arrow_table(self) -> pa.Table:
        """:meth:`table` as an Arrow table: the same columns, order and values (pandas'
        ``string`` as ``large_string``, what ``pa.Table.from_pandas`` makes of it, with no
        pandas metadata), built without pandas (and forget them). A streamed run writes these:
        building the DataFrame and converting it back cost as much as the Parquet write."""
        if not self.parts:
            return ARROW_READS_POINTS.empty_table()
        cols = {c: np.concatenate([p[c] for p in self.parts]) for c in READ_COLUMNS_POINTS}
        self.parts = []
        point = cols["point"]
        order = None if self.P == 1 else np.argsort(point, kind="stable")
        arrays = []
        for f in ARROW_READS_POINTS:
            v = cols[f.name] if order is None else cols[f.name][order]
            if pa.types.is_large_string(f.type):
                arrays.append(pa.array(v, type=f.type))
            else:
                arrays.append(pa.array(v.astype(f.type.to_pandas_dtype(), copy=False)))
        return pa.Table.from_arrays(arrays, schema=ARROW_READS_POINTS)

    def summaries(self, fwd_first, fwd_last, wait_sum, sim_time) -> list[dict]:
        steps, tokens = self.steps, self.tokens
        pairs = np.concatenate(self.corrupted) if self.corrupted else np.zeros((0, 2), np.int64)
        corrupted = np.zeros(self.P, np.int64)
        if len(pairs):
            uniq = np.unique(pairs, axis=0)
            corrupted = np.bincount(uniq[:, 0], minlength=self.P)
        order = sorted(range(1, len(KINDS)), key=lambda k: KINDS[k])  # as value_counts sorts
        cols = zip(
            self.by_kind.T.tolist(),
            self.cpu_wrong.tolist(),
            self.gpu_wrong.tolist(),
            self.lost.tolist(),
            corrupted.tolist(),
            np.asarray(fwd_first).tolist(),
            np.asarray(fwd_last).tolist(),
            np.asarray(wait_sum).tolist(),
            np.asarray(sim_time).tolist(),
            strict=True,
        )  # Python ints: one conversion per column, not per point
        out = []
        for kinds, cw, gw, lost, corrupt, first, last, wait, end in cols:
            step_ns = (last - first) / (steps - 1) if steps > 1 else 0.0
            out.append(
                {
                    "policy": self.pol.name,
                    "steps": steps,
                    "reads": int(self.n_reads),
                    "cpu_wrong": cw,
                    "gpu_wrong": gw,
                    "prompt_state_lost": lost,
                    "corrupted_requests": corrupt,
                    "by_kind": {KINDS[k]: kinds[k] for k in order if kinds[k]},
                    "mean_step_ns": round(step_ns, 1),
                    "tokens_per_s": round(tokens / max(end, 1) * 1e9, 1),
                    "event_wait_ns_mean": round(wait / steps, 1) if steps else 0.0,
                    "sim_time_ns": end,
                }
            )
        return out


class OnePointAccumulator(Accumulator):
    """:class:`Accumulator` at one timing point: each step's reads are remembered (the
    step's arrays, its kind and margin from Python ints) and judged :data:`BATCH` steps at a
    time, in one call of the policy's functions over all their reads."""

    BATCH = 4096

    def __init__(self, pol: Policy, keep_reads: bool) -> None:
        super().__init__(pol, 1, keep_reads)
        # per step: (n, step N+1's record, step N's record, its CPU values, kind code, margin)
        self._pending: list[tuple[int, StepRecord, StepRecord, np.ndarray, int, int]] = []

    def step(self, n, cur, prev, cpu_all, land, read, writes: list) -> None:
        kind, margin = kind_and_margin(land, read, writes)  # writes in op order: ascending
        # its reads' CPU values, (reads,) or (reads, 1); a copy: the buffer moves on before
        # the batch is judged
        cpu = np.array(cpu_all).reshape(-1)
        self._pending.append((n, cur, prev, cpu, KIND_CODE[kind], margin))
        if len(self._pending) >= self.BATCH:
            self.judged()

    def judged(self) -> bool:
        if self._pending:
            self._judge(self._pending)
            self._pending = []
        return bool(self.parts)

    def _judge(self, steps: list[tuple[int, StepRecord, StepRecord, np.ndarray, int, int]]) -> None:
        """The verdicts of ``steps``' reads (:func:`sim.model.reads.judged_reads`), in step
        order and row order within a step (the order :meth:`Accumulator.step` appends them at
        one point)."""
        cpu = np.concatenate([v for _, _, _, v, _, _ in steps])
        judged = judged_reads(self.pol, [p for _, _, p, _, _, _ in steps],
                              [c for _, c, _, _, _, _ in steps], cpu)  # fmt: skip
        if judged is None:
            return
        step_i, cols = judged
        cpu_wrong, gpu_wrong, lost = cols["cpu_wrong"], cols["gpu_wrong"], cols["prompt_state_lost"]
        wrong = cpu_wrong | gpu_wrong
        kind = np.array([k for _, _, _, _, k, _ in steps], dtype=np.int64)[step_i]
        n_kinds = len(KINDS)
        self.n_reads += len(step_i)
        self.cpu_wrong[0] += int(np.count_nonzero(cpu_wrong))
        self.gpu_wrong[0] += int(np.count_nonzero(gpu_wrong))
        self.lost[0] += int(np.count_nonzero(lost))
        self.by_kind[:, 0] += np.bincount(kind[wrong], minlength=n_kinds)
        self.gpu_kind[:, 0] += np.bincount(kind[gpu_wrong], minlength=n_kinds)
        self.gpu_steps[0] += len(np.unique(step_i[gpu_wrong]))
        if gpu_wrong.any():
            ids = [self.req_index.setdefault(r, len(self.req_index))
                   for r in cols["req_id"][gpu_wrong].tolist()]  # fmt: skip
            self.corrupted.append(np.stack([np.zeros(len(ids), np.int64), np.array(ids)], axis=1))
        if self.keep:
            self.parts.append({
                "point": np.zeros(len(step_i), np.int64),
                "step": np.array([n for n, _, _, _, _, _ in steps])[step_i],
                **cols,
                "kind": np.asarray(KINDS, dtype=object)[np.where(wrong, kind, 0)],
                "margin_ns": np.array([m for _, _, _, _, _, m in steps])[step_i],
            })  # fmt: skip

    def summaries(self, fwd_first, fwd_last, wait_sum, sim_time) -> list[dict]:
        self.judged()
        return super().summaries(fwd_first, fwd_last, wait_sum, sim_time)
