"""Where specrace writes: the one home for preparing, owning and replacing every output.

Every command that writes calls :func:`prepare_dir` (a folder) or :func:`prepare_file` (one
file) before any work, so a path that cannot be written is one line and nothing is left behind:
an empty name, a name longer than the file system allows, a symbolic link that loops or dangles,
a file where a folder belongs, a folder that cannot be written.

Ownership is proved, never guessed from names or layout:

- An output folder holds specrace's marker, ``.specrace-run.json`` (its kind, specrace's version,
  the command line), and a manifest, ``.specrace-manifest.jsonl``: one line per file specrace
  wrote there, with the file's SHA-256. A file there is specrace's only if the manifest lists its
  path with its present content's hash; a folder inside it is judged by its own marker.
- A single file written elsewhere carries its proof inside (``sim.runs.signature``).
- ``--force`` replaces a folder only if it holds a marker of the command's own kind and every
  file in it is proved; anything else is refused, naming the first foreign file. A folder is
  written into (a resumed sweep, ``field-reports``) only if it is new, empty or specrace's of
  the same kind, and an existing file in it is replaced only if proved.
- A marker older than the manifest (an older specrace's) proves nothing: such a folder is
  refused with how to move it aside.
- Replacing re-checks at the moment of replacing (:func:`install_dir`, :func:`install_file`):
  the old output is first moved aside under a private name, checked there, and only then
  removed; the new one is renamed in only if nothing took its place meanwhile. What fails the
  re-check is put back and the finished output is left beside it, named in the message.
- Temporaries are cleaned only if they carry the marker (a folder) or their folder's manifest
  lists them (a file).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shlex
import stat
import sys
from pathlib import Path

from sim.errors import SpecraceError
from sim.runs.manifest import (  # noqa: F401  (callers import these from here too)
    MANIFEST,
    TEMP_NAME,
    manifest,
    record,
    settle,
    sha256,
    write_small,
)

MARKER = ".specrace-run.json"  # the kind of output, specrace's version, the command line
FORMAT = 2  # markers before it carried no manifest: they prove nothing
_COMMAND: list[str] = []  # the command line of this process's command (record_command)

# kind -> what writes it (the messages name it).
KINDS: dict[str, str] = {
    "run": "python -m sim run", "schedule": "python -m sim schedule",
    "replay": "python -m gpu_check replay", "sweep": "python -m sim sweep",
    "field-reports": "python -m sim field-reports", "calibrate": "python -m gpu_check calibrate",
    "bench": "python -m gpu_check bench", "vllm-run": "python -m gpu_check vllm-run",
    "vllm-export": "python -m gpu_check vllm-export",
    "vllm-forward": "python -m gpu_check vllm-forward",
    "vllm-repeatability": "python -m gpu_check vllm-repeatability",
    "vllm-plan": "python -m gpu_check vllm-plan",
    "vllm-gauge": "python -m gpu_check vllm-gauge",
    "vllm-plugin-bench": "python -m gpu_check vllm-plugin-bench",
    "event-lag": "python -m gpu_check.event_lag",
}  # fmt: skip


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
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = ascii(os.fsencode(text))[2:-1]
        raise SpecraceError(f"{flag} {shown}: not valid UTF-8 (a path specrace writes must be "
                            "UTF-8 text)") from None  # fmt: skip
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


# -- markers and manifests --------------------------------------------------------------------
def write_marker(folder: Path, kind: str, *, writing: bool = False) -> None:
    """Mark ``folder`` as a specrace ``kind`` output with an empty manifest. ``writing``: a run
    folder being written whole under a temporary name; :func:`seal` lists its files at the end."""
    from sim.version import version

    assert kind in KINDS, kind
    doc = {"kind": kind, "format": FORMAT, "version": version(), "command": " ".join(_COMMAND)}
    if writing:
        doc["writing"] = True
    write_small(folder / MARKER, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if not (folder / MANIFEST).exists():
        write_small(folder / MANIFEST, "")


def marker(folder: Path) -> dict | None:
    """``folder``'s marker, if it is one of this format (a regular file, a known kind)."""
    path = folder / MARKER
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 65536:
            return None
        doc = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    kind = doc.get("kind")
    return doc if isinstance(kind, str) and kind in KINDS else None


