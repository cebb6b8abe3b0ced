"""``python -m sim field-reports``: every public report beside specrace's prediction
(sim.resolve.field_reports), written to ``--out`` as raw.json, summary.json and a Markdown table."""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.cli.guards import BUDGET_H
from sim.runs import tables
from sim.runs.args import budget_arg, int_in


def cmd_field_reports(args: argparse.Namespace) -> int:
    from sim.errors import SpecraceError
    from sim.resolve.field_reports import ARMS, run_all, summary_markdown, summary_rows
    from sim.runs.io import atomic_write_text, write_json
    from sim.runs.outputs import claim_dir, prepare_dir

    arms = tuple(a for a in ARMS if not args.only or a.report == args.only)
    if not arms:
        known = ", ".join(sorted({a.report for a in ARMS}))
        raise SpecraceError(f"--only {args.only!r}: no such report (known: {known})")
    if args.seeds:
        from dataclasses import replace

        arms = tuple(replace(a, seeds=args.seeds) for a in arms)
    from sim.cli.guards import check_budget, runs_s

    check_budget(f"field-reports of {len(arms)} arms" + (f" x {args.seeds:,} seeds" if args.seeds
                 else ""), sum(runs_s(a.seeds, a.steps, a.setup.max_num_seqs) for a in arms),
                 args.budget, "fewer --seeds, or --only one report")  # fmt: skip
    out = prepare_dir(args.out, "field-reports", replace=False)
    rows = run_all(arms)
    claim_dir(out, "field-reports")
    write_json(out / "raw.json", rows)
    write_json(out / "summary.json", summary_rows(rows))
    text = summary_markdown(rows)
    atomic_write_text(out / "summary.md", text)
    tables.show(args.table_format, report_rows(rows), lambda: print(text, end=""))
    shown = Path(args.out)
    print(f"wrote {shown / 'raw.json'}, {shown / 'summary.json'}, {shown / 'summary.md'}")
    return 0


def report_rows(rows: list[dict]) -> list[dict]:
    """The summary table's rows for a program: one per report, arm and timing."""
    out = []
    for r in rows:
        e, rep = r["estimate"], r["reported_per_10k"]
        out.append({
            "report": r["report"], "arm": r["arm"],
            "reported_corrupted": r["reported_corrupted"],
            "reported_generations": r["reported_generations"],
            "reported_per_10k": rep[0] if rep else None,
            "reported_per_10k_lo": rep[1] if rep else None,
            "reported_per_10k_hi": rep[2] if rep else None,
            "policy": r["policy"], "timing": r["timing"],
            "predicted_per_10k": e["per_10k"], "predicted_per_10k_lo": e["per_10k_lo"],
            "predicted_per_10k_hi": e["per_10k_hi"], "predicted_corrupted": e["corrupted"],
            "predicted_generations": e["generations"], "verdict": r["verdict"],
            "assumed": list(r["assumed"]),
        })  # fmt: skip
    return out


def register(sub: argparse._SubParsersAction) -> None:
    f = sub.add_parser("field-reports", help="public bug reports beside the model's prediction")
    f.add_argument("--out", default="data/field_reports")
    f.add_argument("--only", default="", help="one report, e.g. vllm#45100")
    f.add_argument("--seeds", type=int_in(0, 10**6, "0..10^6"), default=0,
                   help="override every arm's seed count")  # fmt: skip
    f.add_argument("--budget", type=budget_arg, default=BUDGET_H, metavar="HOURS",
                   help="refuse a run estimated to take longer (CPU hours)")  # fmt: skip
    tables.add_format_arg(f, "the summary table")
    f.set_defaults(func=cmd_field_reports)
