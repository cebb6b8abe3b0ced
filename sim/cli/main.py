"""Command line: ``schedule``, ``run``, ``sweep``, ``plot``, ``perfetto``, ``compare``, ``bench``.

Every :class:`SpecraceError` becomes one ``error: ...`` line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path
from typing import Any

from sim.cli import check as check_cli
from sim.cli import explore, field_reports, report, risk, upstream
from sim.cli.guards import BUDGET_H, parse_sets
from sim.errors import SpecraceError, one_line
from sim.model import schedule as schedule_mod
from sim.model.params import (
    Scenario,
    load_scenario,
    scenario_from_dict,
    scenario_path,
    timing_file_values,
    with_values,
)
from sim.model.policies import ALL, POLICIES, select
from sim.model.scheduling import build_schedule
from sim.model.verdict import HAZARD_KINDS
from sim.runs import tables
from sim.runs.args import budget_arg, int_in, seed_arg, step_index_arg, steps_arg
from sim.runs.io import atomic_write_text, fresh_output_dir
from sim.runs.limits import guard_resources


def print_parameters(scenario: Scenario, seed: int) -> None:
    print(f"SEED={seed}")
    print(f"scenario={scenario.name}")
    for section in ("engine", "workload", "timing"):
        for key, value in scenario.to_dict()[section].items():
            if key == "requests":
                value = f"<{len(value)} scripted requests>"
            print(f"{section}.{key}={value}")


def cmd_schedule(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, parse_sets(args.set))
    steps = args.steps or scenario.default_steps
    out = Path(args.out)
    if args.format == "parquet":  # streamed: bounded memory whatever the step count
        from sim.model.schedule_parquet import ScheduleWriter, tee
        from sim.model.scheduling import iter_schedule
        from sim.runs.io import atomic_write

        name = "schedule.parquet"
        with fresh_output_dir(out, args.force, kind="schedule") as tmp:
            print_parameters(scenario, args.seed)
            head, step_iter = iter_schedule(scenario, args.seed, steps)

            s: dict = {}

            def write(path: Path) -> None:
                with ScheduleWriter(path, head) as w:
                    s.update(schedule_mod.steps_summary(len(head.requests), tee(w, step_iter)))

            atomic_write(tmp / name, write)
    else:
        guard_resources(scenario, steps)
        name = "schedule.json"
        with fresh_output_dir(out, args.force, kind="schedule") as tmp:
            print_parameters(scenario, args.seed)
            sched = build_schedule(scenario, args.seed, steps)
            atomic_write_text(tmp / name, schedule_mod.dumps(sched))
        s = sched.summary()
    print(
        f"steps={s['steps']} requests_arrived={s['requests_arrived']} "
        f"requests_scheduled={s['requests_scheduled']} "
        f"requests_finished={s['requests_finished']}"
    )
    print("row_ops " + " ".join(f"{k}={v}" for k, v in s["row_ops"].items()))
    print(f"first_spec_steps={s['first_spec_steps']}")
    print(f"wrote {out / name}")
    return 0


def scenario_and_schedule(args: argparse.Namespace) -> tuple[Scenario, schedule_mod.Schedule]:
    """From ``--schedule PATH`` (its own scenario and seed; ``--set`` may change timing only)
    or from ``--scenario/--seed/--steps``."""
    overrides = parse_sets(args.set)
    if not args.schedule:
        scenario = load_scenario(args.scenario, overrides, tuple(args.timing))
        steps = args.steps or scenario.default_steps
        guard_resources(scenario, steps)
        return scenario, build_schedule(scenario, args.seed, steps)
    from sim.model.schedule_io import read_schedule

    sched = read_schedule(Path(args.schedule))
    return schedule_scenario(args, sched), sched


def schedule_scenario(args: argparse.Namespace, sched: schedule_mod.Schedule) -> Scenario:
    """The scenario of ``--schedule``'s file, with ``--timing``/``--set`` (timing only)."""
    overrides = parse_sets(args.set)
    if any(not k.startswith("timing.") for k in overrides):
        raise SpecraceError(
            "with --schedule, --set may change timing.* only (the schedule fixes "
            "engine and workload)"
        )
    base = scenario_from_dict(sched.scenario, "schedule", args.schedule)
    values: dict[str, Any] = dict(timing_file_values(args.timing or ()))
    values |= overrides
    return with_values(base, values) if values else base


