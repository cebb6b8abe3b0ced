"""``python -m sim field-reports``: every public report beside specrace's prediction
(sim.resolve.field_reports), written to ``--out`` as raw.json, summary.json and a Markdown table."""

from __future__ import annotations

import argparse
from pathlib import Path


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
    f.add_argument("--seeds", type=int, default=0, help="override every arm's seed count")
    f.set_defaults(func=cmd_field_reports)
