"""Where specrace writes: the one home for preparing every output folder and output file.

Every command that writes calls :func:`prepare_dir` (a folder) or :func:`prepare_file` (one
file) before any work, so a path that cannot be written is one line and nothing is left behind:
an empty name, a name longer than the file system allows, a symbolic link that loops or dangles,
a file where a folder belongs, a folder that cannot be written.

Ownership. Every output folder holds a marker, ``.specrace-run.json`` (the kind of output,
specrace's version, the command line). A folder may be replaced (``--force``) or written into
(a resumed sweep, ``field-reports``) only if it is new, empty, or specrace's: it holds the
marker, or the layout an older specrace wrote without one (:data:`KINDS`). Replacing also needs
every file in it to be one specrace writes there; anything else is refused with what is there.
A file is replaced only if specrace wrote it (:func:`written_by_specrace`). Nothing outside the
output is removed, apart from the hidden temporaries of our own naming that a kill left beside
it (``sim.runs.io.remove_stale``).
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import stat
import sys
from pathlib import Path

from sim.errors import SpecraceError

MARKER = ".specrace-run.json"
_COMMAND: list[str] = []  # the command line of this process's command (record_command)

# kind -> the files specrace writes into such a folder (fnmatch over the path inside it; "*"
# also crosses "/"); the first pattern is the signature an older, unmarked folder is known by.
KINDS: dict[str, tuple[str, ...]] = {
    "run": ("*meta.json", "schedule.json", "schedule.parquet", "*trace.parquet",
            "*reads.parquet", "comparison.json"),
    "schedule": ("schedule.*", "schedule.json", "schedule.parquet"),
    "replay": ("replay_summary.json", "observed.parquet"),
    "sweep": ("sweep.json", "sweep.parquet", "points/*.json"),
    "field-reports": ("summary.md", "raw.json", "summary.json"),
    "calibrate": ("*.toml", "*.csv"),
    "bench": ("*_summary.json", "*.csv"),
    "vllm-run": ("summary.json", "raw_*.json*", "raw/raw_*.json*", "*.log", "*_d*ms/*"),
    "vllm-export": ("export.json", "schedule.json", "*.parquet", "agreement.json"),
    "vllm-forward": ("forward.csv", "forward.md", "summary.json", "timing-*.toml"),
    "vllm-repeatability": ("summary.json", "pairs.csv"),
}  # fmt: skip
# A file at the top of every unmarked output folder of ours (of some kind).
_TOP_NAMES = {"meta.json", "schedule.json", "schedule.parquet", "comparison.json",
              "replay_summary.json", "observed.parquet", "sweep.json", "summary.md", "raw.json",
              "summary.json", "export.json", "forward.csv"}  # fmt: skip
# Kinds whose files are too common to know an unmarked folder by: a marker is needed.
_MARKER_ONLY = {"calibrate", "bench"}
# What other commands add to an output folder: plots, a Perfetto trace, a shrunk scenario, the
# agreement of an export; and the temporaries of an atomic write that a kill left.
DERIVED = ("*.png", "*.svg", "*trace.perfetto.json", "*shrunk-*.toml", "agreement.*", "*.tmp",
           "*.old")  # fmt: skip


def record_command(prog: str, argv: list[str] | None) -> None:
    """The command line the markers of this process name (called by each command line's main)."""
    _COMMAND[:] = [prog, *(sys.argv[1:] if argv is None else argv)]


# -- paths ------------------------------------------------------------------------------------
def check_path(out: Path | str, flag: str = "--out") -> Path:
    """``out`` as an absolute path with its symbolic links resolved, or one line on why it
    cannot be an output: empty, a NUL, a name or path longer than the file system allows, a
    link that loops or dangles, a file where a folder belongs, a folder that cannot be read."""
    text = str(out)
    if not text.strip():
        raise SpecraceError(f"{flag} is empty: name a directory")
    if "\x00" in text:
        raise SpecraceError(f"{flag} {text!r}: a path cannot hold a NUL character")
    path = Path(text) if os.path.isabs(text) else Path.cwd() / text
    name_max, path_max = _limits(path)
    size = len(os.fsencode(str(path)))
    if size >= path_max:
        raise SpecraceError(f"{flag} {_short(text)}: the path is {size:,} bytes, more than the "
                            f"{path_max - 1:,} the file system allows")  # fmt: skip
    cur = Path(path.anchor)
    exists = True
    for i, part in enumerate(path.parts[1:]):
        n = len(os.fsencode(part))
        if n > name_max:
            raise SpecraceError(f"{flag} {_short(text)}: the name {_short(part, 24)} is {n} bytes, "
                                f"more than the {name_max} the file system allows")  # fmt: skip
        cur = cur / part
        if not exists:
            continue
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            exists = False
            continue
        except PermissionError:
            raise SpecraceError(f"{flag} {text}: cannot look into {cur.parent} "
                                "(permission denied)") from None  # fmt: skip
        except OSError as e:
            raise SpecraceError(f"{flag} {text}: {cur}: {e.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            st = _follow(cur, text, flag)
        if not stat.S_ISDIR(st.st_mode) and i < len(path.parts) - 2:
            raise SpecraceError(f"{flag} {text}: {cur} is a file, not a directory")
    return path.resolve()


def _follow(link: Path, text: str, flag: str) -> os.stat_result:
    try:
        return os.stat(link.resolve(strict=True))
    except RuntimeError:  # Python < 3.13: "Symlink loop from ..."
        raise SpecraceError(f"{flag} {text}: {link} is a symbolic link loop") from None
    except FileNotFoundError:
        raise SpecraceError(f"{flag} {text}: {link} is a dangling symbolic link (to "
                            f"{os.readlink(link)}, which does not exist)") from None  # fmt: skip
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SpecraceError(f"{flag} {text}: {link} is a symbolic link loop") from None
        raise SpecraceError(f"{flag} {text}: {link}: {e.strerror}") from None


def _limits(path: Path) -> tuple[int, int]:
    """NAME_MAX and PATH_MAX of the file system that holds ``path``'s nearest existing folder."""
    folder = path
    while not os.path.isdir(folder) and folder != folder.parent:
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX"), os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 255, 4096


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else f"{text[: n // 2]}...{text[-n // 2 :]}"


def _writable(path: Path, text: str, flag: str) -> None:
    """The folder ``path`` (or, if absent, its nearest existing parent) can be written."""
    folder = path
    while not os.path.exists(folder) and folder != folder.parent:
        folder = folder.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SpecraceError(f"{flag} {text}: {folder} is not writable")


# -- folders ----------------------------------------------------------------------------------
def prepare_dir(out: Path | str, kind: str, *, replace: bool, force: bool = False,
                flag: str = "--out") -> Path:  # fmt: skip
    """Check an output folder before any work; returns its resolved path. Creates nothing.

    ``replace``: the command writes the folder whole (a run, a replay): it must be absent or
    empty, or specrace's and ``force``. Otherwise the command writes its files into the folder
    (a sweep, field-reports): it must be absent, empty, or specrace's of the same kind."""
    assert kind in KINDS, kind
    text = str(out)
    path = check_path(out, flag)
    if replace and (path == Path.cwd().resolve() or path in Path.cwd().resolve().parents):
        raise SpecraceError(
            f"{flag} {text} is the working directory or a folder above it, which a run cannot "
            "replace: name a new directory"
        )
    if path.exists() and not path.is_dir():
        raise SpecraceError(f"{flag} {text} exists and is not a directory")
    _writable(path.parent if replace else path, text, flag)
    if not path.exists():
        return path
    try:
        entries = list(path.iterdir())
    except OSError as e:
        raise SpecraceError(f"{flag} {text}: cannot read the folder ({e.strerror})") from None
    if not entries:
        return path
    has = owner(path)
    if has is None:
        raise SpecraceError(f"{flag} {text} holds files specrace did not write "
                            f"({_listing(path)}): name a new or empty directory")  # fmt: skip
    if not replace:
        if has != kind:
            raise SpecraceError(f"{flag} {text} holds a specrace {has} output, not a {kind}: "
                                "name another directory")  # fmt: skip
        return path
    if not force:
        raise SpecraceError(f"{flag} {text} is not empty (a previous {has} output): --force "
                            "replaces it")  # fmt: skip
    foreign = foreign_files(path, has)
    if foreign:
        raise SpecraceError(
            f"{flag} {text} holds a specrace {has} output and files specrace did not write "
            f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}): --force replaces "
            "only what specrace wrote; move them or name another directory"
        )
    return path