def cmd_run(args: argparse.Namespace) -> int:
    import json

    from sim.resolve.check import check_scenario_policy
    from sim.runs.run import run_policy, run_policy_vector, write_run

    if args.stream:
        return run_stream(args)
    if args.workers is not None:
        raise SpecraceError("--workers is for --stream (a run without it is one process)")
    if args.engine == "vector" and not args.no_trace:
        raise SpecraceError("--engine vector writes no trace: add --no-trace")
    names = [p.name for p in select(args.policy, many=False)]
    out = Path(args.out)
    scenario, sched = scenario_and_schedule(args)
    note = check_scenario_policy(scenario.engine, args.policy)
    if not scenario.engine.async_scheduling:
        names = names[:1]  # every policy takes the synchronous path: one row (async-off)
    steps = len(sched.steps)
    from sim.cli import brief

    progress = brief.Progress(len(names), on=args.brief and len(names) > 1)
    with fresh_output_dir(out, args.force) as tmp:
        if args.brief:
            brief.print_header(scenario, _origin(args), sched.seed, steps, names, args.timing,
                               args.set)  # fmt: skip
        else:
            print_parameters(scenario, sched.seed)
            print(f"policy={args.policy} steps={steps}")
        if len(names) > 1:
            atomic_write_text(tmp / "schedule.json", schedule_mod.dumps(sched))
        summaries = []
        for name in names:
            progress.start(name)
            if args.engine == "vector":
                result = run_policy_vector(sched, scenario, POLICIES[name], sched.seed)
            else:
                result = run_policy(
                    sched, scenario, POLICIES[name], sched.seed, trace=not args.no_trace
                )
            target = tmp / name if len(names) > 1 else tmp
            write_run(target, scenario, sched.seed, sched, result, write_schedule=len(names) == 1)
            summaries.append(result.summary)
            progress.finish()
        if len(names) > 1:
            from sim.runs.io import write_json

            write_json(tmp / "comparison.json", summaries)
        if args.picture:
            title = f"{scenario.name}: wrong accepted counts by policy ({steps:,} steps, seed "
            brief.write_picture(tmp, summaries, sched, title + f"{sched.seed})")
    tables.show(args.table_format, run_rows(summaries), lambda: print_table(summaries))
    if args.brief:
        brief.print_legend()
    if args.picture:
        print(f"wrote {out / brief.PICTURE} (python -m sim report {out}: the whole story)")
    if note:  # the chosen policy is not what this configuration's vLLM does
        print(f"note: {note}")
    if args.json:
        last = summaries[0] if len(summaries) == 1 else {"policies": summaries}
        print(json.dumps(last, sort_keys=True))
    return 0


def _origin(args: argparse.Namespace) -> str:
    """Where ``--brief``'s header says the run's scenario came from."""
    origin = f"schedule {args.schedule}" if args.schedule else scenario_path(args.scenario)
    return "built-in" if origin.startswith("built-in") else origin


