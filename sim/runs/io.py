"""All file I/O of ``sim``: atomic writes and the run directory.

Every output is written to a temporary file in the target folder and renamed into place,
so a killed run never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
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
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, sort_keys=True, indent=1) + "\n")


def read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecraceError(f"{what} not found: {path}") from None
    except (OSError, json.JSONDecodeError) as e:
        raise SpecraceError(f"{what} {path} is unreadable or truncated: {e}") from None


def ensure_out_dir(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise SpecraceError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def read_parquet(path: Path, what: str):
    """A Parquet table, or one clear error if it is missing, truncated or not Parquet."""
    import pandas as pd

    if not path.is_file():
        raise SpecraceError(f"{what} not found: {path}")
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise SpecraceError(
            f"{what} {path} is unreadable or truncated ({type(e).__name__})"
        ) from None
