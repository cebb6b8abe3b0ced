"""The documents the code cites live in the repository (issue #8).

1. Every relative Markdown link ``[text](path)`` / ``[text](path#anchor)`` in the repository's
   Markdown files resolves to an existing file, and an anchor to a heading of that file
   (GitHub's heading slugs).
2. Every section citation in the repository's ``.py``, ``.md``, ``.toml``, ``.ipynb`` and ``.sh``
   files, ``<name>.md §N[.M]`` (also ``docs/<name>.md §N``, ``§N of <name>.md`` and lists such
   as ``<name>.md §1, §2 and §6``), names a file under ``docs/`` and a heading numbered N there.
   A bare ``§N`` inside ``docs/<name>.md`` must be a heading of that same file.
3. No file cites a document that is not in the repository: neither a ``*.md`` name that
   resolves to no file here, nor (with or without ``.md`` or a section) the names of the
   reference notes these documents replaced, which lived outside the repository.

Each failure lists every offender as ``path:line: what``.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path

import pytest
from load import limit_s
from repo_root import ROOT

DOCS = ROOT / "docs"
SELF = Path(__file__).resolve()
SCANNED_SUFFIXES = {".py", ".md", ".toml", ".ipynb", ".sh"}
SKIP_DIRS = {".git", ".venv", ".cache", "out", "node_modules", "__pycache__", ".pytest_cache"}

# The reference notes that used to be cited, and the in-repo document that replaces each.
REPLACED = {
    "vllm-mechanics": "docs/mechanism.md",
    "h200-measurements": "docs/timing.md",
    "gdn-kernels": "docs/gdn.md",
    "vllm-versions": "docs/versions.md",
}

NUM = r"\d+(?:\.\d+)*"
SEP = r"\s*(?:,|;|/|&|–|-|\band\b|\bor\b)\s*"
CHAIN = rf"§\s?{NUM}(?:{SEP}§\s?{NUM})*"
FILE = r"(?<![\w/.-])(?P<file>(?:\.{1,2}/|[\w-]+/)*[\w-]+\.md)\b"
# <file>.md §N, §M  |  [text](<file>.md#x) §N  |  <file>.md`, §N
CITE_AFTER = re.compile(rf"{FILE}(?:\]\([^)\s]*\)|\)|`)?,?\s?(?P<chain>{CHAIN})")
# §N of <file>.md
CITE_BEFORE = re.compile(rf"(?P<chain>{CHAIN})\s+(?:of|in)\s+\[?`?{FILE}")
SECTION = re.compile(rf"§\s?({NUM})")
MD_MENTION = re.compile(FILE)
REPLACED_MENTION = re.compile(r"\b(" + "|".join(map(re.escape, REPLACED)) + r")\b(?:\.md)?")
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target><[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HEADING_NUMBER = re.compile(rf"^({NUM})\.?(?:\s|$)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+\1")


# -- the files ------------------------------------------------------------------------------


def repo_files() -> list[Path]:
    """Tracked plus untracked-but-not-ignored files (git), else a walk of the tree."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True, timeout=limit_s(60),
        ).stdout.decode()  # fmt: skip
        files = [ROOT / p for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        files = [
            p
            for p in ROOT.rglob("*")
            if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)
        ]
    return sorted(p for p in files if p.is_file())


def scanned_files() -> list[Path]:
    return [p for p in repo_files() if p.suffix in SCANNED_SUFFIXES and p.resolve() != SELF]


def markdown_files() -> list[Path]:
    return [p for p in repo_files() if p.suffix == ".md"]


def text_lines(path: Path) -> list[tuple[str, str]]:
    """(location, line) pairs; a notebook yields the lines of its cells' sources."""
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text).get("cells", [])
        except json.JSONDecodeError:
            cells = None
        if cells is not None:
            out = []
            for i, cell in enumerate(cells):
                src = cell.get("source", "")
                src = "".join(src) if isinstance(src, list) else str(src)
                out += [(f"{rel} cell {i} line {n}", s) for n, s in enumerate(src.split("\n"), 1)]
            return out
    return [(f"{rel}:{n}", s) for n, s in enumerate(text.split("\n"), 1)]