def run_stream(args: argparse.Namespace) -> int:
    """``run --stream``: one policy in bounded memory (:func:`sim.runs.run.run_streaming`):
    schedule.parquet, reads.parquet in row groups, meta.json; no trace."""
    import json

    from sim.resolve.check import check_scenario_policy
    from sim.runs.run import run_streaming

    if args.policy == ALL:
        raise SpecraceError("--stream runs one policy: name it with --policy")
    name = select(args.policy, many=False)[0].name
    source = None
    if args.schedule:
        import functools

        from sim.model.schedule_io import open_schedule

        head, _, steps = open_schedule(Path(args.schedule))
        scenario, seed = schedule_scenario(args, head), head.seed
        source = functools.partial(open_schedule, Path(args.schedule))
    else:
        scenario = load_scenario(args.scenario, parse_sets(args.set), tuple(args.timing))
        seed, steps = args.seed, args.steps or scenario.default_steps
    note = check_scenario_policy(scenario.engine, name)
    from sim.cli import brief

    progress = brief.StreamProgress()
    with fresh_output_dir(Path(args.out), args.force) as tmp:
        if args.brief:  # four lines, as a run without --stream
            brief.print_header(scenario, _origin(args), seed, steps, [name], args.timing, args.set)
        else:
            print_parameters(scenario, seed)
            print(f"policy={name} steps={steps} stream=true")
        summary = run_streaming(
            tmp,
            scenario,
            POLICIES[name],
            seed,
            steps,
            schedule_format="parquet",
            source=source,
            workers=0 if args.workers is None else args.workers,
            progress=progress,
        )
        progress.close()
    tables.show(args.table_format, run_rows([summary]), lambda: print_table([summary]))
    if args.brief:
        brief.print_legend()
    if note:
        print(f"note: {note}")
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    return 0


def run_rows(summaries: list[dict]) -> list[dict]:
    """The policy table's rows, its columns as keys (``--format json|csv``)."""
    return [
        {
            "policy": s["policy"],
            "reads": s["reads"],
            "cpu_wrong": s["cpu_wrong"],
            "gpu_wrong": s["gpu_wrong"],
            **{kind: s["by_kind"].get(kind, 0) for kind in HAZARD_KINDS},
            "prompt_lost": s["prompt_state_lost"],
            "corrupted_reqs": s["corrupted_requests"],
            "step_ms": s["mean_step_ns"] / 1e6,
            "tok/s": s["tokens_per_s"],
        }
        for s in summaries
    ]


def print_table(summaries: list[dict]) -> None:
    head = (
        "policy",
        "reads",
        "cpu_wrong",
        "gpu_wrong",
        *HAZARD_KINDS,
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
            *(k.get(kind, 0) for kind in HAZARD_KINDS),
            s["prompt_state_lost"],
            s["corrupted_requests"],
            f"{s['mean_step_ns'] / 1e6:.3f}",
            f"{s['tokens_per_s']:.0f}",
        )
        print(" ".join(f"{c:>20}" if i == 0 else f"{c!s:>14}" for i, c in enumerate(cells)))


def cmd_bench(args: argparse.Namespace) -> int:
    from sim.cli.guards import bench_s, check_budget

    cost = bench_s(args.steps, args.points, args.vector_steps, args.long_steps, args.sweep)
    check_budget("bench", cost, args.budget, "fewer --steps, --points, --long-steps or --sweep")
    if args.waits:
        from sim.explore.bench_waits import main as waits_main

        return waits_main(fmt=args.table_format)
    if args.sweep:
        import json

        from sim.explore.sweep import sweep_bench

        rows = [
            sweep_bench(w, points=args.sweep, steps=args.steps, engine=e)
            for e, w in (("vector", 1), ("vector", 2), ("simpy", 1))
        ]
        text = "\n".join(json.dumps(r, sort_keys=True) for r in rows)
        tables.show(args.table_format, rows, text)
        return 0
    from sim.explore.bench import main as bench_main

    return bench_main(args.steps, args.points, args.vector_steps, long_steps=args.long_steps,
                      fmt=args.table_format)  # fmt: skip


