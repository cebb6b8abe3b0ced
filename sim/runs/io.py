"""All file I/O of ``sim``: atomic writes and the run directory.

Every output is written to a temporary file in the target folder and renamed into place,
so a killed run never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sim.errors import SpecraceError


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` and rename ``tmp`` to ``path`` only if it succeeded."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs follow the umask
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(text)

    atomic_write(path, write)


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, sort_keys=True, indent=1) + "\n")


def read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecraceError(f"{what} not found: {path}") from None
    except (OSError, json.JSONDecodeError) as e:
        raise SpecraceError(f"{what} {path} is unreadable or truncated: {e}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def fresh_output_dir(out: Path, force: bool = False) -> Iterator[Path]:
    """A run directory written whole or not at all.

    Yields a temporary directory beside ``out``; on success it replaces ``out`` (which must be
    absent or empty unless ``force``), on failure or Ctrl-C it is removed and ``out`` is left
    as it was. A directory holds one run: writing a second run into it is refused.
    """
    if not str(out):
        raise SpecraceError("--out is empty: name a directory")
    if out.exists() and not out.is_dir():
        raise SpecraceError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise SpecraceError(f"--out {out} is not empty (a previous run?): --force replaces it")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise SpecraceError(f"--out {out}: {parent} is not a directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as e:
        raise SpecraceError(f"--out {out}: cannot create: {e.strerror}") from None
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def ensure_out_dir(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise SpecraceError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def read_parquet(path: Path, what: str, schema: dict[str, str] | None = None):
    """A Parquet table, or one clear error if it is missing, truncated, not Parquet, or (with
    ``schema``: column -> int | bool | string | float) not the table the command expects."""
    import pandas as pd

    if not path.is_file():
        raise SpecraceError(f"{what} not found: {path}")
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise SpecraceError(
            f"{what} {path} is unreadable or truncated ({type(e).__name__})"
        ) from None
    if schema:
        check_schema(df, schema, f"{path}: not a {what}")
    return df


_KINDS = {"int": "is_integer_dtype", "bool": "is_bool_dtype", "float": "is_numeric_dtype"}


def check_schema(df, schema: dict[str, str], prefix: str) -> None:
    """Every column of ``schema`` present with the right kind of values."""
    from pandas.api import types

    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise SpecraceError(f"{prefix} (missing columns {', '.join(missing)})")
    for col, kind in schema.items():
        dtype = df[col].dtype
        if kind == "string":
            ok = types.is_string_dtype(dtype) or types.is_object_dtype(dtype)
        else:
            ok = getattr(types, _KINDS[kind])(dtype)
        if kind == "int" and types.is_bool_dtype(dtype):
            ok = False
        if not ok:
            raise SpecraceError(f"{prefix} (column {col} is {dtype}, expected {kind})")
