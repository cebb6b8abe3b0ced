"""The hardware replay's logic on the CPU (scripted landings) and on a real GPU (marked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from load import limit_s
from repo_root import ROOT

from gpu_check.replay import CudaCounts, ReplayConfig, ScriptedCounts, replay
from policy_cases import MINIMAL_RACE
from sim.hardware.compare import agreement
from sim.model.params import load_scenario
from sim.model.policies import POLICIES
from sim.model.scheduling import build_schedule

SMALL = {"H": 2, "HV": 4, "K": 16, "V": 8}


def run_module(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``timeout``: what the command takes on an idle machine, scaled by tests/load.py."""
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=limit_s(timeout))  # fmt: skip


@pytest.fixture(scope="module")
def minimal():
    sc = load_scenario("minimal-race")
    return sc, build_schedule(sc, 0, sc.default_steps)


@pytest.mark.parametrize("land", [-1, 0, 1, 2, 3])
def test_minimal_race_outcome_by_landing(minimal, land: int) -> None:
    """The replay gives the hand-derived outcome of tests/policy_cases.py for every policy."""
    sc, sched = minimal
    assert sched.steps[4].ops == MINIMAL_RACE.ops
    plan = [land if n == 4 else 0 for n in range(1, len(sched.steps))]
    for name, policy in POLICIES.items():
        df = replay(sched, policy, ScriptedCounts(8, list(plan)), ReplayConfig(sc.timing))
        assert df["agree"].all(), name
        r = df[(df.step == 4) & (df.req_id == "R")].iloc[0]
        # A wait before the read lands a late copy after the last op; one before the moves,
        # before the first.
        seen = land
        if policy.waits_before_moves:
            seen = 0
        elif land == -1 and policy.waits:
            seen = len(MINIMAL_RACE.ops)
        assert r.land_pos == seen, name
        assert (r.cpu_observed, r.gpu_consumed) == MINIMAL_RACE.expect[name][seen], (name, land)


def test_qwen35_random_landings_agree_with_the_write_log() -> None:
    sc = load_scenario("qwen35-mtp3")
    sched = build_schedule(sc, 1, 60)
    rng = np.random.default_rng(3)
    for name, policy in POLICIES.items():
        plan = [int(rng.integers(-1, len(sched.steps[n].ops) + 1)) for n in range(1, 60)]
        df = replay(
            sched, policy, ScriptedCounts(sched.max_num_reqs, plan), ReplayConfig(sc.timing)
        )
        assert len(df) > 1000 and df["agree"].all(), name
        if name in ("device-authoritative", "private-buffer", "sync-before-moves"):
            assert not df["gpu_wrong"].any(), name


def test_gdn_consequence_wrong_iff_diverged(minimal) -> None:
    from gpu_check.replay.gdn import add_gdn_columns

    sc, sched = minimal
    plan = [2 if n == 4 else 0 for n in range(1, len(sched.steps))]
    df = replay(sched, POLICIES["synced-gather"], ScriptedCounts(8, plan), ReplayConfig(sc.timing))
    df = add_gdn_columns(df, sched, "cpu", SMALL, impl="reference")
    spec = df[df["gdn_rel_err"].notna()]
    assert len(spec) == len(df)  # every minimal-race read is a speculative row
    assert (spec["gpu_wrong"] == spec["gdn_diverged"]).all()
    assert spec["gdn_diverged"].sum() == 1


