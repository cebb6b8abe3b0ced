"""A sweep's finished points on disk, in ``<sweep>/points/``.

A point-policy's row (its summary, :func:`sim.explore.sweep.run_points`) is known by its id,
the hash of its settings, seed and policy (:func:`sim.explore.sweep.point_id`). The driver
writes the rows of each finished work unit as one file, ``<hash of its ids>.jsonl``, one line
``{"id": ..., "row": ...}`` per point-policy, atomically: a killed sweep keeps every unit that
had finished, and a resumed one runs the rest. One file per unit rather than per point: at
10^4 points the driver's file calls were the floor of a parallel sweep (data/bench/scaling).
Sweeps written before keep their one-file-per-point ``<id>.json`` (the row itself); both are
read, so such a sweep resumes and extends.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sim.errors import SpecraceError
from sim.runs.io import atomic_write_text, read_json

POINT_FILE = re.compile(r"[0-9a-f]{16}\.json")  # one row, named by its id (older sweeps)
UNIT_FILE = re.compile(r"[0-9a-f]{16}\.jsonl")  # a unit's rows, named by a hash of their ids


def unit_lines(path: Path) -> Iterator[tuple[int, str, Any]]:
    """(line number, id, row) of a unit file; one clear error for a line that is not ours."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise SpecraceError(f"sweep point {path} is not JSON text (binary)") from None
    except OSError as e:
        raise SpecraceError(f"sweep point {path} is unreadable: {e.strerror}") from None
    for n, line in enumerate(text.splitlines(), 1):
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            item = None
        if not (isinstance(item, dict) and set(item) == {"id", "row"}):
            raise SpecraceError(f"sweep point {path} line {n}: not a point's line "
                                "(python -m sim sweep writes them); delete the file to run "
                                "its points again")  # fmt: skip
        if not isinstance(item["id"], str) or not re.fullmatch(r"[0-9a-f]{16}", item["id"]):
            raise SpecraceError(f"sweep point {path} line {n}: its id is not a point id; "
                                "delete the file to run its points again")  # fmt: skip
        yield n, item["id"], item["row"]


def finished(folder: Path) -> dict[str, Any]:
    """Every finished row in ``folder`` by id: the older one-point files and the unit files,
    in file-name order (an id found twice keeps its first row)."""
    rows: dict[str, Any] = {}
    if not folder.is_dir():
        return rows
    for path in sorted(folder.iterdir()):
        if POINT_FILE.fullmatch(path.name):
            rows.setdefault(path.stem, read_json(path, "sweep point"))
        elif UNIT_FILE.fullmatch(path.name):
            for _n, pid, row in unit_lines(path):
                rows.setdefault(pid, row)
    return rows


def write_unit(folder: Path, rows: list[tuple[str, dict[str, Any]]]) -> Path:
    """The rows of one finished unit, as ``(id, row)``, into one new file of ``folder`` (which
    the caller has checked)."""
    ids = "\n".join(pid for pid, _ in rows)
    path = folder / f"{hashlib.sha1(ids.encode()).hexdigest()[:16]}.jsonl"
    text = "".join(json.dumps({"id": pid, "row": row}, sort_keys=True) + "\n" for pid, row in rows)
    atomic_write_text(path, text, checked=True)
    return path