def owner(folder: Path) -> str | None:
    """The kind of specrace output ``folder`` is: its marker's, or the kind whose layout an older
    specrace wrote (every file one of the kind's, the signature file among them); else None."""
    marker = folder / MARKER
    if marker.is_file() and not marker.is_symlink():
        try:
            kind = json.loads(marker.read_text()).get("kind")
        except (OSError, ValueError, AttributeError):
            kind = None
        return kind if isinstance(kind, str) and kind in KINDS else None
    try:  # a folder of no output of ours is known at its top, without walking it
        top = {p.name for p in folder.iterdir()}
    except OSError:
        return None
    if not top & _TOP_NAMES:
        return None
    files = _files(folder)
    for kind, patterns in KINDS.items():
        if kind in _MARKER_ONLY or not any(fnmatch.fnmatch(f, patterns[0]) for f in files):
            continue
        if not foreign_files(folder, kind, files):
            return kind
    return None


def foreign_files(folder: Path, kind: str, files: list[str] | None = None) -> list[str]:
    """The files in ``folder`` specrace does not write into a ``kind`` folder."""
    patterns = (*KINDS[kind], *DERIVED, MARKER)
    return [f for f in (_files(folder) if files is None else files)
            if not any(fnmatch.fnmatch(f, p) for p in patterns)]  # fmt: skip


