"""Our row model against vLLM's real InputBatch, step for step, on random schedules.

Each schedule of cases.py is replayed on vLLM's InputBatch with the scheduler decisions it
records (finished, scheduled tokens, num_computed, drafts, new and re-added requests).
After every step the two must agree on: the row operations in order (removals up to
their order, see compare.canonical_ops), the layout, num_computed/num_prompt per row,
prev_positions, prev_num_draft_tokens, and the prev_req_id_to_index left for the next step.
"""

from __future__ import annotations

import numpy as np
import pytest
from cases import CASES, describe, schedule_for
from compare import canonical_ops, diff_arrays, fmt_op, keyed_table, step_context, table
from vllm_driver import RealBatch, StepInput

from sim.model.schedule import Schedule, StepRecord


def real_batch_for(schedule: Schedule) -> RealBatch:
    longest = max((r["prompt_len"] for r in schedule.requests), default=1)
    k = schedule.num_speculative_tokens
    threshold = 1 if schedule.scenario["engine"]["reorder_threshold_is_one"] else 1 + k
    return RealBatch(schedule.max_num_reqs, longest + k + 1, k, threshold)


def step_differences(rec: StepRecord, real: RealBatch) -> list[str]:
    """Everything about one step (after _update_states) where ours and vLLM's differ."""
    ib = real.ib
    out = []
    ours_ops = [fmt_op(op) for op in canonical_ops(rec.ops)]
    vllm_ops = [fmt_op(op) for op in canonical_ops(real.recorder.ops)]
    if ours_ops != vllm_ops:
        out.append("row operations differ:\n" + table("#", ours_ops, vllm_ops))
    if rec.req_ids != ib.req_ids:
        out.append("layout (row -> req_id) differs:\n" + table("row", rec.req_ids, ib.req_ids))
    n = ib.num_reqs
    for name, ours, vllm in [
        ("num_computed_tokens_cpu", rec.num_computed, ib.num_computed_tokens_cpu[:n]),
        ("num_prompt_tokens", rec.num_prompt, ib.num_prompt_tokens[:n]),
        ("prev_positions", rec.prev_positions, real.prev_positions()),
    ]:
        if (msg := diff_arrays(name, np.asarray(ours), np.asarray(vllm))) is not None:
            out.append(msg)
    ours_drafts = np.zeros(real.max_num_reqs, dtype=np.int64)
    ours_drafts[: len(rec.prev_num_draft_tokens)] = rec.prev_num_draft_tokens
    msg = diff_arrays("prev_num_draft_tokens", ours_drafts, real.prev_num_draft_tokens, "prev row")
    if msg is not None:
        out.append(msg)
    return out


def replay(schedule: Schedule, label: str) -> int:
    """Replay every step; fail at the first step that differs. Returns the steps checked."""
    real = real_batch_for(schedule)
    prev = None
    for rec in schedule.steps:
        step = StepInput.from_record(rec)
        real.update_states(step)
        problems = step_differences(rec, real)
        real.finish_step(step)
        if rec.prev_req_id_to_index() != real.ib.prev_req_id_to_index:
            problems.append(
                "prev_req_id_to_index for the next step differs:\n"
                + keyed_table(rec.prev_req_id_to_index(), real.ib.prev_req_id_to_index)
            )
        if problems:
            head = f"{label}, step {rec.step}: our model and vLLM's InputBatch differ"
            pytest.fail("\n\n".join([head, step_context(rec, prev), *problems]), pytrace=False)
        prev = rec
    return len(schedule.steps)


@pytest.mark.parametrize("case", CASES)
def test_rows_match_vllm_step_for_step(case: int | str) -> None:
    assert replay(schedule_for(case), describe(case)) == len(schedule_for(case).steps)
