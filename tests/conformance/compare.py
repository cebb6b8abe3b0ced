"""Side-by-side tables for a step where our model and vLLM's InputBatch disagree."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.model.input_batch import RowOp
from sim.model.schedule import StepRecord


def fmt_op(op: RowOp) -> str:
    if op.kind == "move":
        return f"move {op.a}->{op.b} {op.req_id}"
    if op.kind == "swap":
        return f"swap {op.a}<->{op.b} {op.req_id}"
    return f"{op.kind} {op.a} {op.req_id}"


def canonical_ops(ops: Sequence[RowOp]) -> list[RowOp]:
    """The leading removals sorted by row: vLLM removes in set order (finished_req_ids and
    ``cached - scheduled`` are sets), and a removal writes nothing, so that order is free."""
    n = next((i for i, op in enumerate(ops) if op.kind != "remove"), len(ops))
    return sorted(ops[:n], key=lambda op: op.a) + list(ops[n:])


def table(label: str, ours: Sequence[object], vllm: Sequence[object]) -> str:
    """``label | ours | vLLM``, one line per index, ``<<`` where the two differ."""
    a = [str(x) for x in ours]
    b = [str(x) for x in vllm]
    width = max([len("ours"), *(len(s) for s in a)])
    lines = [f"{label:>6} | {'ours':<{width}} | vLLM"]
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else "-"
        y = b[i] if i < len(b) else "-"
        lines.append(f"{i:>6} | {x:<{width}} | {y}" + ("" if x == y else "   <<"))
    return "\n".join(lines)


def keyed_table(ours: dict[str, int], vllm: dict[str, int]) -> str:
    keys = sorted(ours.keys() | vllm.keys())
    width = max([len("req_id"), *(len(k) for k in keys)])
    lines = [f"{'req_id':>{width}} | ours | vLLM"]
    for k in keys:
        x, y = ours.get(k, "-"), vllm.get(k, "-")
        lines.append(f"{k:>{width}} | {x!s:>4} | {y}" + ("" if x == y else "   <<"))
    return "\n".join(lines)


def step_context(rec: StepRecord, prev: StepRecord | None) -> str:
    """What the scheduler asked for in this step, for the reader of a failure."""
    sched = ", ".join(
        f"{r}:{s}t/{c}c/{p}p"
        for r, s, c, p in zip(
            rec.req_ids, rec.num_scheduled, rec.num_computed, rec.num_prompt, strict=True
        )
    )
    return "\n".join(
        [
            f"previous layout: {prev.req_ids if prev else []}",
            f"finished: {rec.finished}  new: {rec.new}  re-added: {rec.resumed}",
            f"scheduled (tokens/computed/prompt): {sched}",
        ]
    )


def diff_arrays(name: str, ours: np.ndarray, vllm: np.ndarray, label: str = "row") -> str | None:
    if len(ours) == len(vllm) and np.array_equal(ours, vllm):
        return None
    return f"{name} differs:\n" + table(label, ours.tolist(), vllm.tolist())
