"""Plain-text tables for the CLI's human-readable output."""

from __future__ import annotations

__all__ = ["format_table"]


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
