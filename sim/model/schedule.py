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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
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
    def has_prefill(self) -> bool:
        """A row of this step still computes its prompt (a prefill chunk)."""
        n = self.num_reqs
        return bool((self.num_computed[:n] < self.num_prompt[:n]).any())

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
        """One step of ``schedule.json``; a value of the wrong type raises ValueError naming
        the field (the caller adds the file)."""
        if not isinstance(d, dict):
            raise ValueError("a step must be an object")
        step = d.get("step")

        def fail(key: str, why: str) -> ValueError:
            return ValueError(f"step {step}: {key}: {why}")

        def ids(key: str) -> list[str]:
            v = d[key]
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise fail(key, "must be a list of request ids")
            return list(v)

        def arr(key: str, dtype: type = np.int64) -> np.ndarray:
            v = d[key]
            if not isinstance(v, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in v
            ):
                raise fail(key, "must be a list of integers")
            if any(not -(2**62) <= x < 2**62 for x in v):
                raise fail(key, "integer out of range")
            return np.asarray(v, dtype=np.int64).astype(dtype)

        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"step: must be an integer, got {step!r}")
        raw_ops = d["ops"]
        if not isinstance(raw_ops, list):
            raise fail("ops", "must be a list")
        ops = []
        for i, item in enumerate(raw_ops):
            ok = isinstance(item, list) and len(item) == 4
            ok = ok and isinstance(item[0], str) and isinstance(item[3], str)
            ok = ok and all(isinstance(x, int) and not isinstance(x, bool) for x in item[1:3])
            if not ok:
                raise fail(f"ops[{i}]", f"must be [kind, row, row, req_id], got {item!r}")
            ops.append(RowOp.from_json(item))
        rec = StepRecord(
            step=step,
            finished=ids("finished"),
            unscheduled=ids("unscheduled"),
            new=ids("new"),
            resumed=ids("resumed"),
            ops=ops,
            req_ids=ids("req_ids"),
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
                raise fail(key, f"has {len(getattr(rec, key))} rows, req_ids has {n}")
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
        return steps_summary(len(self.requests), self.steps)


def steps_summary(requests_arrived: int, steps: Iterable[StepRecord]) -> dict[str, Any]:
    """:meth:`Schedule.summary` over steps that may come one at a time (a long schedule)."""
    n = finished = first_spec = 0
    scheduled: set[str] = set()
    ops: Counter[str] = Counter()
    prev: StepRecord | None = None
    for cur in steps:
        n += 1
        scheduled.update(cur.new)
        finished += len(cur.finished)
        ops.update(op.kind for op in cur.ops)
        if prev is not None:
            first_spec += int(first_spec_rows(prev, cur).sum())
        prev = cur
    return {
        "steps": n,
        "requests_arrived": requests_arrived,
        "requests_scheduled": len(scheduled),
        "requests_finished": finished,
        "row_ops": {k: ops.get(k, 0) for k in ("remove", "add", "move", "swap")},
        "first_spec_steps": first_spec,
    }


def first_spec_rows(prev: StepRecord, cur: StepRecord) -> np.ndarray:
    """Rows of ``cur`` at their first speculative step: drafts now, none in ``prev``.

    These are the rows the GPU correction kernel cannot repair (docs/mechanism.md §2).
    """
    pp = cur.prev_positions
    had = np.zeros(len(pp), dtype=bool)
    ok = pp >= 0
    had[ok] = prev.drafts[pp[ok]] > 0
    return (cur.drafts > 0) & ok & ~had


def header(schedule: Schedule) -> dict[str, Any]:
    """Everything of a schedule but its steps, as both file forms (JSON, Parquet) store it."""
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "scenario": schedule.scenario,
        "seed": schedule.seed,
        "requests": schedule.requests,
    }


def dumps(schedule: Schedule) -> str:
    """Canonical text: sorted keys, one step per line, so same input -> same bytes."""
    head = header(schedule)
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
    head = read_header(d, origin)
    from sim.model.schedule_check import check_meaning

    try:
        steps = d["steps"]
        if not isinstance(steps, list):
            raise ValueError("steps must be a list")
        sched = Schedule(
            scenario=head.scenario,
            seed=head.seed,
            requests=head.requests,
            steps=[StepRecord.from_json(s) for s in steps],
        )
    except KeyError as e:
        raise SpecraceError(f"{origin}: malformed schedule: missing {e}") from None
    except (TypeError, ValueError, OverflowError) as e:
        raise SpecraceError(f"{origin}: malformed schedule: {e}") from None
    check_schedule(sched, origin)
    check_meaning(sched, origin)
    return sched


