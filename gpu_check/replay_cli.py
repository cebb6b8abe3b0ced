"""``python -m gpu_check replay``: schedule -> replay per policy -> observed.parquet + summary."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_check.environment import environment
from gpu_check.replay import CudaCounts, ReplayConfig, ScriptedCounts, replay
from sim.compare import agreement
from sim.errors import SpecraceError
from sim.io import ensure_out_dir
from sim.params import load_scenario, scenario_from_dict
from sim.policies import POLICIES, get_policy
from sim.run import write_parquet
from sim.schedule import read_schedule
from sim.scheduling import build_schedule


def run_replay_command(args: argparse.Namespace, out: Path, need_cuda, usage_error) -> str:
    try:
        names = list(POLICIES) if args.policy == "all" else args.policy.split(",")
        policies = [get_policy(n) for n in names]
        if args.schedule:  # the very schedule sim simulated
            schedule = read_schedule(Path(args.schedule))
            scenario = scenario_from_dict(schedule.scenario, "schedule", args.schedule)
        else:
            scenario = load_scenario(args.scenario)
            schedule = build_schedule(scenario, args.seed, args.steps or scenario.default_steps)
        out = ensure_out_dir(out)
    except SpecraceError as e:
        raise usage_error(str(e)) from None
    if args.device == "cuda":
        need_cuda()
    steps = len(schedule.steps)
    step_list = [n for _ in range(args.reps) for n in range(1, steps)]
    cfg = ReplayConfig(scenario.timing, seed=args.seed)
    frames, env = [], environment(args.device)
    for policy in policies:
        if args.device == "cuda":
            device = CudaCounts(schedule.max_num_reqs)
            cfg = ReplayConfig(scenario.timing, seed=args.seed, launch_ns=_launch_ns(device))
            env["launch_to_land_ns"] = cfg.launch_ns
        else:
            rng = np.random.default_rng([args.seed, 7])
            plan = [int(rng.integers(-1, len(schedule.steps[n].ops) + 1)) for n in step_list]
            device = ScriptedCounts(schedule.max_num_reqs, plan)
        frames.append(replay(schedule, policy, device, cfg, steps=step_list))
    observed = pd.concat(frames, ignore_index=True)
    if args.gdn:
        from gpu_check.replay_gdn import add_gdn_columns

        small = None if args.device == "cuda" else {"H": 2, "HV": 4, "K": 16, "V": 8}
        impl = "triton" if args.device == "cuda" else "reference"
        observed = add_gdn_columns(observed, schedule, args.device, small, impl)
    write_parquet(out / "observed.parquet", observed)
    table = agreement(observed)
    summary = {
        "scenario": scenario.name,
        "steps": steps,
        "reps": args.reps,
        "seed": args.seed,
        **env,
        "agreement": json.loads(table.to_json(orient="records")),
    }
    from gpu_check.store import write_json

    write_json(summary, out / "replay_summary.json")
    return f"wrote {out / 'observed.parquet'}\n" + table.to_string(index=False)


def _launch_ns(device: CudaCounts, reps: int = 30) -> int:
    """Median time from the launch call's return (the replay's t0) to the tag being visible,
    with no spin: the part of a landing's offset that the spin does not set."""
    import time

    samples = []
    for i in range(reps):
        device.reset(np.ones(len(device.buf), dtype=np.int32), 10_000 + i)
        device.launch(np.ones(1, dtype=np.int32), 0, private=False)
        t0 = time.perf_counter_ns()
        while not device.poll(0):
            pass
        samples.append(time.perf_counter_ns() - t0)
    return int(np.median(samples))
