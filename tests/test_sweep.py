"""Sweeps resume after a kill, refuse a foreign directory, and plot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sim.errors import SpecraceError
from sim.explore.analysis import hazard_rates
from sim.explore.sweep import SweepSpec, parse_vary, run_sweep

ROOT = Path(__file__).resolve().parent.parent


def spec(values: str = "3000000,9000000") -> SweepSpec:
    return SweepSpec(
        "qwen35-mtp3",
        ("synced-gather", "device-authoritative"),
        parse_vary([f"timing.gpu_forward_ns_base={values}"]),
        0,
        2,
        150,
    )


def test_killed_sweep_resumes_without_rerunning(tmp_path: Path) -> None:
    class Killed(Exception):
        pass

    seen: list[str] = []

    def die_after_two(msg: str) -> None:
        seen.append(msg)
        if len(seen) == 2:
            raise Killed

    with pytest.raises(Killed):
        run_sweep(spec(), tmp_path, log=die_after_two)
    finished = sorted(p.name for p in (tmp_path / "points").glob("*.json"))
    assert len(finished) == 4  # two points x two policies survived the kill
    assert not list((tmp_path / "points").glob(".*.tmp"))
    mtimes = {p: (tmp_path / "points" / p).stat().st_mtime_ns for p in finished}
    log: list[str] = []
    df = run_sweep(spec(), tmp_path, log=log.append)
    assert log[-1] == "ran 4 point-policies, 4 already done"
    assert all((tmp_path / "points" / p).stat().st_mtime_ns == t for p, t in mtimes.items())
    assert len(df) == 8
    assert set(df["policy"]) == {"synced-gather", "device-authoritative"}
    rates = hazard_rates(df, "set.timing.gpu_forward_ns_base")
    assert (rates[rates.policy == "device-authoritative"]["gpu_wrong"] == 0).all()


def test_sweep_refuses_another_spec(tmp_path: Path) -> None:
    run_sweep(spec("3000000"), tmp_path, log=lambda m: None)
    with pytest.raises(SpecraceError, match="different sweep"):
        run_sweep(spec("5000000"), tmp_path, log=lambda m: None)


def test_swarm_sweep_and_plot_cli(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim",
            "sweep",
            "--policy",
            "unsynced",
            "--swarm",
            "3",
            "--steps",
            "120",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    df = pd.read_parquet(out / "sweep.parquet")
    assert len(df) == 3 and df["timing.gpu_forward_ns_base"].nunique() == 3
    r = subprocess.run(
        [sys.executable, "-m", "sim", "plot", str(out), "--x", "set.swarm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert (out / "hazard.png").read_bytes()[:4] == b"\x89PNG"
    r = subprocess.run(
        [sys.executable, "-m", "sim", "plot", str(tmp_path / "nothing")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "neither a sweep" in r.stderr
