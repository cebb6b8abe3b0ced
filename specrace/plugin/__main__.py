"""``python -m specrace.plugin report WATCHDIR``: a summary of the watch's output."""

import sys
from pathlib import Path

from specrace.plugin.report import report

if len(sys.argv) != 3 or sys.argv[1] != "report" or not Path(sys.argv[2]).is_dir():
    print("usage: python -m specrace.plugin report WATCHDIR", file=sys.stderr)
    raise SystemExit(2)
print(report(Path(sys.argv[2])))
