"""The per-read verdict: one row per (step, request) that consumed a previous step's count.

For request r in row ``row`` of step N+1 with ``prev_row = prev_positions[row] >= 0``
(docs/mechanism.md §11, "Oracle"):

- ``true_count`` = ``accepted_N[prev_row]``;
- ``cpu_value``: what the CPU put into ``num_accepted_tokens`` (a read of the pinned buffer,
  or 1 under ``fill1``); ``cpu_wrong`` only for policies that read the buffer;
- ``gpu_value``: what the GDN kernel consumes (§3 correction kernel or align's CPU value);
- ``kind`` of a CPU-wrong read: ``unlanded`` (read before step N's DMA landed),
  ``double-permute`` (landed before the first writing row op, so the moves permuted step N
  values and the gather permuted them again), ``ownership`` (landed between a write into a
  row and a later swap that carried the value to another request);
- ``gdn_slot`` = ``gpu_value - 1`` (the speculative slot the recurrent state is restored
  from); ``prompt_state_lost``: a wrong count at the first speculative step (no drafts at
  step N), so the state comes from a slot the prefill never wrote;
- ``margin_ns``: distance from the DMA landing to the nearest writing row op of step N+1
  (for ``unlanded``: landing minus read time, positive).

Each of these is :mod:`sim.model.verdict`'s judgement; this module only lays the SimPy tier's
reads out as a table.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pandas as pd

from sim.model.policies import Policy
from sim.model.schedule import Schedule, StepRecord
from sim.model.simulate import Model
from sim.model.verdict import HazardKind, judge, kind_and_margin, participating, prompt_state_lost

READ_COLUMNS = {
    "step": "int64",
    "req_id": "string",
    "row": "int32",
    "prev_row": "int32",
    "prev_drafts": "int32",
    "true_count": "int32",
    "cpu_value": "int32",
    "gpu_value": "int32",
    "cpu_wrong": "bool",
    "gpu_wrong": "bool",
    "kind": "string",
    "gdn_slot": "int32",
    "prompt_state_lost": "bool",
    "margin_ns": "int64",
}


def build_reads(schedule: Schedule, model: Model) -> pd.DataFrame:
    """One row per read, built over all steps at once (:func:`judged_reads`); only the step's
    kind and margin are per-step scalars."""
    steps = schedule.steps
    if len(steps) < 2:
        return _empty_reads()
    cpu = np.concatenate([model.timing[n].cpu_counts for n in range(1, len(steps))])
    judged = judged_reads(model.policy, steps[:-1], steps[1:], cpu)
    if judged is None:
        return _empty_reads()
    step_i, cols = judged
    kinds, margins = _step_kinds(model, len(steps))
    wrong = cols["cpu_wrong"] | cols["gpu_wrong"]
    cols = {
        "step": step_i + 1,
        **cols,
        "kind": np.where(wrong, kinds[step_i + 1], HazardKind.NONE.value),
        "margin_ns": margins[step_i + 1],
    }
    return pd.DataFrame(cols)[list(READ_COLUMNS)].astype(READ_COLUMNS)


def judged_reads(
    pol: Policy, prev: Sequence[StepRecord], cur: Sequence[StepRecord], cpu: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """The reads of steps ``cur`` (``cur[i]`` runs after ``prev[i]``), laid end to end: for
    each read the index ``i`` of its step, and its columns of :data:`READ_COLUMNS` but
    ``step``, ``kind`` and ``margin_ns`` (the step's own); None if no row reads. ``cpu``:
    every row's CPU value, the steps end to end. The per-read columns are gathers from the
    steps' arrays laid end to end, judged by :func:`sim.model.verdict.judge` in one call."""
    lens = np.array([len(c.prev_positions) for c in cur], dtype=np.int64)
    pp = np.concatenate([c.prev_positions for c in cur])
    read = pp >= 0
    if not read.any():
        return None
    step_i = np.repeat(np.arange(len(cur)), lens)[read]
    row = (np.arange(len(pp)) - np.repeat(np.cumsum(lens) - lens, lens))[read]
    src = pp[read]

    def at_src(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The arrays end to end, and where each read's ``src`` row of its step lies in them."""
        sizes = np.array([len(a) for a in arrays], dtype=np.int64)
        return np.concatenate(arrays), src + (np.cumsum(sizes) - sizes)[step_i]

    accepted, at = at_src([p.accepted for p in prev])
    true = accepted[at]
    # a row's drafts lie where its count does: the same offsets
    prev_drafts = np.concatenate([p.drafts for p in prev])[at]
    # prev_num_draft_tokens of cur[i] is indexed by prev[i]'s rows
    part = participating(*at_src([c.prev_num_draft_tokens for c in cur]))
    cpu = np.asarray(cpu)[read]
    gpu, cpu_wrong, gpu_wrong = judge(pol, cpu, true, part)
    gpu = np.asarray(gpu)
    req_ids = np.array(list(itertools.chain.from_iterable(c.req_ids for c in cur)), dtype=object)
    return step_i, {
        "req_id": req_ids[read],
        "row": row,
        "prev_row": src,
        "prev_drafts": prev_drafts,
        "true_count": true,
        "cpu_value": cpu,
        "gpu_value": gpu,
        "cpu_wrong": np.broadcast_to(np.asarray(cpu_wrong), cpu.shape),
        "gpu_wrong": np.asarray(gpu_wrong),
        "gdn_slot": gpu - 1,
        "prompt_state_lost": prompt_state_lost(gpu_wrong, prev_drafts, gpu),
    }


def _empty_reads() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in READ_COLUMNS.items()})


