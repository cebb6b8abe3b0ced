"""Swarm: the fixed policies and async-off consume no wrong count over >= 10^5 steps each."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.explore.swarm import draw_timing
from sim.model.params import load_scenario
from sim.model.policies import POLICIES
from sim.model.scheduling import build_schedule
from sim.runs.run import run_policy

STEPS = 2000  # full: 50 * 2000 = 10^5 steps per policy (make test-slow); quick: 4 * 2000


@pytest.mark.parametrize(
    "seeds", [pytest.param(4, id="quick"), pytest.param(50, id="full", marks=pytest.mark.slow)]
)
def test_swarm_fixed_policies_never_consume_a_wrong_count(seeds: int) -> None:
    base = load_scenario("qwen35-mtp3")
    sync = replace(base, engine=replace(base.engine, async_scheduling=False))
    steps = {
        name: 0
        for name in ("device-authoritative", "private-buffer", "sync-before-moves", "async-off")
    }
    racy_wrong = 0
    for seed in range(seeds):
        timing = draw_timing(base.timing, seed)
        sc = replace(base, timing=timing)
        sched = build_schedule(sc, seed, STEPS)
        for name in ("device-authoritative", "private-buffer", "sync-before-moves"):
            s = run_policy(sched, sc, POLICIES[name], seed, trace=False).summary
            assert s["gpu_wrong"] == 0, (name, seed, s)
            steps[name] += s["steps"]
        if seed % 10 == 0:  # the racy control: the swarm does reach the race
            racy_wrong += run_policy(sched, sc, POLICIES["unsynced"], seed, trace=False).summary[
                "gpu_wrong"
            ]
        sc_sync = replace(sync, timing=timing)
        s = run_policy(
            build_schedule(sc_sync, seed, STEPS),
            sc_sync,
            POLICIES["synced-gather"],
            seed,
            trace=False,
        ).summary
        assert s["gpu_wrong"] == 0 and s["cpu_wrong"] == 0, ("async-off", seed, s)
        steps["async-off"] += s["steps"]
    assert min(steps.values()) >= seeds * STEPS
    assert racy_wrong > 0
