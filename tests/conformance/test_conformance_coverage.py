"""The random schedules of cases.py exercise what the conformance checks are for.

A change to the workload generator or the scheduler that quietly stopped preempting or
chunking would leave the other conformance tests green and empty; this one would fail.
"""

from __future__ import annotations

from collections import Counter

from cases import SEEDS, schedule_for


def coverage() -> Counter:
    c: Counter = Counter()
    for seed in SEEDS:
        schedule = schedule_for(seed)
        c["threshold 1" if schedule.scenario["engine"]["reorder_threshold_is_one"] else "1+k"] += 1
        computed_before: dict[str, int] = {}
        prev_n = 0
        for rec in schedule.steps:
            c["steps"] += 1
            computed = dict(zip(rec.req_ids, rec.num_computed.tolist(), strict=True))
            for r in rec.resumed:  # preempted (recompute) or left out for budget, re-added
                c["preempted" if computed[r] < computed_before.get(r, 0) else "re-added"] += 1
            computed_before.update(computed)
            c["prefix hits"] += sum(computed[r] > 0 for r in rec.new)
            c["partial prefill chunks"] += int(rec.discard.sum())
            c["emptied batch"] += rec.num_reqs == 0 and prev_n > 0
            prev_n = rec.num_reqs
            c.update(op.kind for op in rec.ops)
            swaps = [op for op in rec.ops if op.kind == "swap"]
            pairs = zip(swaps, swaps[1:], strict=False)
            c["swaps on a reused pivot"] += sum(a.a == b.a for a, b in pairs)
            written: set[int] = set()  # rows an add or condense wrote, then a swap moved
            for op in rec.ops:
                if op.kind == "swap" and {op.a, op.b} & written:
                    c["write then swap"] += 1
                    break
                written |= {op.a} if op.kind == "add" else {op.b} if op.kind == "move" else set()
    return c


def test_random_schedules_cover_the_row_machinery() -> None:
    c = coverage()
    assert len(SEEDS) >= 20 and c["steps"] >= 1000
    minimum = {
        "threshold 1": 10,
        "1+k": 10,
        "preempted": 40,
        # vLLM's scheduler (sim's since issue #22) re-adds fewer: a request it sees finishing
        # leaves as unscheduled for good, and full-sequence admission holds others back
        "re-added": 25,
        "prefix hits": 100,
        "partial prefill chunks": 300,
        "emptied batch": 10,
        "remove": 500,
        "add": 500,
        "move": 150,
        "swap": 200,
        "swaps on a reused pivot": 20,
        "write then swap": 150,
    }
    short = {k: (c[k], v) for k, v in minimum.items() if c[k] < v}
    assert not short, f"coverage below minimum (got, want): {short}"
