"""``python -m gpu_check replay``: schedule -> replay per policy -> observed.parquet + summary."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from gpu_check.environment import environment
from gpu_check.replay import (
    CountsDevice,
    CudaCounts,
    ReplayConfig,
    ScriptedCounts,
    clock_lags,
    launch,
    op_offsets,
    replay,
)
from sim.errors import SpecraceError
from sim.hardware.compare import agreement
from sim.model.params import load_scenario, scenario_from_dict
from sim.model.policies import named, select
from sim.model.schedule_io import read_schedule
from sim.model.scheduling import build_schedule
from sim.runs.limits import MAX_STEPS, guard_resources
from sim.runs.run import write_parquet


def run_replay_command(args: argparse.Namespace, out: Path, need_cuda, usage_error) -> str:
    if args.sim_run:
        return _replay_sim_run(args, out, need_cuda, usage_error)
    try:
        policies = list(select(args.policy))
        if args.schedule:  # the very schedule sim simulated
            schedule = read_schedule(Path(args.schedule))
            scenario = scenario_from_dict(schedule.scenario, "schedule", args.schedule)
        else:
            scenario = load_scenario(args.scenario)
            guard_resources(scenario, args.steps or scenario.default_steps)
            schedule = build_schedule(scenario, args.seed, args.steps or scenario.default_steps)
        if args.reps * len(schedule.steps) > MAX_STEPS:
            raise SpecraceError(
                f"--reps {args.reps} x {len(schedule.steps):,} steps: more than {MAX_STEPS:,} "
                "replayed steps"
            )
    except SpecraceError as e:
        raise usage_error(str(e)) from None
    steps = len(schedule.steps)
    cfg = ReplayConfig(scenario.timing, seed=args.seed)
    once = sum(int(op_offsets(schedule.steps[n], scenario.timing)[-1:].sum()) + cfg.slack_ns
               for n in range(1, steps))  # fmt: skip
    _guard_wall(once * args.reps * len(policies), usage_error)
    if args.device == "cuda":
        need_cuda()
    step_list = [n for _ in range(args.reps) for n in range(1, steps)]
    frames, env = [], environment(args.device)
    for policy in policies:
        if args.device == "cuda":
            cuda = CudaCounts(schedule.max_num_reqs)
            device: CountsDevice = cuda
            cfg = _cuda_config(cuda, scenario.timing, args.seed, args.aim, env)
        else:
            rng = np.random.default_rng([args.seed, 7])
            plan = [int(rng.integers(-1, len(schedule.steps[n].ops) + 1)) for n in step_list]
            device = ScriptedCounts(schedule.max_num_reqs, plan)
        frames.append(replay(schedule, policy, device, cfg, steps=step_list))
    observed = pd.concat(frames, ignore_index=True)
    if args.gdn:
        from gpu_check.replay.gdn import add_gdn_columns

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


def _sim_runs(run_dir: Path) -> tuple[Path, list[Path]]:
    """A ``sim run`` directory: one policy (meta.json inside) or ``--policy all`` (one per
    sub-directory, schedule.json at the top). Returns (schedule path, policy directories)."""
    if (run_dir / "meta.json").is_file():
        return run_dir / "schedule.json", [run_dir]
    subs = sorted(d for d in run_dir.iterdir() if (d / "meta.json").is_file()) if (
        run_dir.is_dir()) else []  # fmt: skip
    if not subs:
        raise SpecraceError(f"{run_dir}: not a `python -m sim run` directory (no meta.json)")
    return run_dir / "schedule.json", subs


def _replay_sim_run(args: argparse.Namespace, out: Path, need_cuda, usage_error) -> str:
    """Replay each policy's steps with the landing and op times the model predicted, and
    put the model's verdict beside what the hardware did."""
    from gpu_check.replay import timeline_from_trace
    from sim.hardware.compare import prediction_agreement
    from sim.runs.io import check_run_tables, read_meta, read_table

    try:
        schedule_path, runs = _sim_runs(Path(args.sim_run))
        schedule = read_schedule(schedule_path)
        scenario = scenario_from_dict(schedule.scenario, "schedule", str(schedule_path))
        loaded = []
        for d in runs:
            meta = read_meta(d / "meta.json")
            if meta["scenario"] != schedule.scenario or meta["seed"] != schedule.seed:
                raise SpecraceError(f"{d / 'meta.json'}: not the run of {schedule_path}")
            name = meta["policy"]
            policy = named(name)
            trace = read_table(d / "trace.parquet", "trace.parquet")
            reads = read_table(d / "reads.parquet", "reads.parquet")
            check_run_tables(schedule, reads, trace, str(d))
            timing = scenario_from_dict(meta["scenario"], "meta", str(d / "meta.json")).timing
            loaded.append((policy, timeline_from_trace(trace), reads, timing))
    except SpecraceError as e:
        raise usage_error(str(e)) from None
    _guard_wall(sum(max(t.read_ns, int(t.ops_end_ns.max(initial=0)), 0)
                    for _p, timeline, _r, _t in loaded for t in timeline.values()),
                usage_error)  # fmt: skip
    if args.device == "cuda":
        need_cuda()
    frames, env = [], environment(args.device)
    for policy, timeline, reads, timing in loaded:
        steps = sorted(timeline)
        if args.device == "cuda":
            cuda = CudaCounts(schedule.max_num_reqs)
            device: CountsDevice = cuda
            cfg = _cuda_config(cuda, timing, args.seed, args.aim, env)
        else:  # land exactly where the model said: the replay must then agree everywhere
            cfg = ReplayConfig(timing, seed=args.seed)
            plan = [_scripted_landing(timeline[n], policy) for n in steps]
            device = ScriptedCounts(schedule.max_num_reqs, plan)
        got = replay(schedule, policy, device, cfg, steps=steps, timeline=timeline)
        sim = reads[["step", "req_id", "cpu_value", "gpu_value", "gpu_wrong", "kind",
                     "margin_ns"]].rename(columns=lambda c: c if c in ("step", "req_id")
                                          else f"sim_{c}")  # fmt: skip
        got = got.merge(sim, on=["step", "req_id"], how="left", validate="one_to_one")
        landed = {n: t.land_ns <= t.read_ns for n, t in timeline.items()}
        got["sim_landed"] = got["step"].map(landed).astype(bool)
        frames.append(got)
    observed = pd.concat(frames, ignore_index=True)
    write_parquet(out / "observed.parquet", observed)
    table = agreement(observed)
    pred = prediction_agreement(observed)
    from gpu_check.store import write_json

    write_json({"sim_run": str(args.sim_run), "scenario": scenario.name, **env,
                "agreement": json.loads(table.to_json(orient="records")),
                "prediction": json.loads(pred.to_json(orient="records"))},
               out / "replay_summary.json")  # fmt: skip
    return (f"wrote {out / 'observed.parquet'}\n" + table.to_string(index=False) + "\n"
            + pred.to_string(index=False))  # fmt: skip


