"""What a user reads at the terminal: every ``--help`` names the command as typed and shows
each default once; every table command prints rows with one field per header column."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from repo_root import ROOT

from sim.cli.main import build_parser
from sim.model.policies import POLICIES


def run(module: str, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _subparsers(parser):
    for action in parser._actions:
        if hasattr(action, "add_parser"):
            return action.choices
    raise AssertionError("no subcommands")


@pytest.mark.parametrize("prog", ["python -m sim", "specrace"])
def test_every_help_names_the_command_as_typed_and_each_default_once(prog: str) -> None:
    bad = []
    for name, sub in _subparsers(build_parser(prog)).items():
        text = sub.format_help()
        if not text.startswith(f"usage: {prog} {name} "):
            bad.append(f"{name}: {text.splitlines()[0]}")
        flat = re.sub(r"\s+", " ", text)
        for m in re.finditer(r"\(default[^)]*\)\s*\(default[^)]*\)", flat):
            bad.append(f"{name}: {m.group(0)}")
    assert not bad, bad


def test_the_entry_points_pass_their_names() -> None:
    r = run("specrace", "check", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: specrace check "), r.stdout[:200]
    r = run("specrace", "gpu-bench", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: specrace gpu-bench "), r.stdout[:200]
    r = run("sim", "check", "--help")
    assert r.stdout.startswith("usage: python -m sim check ")
    r = run("gpu_check", "bench", "--help")
    assert r.stdout.startswith("usage: python -m gpu_check bench ")


def test_run_table_rows_match_its_header(tmp_path: Path) -> None:
    r = run("sim", "run", "--scenario", "minimal-race", "--out", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line.split()[:2] == ["policy", "reads"])
    head = lines[i].split()
    rows = [line.split() for line in lines[i + 1 : i + 10]]
    assert [row[0] for row in rows] == list(POLICIES)
    assert all(len(row) == len(head) for row in rows), (head, rows)


def test_risk_mitigations_rows_match_their_header() -> None:
    r = run("sim", "risk", "--vllm", "0.28.0", "--gpu-timing", "balanced", "--seeds", "1",
            "--steps", "200")  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = lines.index("mitigations (cheapest safe first):")
    head = lines[i + 1].strip().split(" | ")
    rows = [line.strip().split(" | ") for line in lines[i + 2 :] if line.startswith("  ")]
    assert head[-1] == "note" and len(rows) >= 4
    assert all(len(row) == len(head) for row in rows), (head, rows)


def test_params_rows_have_every_column() -> None:
    r = run("sim", "params")
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["key", "unit", "default"]
    for line in lines[1:]:
        key, unit, value, *meaning = line.split()
        assert "." in key and meaning and line.endswith("]"), line


def test_field_reports_markdown_rows_match_their_header(tmp_path: Path) -> None:
    r = run("sim", "field-reports", "--only", "vllm#35288", "--seeds", "1", "--out",
            str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    table = [line for line in r.stdout.splitlines() if line.startswith("|")]
    cells = [line.count("|") for line in table]
    assert len(table) > 3 and len(set(cells)) == 1, table
