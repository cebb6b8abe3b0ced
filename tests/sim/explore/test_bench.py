"""`python -m sim bench` runs end to end on small sizes and reports what it claims (no timing
is asserted: benchmarks print, the machine is shared)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sim.explore.bench import (
    _steps_in_common,
    bare_mix,
    differs_only_by_avoided_extra_step,
    event_mix,
    main,
    old_build_schedule,
    peak_rss_mb,
)
from sim.model.params import load_scenario
from sim.model.policies import POLICIES
from sim.model.schedule import dumps
from sim.model.scheduling import build_schedule
from sim.model.simulate import Model


def test_bench_prints_every_number_and_the_tiers_agree(capsys) -> None:
    assert main(60, points=40, vector_steps=50, sample=3, long_steps=0) == 0
    out = capsys.readouterr().out.strip().splitlines()
    last = json.loads(out[-1])
    for key in (
        "events_per_s",
        "ratio",
        "ratio_mix",
        "vector_point_steps_per_s",
        "vector_over_simpy",
        "schedule_steps_per_s",
    ):
        assert last[key] > 0, key
    assert last["vector_matches_simpy_sample"] is True
    assert last["vector_points"] == 40 and last["vector_steps"] == 50


def test_event_mix_counts_every_scheduled_event() -> None:
    sc = load_scenario("minimal-race")
    sched = build_schedule(sc, 0, sc.default_steps)
    pol = POLICIES["synced-gather"]
    mix = event_mix(sched, sc.timing, pol, 0)
    model = Model(sched, sc.timing, pol, 0, trace=False)
    model.run()
    assert sum(mix.values()) == next(model.env._eid)  # SimPy's own count of scheduled events
    assert {k for k, _ in mix} >= {"timeout", "Event"}
    assert bare_mix(mix) > 0


def test_peak_rss_of_a_child_run() -> None:
    assert 10 < peak_rss_mb(20) < 4000
    one = peak_rss_mb(20, streamed=True)
    assert 10 < one < 4000
    # on two processes: both peaks, so more than one Python process's alone
    assert one < peak_rss_mb(20, streamed=True, workers=2) < 8000


def test_schedule_before_and_after_are_the_same_bytes() -> None:
    """The array-based build_schedule against the per-object one it replaced (from git)."""
    old = old_build_schedule()
    if old is None:
        pytest.skip("no git history here")
    base = load_scenario("qwen35-mtp3")
    small = replace(
        base.workload,
        initial_requests=20,
        arrival_rate_per_step=1.0,
        prefix_hit_prob=0.3,
        prompt_len=replace(base.workload.prompt_len, mean=100.0),
        output_len=replace(base.workload.output_len, mean=30.0),
    )
    cases = [(load_scenario("minimal-race"), 8), (base, 150)]
    for kv, asy, thr in ((0, True, False), (3000, True, True), (3000, False, False)):
        engine = replace(
            base.engine,
            kv_cache_capacity_tokens=kv,
            async_scheduling=asy,
            reorder_threshold_is_one=thr,
            max_num_seqs=16,
            max_num_batched_tokens=300,
        )
        cases.append((replace(base, engine=engine, workload=small), 150))
    for sc, steps in cases:
        for seed in (0, 7):
            before, after = dumps(old(sc, seed, steps)), dumps(build_schedule(sc, seed, steps))
            if not sc.engine.async_scheduling or sc.name == "minimal-race":
                assert before == after
                continue
            _only_the_avoided_extra_step_differs(json.loads(before), json.loads(after))


def _only_the_avoided_extra_step_differs(before: dict, after: dict) -> None:
    """The per-object builder predates issue #22's "avoid scheduling an extra step" rule: the
    schedules agree until the rule first fires (bench's own check, which its output reports)."""
    assert _steps_in_common(before, after) > 0
    assert differs_only_by_avoided_extra_step(before, after)


def test_the_avoided_extra_step_check_refuses_other_differences() -> None:
    """differs_only_by_avoided_extra_step is no rubber stamp: a schedule with a request dropped
    anywhere else, or with a step changed at the start, is refused."""
    sc = load_scenario("qwen35-mtp3")
    same = json.loads(dumps(build_schedule(sc, 0, 60)))
    assert differs_only_by_avoided_extra_step(same, same)
    assert _steps_in_common(same, same) == 60
    other = json.loads(dumps(build_schedule(sc, 1, 60)))
    assert not differs_only_by_avoided_extra_step(same, other)
    cut = json.loads(json.dumps(same))
    victim = cut["steps"][30]["req_ids"].pop()
    cut["steps"][30]["unscheduled"].append(victim)  # dropped, but never finished after
    assert _steps_in_common(same, cut) == 30
    assert not differs_only_by_avoided_extra_step(same, cut)


def test_bench_waits_times_each_command_in_loop_units(monkeypatch, capsys) -> None:
    """``bench --waits`` on two quick commands: a row per command with its wall time in units
    of the reference loop, the goal's verdict where there is a goal, and a failed command's
    exit status kept (the bench then exits 1)."""
    import sim.explore.bench_waits as waits

    assert {name for name, _argv, _goal in waits.commands(Path("/tmp"))} >= {
        "check R=3 S=3 k=3", "risk (defaults)", "README sweep, default executor",
        "README sweep, --workers 1", "run --stream, 20,000 steps",
        "run --stream, 20,000 steps, --workers 1",
    }  # fmt: skip
    monkeypatch.setattr(waits, "LOOP_ITERATIONS", 100_000)
    monkeypatch.setattr(waits, "commands", lambda tmp: [
        ("README sweep, default executor", ["params", "--timing", "h200"], 1000.0),
        ("README sweep, --workers 1", ["params", "--timing", "h200"], None),
    ])  # fmt: skip
    assert waits.main(fmt="json") == 0
    rows = json.loads(capsys.readouterr().out)  # progress on stderr: stdout is the table
    assert [r["command"] for r in rows] == ["README sweep, default executor",
                                            "README sweep, --workers 1"]  # fmt: skip
    assert all(r["exit"] == 0 and r["loops"] > 0 for r in rows)
    # each row carries the run's reference loop: loops = wall / loop_s
    assert all(
        r["loop_s"] > 0 and abs(r["wall_s"] / r["loop_s"] / r["loops"] - 1) < 0.05 for r in rows
    )
    assert rows[0]["meets_goal"] is True and rows[1]["meets_goal"] is None
    monkeypatch.setattr(waits, "commands", lambda tmp: [
        ("README sweep, default executor", ["params", "--timing", "no-such-file"], None),
        ("README sweep, --workers 1", ["params"], None),
    ])  # fmt: skip
    assert waits.main(fmt="json") == 1


def test_bench_without_git_history_says_the_builders_were_not_compared(monkeypatch, capsys) -> None:
    """An installed copy has no git history: no 'before' figures, and the line says why."""
    import sim.explore.bench as bench

    monkeypatch.setattr(bench, "old_build_schedule", lambda: None)
    assert bench.main(40, points=10, vector_steps=20, sample=2, long_steps=0) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("schedule: "))
    assert "not compared: no git history" in line and "speedup=" not in line
    assert "schedule_speedup" not in json.loads(out.strip().splitlines()[-1])
