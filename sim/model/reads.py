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

import numpy as np
import pandas as pd

from sim.model.schedule import Schedule
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
    """One row per read, built over all steps at once: the per-read columns are gathers from
    the steps' arrays laid end to end; only the step's kind and margin are per-step scalars."""
    pol = model.policy
    steps = schedule.steps
    if len(steps) < 2:
        return _empty_reads()
    cur = steps[1:]
    sizes = np.array([s.num_reqs for s in steps], dtype=np.int64)
    starts = np.cumsum(sizes) - sizes  # step n's rows start at starts[n] in the flat arrays
    pp = np.concatenate([s.prev_positions for s in cur])
    keep = pp >= 0
    if not keep.any():
        return _empty_reads()
    step_of = np.repeat(np.arange(1, len(steps)), sizes[1:])[keep]
    row = (np.arange(len(pp)) - np.repeat(starts[1:] - starts[1], sizes[1:]))[keep]
    src = pp[keep]
    at_prev = starts[step_of - 1] + src  # flat index of (step - 1, prev_row)
    true = np.concatenate([s.accepted for s in steps])[at_prev]
    prev_drafts = np.concatenate([s.drafts for s in steps])[at_prev]
    # prev_num_draft_tokens of step n is indexed by step n-1's rows: same flat layout.
    pnd = np.concatenate([s.prev_num_draft_tokens for s in cur])
    pnd_starts = np.cumsum([len(s.prev_num_draft_tokens) for s in cur])
    pnd_starts = np.concatenate([[0], pnd_starts[:-1]])
    part = participating(pnd, pnd_starts[step_of - 1] + src)
    cpu = np.concatenate([model.timing[n].cpu_counts for n in range(1, len(steps))])[keep]
    gpu, cpu_wrong, gpu_wrong = judge(pol, cpu, true, part)
    kinds, margins = _step_kinds(model, len(steps))
    kind = kinds[step_of]
    req_ids = np.concatenate([np.asarray(s.req_ids, dtype=object) for s in cur])[keep]
    cols = {
        "step": step_of,
        "req_id": req_ids,
        "row": row,
        "prev_row": src,
        "prev_drafts": prev_drafts,
        "true_count": true,
        "cpu_value": cpu,
        "gpu_value": gpu,
        "cpu_wrong": cpu_wrong,
        "gpu_wrong": gpu_wrong,
        "kind": np.where(cpu_wrong | gpu_wrong, kind, HazardKind.NONE.value),
        "gdn_slot": gpu - 1,
        "prompt_state_lost": prompt_state_lost(gpu_wrong, prev_drafts, gpu),
        "margin_ns": margins[step_of],
    }
    return pd.DataFrame(cols).astype(READ_COLUMNS)


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