REPLAY_WALL_S_MAX = 3600


def _guard_wall(wait_ns: int, usage_error) -> None:
    """The replay waits in real time for every op and read at the timing's offsets: refuse up
    front a timing (or a --sim-run trace) that would keep it waiting for hours."""
    if wait_ns > REPLAY_WALL_S_MAX * 10**9:
        raise usage_error(
            f"the replay would wait about {wait_ns / 3.6e12:,.1f} h in real time for its ops "
            f"and reads (the timing's op costs), more than {REPLAY_WALL_S_MAX // 3600} h: "
            "replay fewer steps or a faster timing"
        )


def _scripted_landing(t, policy) -> int:
    """Op index before which the counts land (ties: the GPU first, sim.model.cuda); -1: later."""
    if t.land_ns > t.read_ns:
        return -1
    return int((t.ops_end_ns < t.land_ns).sum()) if not policy.waits_before_moves else 0


def _cuda_config(cuda: CudaCounts, timing, seed: int, aim: str, env: dict) -> ReplayConfig:
    """The replay's landing calibration on this device, for the chosen aim; recorded in
    ``env`` (the summary)."""
    table = _landing_table(cuda)
    env["aim"] = aim
    env["launch_to_land_ns"] = table[1][0]
    env["landing_fit"] = cuda.landing_fit
    cfg = ReplayConfig(timing, seed=seed, launch_ns=table[1][0], spin_table=table, aim=aim)
    if aim == "device-clock":
        lag = _device_clock_lag(cuda, cfg.lead_ns)
        m = cuda.device_clock().map
        env["device_clock"] = {"offset_ns": m.offset_ns, "uncertainty_ns": m.uncertainty_ns,
                               "rounds": m.rounds, "lag_ns": lag}  # fmt: skip
        cfg = ReplayConfig(timing, seed=seed, launch_ns=table[1][0], spin_table=table, aim=aim,
                           clock_lag_ns=lag)  # fmt: skip
    return cfg


def _device_clock_lag(device: CudaCounts, lead_ns: int, reps: int = 31) -> int:
    """Median of (landing seen - instant aimed at) through the replay's own launch path: what
    the copy's launch and transfer add after the device clock's wait ends."""
    return int(np.median(clock_lags(device, lead_ns, reps)))


SPINS_NS = (0, 10_000, 25_000, 50_000, 100_000, 200_000, 400_000, 800_000, 1_600_000, 3_200_000)


def _landing_table(device: CudaCounts, reps: int = 9) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Requested spin -> landing seen after the launch call returns (the replay's t0), median of
    ``reps``, measured through the replay's own launch path on this device. Short spins are not
    linear (50 µs asked gave 28 µs on the H200), so the replay interpolates in this table
    instead of fitting a line. Made increasing (a tie or dip within noise is smoothed)."""
    import time

    seen = []
    for j, spin in enumerate(SPINS_NS):
        samples = []
        for i in range(reps):
            device.reset(np.ones(len(device.buf), dtype=np.int32), 10_000 + 100 * j + i)
            launch(device, np.ones(1, dtype=np.int32), spin, private=False)
            t0 = time.perf_counter_ns()
            while not device.poll(0):
                pass
            samples.append(time.perf_counter_ns() - t0)
        seen.append(int(np.median(samples)))
    seen = list(np.maximum.accumulate(np.asarray(seen) + np.arange(len(seen))))  # strictly up
    device.landing_fit = {"spins_ns": list(SPINS_NS), "seen_ns": [int(x) for x in seen]}
    return tuple(SPINS_NS), tuple(int(x) for x in seen)