def old_marker(folder: Path) -> bool:
    """A marker an older specrace wrote (no format, so no manifest): it proves nothing."""
    try:
        doc = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError, RecursionError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and "format" not in doc and doc.get("kind") in KINDS


def seal(folder: Path, kind: str) -> None:
    """A run folder written whole: list every file in it with its hash (folders marked inside
    it keep their own), then mark it done."""
    lines = []
    for rel in _walk(folder):
        if rel.endswith("/"):
            continue
        lines.append(json.dumps({"path": rel, "sha256": sha256(folder / rel)}, sort_keys=True))
    write_small(folder / MANIFEST, "".join(line + "\n" for line in lines))
    write_marker(folder, kind)


def _walk(folder: Path, limit: int | None = None) -> list[str]:
    """What ``folder`` holds, as paths inside it: files, links and other entries as they are,
    folders that hold nothing with a trailing "/"; its own marker and manifest left out, and
    folders marked inside it left whole (as "sub/" + their marker's name)."""
    out: list[str] = []
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        rel = here.relative_to(folder)
        if rel.parts and marker(here) is not None:
            out.append((rel / MARKER).as_posix())
            dirs[:] = []
            continue
        for d in list(dirs):
            if (here / d).is_symlink():
                out.append((rel / d).as_posix())
                dirs.remove(d)
        if rel.parts and not dirs and not names:
            out.append(rel.as_posix() + "/")
        out += [(rel / n).as_posix() for n in names if rel.parts or n not in (MARKER, MANIFEST)]
        if limit is not None and len(out) > limit:
            break
    return sorted(out)


def foreign_files(folder: Path, limit: int = 3) -> list[str]:
    """The first ``limit`` entries in the marked ``folder`` specrace cannot prove it wrote
    (paths inside it). Folders marked inside it are judged by their own manifests."""
    files, temps = manifest(folder)
    out: list[str] = []
    for rel in _walk(folder):
        path = folder / rel
        if rel.endswith("/" + MARKER):
            inner = path.parent
            out += [f"{inner.relative_to(folder).as_posix()}/{f}" for f in foreign_files(inner)]
        elif not rel.endswith("/") and not _proved(path, files.get(rel), rel in temps):
            out.append(rel)
        elif rel.endswith("/"):
            out.append(rel)  # a folder specrace did not make (it writes none empty)
        if len(out) >= limit:
            break
    return out[:limit]


def _proved(path: Path, hashes: set[str] | None, temp: bool) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return True  # gone meanwhile: nothing of anyone's to lose
    if not stat.S_ISREG(st.st_mode):
        return False
    if temp and TEMP_NAME.fullmatch(path.name):
        return True
    return bool(hashes) and sha256(path) in hashes  # type: ignore[operator]


def home(path: Path) -> Path | None:
    """The nearest folder at or above ``path`` that holds a marker of this format."""
    for folder in (path, *path.parents):
        if marker(folder) is not None:
            return folder
    return None


def proved_file(path: Path, as_path: Path | None = None) -> bool:
    """Whether specrace can prove it wrote the file at ``path`` as it is now: its folder's
    manifest lists it with this content's hash, or it carries a valid signature. ``as_path``:
    judge it as if it were there (a file a replace has just moved aside)."""
    from sim.runs.signature import is_signed

    at = as_path or path
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    folder = home(at.parent)
    if folder is not None:
        files, _ = manifest(folder)
        hashes = files.get(at.relative_to(folder).as_posix())
        if hashes and sha256(path) in hashes:
            return True
    return is_signed(path)


