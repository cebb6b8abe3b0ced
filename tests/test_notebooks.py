"""Every notebook's code cells run top to bottom against the public API (no Jupyter needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = json.loads(path.read_text())
    code = [("".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "a notebook without code"
    namespace: dict = {"__name__": "__notebook__"}
    monkeypatch.chdir(path.parent)
    for i, src in enumerate(code):
        exec(compile(src, f"{path.name}[{i}]", "exec"), namespace)
    out = capsys.readouterr().out
    for needle in EXPECT[path.name]:
        assert needle in out, needle


# What each notebook must print: the claims it exists to show.
EXPECT = {
    "explore_timing.ipynb": [
        "R consumes 4 (true 1), kind='ownership'",
        "delay=     0 ns: R consumes 1 (true 1)",
    ],
    "validate_replay.ipynb": [
        "landing positions that corrupted R: [2]",
        "policies that corrupted R: ['align', 'synced-gather', 'unsynced']",
    ],
}


def test_there_is_a_notebook() -> None:
    assert NOTEBOOKS
