"""``make demo`` as a first impression: a short header, progress, the table with a legend per
column, and a picture in the run folder; the run's files are those of a plain run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from sim.cli.brief import LEGEND, PICTURE
from sim.model.policies import POLICIES

ROOT = Path(__file__).resolve().parents[1]


def sim(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "sim", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_make_demo_runs_the_brief_run_with_a_picture() -> None:
    make = (ROOT / "Makefile").read_text()
    demo = re.search(r"^demo:.*\n\t(.*)$", make, re.M)
    assert demo and "--brief --picture" in demo.group(1) and "--scenario qwen35-mtp3" in demo[1]


def test_brief_run_prints_header_progress_table_legend_and_picture(tmp_path: Path) -> None:
    out = tmp_path / "brief"
    r = sim("run", "--scenario", "minimal-race", "--out", str(out), "--brief", "--picture")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line.split()[:2] == ["policy", "reads"])
    assert i <= 4 and lines[0] == "SEED=0", lines[:i]  # a short header, not 45 parameters
    assert "scenario minimal-race (built-in), 8 steps, seed 0, 9 policies" in lines[1]
    assert lines[2].startswith("timing: ")
    head = lines[i].split()
    j = lines.index("columns:")
    legend = [line.split()[0] for line in lines[j + 1 : j + 1 + len(head)]]
    assert legend == head == [k for k, _ in LEGEND]  # one line per column, in order
    assert lines[-1] == f"wrote {out / PICTURE} (python -m sim report {out}: the whole story)"
    png = (out / PICTURE).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    progress = r.stderr.splitlines()
    assert [p.split()[1] for p in progress] == list(POLICIES), r.stderr
    assert all(re.fullmatch(rf"\[\d/{len(POLICIES)}\] \S+ \.\.\. \d+\.\d s", p) for p in progress)


def test_brief_and_picture_change_no_other_output(tmp_path: Path) -> None:
    plain, brief = tmp_path / "plain", tmp_path / "brief"
    assert sim("run", "--scenario", "minimal-race", "--out", str(plain)).returncode == 0
    r = sim("run", "--scenario", "minimal-race", "--out", str(brief), "--brief", "--picture")
    assert r.returncode == 0, r.stderr
    files = sorted(p.relative_to(plain) for p in plain.rglob("*") if p.is_file())
    assert sorted(p.relative_to(brief) for p in brief.rglob("*") if p.is_file()) == sorted(
        [*files, Path(PICTURE)]
    )
    for f in files:
        if f.name != "meta.json":  # meta.json: the commit and versions may differ
            assert (plain / f).read_bytes() == (brief / f).read_bytes(), f
