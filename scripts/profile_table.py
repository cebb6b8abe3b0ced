"""A py-spy profile (``--format raw``: one collapsed stack and its sample count a line) as the
markdown tables of docs/perf.md: each function's share of the samples, with what it calls
(inclusive) and in its own frame (self; py-spy counts numpy's C calls in the Python frame that
made them).

    py-spy record -r 200 -f raw -o PROFILE.raw -- python -m sim ...
    python scripts/profile_table.py PROFILE.raw [--top 20] [--skip 8]   # or .raw.gz, .raw.xz

``--skip`` leaves out the first inclusive rows (the interpreter and CLI frames every sample
has). ``--by-package`` gives instead each sample to where its deepest frame is: a package of
site-packages, a file of the checkout (sim/, gpu_check/, tests/, scripts/), Python's import
machinery, or the rest of the standard library (a profile of a whole test suite, recorded with
``--subprocesses``, spreads over hundreds of processes). py-spy is a developer tool, not a
dependency of the project (``pip install py-spy``).
"""

from __future__ import annotations

import argparse
import gzip
import lzma
import re
import sys
from collections import Counter
from pathlib import Path

_PATH = re.compile(r" \((?:[^()]*/site-packages/|[^()]*?/(?=(?:sim|gpu_check)/))")
_LINE = re.compile(r":\d+\)$")


def _name(frame: str) -> str:
    """``func (sim/model/x.py)``: the checkout or site-packages prefix and the line dropped."""
    return _LINE.sub(")", _PATH.sub(" (", frame))


def _lines(text: str) -> list[tuple[int, str]]:
    """The raw lines, numbered: a line without its count is joined to the next (py-spy writes
    the command line of a ``python -c`` process with its newlines)."""
    out, pending, first = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        pending, first = (pending + " " + line, first) if pending else (line, n)
        if re.search(r" \d+$", pending):
            out.append((first, pending))
            pending = ""
    if pending:
        out.append((first, pending))  # no count at the end: the caller's error
    return out


def read_profile(raw: Path) -> str:
    """The profile's text: ``.gz`` and ``.xz`` (how the large ones are committed) unpacked."""
    unpack = {".gz": gzip.decompress, ".xz": lzma.decompress}.get(raw.suffix, bytes)
    try:
        return unpack(raw.read_bytes()).decode()
    except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError) as e:
        raise SystemExit(f"error: {raw}: not a py-spy raw profile ({e})") from None


def tables(raw: Path) -> tuple[int, Counter, Counter]:
    total, inclusive, own = 0, Counter(), Counter()
    text = read_profile(raw)
    for n_line, line in _lines(text):
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


_OURS = re.compile(r"\((?:[^()]*/)?((?:sim|gpu_check|tests|scripts)/[^:()]+)")
_FILE = re.compile(r"\((?:[^()]*/site-packages/)?([^():]+):\d+\)$")


def package(frame: str) -> str:
    """Where a raw frame ``func (path:line)`` is: see ``--by-package``. py-spy writes a path
    under sys.path relative to it: ``pandas/core/frame.py``, ``subprocess.py``."""
    if m := _OURS.search(frame):
        return m.group(1)
    if "<frozen importlib" in frame:
        return "(imports)"
    if frame.startswith("process "):
        return "(no Python frame)"
    m = _FILE.search(frame)
    path = m.group(1) if m else ""
    if "/" in path and not path.startswith("/"):
        return path.split("/")[0]  # a package: pandas, matplotlib, json, multiprocessing
    return "(python: one-file modules, frozen, builtins)"


def by_package(raw: Path) -> tuple[int, Counter]:
    total, where = 0, Counter()
    for _n, line in _lines(read_profile(raw)):
        stack, _sep, count = line.rpartition(" ")
        frames = stack.split(";")
        total += int(count)
        where[package(frames[-1]) if stack else "(no Python frame)"] += int(count)
    return total, where


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--skip", type=int, default=8)
    ap.add_argument("--by-package", action="store_true", help="shares by where samples are")
    args = ap.parse_args(argv)
    if not args.raw.is_file():
        raise SystemExit(f"error: {args.raw}: no such file")
    total, inclusive, own = tables(args.raw)  # also checks every line
    if args.by_package and total:
        total, where = by_package(args.raw)
        print(f"{total:,} samples\n")
        print("| where the deepest frame is | share |\n|---|---:|")
        for f, n in where.most_common(args.top):
            print(f"| {f} | {100 * n / total:.1f} % |")
        return 0
    if not total:
        raise SystemExit(f"error: {args.raw}: no samples")
    print(f"{total:,} samples\n")
    print("| function | inclusive | self |\n|---|---:|---:|")
    for f, n in inclusive.most_common(args.top + args.skip)[args.skip :]:
        print(f"| `{f}` | {100 * n / total:.1f} % | {100 * own[f] / total:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
