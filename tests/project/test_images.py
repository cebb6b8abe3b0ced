"""Every picture in docs/images/ is shown by a document and reads at GitHub's width (900 px).

A PNG must be linked from the README or a docs/ page (its SVG twin goes with it), at most
1,800 px wide, so a 900 px page shows it at no less than half size, and at most 1.7 times as
tall as wide: the stack of every policy's timeline (1560 x 4680) was neither. The pictures
were each opened and read at 900 px when they were made; this keeps what can be kept by a test.
"""

from __future__ import annotations

import struct
from pathlib import Path

from repo_root import ROOT

IMAGES = ROOT / "docs" / "images"
MAX_WIDTH, MAX_ASPECT = 1800, 1.7


def _size(png: Path) -> tuple[int, int]:
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", png
    w, h = struct.unpack(">II", head[16:24])
    return w, h


def _documents() -> str:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text(encoding="utf-8") for p in docs)


def test_every_picture_is_shown_by_a_document() -> None:
    text = _documents()
    unused = [p.name for p in sorted(IMAGES.glob("*.png")) if f"images/{p.name}" not in text]
    assert not unused, f"in no document: {unused} (show them, or stop generating them)"
    twins = [p.name for p in IMAGES.glob("*.svg") if not p.with_suffix(".png").exists()]
    assert not twins, f"SVG without its PNG: {twins}"


def test_every_picture_reads_at_900_px() -> None:
    for png in sorted(IMAGES.glob("*.png")):
        w, h = _size(png)
        assert w <= MAX_WIDTH, f"{png.name}: {w} px wide"
        assert h <= MAX_ASPECT * w, f"{png.name}: {w} x {h}, too tall for a page"
