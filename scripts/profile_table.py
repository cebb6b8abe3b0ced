"""A py-spy profile (``--format raw``: one collapsed stack and its sample count a line) as the
markdown tables of docs/perf.md: each function's share of the samples, with what it calls
(inclusive) and in its own frame (self; py-spy counts numpy's C calls in the Python frame that
made them).

    py-spy record -r 200 -f raw -o PROFILE.raw -- python -m sim ...
    python scripts/profile_table.py PROFILE.raw [--top 20] [--skip 8]   # or PROFILE.raw.gz

``--skip`` leaves out the first inclusive rows (the interpreter and CLI frames every sample
has). py-spy is a developer tool, not a dependency of the project (``pip install py-spy``).
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from collections import Counter
from pathlib import Path

_PATH = re.compile(r" \((?:[^()]*/site-packages/|[^()]*?/(?=(?:sim|gpu_check)/))")
_LINE = re.compile(r":\d+\)$")


def _name(frame: str) -> str:
    """``func (sim/model/x.py)``: the checkout or site-packages prefix and the line dropped."""
    return _LINE.sub(")", _PATH.sub(" (", frame))


def tables(raw: Path) -> tuple[int, Counter, Counter]:
    total, inclusive, own = 0, Counter(), Counter()
    try:
        data = raw.read_bytes()
        text = (gzip.decompress(data) if raw.suffix == ".gz" else data).decode()
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise SystemExit(f"error: {raw}: not a py-spy raw profile ({e})") from None
    for n_line, line in enumerate(text.splitlines(), 1):
        stack, sep, count = line.rpartition(" ")
        if not sep or not count.isdigit():
            raise SystemExit(f"error: {raw}:{n_line}: not a py-spy raw line (stack count)")
        n = int(count)
        total += n
        frames = [_name(f) for f in stack.split(";")] if stack else ["(no Python frame)"]
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    return total, inclusive, own


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--skip", type=int, default=8)
    args = ap.parse_args(argv)
    if not args.raw.is_file():
        raise SystemExit(f"error: {args.raw}: no such file")
    total, inclusive, own = tables(args.raw)
    if not total:
        raise SystemExit(f"error: {args.raw}: no samples")
    print(f"{total:,} samples\n")
    print("| function | inclusive | self |\n|---|---:|---:|")
    for f, n in inclusive.most_common(args.top + args.skip)[args.skip :]:
        print(f"| `{f}` | {100 * n / total:.1f} % | {100 * own[f] / total:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
