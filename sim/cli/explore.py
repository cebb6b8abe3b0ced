"""Command line for exploring: ``sweep``, ``plot``, ``perfetto``, ``timeline``.

``plot``, ``perfetto`` and ``timeline`` take a run directory of one policy or of
``--policy all`` (one sub-directory per policy beside a shared ``schedule.json``): with
``--policy P`` they draw that policy, otherwise every policy side by side.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.errors import SpecraceError
from sim.model.policies import ALL, POLICIES, select
from sim.runs.args import file_arg, int_in, step_index_arg, steps_arg
from sim.runs.io import (
    atomic_write,
    atomic_write_text,
    check_run_tables,
    read_json,
    read_meta,
    read_table,
    remove_stale,
)


# -- run directories --------------------------------------------------------------------------
def run_dirs(src: Path, policy: str = "") -> list[tuple[str, Path]]:
    """``[(policy, directory)]`` of a run directory: a one-policy run (``meta.json``) or a
    ``--policy all`` run (a sub-directory per policy); ``policy`` picks one of the latter."""
    if (src / "meta.json").is_file():
        name = read_meta(src / "meta.json")["policy"]
        if policy and policy not in ("all", name):
            raise SpecraceError(f"{src} is a run of policy {name!r}, not {policy!r}")
        return [(name, src)]
    subs = [(p, src / p) for p in POLICIES if (src / p / "meta.json").is_file()]
    broken = [p for p in POLICIES if (src / p).is_dir() and p not in dict(subs)]
    if subs and broken:
        raise SpecraceError(f"{src / broken[0]}: no meta.json (an incomplete run?)")
    for p, d in subs:
        if read_meta(d / "meta.json")["policy"] != p:
            raise SpecraceError(f"{d / 'meta.json'}: a run of another policy than {p!r}")
    if not subs:
        raise SpecraceError(
            f"{src}: not a run directory (no meta.json, and no policy sub-directories as "
            "`python -m sim run --policy all` writes)"
        )
    if policy and policy != ALL:
        select(policy, many=False)
        sel = [s for s in subs if s[0] == policy]
        if not sel:
            raise SpecraceError(
                f"{src} has no run of {policy!r} (has: {', '.join(p for p, _ in subs)})"
            )
        return sel
    return subs


def traced_run_dirs(src: Path, policy: str) -> list[tuple[str, Path]]:
    """:func:`run_dirs` for commands that need ``trace.parquet``."""
    try:
        return run_dirs(src, policy)
    except SpecraceError as e:
        if (src / "meta.json").is_file() or not str(e).startswith(f"{src}: not a run"):
            raise
        raise SpecraceError(f"trace.parquet not found: {e}") from None


def _schedule_path(src: Path, run: Path) -> Path:
    """A one-policy run keeps its schedule.json; a --policy all run shares one above."""
    return run / "schedule.json" if (run / "schedule.json").is_file() else src / "schedule.json"


def load_run(src: Path, runs: list[tuple[str, Path]], trace: bool = True):
    """``(schedule, [(policy, meta, trace, reads)])`` of :func:`run_dirs`' runs, every table
    schema-checked and checked against the schedule before any analysis starts."""
    from sim.model.schedule_io import read_schedule

    schedule = read_schedule(_schedule_path(src, runs[0][1]))
    out = []
    for policy, d in runs:
        meta = read_meta(d / "meta.json")
        if meta["scenario"] != schedule.scenario or meta["seed"] != schedule.seed:
            raise SpecraceError(f"{d / 'meta.json'}: not the run of {_schedule_path(src, d)}")
        tr = read_table(d / "trace.parquet", "trace.parquet") if trace else None
        reads = read_table(d / "reads.parquet", "reads.parquet")
        check_run_tables(schedule, reads, tr, str(d))
        out.append((policy, meta, tr, reads))
    return schedule, out


def _check_figure_out(out: Path, formats: tuple[str, ...]) -> None:
    """Each file a figure will be written to: a path that can be written, no file of the user's
    replaced (``sim.runs.outputs.prepare_file``)."""
    from sim.runs.outputs import prepare_file

    if not out.name:
        raise SpecraceError(f"--out {out}: a file name is needed, not a directory")
    for fmt in formats:
        prepare_file(out.with_suffix(f".{fmt}"))


def _save(fig, out: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    written = []
    for fmt in formats:
        path = out.with_suffix(f".{fmt}")

        def write(tmp: Path, fmt: str = fmt) -> None:
            save_figure(fig, tmp, fmt)

        atomic_write(path, write, sign=f".{fmt}")  # a picture anywhere: it carries its proof
        remove_stale(path.parent, path.name)  # what a plot killed before its rename left
        written.append(path)
    return written


def save_figure(fig, path: Path, fmt: str) -> None:
    """Same figure -> same bytes: no date in the SVG and a fixed salt for its element ids
    (matplotlib draws them at random otherwise); a local rc context, no global state."""
    import matplotlib

    meta = {"Date": None} if fmt == "svg" else {}
    with matplotlib.rc_context({"svg.hashsalt": "specrace"}):
        fig.savefig(path, dpi=120, format=fmt, metadata=meta)


# -- sweep ------------------------------------------------------------------------------------
def cmd_sweep(args: argparse.Namespace) -> int:
    from sim.explore.sweep import SweepSpec, parse_vary, run_sweep, terminal_log
    from sim.model.params import load_scenario

    policies = tuple(p.name for p in select(args.policy))
    if bool(args.vary) == bool(args.swarm):
        raise SpecraceError("give either --vary (a grid) or --swarm N (timing sets)")
    from sim.cli.guards import check_sweep, check_vary

    check_vary(args.vary)
    if args.scheduler is not None:  # given, even empty
        from sim.explore.dask_address import parse_address

        parse_address(args.scheduler)
    spec = SweepSpec(
        args.scenario, policies, parse_vary(args.vary), args.swarm, args.seeds, args.steps,
        args.engine,
    )  # fmt: skip
    check_sweep(spec, load_scenario(args.scenario), Path(args.out))
    df = run_sweep(
        spec, Path(args.out), log=terminal_log(args.quiet), workers=args.workers,
        scheduler=args.scheduler or "",
    )  # fmt: skip
    print(f"wrote {Path(args.out) / 'sweep.parquet'} ({len(df)} rows)")
    return 0


# -- plot -------------------------------------------------------------------------------------
def cmd_plot(args: argparse.Namespace) -> int:
    from sim.explore import plots

    src = Path(args.dir)
    if args.out:
        _check_figure_out(Path(args.out), ("png", "svg") if args.svg else ("png",))
    if src.suffix == ".parquet" or (src / "observed.parquet").is_file():
        return _plot_replay(args, src)
    if (src / "sweep.parquet").is_file():
        df = read_table(src / "sweep.parquet", "sweep.parquet")
        if args.policy and args.policy != "all":
            df = df[df["policy"].isin(args.policy.split(","))]
            if df.empty:
                raise SpecraceError(f"--policy {args.policy}: not in the sweep")
        if args.y:
            x = args.x or plots.default_x(df)
            fig, name = plots.phase_diagram(df, x, args.y, what=args.what), "phase"
        else:
            fig, name = plots.hazard_plot(df, args.x or None), "hazard"
    else:
        if args.x or args.y:
            raise SpecraceError(f"--x/--y draw a sweep; {src} has no sweep.parquet")
        try:
            runs = run_dirs(src, args.policy)
        except SpecraceError as e:
            raise SpecraceError(f"neither a sweep (no sweep.parquet) nor a run: {e}") from None
        reads = {p: r for p, _m, _t, r in load_run(src, runs, trace=False)[1]}
        fig, name = plots.margin_histogram(reads), "margins"
        src = runs[0][1] if len(runs) == 1 else src
    out = Path(args.out) if args.out else src / f"{name}.png"
    _check_figure_out(out, ("png", "svg") if args.svg else ("png",))
    for path in _save(fig, out, ("png", "svg") if args.svg else ("png",)):
        print(f"wrote {path}")
    return 0


def _plot_replay(args: argparse.Namespace, src: Path) -> int:
    """A hardware replay table: what one request consumed, by where the copy landed, with the
    landing positions named by that step's ops (from --scenario, or the replay's summary)."""
    from sim.explore.plots import landing_labels, landing_outcome_plot
    from sim.hardware.compare import by_landing, read_observed
    from sim.model.params import load_scenario
    from sim.model.scheduling import build_schedule

    if not args.req or args.step is None:
        raise SpecraceError("a replay table: give --req R --step N (e.g. --req R --step 4)")
    observed = read_observed(src)
    table = by_landing(observed, args.req, args.step)
    if table.empty:
        raise SpecraceError(f"--req {args.req!r} --step {args.step}: no such read in {src}")
    scenario, seed = args.scenario, 0
    summary = src.parent / src.name.replace("observed", "replay_summary").replace(
        ".parquet", ".json"
    )
    if not scenario and src.suffix == ".parquet" and summary.is_file():
        meta = read_json(summary, "replay summary")
        name, seed_ = (meta.get("scenario"), meta.get("seed", 0)) if isinstance(
            meta, dict) else (None, None)  # fmt: skip
        if not isinstance(name, str) or type(seed_) is not int or not 0 <= seed_ < 2**63:
            raise SpecraceError(f"{summary}: not a replay summary (a scenario name and a seed)")
        scenario, seed = name, seed_
    labels = None
    if scenario:
        sc = load_scenario(scenario)
        sched = build_schedule(sc, seed, max(args.step + 1, sc.default_steps))
        labels = landing_labels(sched.steps[args.step].ops)
    true = int(
        observed[(observed.req_id == args.req) & (observed.step == args.step)]["true_count"].iloc[0]
    )
    title = (
        f"{scenario or src.name}: the count {args.req} consumed at step {args.step} "
        "(hardware replay), by where the copy landed"
    )
    fig = landing_outcome_plot(table, title, labels, true=true)
    base = src.parent if src.suffix == ".parquet" else src
    out = Path(args.out) if args.out else base / f"landing_{args.req}_{args.step}.png"
    _check_figure_out(out, ("png", "svg") if args.svg else ("png",))
    for path in _save(fig, out, ("png", "svg") if args.svg else ("png",)):
        print(f"wrote {path}")
    return 0


# -- perfetto ---------------------------------------------------------------------------------
def cmd_perfetto(args: argparse.Namespace) -> int:
    from sim.explore.perfetto import dumps

    src = Path(args.dir)
    runs = traced_run_dirs(src, args.policy)
    schedule, loaded = load_run(src, runs)
    tables = [(p, meta["scenario"].get("name", ""), t, r) for p, meta, t, r in loaded]
    out = (runs[0][1] if len(runs) == 1 else src) / "trace.perfetto.json"
    from sim.runs.outputs import prepare_file

    prepare_file(out)
    atomic_write_text(out, dumps(tables, schedule), sign=".json")
    remove_stale(out.parent, out.name)
    print(f"wrote {out}: open it in ui.perfetto.dev")
    return 0


# -- timeline ---------------------------------------------------------------------------------
def cmd_timeline(args: argparse.Namespace) -> int:
    from sim.explore.timeline import build_timeline, pick_read, timeline_figure

    src = Path(args.dir)
    if args.out:
        _check_figure_out(Path(args.out), ("png", "svg"))
    runs = traced_run_dirs(src, args.policy)
    schedule, loaded = load_run(src, runs)
    tables = [(p, t, r) for p, _m, t, r in loaded]
    step = args.step
    if step is None:
        # Every policy shows the same step: the first one any policy of the run got wrong
        # (so a fix drawn alone shows the step where the others went wrong).
        siblings = [r for _p, _m, _t, r in load_run(src, run_dirs(src), trace=False)[1]]
        for reads in [r for _p, _t, r in tables] + siblings:
            try:
                step = int(pick_read(reads)["step"])
                break
            except SpecraceError:
                continue
        else:
            raise SpecraceError("no policy read a wrong count in this run: give --step N")
    req = args.req or None
    if req is None and args.step is None:
        # The same request in every panel: the one the first wrong policy got wrong (a
        # consumed wrong count before a CPU-only one).
        for reads in [r for _p, _t, r in tables] + siblings:
            at = reads[(reads["step"] == step) & (reads["gpu_wrong"] | reads["cpu_wrong"])]
            if len(at):
                req = str(pick_read(at, step)["req_id"])
                break
    tls = [build_timeline(t, r, schedule, p, step, req) for p, t, r in tables]
    for tl in tls:
        print(f"{tl.policy}: {tl.verdict_text()}")
    fig = timeline_figure(tls)
    out = Path(args.out) if args.out else (runs[0][1] if len(runs) == 1 else src) / "timeline"
    _check_figure_out(out, ("png", "svg"))
    for path in _save(fig, out, ("png", "svg")):
        print(f"wrote {path}")
    return 0


def _out(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: name a directory")
    return text


def register(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("sweep", help="many runs over a grid or a swarm; parallel, resumable")
    w.add_argument("--scenario", default="qwen35-mtp3")
    w.add_argument("--policy", default="all", help="comma-separated policies or all")
    w.add_argument("--vary", action="append", default=[], metavar="SECTION.KEY=V1,V2,...")
    w.add_argument("--swarm", type=int_in(0, 10**6, "0..10^6"), default=0,
                   help="N swarm-drawn timing sets")  # fmt: skip
    w.add_argument("--seeds", type=int_in(1, 10**6, "1..10^6"), default=1)
    w.add_argument("--steps", type=steps_arg, default=1000)
    w.add_argument("--out", type=_out, required=True,
                   help="a new directory, or a sweep to resume/extend")  # fmt: skip
    w.add_argument(
        "--workers", type=int_in(0, 4096, "0..4096"), default=0,
        help="local worker processes, at most one per core (0: one per core where that "
        "pays, about 3 s of work or more, else serial; 1: serial in this process)"
    )  # fmt: skip
    w.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on an existing Dask cluster instead: [tcp://]HOST:PORT")  # fmt: skip
    w.add_argument("--quiet", action="store_true", help="no progress bar")
    w.add_argument("--engine", choices=("vector", "simpy"), default="vector",
                   help="timing tier: vector (NumPy, all points of a schedule at once) or "
                   "simpy (the reference); same results")  # fmt: skip
    w.set_defaults(func=cmd_sweep)
    pl = sub.add_parser(
        "plot", help="a sweep: hazard plot (--y: phase diagram); a run: margin histogram"
    )
    pl.add_argument(
        "dir", help="a sweep or run directory (also of --policy all), or a replay observed*.parquet"
    )
    pl.add_argument("--x", default="", help="swept column for the x axis")
    pl.add_argument("--y", default="", help="second swept column: draw the phase diagram")
    pl.add_argument(
        "--what", default="gpu_wrong", choices=("gpu_wrong", "cpu_wrong"), help="phase diagram"
    )
    pl.add_argument("--policy", default="", help="one policy (or a comma list for a sweep)")
    pl.add_argument("--req", default="", help="replay table: the request to draw")
    pl.add_argument("--step", type=step_index_arg, default=None, help="replay table: its step")
    pl.add_argument("--scenario", default="", help="replay table: names the landing positions")
    pl.add_argument("--out", type=file_arg, help="PNG path (default: inside DIR)")
    pl.add_argument("--svg", action="store_true", help="also write an SVG")
    pl.set_defaults(func=cmd_plot)
    pf = sub.add_parser("perfetto", help="trace.parquet -> trace.perfetto.json")
    pf.add_argument("dir", help="a run directory (also of --policy all: one process each)")
    pf.add_argument("--policy", default="", help="one policy of a --policy all run")
    pf.set_defaults(func=cmd_perfetto)
    t = sub.add_parser("timeline", help="one step as a picture: ops, streams, landing, verdict")
    t.add_argument("dir", help="a run directory (also of --policy all: policies stacked)")
    t.add_argument("--step", type=step_index_arg, default=None,
                   help="default: the first wrong read")  # fmt: skip
    t.add_argument("--req", default="", help="request id (default: the first wrong one)")
    t.add_argument("--policy", default="", help="one policy of a --policy all run")
    t.add_argument("--out", type=file_arg, help="path without suffix (writes .png and .svg)")
    t.set_defaults(func=cmd_timeline)