# -- folders ----------------------------------------------------------------------------------
def prepare_dir(out: Path | str, kind: str, *, replace: bool, force: bool = False,
                flag: str = "--out") -> Path:  # fmt: skip
    """Check an output folder before any work; returns its resolved path. Creates nothing.

    ``replace``: the command writes the folder whole (a run, a replay): it must be absent or
    empty, or, with ``force``, specrace's of this kind with nothing in it specrace did not
    write. Otherwise the command writes its files into the folder (a sweep, field-reports): it
    must be absent, empty, or specrace's of this kind."""
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
        if replace:
            _writable(path, text, flag)
        return path
    doc = marker(path)
    if doc is None:
        if old_marker(path):
            raise SpecraceError(
                f"{flag} {text} was written by an older specrace, whose outputs carry no "
                f"manifest to prove what is theirs: move it aside (mv {shlex.quote(text)} "
                f"{shlex.quote(text + '.old')}) or "
                "name a new directory"
            )
        raise SpecraceError(f"{flag} {text} holds files specrace did not write "
                            f"({_listing(path)}): name a new or empty directory")  # fmt: skip
    if doc["kind"] != kind:
        raise SpecraceError(f"{flag} {text} holds a specrace {doc['kind']} output, not a "
                            f"{kind}: name another directory")  # fmt: skip
    if not replace:
        return path
    if not force:
        raise SpecraceError(f"{flag} {text} is not empty (a previous {kind} output): --force "
                            "replaces it")  # fmt: skip
    foreign = foreign_files(path)
    if foreign:
        raise SpecraceError(
            f"{flag} {text} holds a specrace {kind} output and files specrace did not write "
            f"({', '.join(foreign)}{', ...' if len(foreign) == 3 else ''}): --force replaces "
            "only what specrace wrote; move them or name another directory"
        )
    return path


def _listing(folder: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    return ", ".join(names[:3]) + (f", ... {len(names)} in all" if len(names) > 3 else "")


def claim_dir(path: Path, kind: str) -> Path:
    """Create a folder :func:`prepare_dir` accepted (``replace=False``) and mark it, unless it is
    marked already: called just before the command's first write, so a failure before it leaves
    nothing. A folder that gained someone else's files since it was checked is refused."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        doc = marker(path)
        if doc is None:
            if any(path.iterdir()):
                seen = _listing(path)
                raise SpecraceError(f"--out {path}: files appeared in it while specrace was "
                                    f"working ({seen}): name a new directory")  # fmt: skip
            write_marker(path, kind)
        elif doc["kind"] != kind:
            raise SpecraceError(f"--out {path} holds a specrace {doc['kind']} output, not a "
                                f"{kind}: name another directory")  # fmt: skip
    except OSError as e:
        raise SpecraceError(f"--out {path}: cannot create: {e.strerror}") from None
    return path


# -- replacing, checked again at the moment of replacing -----------------------------------------
def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` only if nothing is at ``dst``; FileExistsError otherwise. One
    system call where the kernel has one (Linux renameat2), else a check just before."""
    fn = _renameat2()
    if fn is not None:
        if fn(-100, os.fsencode(src), -100, os.fsencode(dst), 1) == 0:  # AT_FDCWD, NOREPLACE
            return
        err = _errno()
        if err == errno.EEXIST or err == errno.ENOTEMPTY:
            raise FileExistsError(err, os.strerror(err), str(dst))
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
            raise OSError(err, os.strerror(err), str(dst))
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


_RENAMEAT2: list = []


def _renameat2():
    if not _RENAMEAT2:
        fn = None
        if sys.platform.startswith("linux"):
            import ctypes

            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fn = libc.renameat2
                fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                               ctypes.c_uint]  # fmt: skip
            except (OSError, AttributeError):
                fn = None
        _RENAMEAT2.append(fn)
    return _RENAMEAT2[0]


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


def aside_name(path: Path, suffix: str = "old") -> Path:
    """A free hidden name beside ``path`` of our temporaries' form (:data:`TEMP_NAME`)."""
    for _ in range(100):
        cand = path.parent / f".{path.name}.{secrets.token_hex(4)}.{suffix}"
        if not os.path.lexists(cand):
            return cand
    raise SpecraceError(f"{path}: no free temporary name beside it")


