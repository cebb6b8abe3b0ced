"""The timing-free schedule: what vLLM's scheduler and InputBatch decide in every step.

A :class:`Schedule` is the contract between the two halves of specrace: ``sim`` simulates
it in time, ``gpu_check`` replays it on a GPU; neither re-derives a decision. One
:class:`StepRecord` per engine step holds the row operations of ``_update_states`` in
vLLM's order and the per-row state of the step *after* those operations (its layout).

Per-row arrays are indexed by the step's row (``req_ids[row]``); ``prev_num_draft_tokens``
is indexed by the previous step's row, like vLLM's array.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import SpecraceError
from sim.model.input_batch import RowOp

SCHEMA = "specrace.schedule"
SCHEMA_VERSION = 1


@dataclass
class StepRecord:
    step: int
    finished: list[str]  # scheduler_output.finished_req_ids
    unscheduled: list[str]  # removed because not scheduled (preempted or out of budget)
    new: list[str]  # scheduled_new_reqs, in order
    resumed: list[str]  # cached requests re-added to the batch
    ops: list[RowOp]  # remove/add/move/swap in vLLM's order
    req_ids: list[str]  # row -> req_id after condense + reorder (layout_N)
    num_scheduled: np.ndarray  # tokens scheduled per row
    num_computed: np.ndarray  # num_computed_tokens_cpu per row (scheduler's optimistic view)
    num_prompt: np.ndarray  # num_prompt_tokens per row
    drafts: np.ndarray  # drafts scheduled per row (prev_num_draft_len next step)
    accepted: np.ndarray  # true accepted count per row, in 1..k+1; 1 where drafts == 0
    discard: np.ndarray  # partial prefill rows (excluded from prev_req_id_to_index)
    prev_positions: np.ndarray  # row -> previous step's row, -1 if none
    prev_num_draft_tokens: np.ndarray  # indexed by previous step's row

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)

    def prev_req_id_to_index(self) -> dict[str, int]:
        """``prev_req_id_to_index`` that the *next* step starts from (before removals)."""
        return {r: i for i, r in enumerate(self.req_ids) if not self.discard[i]}

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "finished": self.finished,
            "unscheduled": self.unscheduled,
            "new": self.new,
            "resumed": self.resumed,
            "ops": [op.to_json() for op in self.ops],
            "req_ids": self.req_ids,
            "num_scheduled": self.num_scheduled.tolist(),
            "num_computed": self.num_computed.tolist(),
            "num_prompt": self.num_prompt.tolist(),
            "drafts": self.drafts.tolist(),
            "accepted": self.accepted.tolist(),
            "discard": [int(x) for x in self.discard],
            "prev_positions": self.prev_positions.tolist(),
            "prev_num_draft_tokens": self.prev_num_draft_tokens.tolist(),
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> StepRecord:
        def arr(key: str, dtype: type = np.int64) -> np.ndarray:
            return np.asarray(d[key], dtype=dtype)

        rec = StepRecord(
            step=int(d["step"]),
            finished=list(d["finished"]),
            unscheduled=list(d["unscheduled"]),
            new=list(d["new"]),
            resumed=list(d["resumed"]),
            ops=[RowOp.from_json(x) for x in d["ops"]],
            req_ids=list(d["req_ids"]),
            num_scheduled=arr("num_scheduled"),
            num_computed=arr("num_computed"),
            num_prompt=arr("num_prompt"),
            drafts=arr("drafts"),
            accepted=arr("accepted"),
            discard=arr("discard", bool),
            prev_positions=arr("prev_positions"),
            prev_num_draft_tokens=arr("prev_num_draft_tokens"),
        )
        n = rec.num_reqs
        for key in (
            "num_scheduled",
            "num_computed",
            "num_prompt",
            "drafts",
            "accepted",
            "discard",
            "prev_positions",
        ):
            if len(getattr(rec, key)) != n:
                raise ValueError(
                    f"step {rec.step}: {key} has {len(getattr(rec, key))} rows, req_ids has {n}"
                )
        return rec


@dataclass
class Schedule:
    scenario: dict[str, Any]  # Scenario.to_dict()
    seed: int
    requests: list[dict[str, Any]]  # req_id, arrival_step, prompt_len, output_len, ...
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def num_speculative_tokens(self) -> int:
        return int(self.scenario["engine"]["num_speculative_tokens"])

    @property
    def async_scheduling(self) -> bool:
        return bool(self.scenario["engine"]["async_scheduling"])

    @property
    def max_num_reqs(self) -> int:
        return int(self.scenario["engine"]["max_num_seqs"])

    def op_counts(self) -> dict[str, int]:
        c = Counter(op.kind for s in self.steps for op in s.ops)
        return {k: c.get(k, 0) for k in ("remove", "add", "move", "swap")}

    def summary(self) -> dict[str, Any]:
        return {
            "steps": len(self.steps),
            "requests_arrived": len(self.requests),
            "requests_scheduled": len({r for s in self.steps for r in s.new}),
            "requests_finished": sum(len(s.finished) for s in self.steps),
            "row_ops": self.op_counts(),
            "first_spec_steps": sum(
                int(first_spec_rows(prev, cur).sum())
                for prev, cur in zip(self.steps, self.steps[1:], strict=False)
            ),
        }


def first_spec_rows(prev: StepRecord, cur: StepRecord) -> np.ndarray:
    """Rows of ``cur`` at their first speculative step: drafts now, none in ``prev``.

    These are the rows the GPU correction kernel cannot repair (vllm-mechanics.md §2).
    """
    pp = cur.prev_positions
    had = np.zeros(len(pp), dtype=bool)
    ok = pp >= 0
    had[ok] = prev.drafts[pp[ok]] > 0
    return (cur.drafts > 0) & ok & ~had


def dumps(schedule: Schedule) -> str:
    """Canonical text: sorted keys, one step per line, so same input -> same bytes."""
    head = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "scenario": schedule.scenario,
        "seed": schedule.seed,
        "requests": schedule.requests,
    }
    lines = [json.dumps(head, sort_keys=True, separators=(",", ":"))[:-1] + ',"steps":[']
    body = [json.dumps(s.to_json(), sort_keys=True, separators=(",", ":")) for s in schedule.steps]
    lines.append(",\n".join(body))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def loads(text: str, origin: str = "schedule") -> Schedule:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        msg = f"{origin}: not valid JSON (truncated?): {e.msg} at line {e.lineno}"
        raise SpecraceError(msg) from None
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise SpecraceError(f"{origin}: not a specrace schedule (missing schema {SCHEMA!r})")
    if d.get("schema_version") != SCHEMA_VERSION:
        raise SpecraceError(
            f"{origin}: schedule schema version {d.get('schema_version')!r}, "
            f"this specrace reads version {SCHEMA_VERSION}; regenerate it with `python -m sim "
            "schedule`"
        )
    try:
        return Schedule(
            scenario=d["scenario"],
            seed=int(d["seed"]),
            requests=list(d["requests"]),
            steps=[StepRecord.from_json(s) for s in d["steps"]],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SpecraceError(f"{origin}: malformed schedule: {e!r}") from None


def read_schedule(path: Path) -> Schedule:
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecraceError(f"cannot read schedule {path}: {e.strerror}") from None
    return loads(text, str(path))
