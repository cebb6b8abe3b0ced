"""``make demo`` as a first impression: a short header, progress, the table with a legend per
column, and a picture in the run folder; the run's files are those of a plain run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from repo_root import ROOT

from sim.cli.brief import LEGEND, PICTURE
from sim.model.policies import POLICIES


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
        if f.name == "meta.json":  # the commit and versions may differ
            continue
        if f.name == ".specrace-run.json":  # the run marker records the command line
            a, b = (json.loads((d / f).read_text()) for d in (plain, brief))
            assert a.pop("command") != b.pop("command") and a == b, f
            continue
        if f.name == ".specrace-manifest.jsonl":  # every file with its hash, the picture too
            a, b = ([json.loads(line) for line in (d / f).read_text().splitlines()]
                    for d in (plain, brief))  # fmt: skip
            assert a == [e for e in b if e["path"] != PICTURE], f
            continue
        assert (plain / f).read_bytes() == (brief / f).read_bytes(), f


def test_the_readme_demo_picture_is_make_demos(tmp_path: Path) -> None:
    """docs/images/demo.png (scripts/figures.sh) is the picture of make demo's run, as far as a
    coarse comparison sees: font hinting may differ between machines."""
    import numpy as np
    from matplotlib.image import imread

    from sim.cli.brief import write_picture
    from sim.model.params import load_scenario
    from sim.model.scheduling import build_schedule
    from sim.runs.run import run_policy_vector

    sc = load_scenario("qwen35-mtp3")
    sched = build_schedule(sc, 0, 2000)
    summaries = [run_policy_vector(sched, sc, p, 0).summary for p in POLICIES.values()]
    title = "qwen35-mtp3: wrong accepted counts by policy (2,000 steps, seed 0)"
    got = imread(write_picture(tmp_path, summaries, sched, title))
    want = imread(ROOT / "docs" / "images" / "demo.png")
    assert got.shape == want.shape

    def blocks(img: np.ndarray, b: int = 16) -> np.ndarray:  # 16-px block means, grey
        g = img[..., :3].mean(axis=2)
        h, w = g.shape[0] // b * b, g.shape[1] // b * b
        return g[:h, :w].reshape(h // b, b, w // b, b).mean(axis=(1, 3))

    # One count changed (26 -> 27 in a label) moves a block by 0.08; the same run by 0.
    diff = np.abs(blocks(got) - blocks(want)).max()
    assert diff < 0.05, f"docs/images/demo.png is stale (block diff {diff:.3f}): make figures"


def test_a_streamed_brief_run_has_the_short_header_and_the_legend(tmp_path: Path) -> None:
    r = sim("run", "--stream", "--policy", "align", "--steps", "300", "--brief",
            "--out", str(tmp_path / "s"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line.split()[:2] == ["policy", "reads"])
    assert i <= 4 and lines[0] == "SEED=0", lines[:i]  # four lines, not every parameter
    assert "columns:" in lines
    assert r.stderr == ""  # not a terminal: no progress line


def test_the_stream_progress_line_says_steps_rate_and_time_left(capsys) -> None:
    from sim.cli.brief import StreamProgress

    p = StreamProgress(on=True, after_s=0.0)
    p(1024, 4096)
    p.close()
    err = capsys.readouterr().err
    assert err.startswith("\r1,024 / 4,096 steps, ") and " steps/s, " in err
    assert err.rstrip(" \n").endswith("s left")
    quiet = StreamProgress(on=False)
    quiet(1024, 4096)
    quiet.close()
    assert capsys.readouterr().err == ""
