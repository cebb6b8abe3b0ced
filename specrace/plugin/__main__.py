"""``python -m specrace.plugin report WATCHDIR [--html FILE]``: the watch's output."""

import argparse
import sys
from pathlib import Path

from sim.errors import SpecraceError
from specrace.plugin.report import html_report, report

parser = argparse.ArgumentParser(prog="python -m specrace.plugin")
sub = parser.add_subparsers(dest="command", required=True)
rep = sub.add_parser("report", help="sum a SPECRACE_WATCH_OUT folder over its processes")
rep.add_argument("watchdir", type=Path)
rep.add_argument("--html", type=Path, help="also write the report as one HTML page here")
args = parser.parse_args()
if not args.watchdir.is_dir():
    parser.error(f"{args.watchdir}: not a folder")
try:
    if args.html:  # before any work: a file specrace did not write there is refused
        from sim.runs.outputs import prepare_file

        prepare_file(args.html, "--html")
    print(report(args.watchdir))
    if args.html:
        from sim.runs.io import atomic_write_text

        atomic_write_text(args.html, html_report(args.watchdir), sign=".html")
        print(f"wrote {args.html}")
except SpecraceError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
