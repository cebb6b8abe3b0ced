"""The timing-free schedule: §9's timeline, the async pipeline, golden file, determinism."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest
from repo_root import ROOT

from sim.errors import SpecraceError
from sim.model import schedule as schedule_mod
from sim.model.counts_buffer import apply_step, gather
from sim.model.params import Scenario
from sim.model.scheduling import build_schedule

GOLDEN = ROOT / "data" / "golden" / "minimal-race.schedule.json"


def test_minimal_race_timeline(minimal_race: Scenario) -> None:
    s = build_schedule(minimal_race, 0, minimal_race.default_steps)
    n, n1 = s.steps[3], s.steps[4]
    # Step N = 3: F in row 0 decoding with all 3 drafts accepted, R in row 1 prefilling.
    assert n.req_ids == ["F", "R"]
    assert n.accepted.tolist() == [4, 1] and n.drafts.tolist() == [3, 0]
    # F's last token came at step 2 but it is still scheduled at 3 (async batch queue of 2)
    # and finished at 4.
    assert "F" in s.steps[3].req_ids and n1.finished == ["F"]
    # Step N+1: remove F, add Q into F's row, swap R forward; R is a decode of 1 + k.
    assert [(o.kind, o.a, o.b, o.req_id) for o in n1.ops] == [
        ("remove", 0, -1, "F"),
        ("add", 0, -1, "Q"),
        ("swap", 1, 0, "R"),
    ]
    assert n1.req_ids == ["R", "Q"]
    assert n1.num_scheduled.tolist() == [4, 16]
    assert n1.prev_positions.tolist() == [1, -1]
    # R had no drafts at N, so the GPU kernel will not repair it.
    assert n1.prev_num_draft_tokens.tolist() == [0, 0]
    assert schedule_mod.first_spec_rows(n, n1).tolist() == [True, False]


@pytest.mark.parametrize("land_before,expected_r", [(0, 1), (1, 1), (2, 4), (3, 1)])
def test_minimal_race_only_add_then_land_then_swap_gives_4(
    minimal_race: Scenario, land_before: int, expected_r: int
) -> None:
    s = build_schedule(minimal_race, 0, minimal_race.default_steps)
    n, n1 = s.steps[3], s.steps[4]
    buf = np.ones(8, dtype=np.int64)
    after = apply_step(buf, n1.ops, n.accepted, land_before)
    assert gather(after, n1.prev_positions)[0] == expected_r


def test_async_off_finishes_one_step_earlier(minimal_race: Scenario) -> None:
    sync = replace(minimal_race, engine=replace(minimal_race.engine, async_scheduling=False))
    s = build_schedule(sync, 0, sync.default_steps)
    assert s.steps[3].finished == ["F"]
    assert "F" not in s.steps[3].req_ids


def test_first_spec_step_follows_final_prefill_chunk(qwen35: Scenario) -> None:
    s = build_schedule(qwen35, 3, 300)
    k = qwen35.engine.num_speculative_tokens
    last: dict[str, tuple[int, int, bool]] = {}  # req -> (step, drafts, discard)
    checked = 0
    for rec in s.steps:
        for row, rid in enumerate(rec.req_ids):
            prev = last.get(rid)
            if prev and prev[0] == rec.step - 1 and prev[1] == 0 and not prev[2]:
                # Final prefill chunk ran at the previous step: now 1 + k tokens.
                assert rec.num_scheduled[row] == 1 + k and rec.drafts[row] == k
                checked += 1
            last[rid] = (rec.step, int(rec.drafts[row]), bool(rec.discard[row]))
    assert checked > 50


def test_chunked_prefill_respects_budget_and_discards_partial_chunks(qwen35: Scenario) -> None:
    s = build_schedule(qwen35, 5, 300)
    budget = qwen35.engine.max_num_batched_tokens
    assert all(int(r.num_scheduled.sum()) <= budget for r in s.steps)
    partial = [(r, i) for r in s.steps for i in np.flatnonzero(r.discard)]
    assert partial, "the default workload must chunk some prefills"
    for rec, i in partial:
        assert rec.drafts[i] == 0 and rec.accepted[i] == 1
        assert rec.num_computed[i] + rec.num_scheduled[i] < rec.num_prompt[i]
        assert rec.req_ids[i] not in rec.prev_req_id_to_index()


def test_prev_positions_follow_the_request(qwen35: Scenario) -> None:
    s = build_schedule(qwen35, 7, 200)
    for prev, cur in zip(s.steps, s.steps[1:], strict=False):
        for row, rid in enumerate(cur.req_ids):
            p = cur.prev_positions[row]
            if p >= 0:
                assert prev.req_ids[p] == rid and not prev.discard[p]


def test_preemption_removes_and_resumes(qwen35: Scenario) -> None:
    tight = replace(qwen35, engine=replace(qwen35.engine, kv_cache_capacity_tokens=60_000))
    s = build_schedule(tight, 1, 300)
    assert sum(len(r.resumed) for r in s.steps) > 0
    assert sum(len(r.unscheduled) for r in s.steps) > 0


def test_golden_minimal_race(minimal_race: Scenario) -> None:
    text = schedule_mod.dumps(build_schedule(minimal_race, 0, minimal_race.default_steps))
    assert text == GOLDEN.read_text(), "regenerate on purpose: make golden"


def test_same_seed_same_bytes_other_seed_other_bytes(qwen35: Scenario) -> None:
    def digest(seed: int) -> str:
        text = schedule_mod.dumps(build_schedule(qwen35, seed, 400))
        return hashlib.sha256(text.encode()).hexdigest()

    assert digest(11) == digest(11)
    assert digest(11) != digest(12)


def test_round_trip(qwen35: Scenario) -> None:
    s = build_schedule(qwen35, 2, 100)
    text = schedule_mod.dumps(s)
    assert schedule_mod.dumps(schedule_mod.loads(text)) == text


def test_truncated_and_foreign_schedules_are_clear_errors(qwen35: Scenario) -> None:
    text = schedule_mod.dumps(build_schedule(qwen35, 2, 50))
    with pytest.raises(SpecraceError, match="truncated"):
        schedule_mod.loads(text[: len(text) // 2])
    with pytest.raises(SpecraceError, match="schema version 99"):
        schedule_mod.loads(text.replace('"schema_version":1', '"schema_version":99', 1))
    with pytest.raises(SpecraceError, match="not a specrace schedule"):
        schedule_mod.loads('{"steps": []}')


def test_the_workload_is_the_same_drawn_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accepted counts are drawn a block of requests at a time (bounded memory): any block
    size gives the same numbers."""
    import sim.model.workload as workload_mod
    from sim.model.params import load_scenario

    sc = load_scenario("qwen35-mtp3")
    ref = workload_mod.draw_workload(sc, 5, 300)
    for rows in (1, 7, 1000):
        monkeypatch.setattr(workload_mod, "ROWS_PER_DRAW", rows)
        got = workload_mod.draw_workload(sc, 5, 300)
        assert [r.req_id for r in got] == [r.req_id for r in ref]
        assert all(np.array_equal(a.accepted, b.accepted) for a, b in zip(got, ref, strict=True))


