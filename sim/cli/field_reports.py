"""``python -m sim field-reports``: every public report beside specrace's prediction
(sim.resolve.field_reports), written to ``--out`` as raw.json, summary.json and a Markdown table."""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.cli.guards import BUDGET_H
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
    out = prepare_dir(Path(args.out), "field-reports", replace=False)
    rows = run_all(arms)
    claim_dir(out, "field-reports")
    write_json(out / "raw.json", rows)
    write_json(out / "summary.json", summary_rows(rows))
    text = summary_markdown(rows)
    atomic_write_text(out / "summary.md", text)
    print(text, end="")
    shown = Path(args.out)
    print(f"wrote {shown / 'raw.json'}, {shown / 'summary.json'}, {shown / 'summary.md'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    f = sub.add_parser("field-reports", help="public bug reports beside the model's prediction")
    f.add_argument("--out", default="data/field_reports")
    f.add_argument("--only", default="", help="one report, e.g. vllm#45100")
    f.add_argument("--seeds", type=int_in(0, 10**6, "0..10^6"), default=0,
                   help="override every arm's seed count")  # fmt: skip
    f.add_argument("--budget", type=budget_arg, default=BUDGET_H, metavar="HOURS",
                   help="refuse a run estimated to take longer (CPU hours)")  # fmt: skip
    f.set_defaults(func=cmd_field_reports)