def install_dir(tmp: Path, path: Path, kind: str, *, force: bool, flag: str = "--out") -> None:
    """Put the finished folder ``tmp`` at ``path``, checking again what is there now: nothing,
    an empty folder, or (with ``force``) specrace's ``kind`` output with nothing foreign in it.
    Otherwise the finished output is left beside it, named in the one-line refusal.

    An old output is first moved aside under a new hidden name, which its marker records
    (``"aside"``) before the move: :func:`remove_stale` removes a folder of that form only when
    its own marker names it so, never a user's ``mv o .o.20241205.old``."""
    try:
        rename_noreplace(tmp, path)
        return
    except FileExistsError:
        pass
    try:
        os.rmdir(path)  # an empty folder: removed only while it is empty
        return install_dir(tmp, path, kind, force=force, flag=flag)
    except FileNotFoundError:
        return install_dir(tmp, path, kind, force=force, flag=flag)
    except OSError:
        pass
    why = _why_not_replaceable(path, kind, force)
    if why:
        raise _left_beside(tmp, path, flag, why)
    aside = aside_name(path)
    try:
        _name_aside(path, aside.name)
        os.rename(path, aside)
    except FileNotFoundError:  # gone meanwhile
        return install_dir(tmp, path, kind, force=force, flag=flag)
    except OSError as e:
        why = f"cannot move the old output aside ({e.strerror})"
        raise _left_beside(tmp, path, flag, why) from None
    why = _why_not_replaceable(aside, kind, force)
    if why:
        try:
            rename_noreplace(aside, path)
        except OSError:
            raise _left_beside(tmp, path, flag, f"{why}; it was moved to {aside}") from None
        raise _left_beside(tmp, path, flag, why)
    try:
        rename_noreplace(tmp, path)
    except OSError:
        raise _left_beside(tmp, path, flag, f"a new {path.name} appeared meanwhile; the old "
                           f"output is at {aside}") from None  # fmt: skip
    remove_owned_dir(aside)


