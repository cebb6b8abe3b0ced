"""Reading a schedule file in either of its forms: ``schedule.json`` (:mod:`sim.model.schedule`)
or its compact binary form ``*.parquet`` (:mod:`sim.model.schedule_parquet`).

The choice by file name lives here, above both formats, so that neither format module imports
the other (``tests/project/test_layout.py`` holds every module pair to that).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sim.errors import SpecraceError
from sim.model.schedule import Schedule, StepRecord, loads

__all__ = ["open_schedule", "read_schedule"]


def read_schedule(path: Path) -> Schedule:
    """The whole schedule of ``schedule.json`` or of a ``*.parquet`` file."""
    if path.suffix == ".parquet":  # pyarrow loads only for a parquet file
        from sim.model.schedule_parquet import read_schedule_parquet

        return read_schedule_parquet(path)
    if path.exists() and not path.is_file():  # a FIFO would block the read: never opened
        raise SpecraceError(f"schedule {path} is not a regular file (a FIFO, device or folder)")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise SpecraceError(f"{path}: not a specrace schedule (binary, not JSON text)") from None
    except OSError as e:
        raise SpecraceError(f"cannot read schedule {path}: {e.strerror}") from None
    return loads(text, str(path))


def open_schedule(path: Path) -> tuple[Schedule, Iterator[StepRecord], int]:
    """(header, steps, number of steps): a ``*.parquet`` file is read step by step (bounded
    memory); ``schedule.json`` is read whole first."""
    if path.suffix == ".parquet":
        from sim.model.schedule_parquet import open_schedule_parquet

        return open_schedule_parquet(path)
    full = read_schedule(path)
    return full, iter(full.steps), len(full.steps)
