"""Bad input: one clear error line, a non-zero exit, no traceback, no output written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from load import limit_s
from repo_root import ROOT


def run_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=limit_s(120),
    )


BAD_SCENARIOS = {
    "unknown_key": ("[engine]\nmax_num_seqs = 4\nwarp_speed = 9\n", "engine.warp_speed"),
    "wrong_type": ("[engine]\nmax_num_seqs = 'many'\n", "engine.max_num_seqs must be an integer"),
    "impossible": ("[engine]\nmax_num_seqs = 0\n", "engine.max_num_seqs must be > 0"),
    "bad_literal": ("[engine]\nmamba_cache_mode = 'some'\n", "engine.mamba_cache_mode must be"),
    "not_toml": ("[engine\n", "not valid TOML"),
    "probability": ("[workload]\nacceptance_probs = [0.9, 1.5, 0.2]\n", "probabilities"),
    # These three checks sat after a property's return, unreachable, until the fuzz
    # campaign's sweep refused what run had accepted (the vector tier checks them too).
    "stall_probability": ("[timing]\nworker_stall_prob = 1.5\n", "worker_stall_prob must be in"),
    "slow_probability": ("[timing]\nworker_slow_prob = 1.5\n", "worker_slow_prob must be in"),
    "slow_factor": ("[timing]\nworker_slow_factor = 0.0\n", "worker_slow_factor must be in"),
    "top_level": ("colour = 'red'\n", "unknown key 'colour'"),
    "scripted_bad_count": (
        "[workload]\narrival = 'scripted'\n[[workload.requests]]\nreq_id = 'A'\n"
        "arrival_step = 0\nprompt_len = 4\noutput_len = 4\naccepted = [9]\n",
        "accepted counts must be in 1..4",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_SCENARIOS))
def test_bad_scenario_is_one_clear_line(name: str, tmp_path: Path) -> None:
    text, needle = BAD_SCENARIOS[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    out = tmp_path / "out"
    r = run_sim("schedule", "--scenario", str(path), "--out", str(out), "--steps", "5")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert needle in lines[0] and str(path) in lines[0]
    assert "Traceback" not in r.stderr
    assert not (out / "schedule.json").exists()


def test_unknown_scenario_and_bad_set(tmp_path: Path) -> None:
    r = run_sim("schedule", "--scenario", "nope", "--out", str(tmp_path))
    assert r.returncode == 2 and "unknown scenario 'nope'" in r.stderr
    r = run_sim(
        "schedule",
        "--scenario",
        "minimal-race",
        "--out",
        str(tmp_path),
        "--set",
        "engine.num_speculative_tokens=-1",
    )
    assert r.returncode == 2 and "num_speculative_tokens" in r.stderr
    assert "Traceback" not in r.stderr


def test_schedule_cli_writes_and_prints(tmp_path: Path) -> None:
    r = run_sim("schedule", "--scenario", "minimal-race", "--seed", "3", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("SEED=3\n")
    assert "engine.num_speculative_tokens=3" in r.stdout
    assert "row_ops remove=1 add=3 move=0 swap=1" in r.stdout
    assert (tmp_path / "schedule.json").is_file()


def test_run_and_replay_take_a_schedule_and_refuse_a_foreign_one(tmp_path: Path) -> None:
    assert run_sim("schedule", "--scenario", "minimal-race", "--out", str(tmp_path)).returncode == 0
    good = tmp_path / "schedule.json"
    r = run_sim(
        "run",
        "--schedule",
        str(good),
        "--policy",
        "synced-gather",
        "--json",
        "--out",
        str(tmp_path / "run"),
    )
    assert r.returncode == 0 and '"corrupted_requests": 1' in r.stdout.splitlines()[-1]
    text = good.read_text()
    foreign = tmp_path / "v9.json"
    foreign.write_text(text.replace('"schema_version":1', '"schema_version":9', 1))
    truncated = tmp_path / "cut.json"
    truncated.write_text(text[: len(text) // 3])
    for bad, needle in ((foreign, "schema version 9"), (truncated, "truncated")):
        for argv in (
            [sys.executable, "-m", "sim", "run", "--schedule", str(bad)],
            [
                sys.executable,
                "-m",
                "gpu_check",
                "replay",
                "--device",
                "cpu",
                "--schedule",
                str(bad),
            ],
        ):
            out = tmp_path / f"out-{bad.stem}"
            r = subprocess.run(
                [*argv, "--out", str(out)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=limit_s(120),
            )
            lines = r.stderr.strip().splitlines()
            assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr
            assert not out.exists() or not any(out.iterdir())
    r = run_sim(
        "run",
        "--schedule",
        str(good),
        "--set",
        "engine.max_num_seqs=4",
        "--out",
        str(tmp_path / "x"),
    )
    assert r.returncode == 2 and "timing.* only" in r.stderr


def test_timing_files_apply_and_are_checked(tmp_path: Path) -> None:
    from sim.model.params import load_scenario

    good = tmp_path / "t.toml"
    good.write_text("[timing]\nworker_swap_ns = 77000\n")
    assert load_scenario("qwen35-mtp3", None, (str(good),)).timing.worker_swap_ns == 77000
    bad = tmp_path / "bad.toml"
    bad.write_text("[engine]\nmax_num_seqs = 3\n")
    r = run_sim(
        "run", "--scenario", "minimal-race", "--timing", str(bad), "--out", str(tmp_path / "o")
    )
    assert r.returncode == 2 and "holds only [timing]" in r.stderr
    typo = tmp_path / "typo.toml"
    typo.write_text("[timing]\nworker_swop_ns = 1\n")
    r = run_sim(
        "run", "--scenario", "minimal-race", "--timing", str(typo), "--out", str(tmp_path / "o")
    )
    assert r.returncode == 2 and "timing.worker_swop_ns" in r.stderr
