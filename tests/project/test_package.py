"""The installed package: built-in data inside it, the `specrace` command, the CLI's promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from load import limit_s
from repo_root import ROOT

from sim.model.param_docs import DOCS
from sim.model.params import builtin_scenarios, builtin_timing_files, parameter_keys


def sim(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sim", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=limit_s(120),
    )


def test_every_parameter_is_documented() -> None:
    assert set(DOCS) == set(parameter_keys())
    assert all(d.unit and d.meaning and d.source for d in DOCS.values())


def test_params_lists_every_key_with_its_default() -> None:
    r = sim("params")
    assert r.returncode == 0, r.stderr
    for key in parameter_keys():
        assert f"\n{key} " in r.stdout, key
    assert "timing.dma_land_delay_ns" in r.stdout and "20000" in r.stdout
    r = sim("params", "--scenario", "minimal-race", "--json")
    import json

    rows = {row["key"]: row for row in json.loads(r.stdout)}
    assert rows["timing.gpu_forward_ns_base"]["value"] == "100000"  # the scenario's, not 6 ms


def test_builtins_are_package_data() -> None:
    assert {"qwen35-mtp3", "minimal-race"} <= set(builtin_scenarios())
    assert {"h200", "vllm-0.24.0-row-ops"} <= set(builtin_timing_files())


def test_set_names_the_key_and_near_matches(tmp_path: Path) -> None:
    r = sim("run", "--set", "engine.max_num_seq=8", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert "--set engine.max_num_seq" in r.stderr and "engine.max_num_seqs" in r.stderr
    assert "qwen35-mtp3.toml" not in r.stderr  # the override is at fault, not the scenario
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("steps", ["0", "-3", "x"])
def test_steps_must_be_positive(tmp_path: Path, steps: str) -> None:
    r = sim("run", "--steps", steps, "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--steps" in r.stderr and not (tmp_path / "o").exists()


def test_a_run_directory_holds_one_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert sim("run", "--scenario", "minimal-race", "--out", str(out)).returncode == 0
    assert (out / "comparison.json").is_file() and (out / "align").is_dir()
    r = sim("run", "--scenario", "minimal-race", "--policy", "align", "--out", str(out))
    assert r.returncode == 2 and "--force" in r.stderr
    assert (out / "comparison.json").is_file()  # untouched
    r = sim("run", "--scenario", "minimal-race", "--policy", "align", "--out", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert not (out / "comparison.json").exists() and (out / "reads.parquet").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temporary left behind
    mode = (out / "reads.parquet").stat().st_mode & 0o777
    assert mode == 0o666 & ~_umask(), oct(mode)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_help_shows_defaults_and_an_example() -> None:
    for cmd in ("schedule", "run", "sweep", "params", "compare", "bench"):
        r = sim(cmd, "--help")
        assert r.returncode == 0 and "example:" in r.stdout, cmd
    assert "(default: qwen35-mtp3)" in sim("run", "--help").stdout


def test_installed_package_runs_from_any_folder(tmp_path: Path) -> None:
    """``pip install .`` (not editable): the command finds its scenarios inside the package."""
    target = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(ROOT)],
        capture_output=True, text=True, timeout=limit_s(300),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    cmd = [str(target / "bin" / "specrace")]
    v = subprocess.run([*cmd, "--version"], cwd=elsewhere, env=env, capture_output=True,
                       text=True, timeout=limit_s(60))  # fmt: skip
    assert v.returncode == 0 and v.stdout.startswith("specrace 0.") and "commit " in v.stdout
    assert "unknown" not in v.stdout  # the commit was stamped into the package at build time
    r = subprocess.run([*cmd, "run", "--scenario", "minimal-race", "--out", "x"], cwd=elsewhere,
                       env=env, capture_output=True, text=True, timeout=limit_s(120))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (elsewhere / "x" / "schedule.json").is_file()
    imported = subprocess.run(
        [sys.executable, "-c", "import sim; print(sim.__file__)"], cwd=elsewhere, env=env,
        capture_output=True, text=True, timeout=limit_s(60),
    ).stdout  # fmt: skip
    assert imported.startswith(str(target))
    g = subprocess.run(
        [*cmd, "padding", "--num-reqs", "72", "--k", "3", "--json"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=limit_s(60),
    )  # fmt: skip
    assert g.returncode == 0 and "72" in g.stdout, g.stderr


def test_run_says_when_the_policy_contradicts_the_configuration(tmp_path: Path) -> None:
    r = sim("run", "--scenario", "minimal-race", "--set", "engine.mamba_cache_mode=align",
            "--policy", "synced-gather", "--out", str(tmp_path / "a"))  # fmt: skip
    assert r.returncode == 0 and "note: --policy synced-gather contradicts" in r.stdout
    assert "policy align" in r.stdout.splitlines()[-1]
    r = sim("run", "--scenario", "minimal-race", "--set", "engine.async_scheduling=false",
            "--out", str(tmp_path / "b"))  # fmt: skip
    rows = [line.split()[0] for line in r.stdout.splitlines() if line.startswith(" ")]
    assert r.returncode == 0 and rows == ["policy", "async-off"], r.stdout
