"""``python -m sim bench``: simulator speed beside a bare SimPy loop, measured in one run.

Events are SimPy's own count of scheduled events (``Environment._eid``), so the ratio
compares like with like: our events/s over the events/s of a loop of plain timeouts of
the same count. Target (issue 3): ratio >= 0.3.
"""

from __future__ import annotations

import json
import time

import simpy

from sim.model.params import load_scenario
from sim.model.policies import POLICIES
from sim.model.scheduling import build_schedule
from sim.model.simulate import Model


def bare_simpy(n_events: int) -> float:
    env = simpy.Environment()

    def loop():
        for _ in range(n_events):
            yield env.timeout(1)

    env.process(loop())
    t0 = time.perf_counter()
    env.run()
    return n_events / (time.perf_counter() - t0)


def main(steps: int) -> int:
    scenario = load_scenario("qwen35-mtp3")
    t0 = time.perf_counter()
    schedule = build_schedule(scenario, 0, steps)
    schedule_s = time.perf_counter() - t0
    model = Model(schedule, scenario.timing, POLICIES["synced-gather"], 0, trace=False)
    t0 = time.perf_counter()
    model.run()
    sim_s = time.perf_counter() - t0
    events = next(model.env._eid)
    ours = events / sim_s
    bare = bare_simpy(events)
    print(f"scenario=qwen35-mtp3 steps={steps} schedule_s={schedule_s:.3f} simulate_s={sim_s:.3f}")
    print(
        json.dumps(
            {
                "steps": steps,
                "steps_per_s": round(steps / sim_s, 1),
                "events": events,
                "events_per_s": round(ours),
                "bare_simpy_events_per_s": round(bare),
                "ratio": round(ours / bare, 3),
                "schedule_steps_per_s": round(steps / schedule_s, 1),
            },
            sort_keys=True,
        )
    )
    return 0
