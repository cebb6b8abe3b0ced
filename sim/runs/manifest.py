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
def _manifest_fd(folder: Path, exclusive: bool) -> Iterator[int]:
    """The manifest of ``folder`` open for appending, under a shared lock (appends: one
    ``write`` each, so they do not interleave) or an exclusive one (:func:`settle` rewrites
    it). A writer that waited while :func:`settle` replaced the file opens the new one."""
    path = folder / MANIFEST
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                current = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                yield fd
                return
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
    with _manifest_fd(folder, exclusive=False) as fd:
        os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())


def settle(folder: Path, rel: str) -> None:
    """After ``rel`` was written in the marked ``folder``: drop the manifest's lines that no
    longer prove anything about it (its earlier hashes; its temporaries, which are gone), so
    the same command run twice leaves the same manifest, not one that grows by random names.
    Lines about other files are kept as they are, in their order."""
    name = PurePosixPath(rel)
    with _manifest_fd(folder, exclusive=True):
        lines = (folder / MANIFEST).read_text().splitlines()
        last = None
        for i, line in enumerate(lines):
            e = _entry(line)
            if e is not None and e["path"] == rel and "sha256" in e:
                last = i
        kept = []
        for i, line in enumerate(lines):
            e = _entry(line)
            if e is not None and i != last:
                path = PurePosixPath(e["path"])
                m = TEMP_NAME.fullmatch(path.name)
                if e["path"] == rel and "sha256" in e:
                    continue  # an earlier content of rel: replaced
                if (e.get("temp") is True and m and m["name"] == name.name
                        and path.parent == name.parent
                        and not os.path.lexists(folder / e["path"])):  # fmt: skip
                    continue  # a temporary of rel's, gone
            kept.append(line)
        if len(kept) < len(lines):
            write_small(folder / MANIFEST, "".join(line + "\n" for line in kept))


def _entry(line: str) -> dict | None:
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
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if not isinstance(e, dict) or not isinstance(e.get("path"), str):
            continue
        if e.get("temp") is True:
            temps.add(e["path"])
        elif isinstance(e.get("sha256"), str):
            files.setdefault(e["path"], set()).add(e["sha256"])
    return files, temps
