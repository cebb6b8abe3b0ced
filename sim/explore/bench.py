"""``python -m sim bench``: how fast each tier is, every ratio measured side by side in one run.

- **SimPy tier** events/s (SimPy's own count of scheduled events, ``Environment._eid``) over
  two baselines run in the same process: a bare loop of plain timeouts of the same count,
  and a bare replay of the *same event mix* (the model's timeouts, URGENT stream
  completions and succeeded events, in the model's proportions, with no model logic).
  Goal: ratio >= 0.3.
- **Vector tier** point-steps/s over the SimPy tier's, both producing every read's verdict
  and the per-point summary for the same swarm-drawn timing points (the SimPy tier on a
  sample of them); and the wall time of 10^4 points x 10^3 steps. Goals: >= 500x, < 5 s.
- **Schedule** steps/s of ``build_schedule``, and of the per-object version it replaced
  (rebuilt from git at :data:`SCHEDULE_BEFORE` when the repository is there).
- **Peak RSS** of a long run in a child process of its own: streamed (``run --stream``: the
  vector tier, schedule.parquet and reads in row groups; goal < 2 GB at 10^6 steps of
  ``qwen35-mtp3``, ``--long-steps 1000000``, about 6 minutes here), and, up to
  :data:`FULL_RSS_MAX_STEPS`, the SimPy tier holding the whole run (``run --no-trace``).

Times are CPU seconds of this process (``time.process_time``), the 10^4 x 10^3 run also in
wall seconds. The machine may be shared: only ratios of runs made here mean much.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from collections import Counter
from pathlib import Path

import simpy
from simpy.core import NORMAL, URGENT

from sim.explore.swarm import draw_timing
from sim.model.params import load_scenario
from sim.model.policies import POLICIES
from sim.model.reads import build_reads, summarize
from sim.model.schedule import dumps
from sim.model.scheduling import build_schedule
from sim.model.simulate import Model
from sim.model.vector import simulate_points
from sim.runs.tables import show

SCENARIO = "qwen35-mtp3"
POLICY = "synced-gather"
SCHEDULE_BEFORE = "7fc3e83"  # the last commit with the per-object build_schedule
ROOT = Path(__file__).resolve().parents[2]
FULL_RSS_MAX_STEPS = 20_000  # a whole-run child holds ~40 KB per step: no more than this
RSS_GOAL_MB = 2048  # at 10^6 steps
# CPU seconds of this process: on a machine shared with other work, wall time measures the
# neighbours; CPU time is what "on one core" means (everything here is single-threaded).
_cpu = time.process_time


def bare_simpy(n_events: int) -> float:
    """Events/s of one process yielding ``n_events`` plain timeouts."""
    env = simpy.Environment()

    def loop():
        for _ in range(n_events):
            yield env.timeout(1)

    env.process(loop())
    t0 = _cpu()
    env.run()
    return n_events / (_cpu() - t0)


class _CountingEnv(simpy.Environment):
    """Counts what the model schedules: (kind of event, priority)."""

    def __init__(self) -> None:
        super().__init__()
        self.mix: Counter[tuple[str, int]] = Counter()

    def schedule(self, event, priority=NORMAL, delay=0):
        kind = "timeout" if isinstance(event, simpy.Timeout) else type(event).__name__
        self.mix[(kind, priority)] += 1
        super().schedule(event, priority, delay)


def event_mix(schedule, timing, policy, seed: int) -> Counter[tuple[str, int]]:
    """The model's scheduled events by kind and priority (one run under a counting env)."""
    env = _CountingEnv()
    Model(schedule, timing, policy, seed, trace=False, env=env).run()
    return env.mix


