"""Rates of wrong consumed counts over seeds: one run counted (:func:`seed_tally`), runs pooled
(:func:`pool`) into a :class:`RateEstimate` with Wilson 95 % intervals, and the calls that
simulate them (:func:`simulate_rates`, :func:`estimate_all`).

A *generation* is a request that consumed at least one accepted count; it is *corrupted*
when the GDN kernel consumed at least one wrong count for it. The interval treats
generations as independent trials (they share a schedule within a run, so it is a little
optimistic). ``engine`` ``vector`` (the default, :func:`sim.model.vector.simulate_points`,
no per-read table) or ``simpy`` (the reference) give the same estimate
(tests/sim/resolve/test_risk.py).
:mod:`sim.resolve.risk` and :mod:`sim.resolve.host_band` both build on this module.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sim.errors import SpecraceError
from sim.model.params import Scenario
from sim.model.policies import Policy, named
from sim.model.schedule import Schedule
from sim.model.scheduling import build_schedule
from sim.model.vector import simulate_points
from sim.runs.run import run_policy
from sim.runs.stats import Z95
from sim.runs.stats import wilson as stats_wilson

ENGINES = ("vector", "simpy")  # timing tiers; the first is the default


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """:func:`sim.runs.stats.wilson` as two floats, and (0, 0) with no trials (a rate that was
    not measured reads as none here, not as [0, 1])."""
    if trials <= 0:
        return 0.0, 0.0
    lo, hi = stats_wilson(successes, trials, z)
    return float(lo), float(hi)


@dataclass(frozen=True)
class RateEstimate:
    policy: str
    runs: int  # seeds simulated
    steps: int  # engine steps, all runs
    generations: int
    corrupted: int
    per_10k: float  # corrupted generations per 10,000
    per_10k_lo: float
    per_10k_hi: float
    wrong_steps: int  # steps in which some consumed count was wrong
    per_10k_steps: float
    per_10k_steps_lo: float
    per_10k_steps_hi: float
    gpu_wrong: int  # wrong consumed counts
    prompt_state_lost: int
    by_kind: dict[str, int]
    mean_step_ns: float
    tokens_per_s: float

    @property
    def safe(self) -> bool:
        return self.corrupted == 0


def generations(schedule: Schedule) -> int:
    """Requests that consume at least one accepted count (have a read): timing-free."""
    ids: set[str] = set()
    for rec in schedule.steps[1:]:
        ids.update(itertools.compress(rec.req_ids, (rec.prev_positions >= 0).tolist()))
    return len(ids)


@dataclass(frozen=True)
class SeedTally:
    """One run's (one seed's) counts, before they are pooled into a :class:`RateEstimate`."""

    generations: int
    corrupted: int
    wrong_steps: int
    gpu_wrong: int
    prompt_state_lost: int
    steps: int
    by_kind: dict[str, int]
    mean_step_ns: float
    tokens_per_s: float


def seed_tally(
    sched: Schedule, scenario: Scenario, policy: Policy, seed: int, engine: str = ENGINES[0]
) -> SeedTally:
    """Simulate one run (``sched``, built with ``seed``) under ``policy`` and count it."""
    if engine == "vector":
        res = simulate_points(
            sched, [scenario.timing], policy, seed, keep_reads=False, keep_timing=False
        )
        s = res.summaries[0]
        gens = generations(sched)
        wrong_steps = int(res.gpu_wrong_steps[0])
        kinds = res.gpu_wrong_by_kind[0]
    else:
        run = run_policy(sched, scenario, policy, seed, trace=False)
        reads, s = run.reads, run.summary
        gens = int(reads["req_id"].nunique())
        wrong_steps = int(reads.loc[reads["gpu_wrong"], "step"].nunique())
        counts = reads.loc[reads["gpu_wrong"], "kind"].value_counts()
        kinds = {str(k): int(n) for k, n in counts.items()}
    return SeedTally(
        generations=gens,
        corrupted=int(s["corrupted_requests"]),
        wrong_steps=wrong_steps,
        gpu_wrong=int(s["gpu_wrong"]),
        prompt_state_lost=int(s["prompt_state_lost"]),
        steps=int(s["steps"]),
        by_kind=dict(kinds),
        mean_step_ns=s["mean_step_ns"],
        tokens_per_s=s["tokens_per_s"],
    )


def pool(policy: str, tallies: list[SeedTally]) -> RateEstimate:
    """The runs of seeds 0..n-1, in seed order, as one estimate (sums in that order, so the
    floats are the same however the runs were computed)."""
    gens = corrupted = wrong_steps = gpu_wrong = lost = total_steps = 0
    by_kind: dict[str, int] = {}
    step_ns = tok = 0.0
    for t in tallies:
        gens += t.generations
        corrupted += t.corrupted
        wrong_steps += t.wrong_steps
        gpu_wrong += t.gpu_wrong
        lost += t.prompt_state_lost
        total_steps += t.steps
        for k, n in t.by_kind.items():
            by_kind[k] = by_kind.get(k, 0) + n
        step_ns += t.mean_step_ns
        tok += t.tokens_per_s
    seeds = len(tallies)
    lo, hi = wilson(corrupted, gens)
    slo, shi = wilson(wrong_steps, total_steps)
    return RateEstimate(
        policy=policy,
        runs=seeds,
        steps=total_steps,
        generations=gens,
        corrupted=corrupted,
        per_10k=1e4 * corrupted / gens if gens else 0.0,
        per_10k_lo=1e4 * lo,
        per_10k_hi=1e4 * hi,
        wrong_steps=wrong_steps,
        per_10k_steps=1e4 * wrong_steps / total_steps if total_steps else 0.0,
        per_10k_steps_lo=1e4 * slo,
        per_10k_steps_hi=1e4 * shi,
        gpu_wrong=gpu_wrong,
        prompt_state_lost=lost,
        by_kind=dict(sorted(by_kind.items())),
        mean_step_ns=round(step_ns / seeds, 1),
        tokens_per_s=round(tok / seeds, 1),
    )


def _schedule(scenario: Scenario, seed: int, steps: int, schedules: dict | None) -> Schedule:
    """A schedule is timing-free: it depends on the engine, the workload, the seed and the
    step count only, so ``schedules`` (a cache) serves every estimate that shares those."""
    key = (scenario.engine, scenario.workload, seed, steps)
    sched = schedules.get(key) if schedules is not None else None
    if sched is None:
        sched = build_schedule(scenario, seed, steps)
        if schedules is not None:
            schedules[key] = sched
    return sched


def simulate_rates(
    scenario: Scenario,
    policy: Policy,
    seeds: int,
    steps: int,
    engine: str = ENGINES[0],
    schedules: dict | None = None,
) -> RateEstimate:
    """Simulate ``seeds`` runs of ``steps`` steps (seeds 0..seeds-1) and pool them.

    ``schedules``: a cache shared between calls, so estimates that differ in policy or
    timing alone run on the same schedules instead of building them again."""
    if engine not in ENGINES:
        raise SpecraceError(f"--engine {engine!r}: expected {' or '.join(ENGINES)}")
    return pool(
        policy.name,
        [
            seed_tally(_schedule(scenario, seed, steps, schedules), scenario, policy, seed, engine)
            for seed in range(seeds)
        ],
    )


EstimateSpec = tuple[Scenario, str]  # a scenario and the name of the policy it runs


def _group_unit(unit: tuple[int, int, str, tuple[EstimateSpec, ...]]) -> list[SeedTally]:
    """One seed of estimates that share a schedule (same engine and workload): built once."""
    seed, steps, engine, specs = unit
    sched = build_schedule(specs[0][0], seed, steps)
    return [seed_tally(sched, sc, named(name), seed, engine) for sc, name in specs]


def estimate_all(
    specs: list[EstimateSpec], seeds: int, steps: int, engine: str = ENGINES[0], workers: int = 1
) -> list[RateEstimate]:
    """:func:`simulate_rates` of every spec, each schedule built once per seed, the runs
    spread over ``workers`` processes (:func:`sim.runs.processes.map_units`).

    The work units are (seed, specs sharing a schedule); each estimate pools its runs in seed
    order, so the result is the same whatever ``workers`` is."""
    from sim.runs.processes import map_units

    if engine not in ENGINES:
        raise SpecraceError(f"--engine {engine!r}: expected {' or '.join(ENGINES)}")
    groups: dict[tuple, list[int]] = {}
    for i, (sc, _name) in enumerate(specs):
        groups.setdefault((sc.engine, sc.workload), []).append(i)
    plan = [(seed, members) for seed in range(seeds) for members in groups.values()]
    units = [(seed, steps, engine, tuple(specs[i] for i in members)) for seed, members in plan]
    tallies: list[list[SeedTally]] = [[] for _ in specs]
    for (_seed, members), out in zip(
        plan, map_units(_group_unit, units, workers, preload=(__name__,)), strict=True
    ):  # seed order: the units are in it
        for i, t in zip(members, out, strict=True):
            tallies[i].append(t)
    return [pool(name, tallies[i]) for i, (_sc, name) in enumerate(specs)]
