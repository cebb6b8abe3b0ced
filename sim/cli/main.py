"""Command line: ``schedule``, ``run``, ``sweep``, ``plot``, ``perfetto``, ``compare``, ``bench``.

Every :class:`SpecraceError` becomes one ``error: ...`` line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.cli import check as check_cli
from sim.errors import SpecraceError
from sim.model import schedule as schedule_mod
from sim.model.params import (
    Scenario,
    load_scenario,
    scenario_from_dict,
    timing_file_overrides,
    with_overrides,
)
from sim.model.policies import POLICIES, get_policy
from sim.model.scheduling import build_schedule
from sim.runs.io import atomic_write_text, ensure_out_dir


def _overrides(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecraceError(f"--set {item!r}: expected section.key=value")
        out[key.strip()] = value.strip()
    return out


def print_parameters(scenario: Scenario, seed: int) -> None:
    print(f"SEED={seed}")
    print(f"scenario={scenario.name}")
    for section in ("engine", "workload", "timing"):
        for key, value in scenario.to_dict()[section].items():
            if key == "requests":
                value = f"<{len(value)} scripted requests>"
            print(f"{section}.{key}={value}")


def cmd_schedule(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, _overrides(args.set))
    steps = args.steps or scenario.default_steps
    print_parameters(scenario, args.seed)
    sched = build_schedule(scenario, args.seed, steps)
    out = ensure_out_dir(Path(args.out))
    atomic_write_text(out / "schedule.json", schedule_mod.dumps(sched))
    s = sched.summary()
    print(
        f"steps={s['steps']} requests_arrived={s['requests_arrived']} "
        f"requests_scheduled={s['requests_scheduled']} "
        f"requests_finished={s['requests_finished']}"
    )
    print("row_ops " + " ".join(f"{k}={v}" for k, v in s["row_ops"].items()))
    print(f"first_spec_steps={s['first_spec_steps']}")
    print(f"wrote {out / 'schedule.json'}")
    return 0


def scenario_and_schedule(args: argparse.Namespace) -> tuple[Scenario, schedule_mod.Schedule]:
    """From ``--schedule PATH`` (its own scenario and seed; ``--set`` may change timing only)
    or from ``--scenario/--seed/--steps``."""
    overrides = _overrides(args.set)
    if not args.schedule:
        scenario = load_scenario(args.scenario, overrides, tuple(args.timing))
        return scenario, build_schedule(scenario, args.seed, args.steps or scenario.default_steps)
    sched = schedule_mod.read_schedule(Path(args.schedule))
    if args.timing:
        overrides = {**timing_file_overrides(args.timing), **overrides}
    if any(not k.startswith("timing.") for k in overrides):
        raise SpecraceError(
            "with --schedule, --set may change timing.* only (the schedule fixes "
            "engine and workload)"
        )
    base = scenario_from_dict(sched.scenario, "schedule", args.schedule)
    return (with_overrides(base, overrides) if overrides else base), sched


def cmd_run(args: argparse.Namespace) -> int:
    import json

    from sim.runs.run import run_policy, write_run

    names = list(POLICIES) if args.policy == "all" else [get_policy(args.policy).name]
    scenario, sched = scenario_and_schedule(args)
    steps = len(sched.steps)
    print_parameters(scenario, sched.seed)
    print(f"policy={args.policy} steps={steps}")
    out = ensure_out_dir(Path(args.out))
    if len(names) > 1:
        atomic_write_text(out / "schedule.json", schedule_mod.dumps(sched))
    summaries = []
    for name in names:
        result = run_policy(sched, scenario, POLICIES[name], sched.seed, trace=not args.no_trace)
        target = out / name if len(names) > 1 else out
        write_run(target, scenario, sched.seed, sched, result, write_schedule=len(names) == 1)
        summaries.append(result.summary)
    if len(names) > 1:
        from sim.runs.io import write_json

        write_json(out / "comparison.json", summaries)
    print_table(summaries)
    if not scenario.engine.async_scheduling:
        print("note: async scheduling is off: every policy takes vLLM's synchronous path")
    if args.json:
        last = summaries[0] if len(summaries) == 1 else {"policies": summaries}
        print(json.dumps(last, sort_keys=True))
    return 0


def print_table(summaries: list[dict]) -> None:
    head = (
        "policy",
        "reads",
        "cpu_wrong",
        "gpu_wrong",
        "unlanded",
        "ownership",
        "double-permute",
        "prompt_lost",
        "corrupted_reqs",
        "step_ms",
        "tok/s",
    )
    print(" ".join(f"{h:>20}" if i == 0 else f"{h:>14}" for i, h in enumerate(head)))
    for s in summaries:
        k = s["by_kind"]
        cells = (
            s["policy"],
            s["reads"],
            s["cpu_wrong"],
            s["gpu_wrong"],
            k.get("unlanded", 0),
            k.get("ownership", 0),
            k.get("double-permute", 0),
            s["prompt_state_lost"],
            s["corrupted_requests"],
            f"{s['mean_step_ns'] / 1e6:.3f}",
            f"{s['tokens_per_s']:.0f}",
        )
        print(" ".join(f"{c:>20}" if i == 0 else f"{c!s:>14}" for i, c in enumerate(cells)))


def cmd_bench(args: argparse.Namespace) -> int:
    from sim.explore.bench import main as bench_main

    return bench_main(args.steps or 2000)


def cmd_sweep(args: argparse.Namespace) -> int:
    from sim.explore.sweep import SweepSpec, parse_vary, run_sweep

    policies = tuple(POLICIES) if args.policy == "all" else tuple(args.policy.split(","))
    for name in policies:
        get_policy(name)
    if bool(args.vary) == bool(args.swarm):
        raise SpecraceError("give either --vary (a grid) or --swarm N (timing sets)")
    spec = SweepSpec(
        args.scenario, policies, parse_vary(args.vary), args.swarm, args.seeds, args.steps
    )
    load_scenario(args.scenario)
    df = run_sweep(spec, Path(args.out))
    print(f"wrote {Path(args.out) / 'sweep.parquet'} ({len(df)} rows)")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:

    from sim.explore.plots import hazard_plot, margin_histogram
    from sim.runs.io import atomic_write, read_parquet

    src = Path(args.dir)
    if (src / "sweep.parquet").is_file():
        df = read_parquet(src / "sweep.parquet", "sweep table")
        x = args.x or next((c for c in df.columns if c.startswith("set.")), "")
        if x not in df.columns:
            raise SpecraceError(f"--x {x!r}: not a column of {src / 'sweep.parquet'}")
        fig, name = hazard_plot(df, x), "hazard.png"
    elif (src / "reads.parquet").is_file():
        reads = read_parquet(src / "reads.parquet", "reads table")
        fig, name = margin_histogram(reads), "margins.png"
    else:
        raise SpecraceError(f"{src}: neither a sweep (sweep.parquet) nor a run (reads.parquet)")
    out = Path(args.out) if args.out else src / name
    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    print(f"wrote {out}")
    return 0


def cmd_perfetto(args: argparse.Namespace) -> int:

    from sim.explore.perfetto import dumps
    from sim.runs.io import read_parquet

    trace = read_parquet(Path(args.dir) / "trace.parquet", "trace (run without --no-trace)")
    out = Path(args.dir) / "trace.perfetto.json"
    atomic_write_text(out, dumps(trace))
    print(f"wrote {out}: open it in ui.perfetto.dev")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from sim.hardware.compare import agreement, by_landing, read_observed

    observed = read_observed(Path(args.dir))
    print(agreement(observed).to_string(index=False))
    if "sim_gpu_wrong" in observed.columns:
        from sim.hardware.compare import prediction_agreement

        print(prediction_agreement(observed).to_string(index=False))
    if args.req_id:
        print(by_landing(observed, args.req_id, args.step).to_string(index=False))
    return 0


# Subcommands that live in their own module of sim.cli: each ``register(sub)`` adds its parser
# and sets ``func``.
PLUGINS: tuple = (check_cli.register,)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sim",
        description="Predict when vLLM async spec decoding reads a wrong accepted count.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("schedule", help="write the timing-free schedule.json")
    s.add_argument("--scenario", default="qwen35-mtp3", help="built-in name or TOML path")
    s.add_argument("--steps", type=int, default=0, help="engine steps (default: scenario's)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True)
    s.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    s.set_defaults(func=cmd_schedule)
    r = sub.add_parser("run", help="simulate a scenario under one policy or all")
    r.add_argument("--scenario", default="qwen35-mtp3", help="built-in name or TOML path")
    r.add_argument("--policy", default="all", help=f"{', '.join(POLICIES)} or all")
    r.add_argument("--steps", type=int, default=0, help="engine steps (default: scenario's)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", required=True)
    r.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    r.add_argument("--schedule", default="", help="simulate this schedule.json instead")
    r.add_argument(
        "--timing",
        action="append",
        default=[],
        metavar="FILE",
        help="a [timing] TOML (e.g. data/params/*.toml), applied before --set",
    )
    r.add_argument("--json", action="store_true", help="last line: one JSON summary")
    r.add_argument("--no-trace", action="store_true", help="skip trace.parquet")
    r.set_defaults(func=cmd_run)
    w = sub.add_parser("sweep", help="many runs over a grid or a swarm; resumable")
    w.add_argument("--scenario", default="qwen35-mtp3")
    w.add_argument("--policy", default="all", help="comma-separated policies or all")
    w.add_argument("--vary", action="append", default=[], metavar="SECTION.KEY=V1,V2,...")
    w.add_argument("--swarm", type=int, default=0, help="N swarm-drawn timing sets")
    w.add_argument("--seeds", type=int, default=1)
    w.add_argument("--steps", type=int, default=1000)
    w.add_argument("--out", required=True)
    w.set_defaults(func=cmd_sweep)
    pl = sub.add_parser("plot", help="hazard plot of a sweep, margin histogram of a run")
    pl.add_argument("dir", help="a sweep or run directory")
    pl.add_argument("--x", default="", help="swept column for the x axis")
    pl.add_argument("--out", default="", help="PNG path (default: inside DIR)")
    pl.set_defaults(func=cmd_plot)
    pf = sub.add_parser("perfetto", help="trace.parquet -> trace.perfetto.json")
    pf.add_argument("dir", help="a run directory")
    pf.set_defaults(func=cmd_perfetto)
    c = sub.add_parser("compare", help="model vs hardware replay (observed.parquet)")
    c.add_argument("dir", help="a replay directory or an observed*.parquet file")
    c.add_argument("--req-id", default="", help="also: what this request read, by landing")
    c.add_argument("--step", type=int, default=4)
    c.set_defaults(func=cmd_compare)
    b = sub.add_parser("bench", help="engine steps/s and events/s beside bare SimPy")
    b.add_argument("--steps", type=int, default=0)
    b.set_defaults(func=cmd_bench)
    for register in PLUGINS:
        register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "steps", 0) and args.steps < 0:
            raise SpecraceError("--steps must be > 0")
        return args.func(args)
    except SpecraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