def test_replay_cli_cpu_and_compare(tmp_path: Path) -> None:
    r = run_module("gpu_check", "replay", "--device", "cpu", "--reps", "5", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    r = run_module("sim", "compare", str(tmp_path), timeout=120)
    assert r.returncode == 0 and "synced-gather" in r.stdout
    bad = run_module("gpu_check", "replay", "--device", "cpu", "--policy", "nope", "--out",
                     str(tmp_path), timeout=120)  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "unknown policy 'nope'" in bad.stderr


@pytest.mark.gpu
def test_cuda_replay_real_memory_agrees(minimal) -> None:
    sc, sched = minimal
    steps = [n for _ in range(40) for n in range(1, len(sched.steps))]
    frames = []
    for name in ("synced-gather", "device-authoritative", "sync-before-moves"):
        dev = CudaCounts(sched.max_num_reqs)
        frames.append(replay(sched, POLICIES[name], dev, ReplayConfig(sc.timing), steps=steps))
    import pandas as pd

    table = agreement(pd.concat(frames)).set_index("policy")
    assert (table["agreement"] >= 0.98).all(), table
    assert table.loc["device-authoritative", "gpu_wrong_observed"] == 0
    assert table.loc["sync-before-moves", "gpu_wrong_observed"] == 0


def test_replay_with_the_models_own_timing_agrees_on_the_cpu(tmp_path: Path) -> None:
    """Scripted landings at the model's predicted positions: every compared read matches."""
    import pandas as pd

    from sim.hardware.compare import prediction_agreement

    sim_run = tmp_path / "sim"
    r = run_module("sim", "run", "--policy", "all", "--steps", "200", "--out", str(sim_run))
    assert r.returncode == 0, r.stderr
    rp = tmp_path / "rp"
    r = run_module("gpu_check", "replay", "--device", "cpu", "--sim-run", str(sim_run),
                   "--out", str(rp))  # fmt: skip
    assert r.returncode == 0, r.stderr
    table = prediction_agreement(pd.read_parquet(rp / "observed.parquet"))
    assert len(table) == len(POLICIES)
    assert (table["same_cpu_value"] == table["compared"]).all(), table
    assert (table["sim_only"] + table["hardware_only"] == 0).all()
    assert table["compared"].min() > 1000
    bad = run_module("gpu_check", "replay", "--device", "cpu", "--sim-run", str(tmp_path),
                     "--out", str(tmp_path / "x"), timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "not a `python -m sim run` directory" in bad.stderr


def test_replay_of_an_empty_batch_step_and_of_a_single_step(tmp_path: Path) -> None:
    """An empty step (no requests yet) and a replay with nothing to score both finish."""
    sched_dir = tmp_path / "s"
    r = subprocess.run(
        [sys.executable, "-m", "sim", "schedule", "--set", "workload.initial_requests=0",
         "--steps", "30", "--out", str(sched_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=limit_s(120),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    for extra, name in ((["--schedule", str(sched_dir / "schedule.json")], "empty"),
                        (["--steps", "1"], "one")):  # fmt: skip
        out = tmp_path / name
        r = subprocess.run(
            [sys.executable, "-m", "gpu_check", "replay", "--device", "cpu", *extra,
             "--out", str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=limit_s(120),
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert (out / "observed.parquet").is_file() and (out / "replay_summary.json").is_file()


def test_landing_timing_table_from_hand_built_steps() -> None:
    from sim.hardware.compare import landing_timing

    rows = []
    for step, (aim, seen, op) in enumerate([(100, 130, 2_000), (100, 70, 1_000), (50, -1, 0)]):
        for req in ("A", "B"):  # two reads of one step count once
            rows.append({"policy": "align", "step": step, "req_id": req,
                         "land_predicted_ns": aim * 1000, "land_seen_ns": seen * 1000,
                         "land_bracket_ns": 500, "op_err_max_ns": op, "n_ops": 2,
                         "land_during_op": False, "reads_buffer": True})  # fmt: skip
    t = landing_timing(pd.DataFrame(rows)).iloc[0]
    assert t.steps == 2  # the step whose tag was never seen is left out
    assert t.land_err_median_us == 30.0 and t.land_err_max_us == 30.0
    assert t.op_err_max_us == 2.0 and t.bracket_p95_us == 0.5


def _verdict_step(step, margin_us, land_err_us, op_err_us, same, pos=1, seen=True):
    """Two reads of one hand-built step of a --sim-run replay; ``same``: the hardware gave the
    model's value."""
    aim = 500_000
    return [{"policy": "align", "step": step, "req_id": r, "n_ops": 2, "land_pos": pos,
             "land_during_op": False, "reads_buffer": True, "land_predicted_ns": aim,
             "land_seen_ns": aim + land_err_us * 1000 if seen else -1, "land_bracket_ns": 400,
             "op_err_max_ns": op_err_us * 1000, "land_predicted_pos": 1,
             "land_margin_ns": margin_us * 1000, "sim_landed": True, "sim_cpu_value": 1,
             "cpu_observed": 1 if same or r == "A" else 4} for r in ("A", "B")]  # fmt: skip


def test_close_calls_count_verdicts_by_margin_and_attribute_each_miss() -> None:
    from sim.hardware.compare import close_calls

    rows = (
        _verdict_step(1, 200, 3, 1, True)  # wide only
        + _verdict_step(2, 80, 2, 1, True)  # close and wide
        + _verdict_step(3, 20, 30, 1, False)  # close miss: the landing moved 30 > 20 µs
        + _verdict_step(4, 10, 2, 15, False)  # close miss: an op 15 µs late > 10 µs
        + _verdict_step(5, 10, -12, 11, False)  # both
        + _verdict_step(6, 50, 2, 1, False)  # close and wide miss, neither error explains it
        + _verdict_step(7, 5, 0, 0, False, seen=False)  # never sighted: the landing
        + _verdict_step(8, 10, 6, 5, False)  # neither alone (6.4, 5 < 10), together: both
    )
    t = close_calls(pd.DataFrame(rows)).set_index("policy")
    assert list(t.index) == ["align", "all"]
    a = t.loc["align"]
    assert (a.close_steps, a.close_same) == (7, 1)
    assert (a.wide_steps, a.wide_same) == (3, 2)
    assert (a.miss_landing, a.miss_op_placement, a.miss_both, a.miss_neither) == (2, 1, 2, 1)
    assert a.close_ci95 == "[0.026, 0.513]"  # Wilson 95 % of 1 in 7


def test_a_read_the_model_has_before_the_landing_agrees_only_if_the_hardware_read_before_it():
    from sim.hardware.compare import replay_steps

    rows = _verdict_step(1, 30, 1, 1, False, pos=-1) + _verdict_step(2, 30, 1, 1, False, pos=0)
    for r in rows:  # the model: read before the landing; its value is not compared
        r["sim_landed"] = False
    steps = replay_steps(pd.DataFrame(rows)).set_index("step")
    assert steps.loc[1, "same_verdict"] and not steps.loc[2, "same_verdict"]


def test_cpu_replay_records_the_step_timing(tmp_path: Path) -> None:
    sc = load_scenario("qwen35-mtp3")
    sched = build_schedule(sc, 1, 20)
    plan = [1] * 19
    df = replay(sched, POLICIES["align"], ScriptedCounts(sched.max_num_reqs, plan),
                ReplayConfig(sc.timing))  # fmt: skip
    assert (df["land_seen_ns"] >= 0).all() and (df["land_bracket_ns"] >= 0).all()
    assert (df["op_err_max_ns"] >= df["op_err_p50_ns"]).all()


def test_the_aimed_position_and_margin_count_the_read_only_where_the_policy_does_not_wait():
    from gpu_check.replay import _aimed_position

    ops = np.array([10_000, 20_000], dtype=np.int64)
    assert _aimed_position(ops, 50_000, 15_000, False) == (1, 5_000)
    assert _aimed_position(ops, 50_000, 60_000, False) == (-1, 10_000)  # after the read
    assert _aimed_position(ops, 50_000, 60_000, True) == (2, 40_000)  # the read waits for it
    assert _aimed_position(ops, 50_000, 10_000, True) == (0, 0)  # tie: landing first
    assert _aimed_position(np.zeros(0, dtype=np.int64), 0, 7_000, True) == (0, -1)  # no event