def _step_kinds(model: Model, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Per step N >= 1: the hazard kind a wrong read of N gets, and its margin."""
    kinds = np.full(n_steps, "", dtype=object)
    margins = np.zeros(n_steps, dtype=np.int64)
    for n in range(1, n_steps):
        tim = model.timing[n]
        writes = [t for t, w in zip(tim.op_write_ns, tim.op_is_write, strict=True) if w]
        kind, margins[n] = kind_and_margin(model.timing[n - 1].land_ns, tim.read_ns, writes)
        kinds[n] = kind.value
    return kinds, margins


def summarize(reads: pd.DataFrame, model: Model, schedule: Schedule) -> dict:
    """The numbers ``python -m sim run`` prints: counts of wrong reads and the run's cost."""
    wrong = reads[reads["cpu_wrong"] | reads["gpu_wrong"]]
    by_kind = {k: int(v) for k, v in wrong["kind"].value_counts().sort_index().items()}
    fwd = [t.forward_start_ns for t in model.timing if t.forward_start_ns >= 0]
    steps = len(schedule.steps)
    step_ns = (fwd[-1] - fwd[0]) / (len(fwd) - 1) if len(fwd) > 1 else 0.0
    tokens = int(sum(int(s.accepted[~s.discard].sum()) for s in schedule.steps))
    total_ns = max(model.env.now, 1)
    return {
        "policy": model.policy.name,
        "steps": steps,
        "reads": int(len(reads)),
        "cpu_wrong": int(reads["cpu_wrong"].sum()),
        "gpu_wrong": int(reads["gpu_wrong"].sum()),
        "prompt_state_lost": int(reads["prompt_state_lost"].sum()),
        "corrupted_requests": int(reads.loc[reads["gpu_wrong"], "req_id"].nunique()),
        "by_kind": by_kind,
        "mean_step_ns": round(step_ns, 1),
        "tokens_per_s": round(tokens / total_ns * 1e9, 1),
        # An exact integer sum, one rounding: the vector tier computes the very same number.
        "event_wait_ns_mean": round(
            sum(t.wait_ns for t in model.timing) / len(model.timing) if model.timing else 0.0, 1
        ),
        "sim_time_ns": int(model.env.now),
    }


TRACE_COLUMNS = ["time_ns", "dur_ns", "step", "actor", "event", "row", "value", "req_id"]


def build_trace(model: Model) -> pd.DataFrame:
    rows = model.trace_rows or []
    df = pd.DataFrame(rows, columns=TRACE_COLUMNS)
    df = df.sort_values(["time_ns", "actor"], kind="stable").reset_index(drop=True)
    return df.astype(
        {
            "dur_ns": "int64",
            "time_ns": "int64",
            "step": "int64",
            "actor": "string",
            "event": "string",
            "row": "int32",
            "value": "int64",
            "req_id": "string",
        }
    )
