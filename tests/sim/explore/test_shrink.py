"""``sim shrink``: a wrong read of a short qwen35-mtp3 run becomes a small scripted scenario
with deterministic timing that reproduces the same hazard kind under ``sim run``."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sim.cli.main import main
from sim.model.params import load_scenario


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen")
    args = ["run", "--scenario", "qwen35-mtp3", "--policy", "unsynced", "--steps", "12"]
    assert main([*args, "--out", str(out), "--no-trace"]) == 0
    return out


def _first_wrong(run_dir) -> pd.Series:
    reads = pd.read_parquet(run_dir / "reads.parquet")
    wrong = reads[reads["cpu_wrong"] | reads["gpu_wrong"]]
    assert not wrong.empty
    return wrong.sort_values(["step", "row"]).iloc[-1]


def test_shrink_then_rerun_reproduces_the_kind(run_dir, tmp_path, capsys) -> None:
    w = _first_wrong(run_dir)
    toml = tmp_path / "shrunk.toml"
    rc = main(["shrink", str(run_dir), "--step", str(int(w["step"])), "--req", w["req_id"],
               "--out", str(toml)])  # fmt: skip
    assert rc == 0
    capsys.readouterr()
    scn = load_scenario(str(toml))  # a valid built-in-style scenario
    assert scn.workload.arrival == "scripted"
    assert scn.timing.jitter_frac == 0.0 and scn.timing.worker_stall_prob == 0.0
    assert len(scn.workload.requests) < 64 and scn.engine.max_num_seqs < 64
    out = tmp_path / "rerun"
    assert main(["run", "--scenario", str(toml), "--policy", "unsynced", "--out", str(out),
                 "--json"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["by_kind"].get(w["kind"], 0) >= 1
    # and byte-identical on a second run (deterministic timing)
    out2 = tmp_path / "rerun2"
    assert main(["run", "--scenario", str(toml), "--policy", "unsynced", "--out", str(out2)]) == 0
    assert (out / "reads.parquet").read_bytes() == (out2 / "reads.parquet").read_bytes()


def test_shrink_refuses_a_right_read(run_dir, capsys) -> None:
    reads = pd.read_parquet(run_dir / "reads.parquet")
    right = reads[~(reads["cpu_wrong"] | reads["gpu_wrong"])].iloc[0]
    rc = main(["shrink", str(run_dir), "--step", str(int(right["step"])), "--req",
               right["req_id"]])  # fmt: skip
    assert rc == 2
    assert "read right" in capsys.readouterr().err


def test_shrink_bad_run(tmp_path, capsys) -> None:
    assert main(["shrink", str(tmp_path), "--step", "3", "--req", "A"]) == 2
    assert "meta.json" in capsys.readouterr().err


def test_shrink_minimal_race_to_three_steps(tmp_path, capsys) -> None:
    """minimal-race's consumed-wrong read (R at step 4, ownership) shrinks to the enumeration's
    minimal race: 2 rows, 3 steps, and the TOML reproduces it."""
    run = tmp_path / "mr"
    args = ["run", "--scenario", "minimal-race", "--policy", "synced-gather", "--no-trace"]
    assert main([*args, "--out", str(run)]) == 0
    toml = tmp_path / "mr.toml"
    assert main(["shrink", str(run), "--step", "4", "--req", "R", "--out", str(toml)]) == 0
    text = capsys.readouterr().out
    assert "-> 3 requests, 3 steps, 2 rows" in text and "reads F's 4 instead of 1" in text
    scn = load_scenario(str(toml))
    assert scn.default_steps == 3 and scn.engine.max_num_seqs == 2
    assert main(["run", "--scenario", str(toml), "--policy", "synced-gather", "--out",
                 str(tmp_path / "re"), "--json"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["by_kind"] == {"ownership": 1} and summary["gpu_wrong"] == 1
