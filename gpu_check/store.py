"""All of gpu_check's file output (JSON, CSV, Parquet), written atomically via ``sim.runs.io``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from sim.runs.io import atomic_write, atomic_write_text

__all__ = ["write_csv", "write_json"]


def write_json(obj: object, path: str | Path) -> Path:
    path = Path(path)
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
    return path


def write_csv(rows: list[dict], path: str | Path) -> Path:
    """Rows as CSV; columns in first-seen order over all rows."""
    path = Path(path)
    cols = list(dict.fromkeys(c for r in rows for c in r))

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=cols)
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(path, write)
    return path
