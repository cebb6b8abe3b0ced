"""``python -m specrace.plugin report WATCHDIR [--html FILE]``: the watch's output."""

import argparse
from pathlib import Path

from specrace.plugin.report import html_report, report

parser = argparse.ArgumentParser(prog="python -m specrace.plugin")
sub = parser.add_subparsers(dest="command", required=True)
rep = sub.add_parser("report", help="sum a SPECRACE_WATCH_OUT folder over its processes")
rep.add_argument("watchdir", type=Path)
rep.add_argument("--html", type=Path, help="also write the report as one HTML page here")
args = parser.parse_args()
if not args.watchdir.is_dir():
    parser.error(f"{args.watchdir}: not a folder")
print(report(args.watchdir))
if args.html:
    args.html.write_text(html_report(args.watchdir))
    print(f"wrote {args.html}")
