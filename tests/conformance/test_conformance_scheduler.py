"""sim's scheduler against vLLM's real Scheduler / AsyncScheduler, decision for decision.

Each stream of scheduler_cases.py runs through vLLM's scheduler (scheduler_driver.run_vllm:
a real KV cache manager, the real InputBatch behind it) and through sim.model.scheduling on
the same requests and acceptance draws. Every step must agree on: finished, unscheduled, new
and re-added requests, tokens and drafts per request, num_computed per row, the row
operations in order (removals up to their order) and the layout.

``make conformance`` runs the streams of BOUNDED_SEEDS; scheduler_conformance.py runs
>= 500 per release for data/conformance/scheduler.json (``make conformance-all``).
"""

from __future__ import annotations

import pytest
from scheduler_cases import Case, case_for, compare

import sim.model.scheduler_rules as scheduler_rules

BOUNDED_SEEDS = tuple(range(96))


def _failure(case: Case) -> str | None:
    out = compare(case)
    if not out.differing:
        return None
    step = out.differing[0]
    a, b = out.ours[step], out.vllm.steps[step]
    context = [
        f"{case.describe()}: {len(out.differing)} of {out.steps} steps differ, first {step}",
        f"  ours: {a.req_ids} tokens {a.num_scheduled.tolist()}",
        f"  vLLM: {b.req_ids} tokens {b.num_scheduled.tolist()}",
    ]
    return "\n".join(context + out.first)


@pytest.mark.parametrize("seed", BOUNDED_SEEDS)
def test_schedule_matches_vllm_step_for_step(seed: int) -> None:
    msg = _failure(case_for(seed))
    if msg:
        pytest.fail(msg, pytrace=False)


def test_streams_cover_what_the_issue_asks() -> None:
    """Finishes at max_tokens (with vLLM's skip of the extra step), chunked prefills, align
    cuts, prefix hits, preemption, async on and off, k = 1-4, max_num_seqs 1 and 64,
    arrivals at step 0 and spread out."""
    seen: dict[str, int] = dict.fromkeys(
        ("skip", "chunk", "align", "hit", "preempt", "async", "sync", "seqs1", "seqs64",
         "spread", "start"), 0)  # fmt: skip
    ks: set[int] = set()
    for seed in BOUNDED_SEEDS[:48]:
        case = case_for(seed)
        run = compare(case).vllm
        s = case.setup
        ks.add(s.num_speculative_tokens)
        seen["async" if s.async_scheduling else "sync"] += 1
        seen["seqs1"] += s.max_num_seqs == 1
        seen["seqs64"] += s.max_num_seqs == 64
        seen["align"] += s.mamba_cache_mode == "align"
        seen["spread"] += any(r.arrival_step > 0 for r in case.stream)
        seen["start"] += all(r.arrival_step == 0 for r in case.stream)
        seen["hit"] += any(v > 0 for v in run.hits.values())
        seen["preempt"] += any(run.preempted)
        for prev, rec in zip(run.steps, run.steps[1:], strict=False):
            seen["chunk"] += bool(rec.discard.any())
            # a request unscheduled the step before it is reported finished
            seen["skip"] += bool(set(prev.unscheduled) & set(rec.finished))
    assert ks == {1, 2, 3, 4}
    assert all(seen.values()), seen


def test_removing_the_extra_step_rule_fails_the_suite(monkeypatch) -> None:
    """The suite can fail: sim without "avoid scheduling an extra step" differs from vLLM."""
    monkeypatch.setattr(scheduler_rules, "sure_to_finish", lambda st, r, out_arr: None)
    assert any(_failure(case_for(seed)) for seed in BOUNDED_SEEDS[:16])
