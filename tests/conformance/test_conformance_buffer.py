"""The counts buffer ``num_accepted_tokens_cpu``: sim.model.counts_buffer against vLLM's writes.

For every step of every schedule in cases.py and every place the previous step's counts
can land among the step's row operations (before the first, between each pair, after the
last), a copy of the real batch runs the step with that landing. The buffer starts with a
distinct value in every row (1000 + row) and the landing writes distinct values (2000 +
row), so each value names where it came from. Then the whole real buffer, the values
gathered through prev positions, and the real buffer's write log must equal what
``apply_step`` and ``gather`` predict for the same landing.
"""

from __future__ import annotations

import numpy as np
import pytest
from cases import CASES, describe, schedule_for
from compare import canonical_ops, fmt_op, step_context, table
from test_conformance_rows import real_batch_for
from vllm_driver import RealBatch, Recorder, StepInput

from sim.model.counts_buffer import BufferWrite, apply_step, gather
from sim.model.schedule import StepRecord


def landing_differences(
    rec: StepRecord, before: RealBatch, step: StepInput, dma: np.ndarray | None, land: int
) -> list[str]:
    start = 1000 + np.arange(before.max_num_reqs, dtype=np.int64)
    real = before.clone()
    real.counts[:] = start
    real.update_states(step, Recorder(land, dma))
    vllm_buf = real.counts.astype(np.int64)
    prev = real.prev_positions()
    vllm_gathered = np.where(prev < 0, 1, vllm_buf[np.maximum(prev, 0)])

    log: list[BufferWrite] = []
    ours_buf = apply_step(start, rec.ops, dma, land, log)
    ours_gathered = gather(ours_buf, rec.prev_positions)
    ours_writes = [(w.op_index, w.row, w.value) for w in log if w.writer != "dma"]

    out = []
    if not np.array_equal(ours_buf, vllm_buf):
        out.append("num_accepted_tokens_cpu differs:\n" + table("row", ours_buf, vllm_buf))
    if not np.array_equal(ours_gathered, vllm_gathered):
        out.append(
            "gathered counts (G[r] = B[prev_positions[r]]) differ:\n"
            + table("row", ours_gathered, vllm_gathered)
        )
    if ours_writes != real.recorder.writes:
        out.append(
            "writes (op index, row, value) differ:\n"
            + table("#", ours_writes, real.recorder.writes)
        )
    return out


@pytest.mark.parametrize("case", CASES)
def test_buffer_matches_vllm_at_every_landing(case: int | str) -> None:
    schedule = schedule_for(case)
    real = real_batch_for(schedule)
    prev = None
    for rec in schedule.steps:
        step = StepInput.from_record(rec)
        dma = None if prev is None else 2000 + np.arange(prev.num_reqs, dtype=np.int64)
        for land in range(len(rec.ops) + 1):
            problems = landing_differences(rec, real, step, dma, land)
            if problems:
                ops = [fmt_op(op) for op in canonical_ops(rec.ops)]
                ops.insert(land, "<- counts of the previous step land here")
                head = f"{describe(case)}, step {rec.step}, landing before op {land}"
                context = step_context(rec, prev) + "\nour row operations:\n  " + "\n  ".join(ops)
                pytest.fail("\n\n".join([head, context, *problems]), pytrace=False)
        real.update_states(step)
        assert [fmt_op(op) for op in canonical_ops(real.recorder.ops)] == [
            fmt_op(op) for op in canonical_ops(rec.ops)
        ], f"step {rec.step}: row operations differ (see test_conformance_rows)"
        real.finish_step(step)
        prev = rec