def cmd_compare(args: argparse.Namespace) -> int:
    from sim.hardware.compare import agreement, by_landing, pool_runs, read_observed

    observed = pool_runs([read_observed(Path(d)) for d in args.dir], list(args.dir))
    shown = []  # (table, heading, frame), in the order printed
    shown.append(("agreement", "", agreement(observed)))
    if "sim_gpu_wrong" in observed.columns:
        from sim.hardware.compare import prediction_agreement

        shown.append(("prediction_agreement", "", prediction_agreement(observed)))
    if args.req_id:
        shown.append(("by_landing", "", by_landing(observed, args.req_id, args.step)))
    from sim.hardware.compare import close_calls, landing_timing, replay_steps

    steps = replay_steps(observed)  # once for the three tables below
    for name, heading, frame in (
        ("landing_timing", "\nlanding and op-placement error (µs), by policy",
         landing_timing(observed, steps=steps)),
        ("landing_timing_by_type",
         "\nlanding and op-placement error (µs), by where the model lands the counts",
         landing_timing(observed, by="type", steps=steps)),
        ("close_calls", "\nthe model's verdict on the hardware: close calls (margin < 100 µs),"
         " margins > 25 µs, and what flipped each missed close call",
         close_calls(observed, steps)),
    ):  # fmt: skip
        if not frame.empty:
            shown.append((name, heading, frame))

    def text() -> None:
        for _name, heading, frame in shown:
            if heading:
                print(heading)
            print(frame.to_string(index=False))

    rows = [r for name, _, f in shown for r in tables.flat_rows(f.to_dict("records"), name)]
    tables.show(args.table_format, rows, text)
    return 0


# Subcommands that live in their own module of sim.cli: each ``register(sub)`` adds its parser
# and sets ``func``.
PLUGINS: tuple = (
    explore.register,
    check_cli.register,
    risk.register,
    field_reports.register,
    report.register,
    upstream.register,
)

EXAMPLES = {
    "schedule": "python -m sim schedule --scenario minimal-race --out out/sched",
    "run": "python -m sim run --scenario qwen35-mtp3 --policy all --steps 2000 --out out/demo",
    "sweep": "python -m sim sweep --vary timing.gpu_forward_ns_base=4000000,6000000 --out out/sw",
    "plot": "python -m sim plot out/sw --x set.timing.gpu_forward_ns_base",
    "perfetto": "python -m sim perfetto out/run",
    "compare": "python -m sim compare data/replay/observed_qwen35-mtp3.parquet",
    "bench": "python -m sim bench --steps 2000",
    "report": "python -m sim report out/demo",
    "params": "python -m sim params --timing h200 --timing vllm-0.24.0-row-ops",
    "upstream-test": "python -m sim upstream-test --vllm 0.24.0 --out test_align_counts.py",
}


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (where it has one); keeps the example's line as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "%(default)" in text or default in (None, "", [], False, argparse.SUPPRESS):
            return text
        if action.option_strings or action.nargs in ("?", "*"):
            text += " (default: %(default)s)"
        return text


def cmd_params(args: argparse.Namespace) -> int:
    import json

    from sim.model.param_docs import DOCS, timing_file_sources
    from sim.model.params import parameter_defaults, parameter_keys

    scenario = load_scenario(args.scenario).to_dict() if args.scenario else None
    defaults = parameter_defaults()
    timed = timing_file_values(args.timing)
    sources = timing_file_sources(args.timing)
    rows = []
    for key in parameter_keys():
        section, name = key.split(".")
        default = scenario[section][name] if scenario else defaults[key]
        default = timed.get(key, default)
        doc = DOCS[key]
        source = sources.get(key) or (
            f"scenario file {args.scenario}"
            if scenario and default != defaults[key]
            else doc.source
        )
        rows.append({"key": key, "unit": doc.unit, "value": _show(default),
                     "meaning": doc.meaning, "source": str(source)})  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if args.table_format != "table":
        tables.show(args.table_format, rows)
        return 0
    label = f"value in {args.scenario}" if args.scenario else "default"
    if args.timing:
        label += " + " + " + ".join(args.timing)
    w = max(len(r["key"]) for r in rows)
    vw = max(14, len(label), *(len(r["value"]) for r in rows))
    print(f"{'key':<{w}}  {'unit':<16} {label:<{vw}} meaning [source]")
    for r in rows:
        print(f"{r['key']:<{w}}  {r['unit']:<16} {r['value']:<{vw}} {r['meaning']} [{r['source']}]")
    return 0


def _show(value) -> str:
    if isinstance(value, dict):  # a length distribution
        return f"{value.get('dist')}:{value.get('mean')}"
    if hasattr(value, "dist"):
        return f"{value.dist}:{value.mean}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(str(v) for v in value) + "]" if len(value) < 6 else f"<{len(value)}>"
    return str(value)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, not the usage block (--help has it)
        print(f"{self.prog}: error: {one_line(message)}", file=sys.stderr)
        raise SystemExit(2)


