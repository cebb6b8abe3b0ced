"""Long runs (sim.runs.run): ``run --stream`` writes what a full run writes, and the vector tier
writes the SimPy tier's files (the schedule.parquet they read:
tests/sim/model/test_schedule_parquet.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
from repo_root import ROOT

from sim.model.schedule import dumps
from sim.model.schedule_parquet import read_schedule_parquet


def run_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_streamed_run_cli_writes_what_a_full_run_writes(tmp_path: Path) -> None:
    common = ["--policy", "align", "--steps", "300", "--seed", "3", "--json"]
    r = run_sim("run", "--stream", *common, "--out", str(tmp_path / "stream"))
    assert r.returncode == 0, r.stderr
    assert "stream=true" in r.stdout
    r_full = run_sim("run", "--no-trace", *common, "--out", str(tmp_path / "full"))
    assert r_full.returncode == 0, r_full.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary == json.loads(r_full.stdout.strip().splitlines()[-1])
    assert summary["cpu_wrong"] > 0  # a run with wrong reads to get wrong
    assert (tmp_path / "stream" / "reads.parquet").read_bytes() == (
        tmp_path / "full" / "reads.parquet"
    ).read_bytes()
    assert sorted(p.name for p in (tmp_path / "stream").iterdir()) == [
        ".specrace-manifest.jsonl",
        ".specrace-run.json",
        "meta.json",
        "reads.parquet",
        "schedule.parquet",
    ]
    sched = read_schedule_parquet(tmp_path / "stream" / "schedule.parquet")
    assert dumps(sched) == (tmp_path / "full" / "schedule.json").read_text()
    # `schedule --format parquet` writes the same file, and `run --schedule` reads it back.
    r = run_sim("schedule", "--steps", "300", "--seed", "3", "--format", "parquet",
                "--out", str(tmp_path / "sched"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    binary = tmp_path / "sched" / "schedule.parquet"
    assert binary.read_bytes() == (tmp_path / "stream" / "schedule.parquet").read_bytes()
    for extra in ([], ["--stream"]):
        out = tmp_path / f"again{len(extra)}"
        r = run_sim("run", "--schedule", str(binary), "--policy", "align", "--no-trace",
                    *extra, "--out", str(out))  # fmt: skip
        assert r.returncode == 0, r.stderr
        got = pd.read_parquet(out / "reads.parquet")
        pd.testing.assert_frame_equal(got, pd.read_parquet(tmp_path / "full" / "reads.parquet"))
    r = run_sim("run", "--stream", "--steps", "10", "--out", str(tmp_path / "all"))
    assert (
        r.returncode == 2 and r.stderr == "error: --stream runs one policy: name it with --policy\n"
    )


def test_run_on_the_vector_tier_writes_the_simpy_tiers_files(tmp_path: Path) -> None:
    common = ["--policy", "all", "--steps", "200", "--seed", "1", "--no-trace", "--json"]
    outs = {}
    for engine in ("vector", "simpy"):
        r = run_sim("run", "--engine", engine, *common, "--out", str(tmp_path / engine))
        assert r.returncode == 0, r.stderr
        outs[engine] = json.loads(r.stdout.strip().splitlines()[-1])
    assert outs["vector"] == outs["simpy"]
    assert any(s["cpu_wrong"] for s in outs["vector"]["policies"])
    files = sorted(
        p.relative_to(tmp_path / "simpy") for p in (tmp_path / "simpy").rglob("*.parquet")
    )
    assert len(files) >= 8
    for f in files:
        assert (tmp_path / "vector" / f).read_bytes() == (tmp_path / "simpy" / f).read_bytes(), f
    r = run_sim("run", "--engine", "vector", "--steps", "10", "--out", str(tmp_path / "t"))
    assert (
        r.returncode == 2 and r.stderr == "error: --engine vector writes no trace: add --no-trace\n"
    )
