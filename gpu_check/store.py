"""All of gpu_check's file output (JSON and CSV); the CLI is its only caller."""

from __future__ import annotations

import csv
import json
from pathlib import Path

__all__ = ["write_csv", "write_json"]


def write_json(obj: object, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
    return path


def write_csv(rows: list[dict], path: str | Path) -> Path:
    """Rows as CSV; columns in first-seen order over all rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = list(dict.fromkeys(c for r in rows for c in r))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=cols)
        writer.writeheader()
        writer.writerows(rows)
    return path