def read_header(d: Any, origin: str) -> Schedule:
    """A schedule's header (``steps`` empty) from what either file form stores (:func:`header`),
    checked; the one reader of it, so the JSON and Parquet forms refuse the same headers."""
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise SpecraceError(f"{origin}: not a specrace schedule (missing schema {SCHEMA!r})")
    if d.get("schema_version") != SCHEMA_VERSION:
        raise SpecraceError(
            f"{origin}: schedule schema version {d.get('schema_version')!r}, "
            f"this specrace reads version {SCHEMA_VERSION}; regenerate it with `python -m sim "
            "schedule`"
        )
    from sim.model.schedule_check import check_header

    check_header(d, origin)
    try:
        seed = d["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed: must be an integer, got {seed!r}")
        if not isinstance(d["requests"], list):
            raise ValueError("requests must be a list")
        for i, r in enumerate(d["requests"]):
            ok = isinstance(r, dict) and isinstance(r.get("req_id"), str)
            ok = ok and all(
                _is_int(r.get(k)) and r[k] >= (0 if k == "arrival_step" else 1)
                for k in ("arrival_step", "prompt_len", "output_len")
            )
            if not ok:
                raise ValueError(
                    f"requests[{i}]: must be {{req_id, arrival_step, prompt_len, output_len}}, "
                    f"got {str(r)[:80]}"
                )
    except KeyError as e:
        raise SpecraceError(f"{origin}: malformed schedule: missing {e}") from None
    except ValueError as e:
        raise SpecraceError(f"{origin}: malformed schedule: {e}") from None
    return Schedule(scenario=d["scenario"], seed=seed, requests=list(d["requests"]), steps=[])


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


OP_KINDS = ("remove", "add", "move", "swap")


def check_schedule(schedule: Schedule, origin: str = "schedule") -> None:
    """Refuse a schedule that vLLM's scheduler and InputBatch could not have produced.

    Replays every step's row operations on the previous step's layout and checks the result,
    ``prev_positions`` and the per-row arrays against it; the error names the step and field.
    """
    for _ in checked_steps(schedule, schedule.steps, origin):
        pass


def checked_steps(
    head: Schedule, steps: Iterable[StepRecord], origin: str = "schedule"
) -> Iterator[StepRecord]:
    """:func:`check_schedule` one step at a time: yields each step of ``steps`` (the steps of
    ``head``'s scenario) once it has been checked, so a long schedule streams."""
    from sim.model.params import scenario_from_dict

    if not isinstance(head.scenario, dict):
        raise SpecraceError(f"{origin}: scenario must be a table")
    raw = json.loads(json.dumps(head.scenario))  # tuples -> lists, as the file has them
    scenario = scenario_from_dict(raw, "schedule", f"{origin}: scenario")
    if head.seed < 0:
        raise SpecraceError(f"{origin}: seed must be >= 0")
    max_rows = scenario.engine.max_num_seqs
    k = scenario.engine.num_speculative_tokens
    budget = scenario.engine.max_num_batched_tokens
    layout: list[str | None] = [None] * max_rows
    prev: StepRecord | None = None
    for n, rec in enumerate(steps):

        def bad(field: str, why: str, n: int = n) -> SpecraceError:
            return SpecraceError(f"{origin}: step {n}: {field}: {why}")

        if rec.step != n:
            raise bad("step", f"is {rec.step}, expected {n}")
        if rec.num_reqs > max_rows:
            raise bad("req_ids", f"{rec.num_reqs} rows > engine.max_num_seqs={max_rows}")
        if len(set(rec.req_ids)) != rec.num_reqs:
            raise bad("req_ids", "a request is in two rows")
        for i, op in enumerate(rec.ops):
            if op.kind not in OP_KINDS:
                raise bad(f"ops[{i}]", f"unknown kind {op.kind!r} (known: {', '.join(OP_KINDS)})")
            rows = (op.a, op.b) if op.kind in ("move", "swap") else (op.a,)
            if any(not 0 <= r < max_rows for r in rows):
                raise bad(f"ops[{i}]", f"row outside 0..{max_rows - 1}: {op.to_json()}")
            op.apply_to_rows(layout)
        if layout[: rec.num_reqs] != rec.req_ids or any(layout[rec.num_reqs :]):
            raise bad("ops", "replaying them on the previous layout does not give req_ids")
        _check_range(bad, "num_scheduled", rec.num_scheduled, 0, budget)
        if int(rec.num_scheduled.sum()) > budget:
            raise bad("num_scheduled", f"sums to more than max_num_batched_tokens={budget}")
        _check_range(bad, "num_computed", rec.num_computed, 0, 1 << 40)
        _check_range(bad, "num_prompt", rec.num_prompt, 1, 1 << 40)
        _check_range(bad, "drafts", rec.drafts, 0, k)
        _check_range(bad, "accepted", rec.accepted, 1, k + 1)
        if (rec.accepted[rec.drafts == 0] != 1).any():
            raise bad("accepted", "a row without drafts must accept exactly 1")
        if (rec.accepted > rec.drafts + 1).any():
            raise bad("accepted", "more accepted than 1 + drafts")
        n_prev = prev.num_reqs if prev is not None else 0
        _check_range(bad, "prev_positions", rec.prev_positions, -1, n_prev - 1)
        for row, src in enumerate(rec.prev_positions):
            if src >= 0 and prev is not None and prev.req_ids[src] != rec.req_ids[row]:
                raise bad("prev_positions", f"row {row} points at another request's row {src}")
        if len(rec.prev_num_draft_tokens) != n_prev:
            raise bad("prev_num_draft_tokens", f"needs one entry per previous row ({n_prev})")
        _check_range(bad, "prev_num_draft_tokens", rec.prev_num_draft_tokens, 0, k)
        prev = rec
        yield rec


def _check_range(bad, field: str, values: np.ndarray, lo: int, hi: int) -> None:
    if len(values) and (int(values.min()) < lo or int(values.max()) > hi):
        raise bad(field, f"values must be in {lo}..{hi}")
