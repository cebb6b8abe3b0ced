"""`python -m sim bench` runs end to end on small sizes and reports what it claims (no timing
is asserted: benchmarks print, the machine is shared)."""

from __future__ import annotations

import json

from sim.explore.bench import bare_mix, event_mix, main, peak_rss_mb
from sim.model.params import load_scenario
from sim.model.policies import POLICIES
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
    assert 10 < peak_rss_mb(20, streamed=True) < 4000