def test_the_scheduler_state_shares_the_drawn_counts_or_copies_them() -> None:
    """ReqStates takes the workload's one array of counts instead of a copy, only where every
    request's counts lie back to back in it; any other list is copied, to the same values."""
    from sim.model.params import load_scenario
    from sim.model.scheduler_rules import ReqStates
    from sim.model.workload import draw_workload

    sc = load_scenario("qwen35-mtp3")
    reqs = draw_workload(sc, 5, 300)
    want = np.concatenate([r.accepted for r in reqs])
    st = ReqStates(reqs)
    assert np.array_equal(st.accepted_flat, want)
    assert np.shares_memory(st.accepted_flat, reqs[0].accepted)
    none = replace(sc.workload, initial_requests=0, arrival_rate_per_step=0.0)
    assert draw_workload(replace(sc, workload=none), 5, 300) == []  # no request: no counts
    suffix, swapped, every_other = reqs[1:], [reqs[1], reqs[0], *reqs[2:]], reqs[::2]
    for other, shared in ((suffix, True), (swapped, False), (every_other, False)):
        st = ReqStates(other)
        assert np.array_equal(st.accepted_flat, np.concatenate([r.accepted for r in other]))
        assert np.shares_memory(st.accepted_flat, reqs[1].accepted) == shared


