"""Every table a command prints, in the format asked: ``--format table|json|csv``.

``table`` (the default) is the command's own text, unchanged. ``json`` and ``csv`` carry the
same rows for a program: ``json`` a list of row objects, ``csv`` a header and one line per row,
whose columns are the JSON keys in order. A command that prints several tables (``sim
compare``, ``gpu_check summary``) gives each row a first field ``table`` naming its table. A
nested object becomes dotted keys (``predicted.rate``), so both formats have the same flat
columns; a list stays a list in JSON and is JSON text in a CSV cell.

With ``json`` or ``csv``, stdout carries the rows alone, so that it parses; what the command
says besides its table (its parameters, ``wrote ...``, notes) goes to stderr
(:func:`prose_to_stderr`, which :func:`call` applies to a command).

``format_table`` is the plain-text renderer of gpu_check's tables.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import csv
import io
import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TextIO

__all__ = [
    "FORMATS",
    "add_format_arg",
    "call",
    "flat_rows",
    "format_table",
    "prose_to_stderr",
    "render",
    "show",
]

FORMATS = ("table", "json", "csv")


def add_format_arg(parser: argparse.ArgumentParser, what: str = "the table") -> None:
    """``--format table|json|csv``; a bad value is argparse's one-line error."""
    parser.add_argument(
        "--format",
        dest="table_format",
        choices=FORMATS,
        default="table",
        help=f"{what} as text, or as rows for a program: a JSON list of objects, or CSV "
        "(stdout then carries the rows alone; the rest goes to stderr)",
    )


def _cell(x: object) -> str:
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.4g}"
    return str(x)


def format_table(rows: list[dict], cols: list[str]) -> str:
    """Right-aligned columns `cols` of `rows`, header first."""
    cells = [cols] + [[_cell(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells)
    return "\n".join(lines)


def _plain(x: Any) -> Any:
    """A JSON value: numpy and pandas scalars as Python numbers, NaN as null."""
    if hasattr(x, "tolist"):  # numpy: a scalar to a number, an array to a list
        x = x.tolist()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if x is None or isinstance(x, bool | int | float | str):
        return x
    return str(x)


def _flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = _plain(value)
    return out


def flat_rows(rows: Sequence[Mapping[str, Any]], table: str = "") -> list[dict[str, Any]]:
    """``rows`` with nested objects as dotted keys and plain JSON values; with ``table``, each
    row's first field names the table it belongs to."""
    head = {"table": table} if table else {}
    return [head | _flatten(r) for r in rows]


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r))


def render(fmt: str, rows: Sequence[Mapping[str, Any]], text: str | Callable[[], str]) -> str:
    """The table in ``fmt``: ``text`` (the command's own rendering, or a function that makes
    it) for ``table``; else ``rows`` (:func:`flat_rows`) as JSON or CSV."""
    if fmt == "table":
        return text() if callable(text) else text
    flat = [_flatten(r) for r in rows]
    if fmt == "json":
        return json.dumps(flat, indent=1, ensure_ascii=False)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, _columns(flat), lineterminator="\n")
        w.writeheader()
        for r in flat:
            w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
        return buf.getvalue().rstrip("\n")
    raise ValueError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")


_ROWS_OUT: contextvars.ContextVar[TextIO] = contextvars.ContextVar("rows_out")


@contextlib.contextmanager
def prose_to_stderr(fmt: str) -> Iterator[None]:
    """With ``json`` or ``csv``, everything printed inside goes to stderr but the rows
    (:func:`show`), so that stdout carries the rows alone."""
    if fmt == "table":
        yield
        return
    token = _ROWS_OUT.set(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _ROWS_OUT.reset(token)


def call(func: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> Any:
    """``func(args)`` for a command line: its ``--format`` (:func:`add_format_arg`), where it
    has one, decides where its prose goes (:func:`prose_to_stderr`)."""
    with prose_to_stderr(getattr(args, "table_format", "table")):
        return func(args)


def show(
    fmt: str, rows: Sequence[Mapping[str, Any]], table: Callable[[], None] | str | None = None
) -> None:
    """Print the table: for ``table``, ``table()`` prints the command's own text, or ``table``
    is that text (None: the command printed it already); else the rows as :func:`render` gives
    them, on stdout."""
    if fmt == "table":
        if callable(table):
            table()
        elif table is not None:
            print(table)
        return
    print(render(fmt, rows, ""), file=_ROWS_OUT.get(sys.stdout))
