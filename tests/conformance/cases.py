"""The schedules the conformance suite replays: built-in scenarios and random ones.

The built-in scenarios are minimal-race (the race of docs/mechanism.md §9 by hand) and
300 steps of qwen35-mtp3 (64 rows). For the random ones one seed draws a whole scenario:
each seed draws k, the batch size, the token budget (small, so prefills are chunked), the
arrival rate and, for half of the seeds, a KV capacity small enough to preempt; every
seed has prefix-cache hits. Odd seeds use reorder threshold 1, even seeds 1 + k.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from sim.model.params import Scenario, load_scenario, scenario_from_dict
from sim.model.schedule import Schedule
from sim.model.scheduling import build_schedule

SEEDS = tuple(range(32))
NUM_STEPS = 80
BUILTIN = {"minimal-race": 8, "qwen35-mtp3": 300}  # scenario -> steps (seed 0)
CASES = (*BUILTIN, *SEEDS)


def scenario_for(seed: int) -> Scenario:
    rng = np.random.default_rng([0x5EC, seed])
    k = int(rng.integers(1, 5))
    max_num_seqs = int(rng.choice([4, 6, 8, 12, 16]))
    engine = {
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_seqs * (1 + k) + int(rng.integers(8, 64)),
        "num_speculative_tokens": k,
        "async_scheduling": True,
        "reorder_threshold_is_one": seed % 2 == 1,
        "kv_cache_capacity_tokens": int(rng.integers(60, 250)) if seed % 4 >= 2 else 0,
    }
    workload = {
        "arrival": "poisson",
        "initial_requests": int(rng.integers(2, max_num_seqs + 1)),
        "arrival_rate_per_step": float(rng.uniform(0.3, 1.0)),
        "acceptance_probs": [0.8, 0.6, 0.5, 0.4],
        "prefix_hit_prob": 0.3,
        "prefix_hit_fraction": 0.5,
        "prompt_len": {"dist": "lognormal", "mean": 40.0, "sigma": 0.8, "min": 2, "max": 200},
        "output_len": {"dist": "lognormal", "mean": 10.0, "sigma": 0.8, "min": 1, "max": 60},
    }
    raw = {"default_steps": NUM_STEPS, "engine": engine, "workload": workload}
    return scenario_from_dict(raw, f"conformance-{seed}", f"tests/conformance seed {seed}")


@cache
def schedule_for(case: int | str) -> Schedule:
    if isinstance(case, str):
        return build_schedule(load_scenario(case), 0, BUILTIN[case])
    return build_schedule(scenario_for(case), case, NUM_STEPS)


def describe(case: int | str) -> str:
    if isinstance(case, str):
        return f"scenario {case}, seed 0"
    e = scenario_for(case).engine
    return (
        f"seed {case}: k={e.num_speculative_tokens} max_num_seqs={e.max_num_seqs} "
        f"max_num_batched_tokens={e.max_num_batched_tokens} "
        f"threshold={e.reorder_batch_threshold} kv_cache_capacity_tokens="
        f"{e.kv_cache_capacity_tokens}"
    )
