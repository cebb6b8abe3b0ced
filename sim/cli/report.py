"""``python -m sim report RUN``: one self-contained HTML page of a run directory
(:mod:`sim.explore.report`), written atomically into the run (or ``--out``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sim.errors import SpecraceError
from sim.runs.args import file_arg


def run_report(src: Path, prog: str = "python -m sim") -> str:
    """The HTML page of the run directory ``src`` (one policy, or ``--policy all``)."""
    import pandas as pd

    from sim.cli.explore import load_run, run_dirs
    from sim.explore import report
    from sim.explore.plots import hazard_summary
    from sim.model.params import builtin_scenarios, load_scenario, scenario_from_dict
    from sim.resolve.check import setup_for_engine
    from sim.resolve.rates import generations
    from sim.resolve.resolution import resolve

    runs = run_dirs(src)
    has_trace = _has_trace(runs)
    schedule, loaded = load_run(src, runs, trace=has_trace)
    meta = loaded[0][1]
    scenario = scenario_from_dict(meta["scenario"], "meta", str(src))
    steps = len(schedule.steps)
    summaries = [summary_of(p, m, r) for p, m, _t, r in loaded]
    rows = report.verdict_rows(summaries, generations(schedule))
    fig = hazard_summary(pd.DataFrame(rows), f"{scenario.name}: wrong accepted counts by policy "
                         f"({steps:,} steps, seed {meta['seed']})")  # fmt: skip
    timeline = _first_wrong_timeline(loaded, schedule) if has_trace else None
    if timeline is None:
        wrong = any(r["cpu_wrong"] for r in rows)
        timeline = "no policy read a wrong count in this run" if not wrong else (
            "the run has no trace.parquet (made with --no-trace): rerun without it to see "
            "the timeline")  # fmt: skip
    res = resolve(setup_for_engine(scenario.engine))
    name = scenario.name
    if name in builtin_scenarios():
        base = load_scenario(name).to_dict()
        changed = _changed(base, meta["scenario"])
        scenario_note = f"built-in {name}" + (f", with {len(changed)} --set" if changed else "")
    else:
        changed, scenario_note = {}, f"{name} (not built in: the full table is in meta.json)"
    policy = runs[0][0] if (src / "meta.json").is_file() else "all"
    # a new folder: the run's own would be refused (not empty), or replaced with --force
    again = src.with_name(src.name + "-again")
    command = report.reproduce_run(name, changed, policy, meta["seed"], steps, str(again), prog)
    what_ran = [
        ("scenario", f"{scenario_note}: {scenario.description.split(chr(10))[0]}"),
        ("steps, seed", f"{steps:,}, {meta['seed']}"),
        ("policies", ", ".join(p for p, _d in runs)),
        ("engine (one schedule, every policy)", f"max_num_seqs={scenario.engine.max_num_seqs}, k="
                   f"{scenario.engine.num_speculative_tokens}, async="
                   f"{scenario.engine.async_scheduling}, mamba_cache_mode="
                   f"{scenario.engine.mamba_cache_mode}"),
        ("timing", ", ".join(f"{k}={v}" for k, v in changed.items() if k.startswith("timing."))
         or "the scenario's (python -m sim params: every default and its source)"),
        ("run directory", str(src)),
        ("made with", f"commit {meta.get('git_commit', '?')}, "
                      + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())),
    ]  # fmt: skip
    rules = report.rules_section(res.fired, f"vLLM 0.24.0 for this [engine]: {res.path}",
                                 res.notes)  # fmt: skip
    title = f"specrace: {name}, {steps:,} steps, seed {meta['seed']}"
    page = report.run_page(what_ran=what_ran, rows=rows, hazard_fig=fig, timeline=timeline,
                           rules=rules, command=command, title=title)  # fmt: skip
    return page.html()


def _has_trace(runs: list[tuple[str, Path]]) -> bool:
    """Whether the runs have their traces: a run made with ``--no-trace`` has none (the page
    says so), but one whose ``meta.json`` says it wrote one, or (a run from before meta.json
    said) one policy's missing where another's is there, lost it."""
    from sim.runs.io import read_meta

    found = {d: (d / "trace.parquet").is_file() for _p, d in runs}
    for _p, d in runs:
        wrote = read_meta(d / "meta.json").get("trace", any(found.values()))
        if wrote and not found[d]:
            raise SpecraceError(
                f"{d / 'trace.parquet'}: missing, yet the run wrote one (rerun "
                "it, or run with --no-trace for a page without the timeline)"
            )
        if not wrote and found[d]:
            raise SpecraceError(f"{d / 'trace.parquet'}: a trace its meta.json says the run did "
                                "not write")  # fmt: skip
    return all(found.values())


def summary_of(policy: str, meta: dict, reads) -> dict:
    """A policy's summary: the counts from its reads table (checked against the schedule), the
    step time and throughput from meta.json (NaN when meta.json's are not numbers)."""
    import math

    s = meta.get("summary")

    def num(key: str) -> float:
        v = s.get(key) if isinstance(s, dict) else None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return math.nan
        return float(v)

    wrong = reads[reads["cpu_wrong"] | reads["gpu_wrong"]]
    return {
        "policy": policy,
        "reads": len(reads),
        "cpu_wrong": int(reads["cpu_wrong"].sum()),
        "gpu_wrong": int(reads["gpu_wrong"].sum()),
        "prompt_state_lost": int(reads["prompt_state_lost"].sum()),
        "corrupted_requests": int(reads.loc[reads["gpu_wrong"], "req_id"].nunique()),
        "by_kind": {str(k): int(v) for k, v in wrong["kind"].value_counts().items()},
        "mean_step_ns": num("mean_step_ns"),
        "tokens_per_s": num("tokens_per_s"),
    }


def _changed(base: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """``section.key -> value`` where the run's scenario differs from the built-in one."""
    import json

    run = json.loads(json.dumps(run))  # tuples -> lists, as meta.json holds them
    base = json.loads(json.dumps(base))
    out = {}
    for section in ("engine", "workload", "timing"):
        for key, value in run[section].items():
            if base[section].get(key) != value:
                out[f"{section}.{key}"] = value
    return out


def _first_wrong_timeline(loaded, schedule):
    """(figure, verdict line) of the first consumed wrong read of the first policy that has
    one (else a CPU-wrong one), or None when every read was right. Policies that wait on the
    event come first: their wrong reads are the race inside ``_update_states``, where a policy
    that never waits (``unsynced``) simply read before the copy landed."""
    from sim.explore.timeline import build_timeline, timeline_figure
    from sim.model.policies import POLICIES

    waits_first = sorted(loaded, key=lambda x: not (x[0] in POLICIES and POLICIES[x[0]].waits))
    for col in ("gpu_wrong", "cpu_wrong"):
        for policy, _meta, trace, reads in waits_first:
            hit = reads[reads[col]]
            if hit.empty:
                continue
            first = hit.sort_values(["step", "row"], kind="stable").iloc[0]
            tl = build_timeline(trace, reads, schedule, policy, int(first["step"]),
                                str(first["req_id"]))  # fmt: skip
            return timeline_figure(tl), f"{policy}: {tl.verdict_text()}"
    return None


def cmd_report(args: argparse.Namespace) -> int:
    from sim.runs.io import atomic_write_text, remove_stale
    from sim.runs.outputs import prepare_file

    src = Path(args.run)
    if not src.is_dir():
        raise SpecraceError(f"{src}: not a run directory (python -m sim run --out DIR)")
    if (src / "schedule.parquet").is_file() and not (src / "schedule.json").is_file():
        raise SpecraceError(f"{src}: a --stream run (schedule.parquet); report reads a run "
                            "made without --stream")  # fmt: skip
    out = Path(args.out) if args.out else src / "report.html"
    prepare_file(out)
    atomic_write_text(
        out, run_report(src, prog=getattr(args, "prog", "python -m sim")), sign=".html"
    )
    remove_stale(out.parent, out.name)
    print(f"wrote {out}: open it in a browser (one file, images included)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser(
        "report", help="a run -> one self-contained HTML page (verdicts, timeline, rules)"
    )
    r.add_argument("run", help="a run directory (python -m sim run --out DIR; also --policy all)")
    r.add_argument("--out", type=file_arg, help="HTML path (default: RUN/report.html)")
    r.set_defaults(func=cmd_report)