def out_arg(text: str) -> str:
    """``--out``: a directory name (an empty one would mean the working directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: name a directory")
    return text


def build_parser(prog: str = "python -m sim") -> argparse.ArgumentParser:
    """The parser; ``prog`` is how the user invoked it (``specrace`` passes its own name), so
    every ``--help`` and error names the command as typed."""
    from sim.version import version_line

    p = _Parser(
        prog=prog,
        description="Predict when vLLM async spec decoding reads a wrong accepted count.",
    )
    p.add_argument("--version", action="version", version=version_line())
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("schedule", help="write the timing-free schedule.json")
    s.add_argument("--scenario", default="qwen35-mtp3", help="built-in name or TOML path")
    s.add_argument("--steps", type=steps_arg, help="engine steps (default: the scenario's)")
    s.add_argument("--seed", type=seed_arg, default=0, help="seed of every random draw")
    s.add_argument("--out", type=out_arg, required=True, help="a new or empty directory")
    s.add_argument("--force", action="store_true",
                   help="replace a non-empty --out that specrace wrote")  # fmt: skip
    s.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a parameter (python -m sim params lists them)")  # fmt: skip
    s.add_argument("--format", choices=("json", "parquet"), default="json",
                   help="schedule.json, or its compact binary form schedule.parquet "
                   "(written step by step: for long runs)")  # fmt: skip
    s.set_defaults(func=cmd_schedule)
    r = sub.add_parser("run", help="simulate a scenario under one policy or all")
    r.add_argument("--scenario", default="qwen35-mtp3", help="built-in name or TOML path")
    r.add_argument("--policy", default="all", help=f"{', '.join(POLICIES)} or all")
    r.add_argument("--steps", type=steps_arg, help="engine steps (default: the scenario's)")
    r.add_argument("--seed", type=seed_arg, default=0, help="seed of every random draw")
    r.add_argument("--out", type=out_arg, required=True, help="a new or empty directory")
    r.add_argument("--force", action="store_true",
                   help="replace a non-empty --out that specrace wrote")  # fmt: skip
    r.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a parameter (python -m sim params lists them)")  # fmt: skip
    r.add_argument("--schedule", default="",
                   help="simulate this schedule.json (or schedule.parquet) instead")  # fmt: skip
    r.add_argument(
        "--timing",
        action="append",
        default=[],
        metavar="FILE",
        help="a [timing] TOML, path or built-in name (h200, vllm-0.24.0-row-ops), "
        "applied before --set",
    )
    r.add_argument("--json", action="store_true", help="last line: one JSON summary")
    r.add_argument("--brief", action="store_true",
                   help="a short header instead of every parameter (meta.json has them), "
                   "progress on stderr, a legend under the table")  # fmt: skip
    r.add_argument("--picture", action="store_true",
                   help="also draw the hazard summary: --out/hazard_summary.png")  # fmt: skip
    r.add_argument("--no-trace", action="store_true", help="skip trace.parquet")
    r.add_argument("--engine", choices=("simpy", "vector"), default="simpy",
                   help="timing tier: simpy (the reference, with a trace) or vector "
                   "(same reads and summary, no trace)")  # fmt: skip
    r.add_argument("--stream", action="store_true",
                   help="long runs in bounded memory: one policy, the vector tier, "
                   "schedule.parquet and reads.parquet in row groups, no trace")  # fmt: skip
    r.add_argument("--workers", type=int_in(0, 4096, "0..4096"), default=None,
                   help="with --stream: 1 builds the schedule in this process, 2 or more in a "
                   "second one beside the simulation (0, the default: two where there are two "
                   "cores and the run takes seconds); the same files whichever")  # fmt: skip
    tables.add_format_arg(r, "the policy table")
    r.set_defaults(func=cmd_run)
    c = sub.add_parser("compare", help="model vs hardware replay (observed.parquet)")
    c.add_argument("dir", nargs="+",
                   help="a replay directory or an observed*.parquet file; several are pooled "
                        "(steps kept apart by run)")  # fmt: skip
    c.add_argument("--req-id", default="", help="also: what this request read, by landing")
    c.add_argument("--step", type=step_index_arg, default=4, help="with --req-id: the step")
    tables.add_format_arg(c, "the tables")
    c.set_defaults(func=cmd_compare)
    b = sub.add_parser("bench", help="engine steps/s and events/s beside bare SimPy")
    b.add_argument("--steps", type=steps_arg, default=2000, help="engine steps to time")
    b.add_argument("--points", type=int_in(1, 10**6, "1..10^6"), default=10_000,
                   help="vector-tier timing points")  # fmt: skip
    b.add_argument("--vector-steps", type=steps_arg, default=1_000, help="vector-tier steps")
    b.add_argument("--long-steps", type=int_in(0, 10**7, "0..10^7"), default=20_000,
                   help="steps of the peak-memory runs (0: skip)")  # fmt: skip
    b.add_argument("--sweep", type=int_in(0, 10**6, "0..10^6"), default=0, metavar="POINTS",
                   help="instead: a sweep of POINTS points (vector tier on 1 and 2 worker "
                   "processes, SimPy tier on 1)")  # fmt: skip
    b.add_argument("--waits", action="store_true",
                   help="instead: the commands a person waits for (check, risk, a streamed "
                   "run, the README sweep), end to end, in units of a pure-Python loop timed "
                   "in the same run (a few minutes)")  # fmt: skip
    b.add_argument("--budget", type=budget_arg, default=BUDGET_H, metavar="HOURS",
                   help="refuse a bench estimated to take longer (CPU hours)")  # fmt: skip
    tables.add_format_arg(b, "the measurements")
    b.set_defaults(func=cmd_bench)
    pa = sub.add_parser("params", help="every parameter: unit, default, meaning, source")
    pa.add_argument("--scenario", default="", help="show this scenario's values instead")
    pa.add_argument(
        "--timing",
        action="append",
        default=[],
        metavar="FILE",
        help="apply this [timing] file; its values are labelled measured",
    )
    pa.add_argument("--json", action="store_true", help="one JSON list of rows")
    tables.add_format_arg(pa)
    pa.set_defaults(func=cmd_params)
    for register in PLUGINS:
        register(sub)
    for name, parser in sub.choices.items():
        if name in EXAMPLES and not parser.epilog:
            parser.epilog = f"example:\n  {EXAMPLES[name]}"
    return p


class _ReaderMayLeave(io.TextIOWrapper):
    """stdout that outlives its reader: ``python -m sim run ... | head -1`` closes the pipe after
    one line, and the run goes on to write its --out in full, printing into /dev/null; the exit
    status is then 141, as a shell pipeline expects (gpu_check, which prints once at the end,
    does the same)."""

    reader_left = False  # set on the instance when the pipe closes

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        self.reader_left = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.fileno())
        os.close(devnull)


def _stdout_that_outlives_its_reader() -> None:
    if sys.stdout is sys.__stdout__ and isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.flush()
        fd = os.dup(sys.stdout.fileno())
        sys.stdout = _ReaderMayLeave(
            io.FileIO(fd, "w"), encoding=sys.stdout.encoding, line_buffering=True
        )


def main(argv: list[str] | None = None, prog: str = "python -m sim") -> int:
    from sim.runs.outputs import record_command

    parser = build_parser(prog)
    args = parser.parse_args(argv)
    args.prog = prog
    record_command(prog, argv)
    _stdout_that_outlives_its_reader()
    try:
        code = tables.call(args.func, args)
        sys.stdout.flush()
        return 141 if code == 0 and getattr(sys.stdout, "reader_left", False) else code
    except SpecraceError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        from sim.runs.processes import interrupts_ignored, stop_all

        with interrupts_ignored():  # a second Ctrl-C: no second line, no traceback
            print("error: interrupted", file=sys.stderr)
            stop_all()  # no worker or fork server outlives the command
        return 130
    except BrokenPipeError:  # `python -m sim run ... | head -1`: the reader left
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
