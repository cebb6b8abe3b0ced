"""sim's scheduler against a recorded vLLM schedule: the same request stream, step by step.

A recorded schedule (``data/vllm/*/<mode>_<config>/schedule.json``, vLLM's own decisions in
sim's schema) carries its request stream: arrivals, prompt and output lengths, prefix hits
(every draft accepted: :func:`recorded_stream`). :func:`replayed`
gives that stream, scripted, to :func:`sim.model.scheduling.build_schedule` under the run's
engine (``max_num_seqs`` from the run's ``export.json``, the release's ``mamba_split_rule``
from sim.resolve), and :func:`step_differences` compares the two step by step: finished,
unscheduled, new and re-added requests, tokens and drafts per request, the row operations in
order (removals up to their order) and the layout. The conformance suite
(tests/conformance/test_conformance_scheduler.py) uses the same comparison.

    python -m sim.cli.schedule_match data/vllm   ->  data/vllm/schedule_match.json
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np

from sim.model.input_batch import RowOp
from sim.model.params import ScriptedRequest, scenario_from_dict
from sim.model.schedule import Schedule, StepRecord
from sim.model.scheduling import build_schedule


def _canonical(ops: list[RowOp]) -> list[tuple[str, int, int, str]]:
    """The leading removals sorted by row (vLLM removes in set order; a removal writes
    nothing), every op as a tuple."""
    n = next((i for i, op in enumerate(ops) if op.kind != "remove"), len(ops))
    lead = sorted(ops[:n], key=lambda op: op.a)
    return [(op.kind, op.a, op.b, op.req_id) for op in [*lead, *ops[n:]]]


def _per_req(rec: StepRecord, values: np.ndarray) -> dict[str, int]:
    return {r: int(v) for r, v in zip(rec.req_ids, values, strict=True)}


def step_differences(ours: StepRecord, theirs: StepRecord) -> list[str]:
    """The names of the decisions of one step where the two schedules differ."""
    out = []
    for name in ("finished", "unscheduled"):
        if set(getattr(ours, name)) != set(getattr(theirs, name)):
            out.append(name)
    for name in ("new", "resumed"):
        if list(getattr(ours, name)) != list(getattr(theirs, name)):
            out.append(name)
    for name in ("num_scheduled", "drafts", "num_computed"):
        if _per_req(ours, getattr(ours, name)) != _per_req(theirs, getattr(theirs, name)):
            out.append(name)
    if _canonical(ours.ops) != _canonical(theirs.ops):
        out.append("ops")
    if ours.req_ids != theirs.req_ids:
        out.append("layout")
    return out


def recorded_stream(recorded: Schedule) -> list[ScriptedRequest]:
    """The recorded requests, every draft accepted: the recorded runs' dummy-weight model
    accepts all (data/vllm/README.md; the forward prediction assumes the same). The recorded
    ``accepted`` is no draw to replay in align mode: there it is the count the align
    postprocess left in the buffer (1 where a row's source and destination block are one,
    19 of 4,100 drafted rows per align run), not what the scheduler was told."""
    k = int(recorded.scenario["engine"]["num_speculative_tokens"])
    return [
        ScriptedRequest(
            req_id=str(r["req_id"]),
            arrival_step=int(r["arrival_step"]),
            prompt_len=int(r["prompt_len"]),
            output_len=int(r["output_len"]),
            accepted=(k + 1,) * int(r["output_len"]),
            prefix_hit_tokens=int(r.get("prefix_hit_tokens", 0)),
            eos=bool(r.get("eos", False)),
        )
        for r in recorded.requests
    ]


def replayed(recorded: Schedule, engine: dict[str, Any]) -> Schedule:
    """sim's schedule of the recorded stream under ``engine`` (a scenario's [engine] table),
    as many steps as the recording."""
    raw = json.loads(json.dumps(recorded.scenario))
    raw.pop("name", None)
    raw["engine"] = {**raw["engine"], **engine}
    scenario = scenario_from_dict(raw, "schedule-match", "recorded schedule")
    k = scenario.engine.num_speculative_tokens
    work = replace(
        scenario.workload,
        arrival="scripted",
        requests=tuple(recorded_stream(recorded)),
        acceptance_probs=(*scenario.workload.acceptance_probs, *([1.0] * k))[: max(k, 1)],
    )
    scenario = replace(scenario, workload=work)
    return build_schedule(scenario, recorded.seed, len(recorded.steps))


def _own(rec: StepRecord, known: set[str]) -> StepRecord:
    """A recorded step without the requests of an earlier pass in the same process (their
    finishes and removals open a recording's first step: not part of its stream)."""
    return replace(
        rec,
        finished=[r for r in rec.finished if r in known],
        unscheduled=[r for r in rec.unscheduled if r in known],
        ops=[op for op in rec.ops if op.kind != "remove" or op.req_id in known],
    )


def match(recorded: Schedule, engine: dict[str, Any]) -> dict[str, Any]:
    """Per configuration: the share of steps whose decisions are identical, the first that
    differs and what differs there, and both schedules' row-op counts."""
    ours = replayed(recorded, engine)
    known = {str(r["req_id"]) for r in recorded.requests}
    own = replace(recorded, steps=[_own(b, known) for b in recorded.steps])
    differing = [
        (a.step, d)
        for a, b in zip(ours.steps, own.steps, strict=True)
        if (d := step_differences(a, b))
    ]
    n = len(recorded.steps)
    return {
        "steps": n,
        "identical_steps_fraction": round((n - len(differing)) / n, 4) if n else 1.0,
        "first_differing_step": differing[0][0] if differing else None,
        "first_differences": differing[0][1] if differing else [],
        "row_ops_sim": ours.op_counts(),
        "row_ops_vllm": own.op_counts(),  # this stream's (an earlier pass's removals left out)
    }