# -- headings -------------------------------------------------------------------------------


def _headings(path: Path) -> list[str]:
    """Heading texts outside fenced code blocks."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            out.append(m.group(2))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = unicodedata.normalize("NFC", text).lower()
    text = "".join(c for c in text if c.isalnum() or c in " _-")
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in _headings(path):
        base = slug(h)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


@cache
def section_numbers(path: Path) -> frozenset[str]:
    nums = set()
    for h in _headings(path):
        m = HEADING_NUMBER.match(h)
        if m:
            nums.add(m.group(1))
    return frozenset(nums)


# -- citations ------------------------------------------------------------------------------


def _strip_urls(line: str) -> str:
    return URL.sub(lambda m: " " * len(m.group(0)), line)


def qualified_citations(line: str) -> list[tuple[str, str, tuple[int, int]]]:
    """(cited file, section, span of the whole citation) for every file-qualified § in a line."""
    out = []
    for rx in (CITE_AFTER, CITE_BEFORE):
        for m in rx.finditer(line):
            for s in SECTION.finditer(m.group("chain")):
                out.append((m.group("file"), s.group(1), m.span()))
    return out


CONTINUATION = re.compile(r"^\s*(?:#+|\*|>|//|--|\"\"\"|\")?\s*")


def line_citations(lines: list[tuple[str, str]], i: int) -> list[tuple[str, str, tuple]]:
    """The qualified citations of line i, including one whose file ends line i and whose
    sections open line i+1 (a citation wrapped in a comment or docstring)."""
    line = _strip_urls(lines[i][1])
    cites = qualified_citations(line)
    if i + 1 < len(lines):
        nxt = CONTINUATION.sub("", _strip_urls(lines[i + 1][1]), count=1)
        joined = f"{line} {nxt}"
        for cited, num, (a, b) in qualified_citations(joined):
            if a < len(line) < b:
                cites.append((cited, num, (a, len(line))))
    return cites


def cited_doc(cited: str, citing: Path) -> Path | None:
    """The file a citation names: ``docs/<name>.md`` or a bare ``<name>.md`` mean the file in
    docs/; any other path is taken relative to the citing file, then to the repository root."""
    p = Path(cited)
    if p.parent == Path(".") or p.parts[0] == "docs":
        candidates = [DOCS / p.name]
    else:
        candidates = [citing.parent / p, ROOT / p]
    for c in candidates:
        if c.is_file():
            return c
    return None


def mention_exists(mention: str, citing: Path) -> bool:
    if "/" not in mention and mention in _tracked_names():  # a file name the code writes
        return True
    return any((base / mention).is_file() for base in (citing.parent, ROOT, DOCS))


@functools.cache
def _tracked_names() -> frozenset[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    return frozenset(Path(f).name for f in out.split())


def _fmt(offenders: list[str], what: str, hint: str = "") -> str:
    return f"{len(offenders)} {what}{hint}:\n  " + "\n  ".join(offenders)


# -- the tests ------------------------------------------------------------------------------


def test_relative_markdown_links_resolve() -> None:
    offenders = []
    for md in markdown_files():
        fenced = False
        for loc, line in text_lines(md):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            for m in LINK.finditer(INLINE_CODE.sub("", line)):
                target = m.group("target").strip("<>")
                if URL.match(target) or target.startswith(("mailto:", "/")):
                    continue
                path_part, _, anchor = target.partition("#")
                dest = (md.parent / path_part).resolve() if path_part else md
                if not dest.exists():
                    offenders.append(f"{loc}: link to missing file {target!r}")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    offenders.append(f"{loc}: no heading for anchor {target!r}")
    if offenders:
        pytest.fail(_fmt(offenders, "broken relative Markdown links"), pytrace=False)


def test_section_citations_name_a_docs_file_and_a_heading() -> None:
    offenders = []
    for path in scanned_files():
        in_docs = path.parent == DOCS and path.suffix == ".md"
        lines = text_lines(path)
        for i, (loc, raw) in enumerate(lines):
            line = _strip_urls(raw)
            cites = line_citations(lines, i)
            for cited, num, _span in cites:
                doc = cited_doc(cited, path)
                if doc is None:
                    offenders.append(f"{loc}: {cited} §{num}: no such file in the repository")
                elif num not in section_numbers(doc):
                    rel = doc.relative_to(ROOT).as_posix()
                    offenders.append(f"{loc}: {cited} §{num}: {rel} has no heading numbered {num}")
            if not in_docs:
                continue
            covered = [span for *_x, span in cites]
            for s in SECTION.finditer(line):
                if any(a <= s.start() < b for a, b in covered):
                    continue
                if s.group(1) not in section_numbers(path):
                    offenders.append(f"{loc}: bare §{s.group(1)}: no such heading in this file")
    if offenders:
        pytest.fail(_fmt(offenders, "section citations that point nowhere"), pytrace=False)


def test_no_citation_of_a_document_outside_the_repository() -> None:
    offenders = []
    for path in scanned_files():
        for loc, raw in text_lines(path):
            line = _strip_urls(raw)
            for m in REPLACED_MENTION.finditer(line):
                new = REPLACED[m.group(1)]
                offenders.append(f"{loc}: {m.group(0)!r} is not in the repository (use {new})")
            for m in MD_MENTION.finditer(line):
                name = m.group("file")
                if REPLACED_MENTION.fullmatch(name.rsplit("/", 1)[-1]):
                    continue  # reported above
                if not mention_exists(name, path):
                    offenders.append(f"{loc}: {name!r} is not a file of the repository")
    hint = " (" + ", ".join(f"{old}.md -> {new}" for old, new in REPLACED.items()) + ")"
    if offenders:
        msg = _fmt(offenders, "citations of documents outside the repository", hint)
        pytest.fail(msg, pytrace=False)


def _timing_rows() -> dict[str, list[str]]:
    """``key -> [default, measured, source]`` from the tables of docs/timing.md §7."""
    text = (DOCS / "timing.md").read_text(encoding="utf-8")
    sec = re.search(r"^## 7\. .*?(?=^## )", text, re.M | re.S)
    assert sec, "docs/timing.md has no section 7"
    rows = {}
    for m in re.finditer(r"^\| `(\w+)` \|(.*)\|\s*$", sec.group(0), re.M):
        rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def _digits(cell: str) -> str:
    head = cell.split("(")[0].split(",")[0].replace("\u2212", "-")
    return re.sub(r"[^\d.\-]", "", head)


def test_timing_doc_lists_every_timing_key_with_its_default_and_measurement() -> None:
    import tomllib
    from dataclasses import fields

    from sim.model.params import TimingParams

    rows = _timing_rows()
    defaults = TimingParams()
    offenders = []
    for f in fields(TimingParams):
        row = rows.get(f.name)
        if row is None:
            offenders.append(f"timing.{f.name}: no row in docs/timing.md §7")
        elif float(_digits(row[0])) != float(getattr(defaults, f.name)):
            offenders.append(f"timing.{f.name}: default {row[0]!r} != {getattr(defaults, f.name)}")
    offenders += [f"timing.{k}: documented but not a TimingParams field" for k in
                  set(rows) - {f.name for f in fields(TimingParams)}]  # fmt: skip
    timing_files = [*ROOT.glob("data/params/*.toml"), *ROOT.glob("sim/model/timing/*.toml")]
    for toml in sorted(timing_files):
        for key, value in tomllib.loads(toml.read_text()).get("timing", {}).items():
            row = rows.get(key)
            if row is not None and _digits(row[1]) != str(value):
                offenders.append(f"timing.{key}: measured {row[1]!r} != {value} in {toml.name}")
    if offenders:
        pytest.fail(_fmt(offenders, "stale rows in docs/timing.md §7"), pytrace=False)