def bare_mix(mix: Counter[tuple[str, int]], processes: int = 5) -> float:
    """Events/s of ``processes`` bare processes (the model's engine, worker and three
    streams) scheduling the same number of timeouts (NORMAL), URGENT completions and
    succeeded events as the model did, with no model logic between them."""
    env = simpy.Environment()
    n_timeout = sum(v for (k, p), v in mix.items() if k == "timeout" and p == NORMAL)
    n_urgent = sum(v for (k, p), v in mix.items() if p == URGENT)
    n_other = sum(mix.values()) - n_timeout - n_urgent
    total = n_timeout + n_urgent + n_other
    per = max(total // processes, 1)

    def proc(share: int):
        # Interleave the kinds in the model's proportions.
        for i in range(share):
            x = (i * total) // share
            if x < n_timeout:
                yield env.timeout(1)
            elif x < n_timeout + n_urgent:
                ev = env.event()
                ev._ok, ev._value = True, None
                env.schedule(ev, URGENT, 1)
                yield ev
            else:
                ev = env.event()
                ev.succeed()
                yield ev

    for _ in range(processes):
        env.process(proc(per))
    t0 = _cpu()
    env.run()
    return next(env._eid) / (_cpu() - t0)


def _simpy_tier(schedule, timings, policy, seed: int) -> tuple[float, list[dict]]:
    """Seconds for the SimPy tier to simulate and judge every read of each timing point."""
    out = []
    t0 = _cpu()
    for timing in timings:
        model = Model(schedule, timing, policy, seed, trace=False)
        model.run()
        out.append(summarize(build_reads(schedule, model), model, schedule))
    return _cpu() - t0, out


def old_build_schedule():
    """``build_schedule`` (with its workload draw and InputBatchRows) as of
    :data:`SCHEDULE_BEFORE`, or None."""
    mods = {}
    for name in ("workload", "input_batch", "scheduling"):
        try:
            src = subprocess.run(
                ["git", "show", f"{SCHEDULE_BEFORE}:sim/model/{name}.py"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        mod_name = f"_specrace_before_{name}"
        for dep in ("workload", "input_batch"):
            src = src.replace(f"from sim.model.{dep} import", f"from _specrace_before_{dep} import")
        mod = types.ModuleType(mod_name)
        sys.modules[mod_name] = mod  # dataclasses look their module up
        exec(compile(src, f"{SCHEDULE_BEFORE}:{name}.py", "exec"), mod.__dict__)
        mods[name] = mod
    return mods["scheduling"].build_schedule


def _schedule_rates(scenario, steps: int, repeats: int = 3) -> dict:
    old = old_build_schedule()
    new_s, old_s = [], []
    for _ in range(repeats):  # interleaved, best of: the machine is shared
        t0 = _cpu()
        build_schedule(scenario, 0, steps)
        new_s.append(_cpu() - t0)
        if old is not None:
            t0 = _cpu()
            old(scenario, 0, steps)
            old_s.append(_cpu() - t0)
    out: dict = {"schedule_steps_per_s": round(steps / min(new_s), 1)}
    if old_s:
        out["schedule_steps_per_s_before"] = round(steps / min(old_s), 1)
        out["schedule_speedup"] = round(min(old_s) / min(new_s), 2)
        before = json.loads(dumps(old(scenario, 0, steps)))
        after = json.loads(dumps(build_schedule(scenario, 0, steps)))
        # Since issue #22 the builder also skips what vLLM's async scheduler skips: the two
        # agree up to the first such skip (the "before" speed is that of less work).
        out["schedule_same_before_first_skip"] = differs_only_by_avoided_extra_step(before, after)
        out["schedule_steps_same_before_after"] = _steps_in_common(before, after)
    return out


def _steps_in_common(before: dict, after: dict) -> int:
    """How many leading steps two schedules of one scenario share."""
    pairs = zip(before["steps"], after["steps"], strict=False)
    return next((i for i, (b, a) in enumerate(pairs) if b != a), len(after["steps"]))


def differs_only_by_avoided_extra_step(before: dict, after: dict) -> bool:
    """Whether ``after`` (this builder's schedule) is ``before`` (the per-object builder's, of
    :data:`SCHEDULE_BEFORE`) up to issue #22's "avoid scheduling an extra step" rule, which the
    per-object builder predates (vLLM's async scheduler skips a running request whose in-flight
    step is sure to reach max_tokens): the same steps up to the first step the rule fires, where
    exactly one request that ``before`` scheduled once more is unscheduled instead, and both
    finish it the step after. (Past that step the layouts part, so nothing more is compared.)"""
    first = _steps_in_common(before, after)
    b_steps, a_steps = before["steps"], after["steps"]
    if first == len(a_steps) == len(b_steps):
        return True
    if first == 0 or first + 1 >= min(len(a_steps), len(b_steps)):
        return False
    b, a = b_steps[first], a_steps[first]
    skipped = set(a["unscheduled"]) - set(b["unscheduled"])
    if len(skipped) != 1 or set(b["req_ids"]) - set(a["req_ids"]) != skipped:
        return False
    (req,) = skipped
    return (
        set(a["req_ids"]) <= set(b["req_ids"])
        and req in b_steps[first + 1]["finished"]
        and req in a_steps[first + 1]["finished"]
    )


def peak_rss_mb(steps: int, streamed: bool = False, workers: int = 1) -> float:
    """Peak RSS (MB) of a child process that runs ``steps`` steps of one policy: the SimPy
    tier holding the whole schedule, its reads and summary (``sim run --no-trace``), or
    ``streamed``: :func:`sim.runs.run.run_streaming` writing its files to a temp folder, on
    ``workers`` processes (2: the sum of both processes' peaks)."""
    if streamed:
        body = (
            "import tempfile\n"
            "from pathlib import Path\n"
            "from sim.runs.run import run_streaming\n"
            "stats = {}\n"
            "with tempfile.TemporaryDirectory() as d:\n"
            f"    run_streaming(Path(d), sc, POLICIES[{POLICY!r}], 0, {steps}, "
            f"schedule_format='parquet', workers={workers}, stats=stats)\n"
            "extra = stats.get('schedule_process_peak_rss_kib', 0)\n"
        )
    else:
        body = (
            "from sim.model.scheduling import build_schedule\n"
            "from sim.runs.run import run_policy\n"
            f"s = build_schedule(sc, 0, {steps})\n"
            f"run_policy(s, sc, POLICIES[{POLICY!r}], 0, trace=False)\n"
        )
    code = (
        "import resource\n"
        "from sim.model.params import load_scenario\n"
        "from sim.model.policies import POLICIES\n"
        "extra = 0\n"
        "if __name__ == '__main__':\n"
        f"    sc = load_scenario({SCENARIO!r})\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
        + "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + extra)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=3600
    )
    if r.returncode != 0:
        return -1.0
    return round(int(r.stdout.strip().splitlines()[-1]) / 1024, 1)  # ru_maxrss is KiB


def main(
    steps: int,
    points: int = 10_000,
    vector_steps: int = 1_000,
    sample: int = 8,
    long_steps: int = 20_000,
    fmt: str = "table",
) -> int:
    scenario = load_scenario(SCENARIO)
    policy = POLICIES[POLICY]
    print(
        f"scenario={SCENARIO} policy={POLICY} steps={steps} points={points} "
        f"vector_steps={vector_steps} sample={sample} long_steps={long_steps}"
    )
    schedule = build_schedule(scenario, 0, steps)

    # -- SimPy tier against bare SimPy -------------------------------------------------------
    model = Model(schedule, scenario.timing, policy, 0, trace=False)
    t0 = _cpu()
    model.run()
    sim_s = _cpu() - t0
    events = next(model.env._eid)
    ours = events / sim_s
    bare = bare_simpy(events)
    mix_rate = bare_mix(event_mix(schedule, scenario.timing, policy, 0))
    print(
        f"simpy tier: {steps} steps in {sim_s:.3f} s, {ours:,.0f} events/s; bare timeouts "
        f"{bare:,.0f}/s (ratio {ours / bare:.3f}); bare same mix {mix_rate:,.0f}/s "
        f"(ratio {ours / mix_rate:.3f})"
    )

    # -- vector tier against the SimPy tier, same points ----------------------------------
    vsched = build_schedule(scenario, 0, vector_steps)
    timings = [draw_timing(scenario.timing, i) for i in range(points)]
    sample_timings = timings[:: max(points // sample, 1)][:sample]
    simpy_s, simpy_summaries = _simpy_tier(vsched, sample_timings, policy, 0)
    t0, w0 = _cpu(), time.perf_counter()
    res = simulate_points(vsched, timings, policy, 0, keep_reads=False, keep_timing=False)
    vector_s, vector_wall_s = _cpu() - t0, time.perf_counter() - w0
    stride = max(points // sample, 1)
    same = all(res.summaries[i * stride] == s for i, s in enumerate(simpy_summaries))
    simpy_rate = len(sample_timings) * vector_steps / simpy_s
    vector_rate = points * vector_steps / vector_s
    print(
        f"vector tier: {points} points x {vector_steps} steps in {vector_s:.2f} s, "
        f"{vector_rate:,.0f} point-steps/s; simpy tier {simpy_rate:,.0f} point-steps/s "
        f"({len(sample_timings)} of the points); ratio {vector_rate / simpy_rate:,.0f}x "
        f"(goal >= 500x); wall {vector_wall_s:.2f} s (goal < 5 s at 10^4 x 10^3); "
        f"sample summaries identical: {same}"
    )

    sched_rates = _schedule_rates(scenario, steps)
    before = (
        f"'before' is the per-object builder of {SCHEDULE_BEFORE}, which predates the avoided "
        "extra step (vLLM's async skip of a request sure to reach max_tokens)"
        if "schedule_speedup" in sched_rates
        else f"not compared: no git history with {SCHEDULE_BEFORE} here"
    )
    print(
        "schedule: "
        + ", ".join(f"{k}={v}" for k, v in sched_rates.items())
        + f" (goal: speedup >= 3; {before})"
    )
    rss: dict[str, float] = {}
    if long_steps:
        for n in sorted({max(long_steps // 4, 1), long_steps}):
            if n <= FULL_RSS_MAX_STEPS:
                rss[f"peak_rss_mb_simpy_{n}"] = peak_rss_mb(n)
            rss[f"peak_rss_mb_streamed_{n}"] = peak_rss_mb(n, streamed=True)
            rss[f"peak_rss_mb_streamed_2_processes_{n}"] = peak_rss_mb(n, True, workers=2)
        print(
            "peak RSS (MB) of one run in a child process: "
            + ", ".join(f"{k.removeprefix('peak_rss_mb_')}={v}" for k, v in rss.items())
            + f" (goal: streamed < {RSS_GOAL_MB} MB at 1,000,000 steps; --long-steps N)"
        )
    doc = {
        "steps": steps,
        "steps_per_s": round(steps / sim_s, 1),
        "events": events,
        "events_per_s": round(ours),
        "bare_simpy_events_per_s": round(bare),
        "ratio": round(ours / bare, 3),
        "bare_mix_events_per_s": round(mix_rate),
        "ratio_mix": round(ours / mix_rate, 3),
        "vector_points": points,
        "vector_steps": vector_steps,
        "vector_s": round(vector_s, 3),
        "vector_wall_s": round(vector_wall_s, 3),
        "vector_point_steps_per_s": round(vector_rate),
        "simpy_point_steps_per_s": round(simpy_rate, 1),
        "vector_over_simpy": round(vector_rate / simpy_rate, 1),
        "vector_matches_simpy_sample": same,
        **sched_rates,
        "long_steps": long_steps,
        **rss,
    }
    show(fmt, [doc], json.dumps(doc, sort_keys=True))
    return 0
