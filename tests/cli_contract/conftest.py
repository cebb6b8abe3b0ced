"""Fixtures shared by the tests of what every command must do (tests/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzz_harness import run_cli


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "one"
    code, err = run_cli(["run", "--scenario", "minimal-race", "--policy", "align", "--out",
                         str(out)])  # fmt: skip
    assert code == 0, err
    return out


@pytest.fixture()
def schedule(tmp_path: Path) -> dict:
    code, err = run_cli(["schedule", "--scenario", "minimal-race", "--out", str(tmp_path / "s")])
    assert code == 0, err
    return json.loads((tmp_path / "s" / "schedule.json").read_text())