def _name_aside(folder: Path, name: str) -> None:
    """Record in ``folder``'s marker (specrace's own file) the name it is about to be moved to."""
    doc = marker(folder)
    if doc is None:
        raise OSError(errno.EPERM, "its marker changed", str(folder))
    doc["aside"] = name
    write_small(folder / MARKER, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _why_not_replaceable(folder: Path, kind: str, force: bool) -> str:
    try:
        if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
            return ""
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    doc = marker(folder) if folder.is_dir() and not folder.is_symlink() else None
    if doc is None:
        return "it now holds files specrace did not write"
    if doc["kind"] != kind:
        return f"it now holds a specrace {doc['kind']} output"
    if not force:
        return f"a {kind} output appeared there meanwhile (--force replaces it)"
    foreign = foreign_files(folder)
    if foreign:
        return f"files specrace did not write appeared in it ({', '.join(foreign)})"
    return ""


def _left_beside(tmp: Path, path: Path, flag: str, why: str) -> SpecraceError:
    keep = path.with_name(f"{path.name}.new-{secrets.token_hex(3)}")
    try:
        rename_noreplace(tmp, keep)
    except OSError:
        keep = tmp
    return SpecraceError(f"{flag} {path} changed while specrace was writing: {why}; nothing "
                         f"there was touched, and the finished output is at {keep}")  # fmt: skip


def remove_owned_dir(folder: Path) -> None:
    """Remove a folder this process moved aside after proving every file in it specrace's."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def install_file(tmp: Path, path: Path, flag: str = "--out") -> None:
    """Put the finished file ``tmp`` at ``path``: renamed in if nothing is there; a file
    already there is first moved aside, proved specrace's there (:func:`proved_file`) and only
    then removed; otherwise it is put back and the refusal names where the new file is."""
    try:
        rename_noreplace(tmp, path)
        return
    except FileExistsError:
        pass
    if os.path.isdir(path) and not os.path.islink(path):
        raise _left_beside(tmp, path, flag, "it is a directory")
    folder = home(path.parent)
    aside = aside_name(path)
    if folder is not None:
        record(folder, aside.relative_to(folder).as_posix(), temp=True)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return install_file(tmp, path, flag)
    if not proved_file(aside, as_path=path):
        try:
            rename_noreplace(aside, path)
        except OSError:
            raise _refuse_file(tmp, path, flag, f"; yours was moved to {aside}") from None
        raise _refuse_file(tmp, path, flag, "")
    try:
        rename_noreplace(tmp, path)
    except OSError:
        raise _left_beside(tmp, path, flag, f"a new file appeared there meanwhile; the old one "
                           f"is at {aside}") from None  # fmt: skip
    aside.unlink(missing_ok=True)


def _refuse_file(tmp: Path, path: Path, flag: str, extra: str) -> SpecraceError:
    keep = path.with_name(f"{path.stem}.new-{secrets.token_hex(3)}{path.suffix}")
    try:
        rename_noreplace(tmp, keep)
    except OSError:
        tmp.unlink(missing_ok=True)
        return SpecraceError(f"{flag} {path} exists and specrace cannot prove it wrote it: name "
                             f"a new file, or move it away{extra}")  # fmt: skip
    return SpecraceError(f"{flag} {path} exists and specrace cannot prove it wrote it: it was "
                         f"left as it is{extra}, and the new file is at {keep}")  # fmt: skip


def remove_stale(folder: Path, name: str | None = None) -> list[Path]:
    """Remove what a kill just before an atomic rename left in ``folder``: temporaries of our
    naming (of target ``name`` only, if given) that prove they are ours: a folder holding our
    marker and nothing foreign, a folder a replace moved aside holding one such folder, or a
    file ``folder``'s manifest lists as a temporary. Returns what was removed."""
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir()) if folder.is_dir() else []
    except OSError:
        return removed
    mark = home(folder)
    temps = manifest(mark)[1] if mark is not None else set()
    for p in entries:
        m = TEMP_NAME.fullmatch(p.name)
        if not m or (name is not None and m["name"] != name) or p.is_symlink():
            continue
        if p.is_dir():
            if not _stale_dir_is_ours(p):
                continue
            remove_owned_dir(p)
        elif mark is not None and p.is_file() and p.relative_to(mark).as_posix() in temps:
            p.unlink(missing_ok=True)
        else:
            continue
        removed.append(p)
    return removed


def _stale_dir_is_ours(p: Path) -> bool:
    """A folder a kill left: a run being written (``.tmp``, marked at once, every file written
    into it listed as it was written) or an old output a replace moved aside (``.old``, whose
    marker recorded that very name before the move), holding nothing specrace cannot prove it
    wrote. A user's folder of the same form is neither: its marker does not name it, or a file
    in it is not listed."""
    doc = marker(p)
    if doc is None:
        return False
    if p.name.endswith(".old") and doc.get("aside") != p.name:
        return False
    return not foreign_files(p)


# -- files ------------------------------------------------------------------------------------
def prepare_file(out: Path | str, flag: str = "--out") -> Path:
    """Check an output file's path before any work; returns it resolved. An existing file is
    replaced only if specrace can prove it wrote it (:func:`proved_file`)."""
    text = str(out)
    if not text.strip():
        raise SpecraceError(f"{flag} is empty: name a file")
    if text.endswith(("/", os.sep)):
        raise SpecraceError(f"{flag} {text}: a file name is needed, not a directory")
    path = check_path(out, flag)
    if path.is_dir():
        raise SpecraceError(f"{flag} {text}: a file name is needed, not a directory")
    _writable(path.parent, text, flag)
    if os.path.lexists(path) and not proved_file(path):
        raise SpecraceError(f"{flag} {text} exists and specrace did not write it: name a new "
                            "file, or move it away")  # fmt: skip
    return path
