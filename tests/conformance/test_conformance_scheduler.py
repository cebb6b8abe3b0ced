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

from dataclasses import replace

import pytest
import scheduler_cases
from scheduler_cases import Case, case_for, compare

import sim.model.scheduler_rules as scheduler_rules
import sim.model.scheduler_step as scheduler_step

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
    monkeypatch.setattr(scheduler_rules, "sure_to_finish", lambda st, r, out_arr, limits=None: None)
    assert any(_failure(case_for(seed)) for seed in BOUNDED_SEEDS[:16])


def _recompute_kept(st, v: int) -> None:
    """``preempt`` without vLLM's recompute: the request keeps its computed tokens."""
    st.preempted[v] = True
    st.running[v] = False
    st.blocks[v] = 0
    st.epoch[v] += 1


# A modelled rule removed (or the wrong release's rule put in its place), and the seeds of the
# bounded suite whose streams exercise it: align streams are seed % 4 == 1, KV-limited ones
# seed % 4 == 3 (scheduler_cases.case_for).
PLANTS = {
    "mamba_block_aligned_split": (
        "aligned_chunk",
        lambda nc, tokens, num_tokens, block, eagle, eng=None: tokens,
        [s for s in BOUNDED_SEEDS if s % 4 == 1][:12],
    ),
    "kv_block_preemption": ("preempt", _recompute_kept, [s for s in BOUNDED_SEEDS if s % 4 == 3]),
}


@pytest.mark.parametrize("rule", sorted(PLANTS))
def test_removing_a_modelled_rule_fails_the_suite(rule: str, monkeypatch) -> None:
    """Each plant changes one rule of sim's scheduler; some stream of the suite must see it.
    (The avoided extra step: the test above. The rest — FCFS order, the token budget of a
    chunked prefill, placeholders, the full-sequence fit — are the step loop's own lines.)"""
    name, plant, seeds = PLANTS[rule]
    assert all(_failure(case_for(seed)) is None for seed in seeds)  # the rule in place: agree
    monkeypatch.setattr(scheduler_step, name, plant)
    assert any(_failure(case_for(seed)) for seed in seeds), rule


def test_another_releases_split_rule_fails_the_suite(monkeypatch) -> None:
    """The release fact ``mamba_split_rule`` matters: the rule of a release that cuts align
    chunks differently from the installed one makes some align stream differ."""
    mine = scheduler_cases.FACTS["mamba_split_rule"][scheduler_cases.vllm.__version__].value
    other = "boundary" if mine == "chunk" else "chunk"
    facts = dict(scheduler_cases.FACTS)
    facts["mamba_split_rule"] = {
        v: replace(f, value=other) for v, f in scheduler_cases.FACTS["mamba_split_rule"].items()
    }
    monkeypatch.setattr(scheduler_cases, "FACTS", facts)
    assert any(_failure(case_for(seed)) for seed in BOUNDED_SEEDS if seed % 4 == 1)
