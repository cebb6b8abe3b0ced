"""Every notebook's code cells run top to bottom against the public API (no Jupyter needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nb = json.loads(path.read_text())
    code = [("".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "a notebook without code"
    namespace: dict = {"__name__": "__notebook__"}
    for i, src in enumerate(code):
        exec(compile(src, f"{path.name}[{i}]", "exec"), namespace)
    out = capsys.readouterr().out
    assert "R consumes 4 (true 1), kind='ownership'" in out
    assert out.count("R consumes 1 (true 1)") == 2


def test_there_is_a_notebook() -> None:
    assert NOTEBOOKS