def test_align_cut_follows_vllms_block_aligned_split() -> None:
    """vLLM v0.24.0's ``_mamba_block_aligned_split`` with block 80 and MTP (EAGLE-type): the
    recorded vLLM run (data/vllm/v0.24.0/align_s16_d0ms) scheduled 160 of a 300-token prompt
    and 560 of 701 in its first step; a chunk short of the last cache position is a multiple
    of the block; a chunk past it is left alone; without MTP the last position is not pulled
    back."""
    from sim.model.scheduler_rules import aligned_chunk

    assert aligned_chunk(0, 300, 300, 80, True) == 160  # last cache position 240 - 80
    assert aligned_chunk(160, 140, 300, 80, True) == 140  # the rest
    assert aligned_chunk(0, 701, 701, 80, True) == 560
    assert aligned_chunk(0, 100, 701, 80, True) == 80  # budget-cut: down to a multiple
    assert aligned_chunk(0, 79, 701, 80, True) == 0  # less than a block: nothing this step
    assert aligned_chunk(0, 300, 300, 80, False) == 240
    assert aligned_chunk(0, 40, 40, 80, True) == 40  # shorter than a block: not cached


def _align_scenario(qwen35: Scenario, block: int, budget: int = 2048) -> Scenario:
    from sim.model.params import ScriptedRequest

    reqs = tuple(ScriptedRequest(f"r{i}", 0, p, 6) for i, p in enumerate((300, 701, 40, 8)))
    return replace(
        qwen35,
        engine=replace(qwen35.engine, mamba_cache_mode="align", mamba_block_size=block,
                       max_num_batched_tokens=budget, max_num_seqs=16),
        workload=replace(qwen35.workload, arrival="scripted", initial_requests=0,
                         max_requests=len(reqs), requests=reqs),
    )  # fmt: skip


def test_align_mode_schedules_the_first_chunks_vllm_did(qwen35: Scenario) -> None:
    s = build_schedule(_align_scenario(qwen35, 80), 0, 12)
    first = dict(zip(s.steps[0].req_ids, s.steps[0].num_scheduled.tolist(), strict=True))
    assert first == {"r0": 160, "r1": 560, "r2": 40, "r3": 8}
    second = dict(zip(s.steps[1].req_ids, s.steps[1].num_scheduled.tolist(), strict=True))
    assert second["r0"] == 140 and second["r1"] == 141  # the rest of each prompt
    assert all(s.steps[0].discard[i] for i, r in enumerate(s.steps[0].req_ids) if r in "r0r1")
    # block 0: no cut, whole prompts at once (as under none)
    whole = build_schedule(_align_scenario(qwen35, 0), 0, 12)
    assert sorted(whole.steps[0].num_scheduled.tolist()) == [8, 40, 300, 701]


def test_align_cut_to_nothing_stops_admission(qwen35: Scenario) -> None:
    """A budget of 100 after r0's 80-token chunk leaves r1 a cut of 0: vLLM's waiting loop
    breaks there, so r2 and r3 wait too even though they would fit."""
    s = build_schedule(_align_scenario(qwen35, 80, budget=100), 0, 4)
    assert s.steps[0].req_ids == ["r0"] and s.steps[0].num_scheduled.tolist() == [80]
