"""``--format table|json|csv`` on every command that prints a table (sim.runs.tables).

Each table command runs in each format on a small input: the text table keeps one field per
header column, the JSON is a list of row objects and nothing else on stdout, and the CSV parses
back to the same rows, its header the JSON keys in order.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from repo_root import ROOT

from gpu_check.__main__ import build_parser as gpu_parser
from gpu_check.__main__ import main as gpu_main
from sim.cli.main import build_parser as sim_parser
from sim.cli.main import main as sim_main
from sim.runs.tables import FORMATS

PREREG = ROOT / "data" / "vllm" / "preregistered" / "ab-45100"

# The commands with a table: (program, argv given a temporary folder, mark).
Argv = Callable[[Path], list[str]]
CASES: dict[str, tuple[Callable, Argv, tuple]] = {
    "run": (sim_main, lambda t: ["run", "--scenario", "minimal-race", "--out", str(t / "o")], ()),
    "run-stream": (sim_main, lambda t: ["run", "--stream", "--scenario", "minimal-race",
                                        "--policy", "align", "--out", str(t / "o")], ()),
    "params": (sim_main, lambda t: ["params", "--timing", "h200"], ()),
    "risk": (sim_main, lambda t: ["risk", "--vllm", "0.28.0", "--gpu-timing", "balanced",
                                  "--seeds", "1", "--steps", "200"], ()),
    "check": (sim_main, lambda t: ["check", "--max-rows", "2", "--steps", "2"], ()),
    "field-reports": (sim_main, lambda t: ["field-reports", "--only", "vllm#35288", "--seeds",
                                           "1", "--out", str(t / "o")], (pytest.mark.slow,)),
    "compare": (sim_main, lambda t: ["compare", "data/replay/observed_simrun_qwen35-mtp3.parquet",
                                     "--req-id", "r0"], ()),
    "bench": (sim_main, lambda t: ["bench", "--steps", "50", "--points", "20", "--vector-steps",
                                   "50", "--long-steps", "0"], ()),
    "bench-sweep": (sim_main, lambda t: ["bench", "--sweep", "4", "--steps", "20"],
                    (pytest.mark.slow,)),
    "padding": (gpu_main, lambda t: ["padding", "--num-reqs", "4", "--k", "3"], ()),
    "recall": (gpu_main, lambda t: ["recall", "--num-reqs", "2", "--k", "1", "--pairs", "4"], ()),
    "summary": (gpu_main, lambda t: ["summary"], ()),
    "event-lag": (gpu_main, lambda t: ["event-lag", "data/bench/event_lag"], ()),
    "vllm-compare": (gpu_main, lambda t: ["vllm-compare", "data/vllm"], ()),
    "vllm-compare-run": (gpu_main, lambda t: ["vllm-compare", str(_run_copy(t))], ()),
    "vllm-plan": (gpu_main, lambda t: ["vllm-plan", "--vllm", "0.24.0", "--modes", "align",
                                       "--configs", "16:0", "--num-requests", "16", "--seeds",
                                       "1", "--out", str(t / "o")], ()),
    "vllm-outcome": (gpu_main, lambda t: ["vllm-outcome", str(_prereg(t)), "--runs",
                                          "data/vllm/ab"], ()),
    "vllm-ab": (gpu_main, lambda t: ["vllm-ab", "data/vllm/ab", "data/vllm/fixes", "--out",
                                     str(t / "ab.json")], ()),
    "vllm-repeatability": (gpu_main, lambda t: ["vllm-repeatability",
                                                "data/vllm/forward-24/v0.33.0-k4-staggered",
                                                "--out", str(t / "rep")], ()),
    "vllm-forward": (gpu_main, lambda t: ["vllm-forward", "data/vllm", "--seeds", "1", "--out",
                                          str(t / "o")], (pytest.mark.slow,)),
}  # fmt: skip
# Commands whose table needs CUDA: they take --format too, but cannot run here.
CUDA_ONLY = {"bench"}


def _run_copy(tmp: Path) -> Path:
    """A committed run in a scratch folder: vllm-compare writes its agreement into the run."""
    dest = tmp / "v0.23.0" / "align_s16_d0ms"
    if not dest.exists():
        shutil.copytree(ROOT / "data/vllm/v0.23.0/align_s16_d0ms", dest)
        shutil.copytree(ROOT / "data/vllm/v0.23.0/raw", tmp / "v0.23.0" / "raw")
    return dest


def _prereg(tmp: Path) -> Path:
    dest = tmp / "prereg"
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(PREREG / "predictions.json", dest)
    return dest


def _cases() -> list:
    return [
        pytest.param(name, fmt, id=f"{name}-{fmt}", marks=marks)
        for name, (_main, _argv, marks) in CASES.items()
        for fmt in FORMATS
    ]


def _text_table(name: str, out: str) -> tuple[list[str], list[list[str]]] | None:
    """(header, rows) of the text tables whose columns a reader can split; None for prose."""
    lines = out.splitlines()
    if name in ("run", "run-stream"):
        i = next(i for i, line in enumerate(lines) if line.split()[:2] == ["policy", "reads"])
        rows = [line.split() for line in lines[i + 1 :] if line.strip()]
        return lines[i].split(), rows[: len(rows) if name == "run" else 1]
    if name == "risk":
        i = lines.index("mitigations (cheapest safe first):")
        rows = [line.strip().split(" | ") for line in lines[i + 2 :] if line.startswith("  ")]
        return lines[i + 1].strip().split(" | "), rows
    if name == "field-reports":
        table = [line.strip("|").split("|") for line in lines if line.startswith("|")]
        return table[0], table[2:]
    if name in ("padding", "recall", "vllm-compare"):  # format_table: 2 spaces between columns
        i = {"padding": 2, "recall": 1}.get(name, 0)
        cells = [re.split(r"\s{2,}", line.strip()) for line in lines[i:]]
        return cells[0], cells[1:]
    return None


@pytest.mark.parametrize(("name", "fmt"), _cases())
def test_every_table_command_in_every_format(name, fmt, tmp_path, monkeypatch, capsys) -> None:
    main, argv, _ = CASES[name]
    if name == "recall":
        pytest.importorskip("torch")
    monkeypatch.chdir(ROOT)
    assert main([*argv(tmp_path), "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "table":
        table = _text_table(name, out)
        if table is not None:
            head, rows = table
            assert rows and all(len(r) == len(head) for r in rows), (head, rows)
        return
    if fmt == "json":
        rows = json.loads(out)
        assert isinstance(rows, list) and all(isinstance(r, dict) for r in rows), out[:300]
        flat = all(not isinstance(v, dict) for r in rows for v in r.values())
        assert flat, "nested objects become dotted keys"
        assert name in ("risk", "padding") or rows, f"{name}: no rows"
        return
    parsed = list(csv.reader(io.StringIO(out)))
    head, body = parsed[0], parsed[1:]
    assert all(len(r) == len(head) for r in body), head
    # the same rows as JSON: the header is the JSON keys in order
    assert main([*argv(tmp_path / "again"), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert head == list(dict.fromkeys(k for r in rows for k in r))
    assert len(body) == len(rows)
    if name not in ("bench", "bench-sweep"):  # timings: the two runs differ
        cells = [[_csv_text(r.get(k)) for k in head] for r in rows]
        assert body == cells


def _csv_text(value: object) -> str:
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, list) else str(value)


def _subparsers(parser):
    return next(a for a in parser._actions if hasattr(a, "add_parser")).choices


def test_the_table_commands_are_the_ones_with_a_format_flag() -> None:
    tested = {n.split("-")[0] if n.startswith(("run", "bench")) else n for n in CASES}
    tested = {"vllm-compare" if n.startswith("vllm-compare") else n for n in tested}
    have = set()
    for parser in (sim_parser(), gpu_parser()):
        for name, sub in _subparsers(parser).items():
            flags = {o: a for a in sub._actions for o in a.option_strings}
            if getattr(flags.get("--format"), "dest", "") == "table_format":
                assert tuple(flags["--format"].choices) == FORMATS, name
                have.add(name)
    assert have == tested | CUDA_ONLY


@pytest.mark.parametrize("main", [sim_main, gpu_main], ids=["sim", "gpu_check"])
def test_a_bad_format_is_one_line(main, capsys) -> None:
    argv = ["params"] if main is sim_main else ["summary"]
    with pytest.raises(SystemExit) as exc:
        code = main([*argv, "--format", "xml"])
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'xml'" in err[0], err
