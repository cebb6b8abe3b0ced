"""The bounded check's reports: a counterexample as a story, results as JSON."""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.explore.check.search import CheckResult, Counterexample
from sim.explore.check.space import BIG, BIG_BUDGET, CLASS_WORD, Space, req_name, scenario_for
from sim.explore.check.step import Wrong
from sim.model.policies import named
from sim.model.schedule import StepRecord
from sim.model.verdict import at_landing

# -- stories and JSON -------------------------------------------------------------------------


def story(cx: Counterexample, header: str | None = None) -> str:
    """The counterexample as a short story: one line per step, the row operations in vLLM's
    order with the copy's landing among them, and the wrong read."""
    recs = cx.records
    thr = 1 if cx.root.threshold_is_one else "1+k"
    budget = "unlimited" if cx.root.budget >= BIG_BUDGET else str(cx.root.budget)
    who = ", ".join(f"{req_name(i)} {CLASS_WORD[r.cls]}" for i, r in enumerate(cx.reqs))
    cap = f", KV capacity {cx.cap} tokens" if cx.cap < BIG else ""
    lines = [header or f"(reorder threshold {thr}, token budget {budget}{cap}; {who})"]
    for s, rec in enumerate(recs):
        words = _op_words(rec)
        land = cx.landings[s - 1] if s else None
        last = s == len(recs) - 1
        if land is not None:
            if land >= 0:
                words.insert(land, f"step {s - 1}'s copy lands")
            else:
                words.append(f"step {s - 1}'s copy has not landed at the read")
        if last:
            words.append(_read_words(cx))
        rows = ", ".join(_row_words(rec, i, last) for i in range(rec.num_reqs))
        lines.append(f"step {s} [{rows}]" + (": " + "; ".join(words) if words else ""))
    return "\n".join(lines)


def _row_words(rec: StepRecord, i: int, last: bool) -> str:
    r = rec.req_ids[i]
    if rec.drafts[i] > 0:
        return f"{r} decode" if last else f"{r} decode, count {int(rec.accepted[i])}"
    if rec.discard[i]:
        return f"{r} prefill chunk"
    return f"{r} prefill" if rec.num_computed[i] < rec.num_prompt[i] else f"{r} decode"


def _op_words(rec: StepRecord) -> list[str]:
    out = []
    for op in rec.ops:
        if op.kind == "remove":
            why = "finishes" if op.req_id in rec.finished else "is unscheduled"
            out.append(f"{op.req_id} {why} in row {op.a}")
        elif op.kind == "add":
            how = "resumes into" if op.req_id in rec.resumed else "is added into"
            out.append(f"{op.req_id} {how} row {op.a}")
        elif op.kind == "move":
            out.append(f"{op.req_id} is moved from row {op.a} to {op.b}")
        else:
            out.append(f"{op.req_id} is swapped from row {op.a} to {op.b}")
    return out


def _read_words(cx: Counterexample) -> str:
    cur = cx.records[-1]
    said = []
    for w in cx.wrong:
        consumed = "" if w.gpu == w.cpu else f" and the GDN kernel consumes {w.gpu}"
        said.append(
            f"{cur.req_ids[w.row]} (row {w.row}, row {w.prev_row} before) reads "
            f"{_provenance(cx, w)} instead of {w.true}{consumed}"
        )
    return "; ".join(said)


def _provenance(cx: Counterexample, w: Wrong) -> str:
    """Whose count the wrong read returned: the same step replayed on tagged values (100 + row
    for step n-1's copy, 200 + row for what the buffer held before the step)."""
    pol = named(cx.policy)
    cur, prev = cx.records[-1], cx.records[-2]
    land = cx.landings[-1]
    size = max(prev.num_reqs, cur.num_reqs, max((max(o.a, o.b) for o in cur.ops), default=0) + 1)
    tag_dma = np.arange(100, 100 + prev.num_reqs, dtype=np.int64)
    buf = np.arange(200, 200 + size, dtype=np.int64)
    tag = int(at_landing(pol, tag_dma, cur, buf, buf, land).cpu[w.row])
    if 100 <= tag < 100 + prev.num_reqs:
        owner = prev.req_ids[tag - 100]
        return f"{owner}'s {w.cpu}" if owner != cur.req_ids[w.row] else f"its own {w.cpu}"
    if 200 <= tag < 200 + size:
        return f"the stale {w.cpu} left in row {tag - 200}"
    return f"{w.cpu}"


def counterexample_json(cx: Counterexample, space: Space) -> dict[str, Any]:
    scn = scenario_for(space, cx.root, cx.reqs, cx.cap, len(cx.records))
    eng = scn.engine
    return {
        "kind": cx.kind,
        "rows": cx.key[0],
        "steps": cx.key[1],
        "ops": cx.key[2],
        "read_step": cx.step,
        "landing": cx.landings[-1],
        "landings": cx.landings,
        "wrong": [
            {
                "req_id": cx.records[-1].req_ids[w.row],
                "row": w.row,
                "prev_row": w.prev_row,
                "true": w.true,
                "cpu": w.cpu,
                "gpu": w.gpu,
            }
            for w in cx.wrong
        ],
        "story": story(cx),
        "engine": {
            "max_num_seqs": eng.max_num_seqs,
            "max_num_batched_tokens": eng.max_num_batched_tokens,
            "num_speculative_tokens": eng.num_speculative_tokens,
            "async_scheduling": eng.async_scheduling,
            "reorder_threshold_is_one": eng.reorder_threshold_is_one,
            "kv_cache_capacity_tokens": eng.kv_cache_capacity_tokens,
        },
        "requests": [
            {
                "req_id": r.req_id,
                "arrival_step": r.arrival_step,
                "prompt_len": r.prompt_len,
                "output_len": r.output_len,
                "accepted": list(r.accepted),
                "prefix_hit_tokens": r.prefix_hit_tokens,
            }
            for r in scn.workload.requests
        ],
    }


def result_json(res: CheckResult) -> dict[str, Any]:
    sp = res.space
    return {
        "space": {
            "max_rows": sp.max_rows,
            "steps": sp.steps,
            "k": sp.k,
            "classes": list(sp.classes),
            "sync_classes": list(sp.sync_classes),
        },
        "schedules": {"async": res.schedules[True], "sync": res.schedules[False]},
        "nodes": res.nodes,
        "build_schedule_runs": res.runs,
        "evaluations": res.evaluations,
        "policies": {
            name: {
                "vllm": p.vllm,
                "safe": p.safe,
                "interleavings": p.interleavings + sum(p.failing.values()),
                "passing": p.interleavings,
                "failing": dict(sorted(p.failing.items())),
                "repaired_cpu_wrong": p.repaired,
                "symbolic_counts": p.symbolic,
                "counterexamples": {
                    k: counterexample_json(cx, sp) for k, cx in sorted(p.minimal.items())
                },
            }
            for name, p in res.policies.items()
        },
    }
