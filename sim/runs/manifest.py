"""A marked output folder's manifest, ``.specrace-manifest.jsonl``: one JSON line per file
specrace wrote there (its path and the SHA-256 of its content) or per temporary it started,
the record by which ``sim.runs.outputs`` proves a file is specrace's before replacing or
removing it. Appends from several processes never interleave or get lost; a file written
again keeps one line (:func:`settle`)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

MANIFEST = ".specrace-manifest.jsonl"  # one line per file specrace wrote there, with its hash
# The names our atomic writes give their temporaries: ".<name>.<8 chars>.tmp" (a file or a run
# folder being written) and ".<name>.<8 chars>.old" (what a replace moved aside).
TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.(tmp|old)")


def write_small(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.part")
    tmp.write_text(text)
    os.replace(tmp, path)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(folder: Path, exclusive: bool, flags: int) -> Iterator[int]:
    """The manifest of ``folder`` opened with ``flags``, under a shared lock (appends: one
    ``write`` each, so they do not interleave) or an exclusive one (:func:`settle`, which
    rewrites it in place, so every writer keeps the same file)."""
    fd = os.open(folder / MANIFEST, flags | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield fd
    finally:
        os.close(fd)


def record(folder: Path, rel: str, digest: str | None = None, *, temp: bool = False) -> None:
    """Add ``rel`` (a path inside the marked ``folder``) to its manifest: a file with the hash
    of its content, or a temporary about to be written (``temp``)."""
    entry: dict[str, object] = {"path": rel}
    if temp:
        entry["temp"] = True
    else:
        entry["sha256"] = digest
    with _locked(folder, False, os.O_WRONLY | os.O_APPEND) as fd:
        os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())


def settle(folder: Path, rel: str) -> None:
    """After ``rel`` was written in the marked ``folder``: drop the manifest's lines that no
    longer prove anything about it (its earlier hashes; its temporaries, which are gone), so
    the same command run twice leaves the same manifest, not one that grows by random names.
    Lines about other files are kept as they are, in their order. The rewrite is in place (one
    write, then a truncate: a kill between them leaves stale lines, never a lost one, and no
    temporary file of its own)."""
    name = PurePosixPath(rel)
    with _locked(folder, True, os.O_RDWR) as fd:
        with open(fd, "rb", closefd=False) as f:
            lines = f.read().splitlines()
        entries = [_entry(line) for line in lines]
        ours = {i for i, e in enumerate(entries) if e and e["path"] == rel and "sha256" in e}
        latest = max(ours, default=None)

        def stale(i: int, e: dict | None) -> bool:
            if e is None or i == latest:
                return False
            if i in ours:
                return True  # an earlier content of rel: replaced
            # a temporary of rel's, gone (checked on disk last: one call per such line)
            path = PurePosixPath(e["path"])
            m = TEMP_NAME.fullmatch(path.name)
            return (e.get("temp") is True and m is not None and m["name"] == name.name
                    and path.parent == name.parent
                    and not os.path.lexists(folder / e["path"]))  # fmt: skip

        kept = [
            line for i, (line, e) in enumerate(zip(lines, entries, strict=True)) if not stale(i, e)
        ]
        if len(kept) < len(lines):
            data = b"".join(line + b"\n" for line in kept)
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))


def _entry(line: str | bytes) -> dict | None:
    try:
        e = json.loads(line)
    except ValueError:
        return None
    return e if isinstance(e, dict) and isinstance(e.get("path"), str) else None


def manifest(folder: Path) -> tuple[dict[str, set[str]], set[str]]:
    """The marked ``folder``'s manifest: path -> the hashes specrace wrote there, and the
    temporaries it started. A line a kill cut short proves nothing and is skipped."""
    files: dict[str, set[str]] = {}
    temps: set[str] = set()
    try:
        text = (folder / MANIFEST).read_text()
    except (OSError, UnicodeDecodeError):
        return files, temps
    for line in text.splitlines():
        e = _entry(line)
        if e is None:
            continue
        if e.get("temp") is True:
            temps.add(e["path"])
        elif isinstance(e.get("sha256"), str):
            files.setdefault(e["path"], set()).add(e["sha256"])
    return files, temps
