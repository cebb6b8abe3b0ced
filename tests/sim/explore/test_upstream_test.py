"""``python -m sim upstream-test``: the generated vLLM test file (CPU, no vLLM needed here; the
file is run against the real wheel in tests/conformance/test_conformance_upstream.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from load import limit_s
from repo_root import ROOT

from sim.errors import SpecraceError
from sim.explore.upstream_test import (
    CHECK_COMMAND,
    SUPPORTED,
    minimal_race,
    predicted_failures,
    read_landings,
    render,
)
from sim.runs.signature import sign


def run_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sim", "upstream-test", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=limit_s(120))  # fmt: skip


@pytest.mark.parametrize("vllm", SUPPORTED)
def test_the_file_parses_and_imports_vllm_not_specrace(vllm: str) -> None:
    tree = ast.parse(render(vllm))
    tops = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            tops.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            tops.update(a.name.split(".")[0] for a in node.names)
    assert "vllm" in tops
    assert not tops & {"sim", "specrace", "gpu_check", "simpy"}, tops
    tests = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert [t for t in tests if t.startswith("test_")] == [
        "test_accepted_counts_follow_requests_across_row_moves"
    ]


def test_the_file_names_the_counterexample() -> None:
    text = render("0.24.0")
    race = minimal_race()
    assert CHECK_COMMAND in text and "vLLM 0.24.0" in text
    assert "#51571" in text and "#51599" in text and "#53919" in text
    for line in race.story.splitlines():  # wrapped at 88 columns, word for word
        assert " ".join(line.split()) in " ".join(text.split())
    for kind in race.kinds.values():
        assert f"({kind})" in text
    for _land, name in read_landings(race):
        assert f'id="{name}"' in text


def test_the_counterexample_is_checks_minimal_align_one() -> None:
    race = minimal_race()
    assert sorted(race.kinds.values()) == ["double-permute", "ownership"]
    assert [len(r.ops) for r in race.records] == [1, 0, 2]
    assert race.wrong == (("A", 1, 4),)  # A reads 1 instead of its 4
    ids = dict(read_landings(race))
    # unpatched align is wrong wherever the copy lands before the swap; the fixes nowhere
    assert predicted_failures("align") == {ids[p] for p in race.kinds}
    assert ids[len(race.read.ops)] not in predicted_failures("align")
    assert predicted_failures("private-buffer") == set()
    assert predicted_failures("sync-before-moves") == set()


def test_releases_differ_only_where_their_code_does() -> None:
    a, b = (render(v).splitlines() for v in ("0.24.0", "0.33.0"))
    diff = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    assert len(diff) == 2, diff  # the release named in the docstring, the InputBatch argument
    assert "kernel_block_sizes" in diff[1][0] and "max_num_blocks_per_req" in diff[1][1]


def test_same_arguments_give_the_same_bytes(tmp_path: Path) -> None:
    one, two = tmp_path / "one.py", tmp_path / "two.py"
    for out in (one, two):
        r = run_sim("--vllm", "0.24.0", "--out", str(out))
        assert r.returncode == 0, r.stderr
        assert f"wrote {out}" in r.stdout
    assert one.read_bytes() == two.read_bytes() == sign(render("0.24.0").encode(), one)
    r = run_sim("--vllm", "0.24.0", "--out", str(one))  # its own file is replaced
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--vllm", "0.25.0"], "--vllm 0.25.0: upstream-test supports vLLM 0.24.0, 0.33.0"),
        (["--vllm", "latest"], "--vllm latest: upstream-test supports"),
        (["--vllm", "0.24.0", "--out", "{tmp}/missing/dir/x.py"], "is a file, not a directory"),
        (["--vllm", "0.24.0", "--out", "/proc/specrace/x.py"], "cannot write"),
        (["--vllm", "0.24.0", "--out", "{tmp}/"], "a file name is needed"),
        (["--vllm", "0.24.0", "--out", "{tmp}/foreign.py"], "specrace did not write it"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args, message) -> None:
    (tmp_path / "foreign.py").write_text("x = 1\n")
    (tmp_path / "missing").write_text("a file where a folder belongs\n")
    argv = [a.format(tmp=tmp_path) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out.py")]
    r = run_sim(*argv)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    assert message in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.py", "missing"]
    assert (tmp_path / "foreign.py").read_text() == "x = 1\n"


def test_an_unknown_release_is_refused_by_the_api() -> None:
    with pytest.raises(SpecraceError, match="supports vLLM"):
        render("0.23.0")


def test_the_program_is_a_module_and_every_stand_in_is_put_back(monkeypatch, tmp_path) -> None:
    """The file's program lives in sim/explore/upstream_program.py (ruff and mypy read it);
    a stand-in line edited there is an error, never a stand-in value in the file."""
    import sim.explore.upstream_test as ut

    text = ut.PROGRAM.read_text()
    compile(text, str(ut.PROGRAM), "exec")
    assert all(line in text.split("\n") for line in ut.STANDINS)
    assert "specrace-template" not in render("0.24.0")
    broken = tmp_path / "upstream_program.py"
    broken.write_text(text.replace("MAX_NUM_REQS = 4\n", "MAX_NUM_REQS = 5\n"))
    monkeypatch.setattr(ut, "PROGRAM", broken)
    with pytest.raises(AssertionError, match="MAX_NUM_REQS"):
        render("0.24.0")
