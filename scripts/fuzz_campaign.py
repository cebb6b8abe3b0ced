"""A fuzz campaign over every input surface, and its per-surface table.

Runs ``tests/cli_contract/test_fuzz.py`` with ``SPECRACE_FUZZ_CAMPAIGN`` set (every case is
classified and recorded instead of failing the test) and fresh cases (``--examples`` per fuzz
test), then prints one row per surface: cases tried, valid runs, clean errors, tracebacks,
hangs, partial outputs, accepted-but-invalid inputs and unclear (not one line) errors; and every
case that was none of the first two, with its command line. Exit status 1 if there was any.

    python scripts/fuzz_campaign.py --examples 300          # about 15 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTCOMES = ("ok", "clean", "traceback", "hang", "partial", "accepted_invalid", "unclear")
HEAD = ("surface", "tried", "valid", "clean errors", "tracebacks", "hangs", "partial",
        "accepted-invalid", "unclear")  # fmt: skip


def table(records: list[dict]) -> str:
    """The Markdown table of a campaign: one row per surface and a total."""
    by: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in records:
        surface = r["surface"].split(":")[0]  # "run dirs: plot" -> "run dirs"
        by[surface][r["outcome"]] += 1
    total: collections.Counter = sum(by.values(), collections.Counter())
    rows = [HEAD, tuple("---" if i == 0 else "---:" for i in range(len(HEAD)))]
    for name, c in [*sorted(by.items()), ("**all**", total)]:
        rows.append((name, str(sum(c.values())), *(f"{c[o]:,}" for o in OUTCOMES)))
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=300, help="cases per fuzz test")
    p.add_argument("--hang-s", type=int, default=60, help="a case longer than this is a hang")
    p.add_argument("--records", default="", help="keep the JSON-lines records here")
    p.add_argument("-k", default="", help="only these fuzz tests (pytest -k)")
    args = p.parse_args(argv)
    records = Path(args.records or tempfile.mkstemp(prefix="fuzz-", suffix=".jsonl")[1])
    records.write_text("")
    env = os.environ | {
        "SPECRACE_FUZZ_CAMPAIGN": str(records),
        "SPECRACE_FUZZ_EXAMPLES": str(args.examples),
        "SPECRACE_FUZZ_HANG_S": str(args.hang_s),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    # Not the slow test_campaign_is_clean: it runs this script.
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
           "tests/cli_contract/test_fuzz.py"]  # fmt: skip
    cmd += ["-k", args.k] if args.k else []
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    rows = [json.loads(line) for line in records.read_text().splitlines() if line]
    print(table(rows))
    bad = [r for r in rows if r["outcome"] not in ("ok", "clean")]
    for r in bad:
        print(f"\n{r['outcome']}: {r['surface']}: {r['case']}\n  {' '.join(r['argv'])}")
        print("  " + r["stderr"].strip().replace("\n", "\n  ")[-1500:])
    if run.returncode != 0:  # a test that failed outside check_case (the harness itself)
        print(run.stdout[-3000:], run.stderr[-2000:], sep="\n")
    return 1 if bad or run.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
