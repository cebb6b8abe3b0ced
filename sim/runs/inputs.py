"""Where specrace reads a file a user named: the one home for refusing what cannot be read.

Every command that reads a file it was given (a scenario or timing TOML, a schedule, a vLLM raw
record, a ``--grid``, a ``predictions.json``) opens it here, so an input that is not a regular
file is one line before any byte is read: a FIFO (reading it would wait for a writer forever),
a character device (``/dev/zero`` never ends), a socket, a folder, a link that dangles or
loops. A symbolic link to a regular file is a regular file. :func:`read_bounded` then reads it
whole, plain or gzip-compressed, with a bound on the size once decompressed (a gzip bomb, or a
file of another kind, is one line, not a machine out of memory), and text must be UTF-8 text.

The sibling of :mod:`sim.runs.outputs` (where specrace writes).
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Literal, overload

from sim.errors import SpecraceError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20  # read this much at a time: a bound never allocates the bound up front
META_MAX = 64 << 20  # a JSON or TOML file of settings or results (a few KiB to a MiB written)
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _check_mode(mode: int, what: str, text: str) -> None:
    if stat.S_ISDIR(mode):
        raise SpecraceError(f"{what} {text} is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise SpecraceError(
            f"{what} {text} is not a regular file ({_kind(mode)}): give a file to read"
        )


def _os_error(e: OSError, what: str, text: str) -> SpecraceError:
    if isinstance(e, FileNotFoundError):
        if os.path.islink(text):
            return SpecraceError(f"cannot read {what} {text}: a dangling symbolic link (to "
                                 f"{os.readlink(text)}, which does not exist)")  # fmt: skip
        return SpecraceError(f"cannot read {what} {text}: no such file")
    if isinstance(e, PermissionError):
        return SpecraceError(f"cannot read {what} {text}: permission denied")
    if e.errno == errno.ELOOP:
        return SpecraceError(f"cannot read {what} {text}: a symbolic link loop")
    return SpecraceError(f"cannot read {what} {text}: {e.strerror or e}")


def regular_file(path: Path | str, what: str) -> Path:
    """``path`` if it names a regular file (a link to one is one), else one line naming the
    input as ``what`` (``"--grid"``, ``"vllm-run record"``): missing, a folder, a FIFO, a device,
    a socket. Nothing is opened."""
    text = str(path)
    if not text:
        raise SpecraceError(f"{what} is empty: name a file")
    if "\x00" in text:
        raise SpecraceError(f"{what} {text!r}: a path cannot hold a NUL character")
    try:
        st = os.stat(text)
    except OSError as e:
        raise _os_error(e, what, text) from None
    _check_mode(st.st_mode, what, text)
    return Path(path)


def open_regular(path: Path | str, what: str) -> BinaryIO:
    """The file opened for reading in binary, checked again once open (a FIFO put in its place
    between the check and the open is refused too: it is opened without waiting for a writer)."""
    regular_file(path, what)
    text = str(path)
    try:
        fd = os.open(text, _OPEN_FLAGS)
    except OSError as e:
        raise _os_error(e, what, text) from None
    try:
        _check_mode(os.fstat(fd).st_mode, what, text)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


def _read_upto(f: BinaryIO | gzip.GzipFile, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of ``f``, a chunk at a time."""
    parts, n = [], 0
    while n <= limit:
        chunk = f.read(min(CHUNK, limit + 1 - n))
        if not chunk:
            break
        parts.append(chunk)
        n += len(chunk)
    return b"".join(parts)


@overload
def read_bounded(path: Path | str, what: str, limit_bytes: int) -> str: ...
@overload
def read_bounded(path: Path | str, what: str, limit_bytes: int, *, text: Literal[True]) -> str: ...
@overload
def read_bounded(
    path: Path | str, what: str, limit_bytes: int, *, text: Literal[False]
) -> bytes: ...
def read_bounded(path: Path | str, what: str, limit_bytes: int, *, text: bool = True) -> Any:
    """The whole of a regular file, decompressed if it is gzip-compressed (by its first bytes,
    or a ``.gz`` name), as UTF-8 text (``text``) or bytes. One line naming the input for each way
    it can fail: not a regular file (:func:`regular_file`), more than ``limit_bytes`` (once
    decompressed), gzip data that is truncated or corrupt, binary where text is expected."""
    shown = str(path)
    with open_regular(path, what) as f:
        try:
            head = f.read(2)
            f.seek(0)
            if head == GZIP_MAGIC or shown.endswith(".gz"):
                with gzip.GzipFile(fileobj=f, mode="rb") as gz:
                    data = _read_upto(gz, limit_bytes)
                packed = " once decompressed"
            else:
                data = _read_upto(f, limit_bytes)
                packed = ""
        except EOFError:
            raise SpecraceError(f"{what} {shown}: truncated gzip data (the file ends before "
                                "the end of its compressed stream)") from None  # fmt: skip
        except gzip.BadGzipFile as e:
            raise SpecraceError(f"{what} {shown}: not gzip-compressed data ({e})") from None
        except zlib.error as e:
            raise SpecraceError(f"{what} {shown}: corrupt gzip data ({e})") from None
        except OSError as e:
            raise _os_error(e, what, shown) from None
    if len(data) > limit_bytes:
        raise SpecraceError(f"{what} {shown}: more than {_size(limit_bytes)}{packed}, larger "
                            f"than any {what} specrace reads")  # fmt: skip
    if not text:
        return data
    nul = data.find(b"\x00")
    if nul >= 0:
        raise SpecraceError(f"{what} {shown}: binary, not text (a NUL byte at offset {nul:,})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecraceError(f"{what} {shown}: binary, not UTF-8 text (byte "
                            f"0x{data[e.start]:02x} at offset {e.start:,})") from None  # fmt: skip


def read_json(path: Path | str, what: str, limit_bytes: int) -> Any:
    """:func:`read_bounded` parsed as JSON; malformed JSON is one line naming the input."""
    doc = read_bounded(path, what, limit_bytes)
    try:
        return json.loads(doc)
    except ValueError as e:
        raise SpecraceError(f"{what} {path}: not valid JSON ({e})") from None
    except RecursionError:
        raise SpecraceError(f"{what} {path}: not valid JSON (nested too deeply)") from None