FILES_MAX = 10_000  # a folder of more files is no output of ours (and is not walked further)


def _files(folder: Path) -> list[str]:
    """Every file and link under ``folder`` (links not followed), as paths inside it; beyond
    :data:`FILES_MAX` of them, one name that is no output's ("...")."""
    out: list[str] = []
    for root, dirs, names in os.walk(folder):
        rel = Path(root).relative_to(folder)
        out += [(rel / n).as_posix() for n in names]
        out += [(rel / d).as_posix() for d in dirs if (Path(root) / d).is_symlink()]
        if len(out) > FILES_MAX:
            return ["..."]
    return sorted(out)


def _listing(folder: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    return ", ".join(names[:3]) + (f", ... {len(names)} in all" if len(names) > 3 else "")


def write_marker(folder: Path, kind: str) -> None:
    """Mark ``folder`` as a specrace ``kind`` output (written last into a run's temporary, first
    into a folder a command writes into)."""
    from sim.version import version

    doc = {"kind": kind, "version": version(), "command": " ".join(_COMMAND)}
    (folder / MARKER).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def claim_dir(path: Path, kind: str) -> Path:
    """Create a folder :func:`prepare_dir` accepted (``replace=False``) and mark it: called just
    before the command's first write, so a failure before it leaves nothing."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        write_marker(path, kind)
    except OSError as e:
        raise SpecraceError(f"--out {path}: cannot create: {e.strerror}") from None
    return path


# -- files ------------------------------------------------------------------------------------
def prepare_file(out: Path | str, flag: str = "--out") -> Path:
    """Check an output file's path before any work; returns it resolved. An existing file is
    replaced only if specrace wrote it (:func:`written_by_specrace`)."""
    text = str(out)
    if not text.strip():
        raise SpecraceError(f"{flag} is empty: name a file")
    path = check_path(out, flag)
    if path.is_dir() or text.endswith(os.sep):
        raise SpecraceError(f"{flag} {text}: a file name is needed, not a directory")
    _writable(path.parent, text, flag)
    if path.exists() and not written_by_specrace(path):
        raise SpecraceError(f"{flag} {text} exists and specrace did not write it: name a new "
                            "file, or move it away")  # fmt: skip
    return path


def written_by_specrace(path: Path) -> bool:
    """A file one of specrace's commands writes, known by its content: a matplotlib figure, a
    ``check`` result, a Perfetto trace, a shrunk scenario, an upstream test; or any file of a
    specrace folder."""
    if path.is_symlink() or not path.is_file():
        return False
    folder = path.parent
    for d in (folder, folder.parent):
        kind = owner(d) if d.is_dir() else None
        rel = path.relative_to(d).as_posix()
        if kind and not foreign_files(d, kind, [rel]):
            return True
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if path.suffix in (".png", ".svg"):
        return b"matplotlib" in head.lower()
    if path.suffix == ".toml":
        return b"Shrunk by `python -m sim shrink" in head
    if path.suffix == ".py":
        return b"``python -m sim upstream-test`` generated this file" in head
    if path.suffix == ".json":
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and (
            {"space", "policies", "schedules"} <= set(doc) or "traceEvents" in doc
        )
    return False
