"""Sweeps resume after a kill, refuse a foreign directory, and plot."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from load import limit_s
from repo_root import ROOT

from sim.errors import SpecraceError
from sim.explore.analysis import hazard_rates
from sim.explore.sweep import SweepSpec, parse_vary, run_sweep
from sim.explore.sweep_points import finished
from sim.model.params import load_scenario


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
    # The first unit (seed 0: two points x two policies) was written whole before its points'
    # progress lines; the kill came in them.
    (unit,) = (tmp_path / "points").glob("*.jsonl")
    assert len(finished(tmp_path / "points")) == 4
    assert not list((tmp_path / "points").glob(".*.tmp"))
    mtime = unit.stat().st_mtime_ns
    log: list[str] = []
    df = run_sweep(spec(), tmp_path, log=log.append)
    assert log[-1] == "ran 4 point-policies, 4 already done"
    assert unit.stat().st_mtime_ns == mtime
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
        timeout=limit_s(300),
    )
    assert r.returncode == 0, r.stderr
    df = pd.read_parquet(out / "sweep.parquet")
    assert len(df) == 3 and df["timing.gpu_forward_ns_base"].nunique() == 3
    r = subprocess.run(
        [sys.executable, "-m", "sim", "plot", str(out), "--x", "set.swarm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=limit_s(300),
    )
    assert r.returncode == 0, r.stderr
    assert (out / "hazard.png").read_bytes()[:4] == b"\x89PNG"
    r = subprocess.run(
        [sys.executable, "-m", "sim", "plot", str(tmp_path / "nothing")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=limit_s(60),
    )
    assert r.returncode == 2 and "neither a sweep" in r.stderr


def small(values: str = "3000000,9000000", seeds: int = 2) -> SweepSpec:
    return SweepSpec(
        "qwen35-mtp3",
        ("align",),
        parse_vary([f"timing.gpu_forward_ns_base={values}"]),
        0,
        seeds,
        60,
    )


def test_same_bytes_serial_or_two_processes_in_any_order(tmp_path: Path) -> None:
    run_sweep(small(), tmp_path / "serial", log=lambda m: None)
    run_sweep(small(), tmp_path / "pool", log=lambda m: None, workers=2)
    # Half serially, the rest on the pool: a resumed sweep in another order.
    run_sweep(small("9000000"), tmp_path / "mixed", log=lambda m: None)
    run_sweep(small(), tmp_path / "mixed", log=lambda m: None, workers=2)
    ref = (tmp_path / "serial" / "sweep.parquet").read_bytes()
    assert (tmp_path / "pool" / "sweep.parquet").read_bytes() == ref
    assert (tmp_path / "mixed" / "sweep.parquet").read_bytes() == ref
    # One file per unit: the pool ran two (one per seed), each in a worker process.
    assert len(list((tmp_path / "pool" / "points").glob("*.jsonl"))) == 2


def test_local_workers_are_at_most_the_cores(tmp_path: Path, monkeypatch) -> None:
    """Processes beyond the cores buy nothing for CPU-bound units and cost a schedule built
    again per unit: ``--workers 64`` on 2 cores runs 2 processes, and says so."""
    import sim.explore.sweep as sweep_mod

    monkeypatch.setattr(sweep_mod.os, "cpu_count", lambda: 2)
    seen: list[int] = []
    real = sweep_mod._processes

    def spy(spec: SweepSpec, units: list, workers: int):
        seen.append(workers)
        assert len(units) == 2  # cut for 2 workers, one per schedule (seed)
        return real(spec, units, workers)

    monkeypatch.setattr(sweep_mod, "_processes", spy)
    lines: list[str] = []
    run_sweep(small(), tmp_path / "s", log=lines.append, workers=64)
    assert seen == [2] and "--workers 64 on 2 cores: 2 processes" in lines
    run_sweep(small(), tmp_path / "ref", log=lambda m: None)
    assert (tmp_path / "s" / "sweep.parquet").read_bytes() == (
        tmp_path / "ref" / "sweep.parquet"
    ).read_bytes()


def test_same_bytes_on_a_dask_cluster_at_its_address_or_started_here(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    run_sweep(small(), tmp_path / "serial", log=lambda m: None)
    run_sweep(small(), tmp_path / "local", log=lambda m: None, workers=2, executor="dask")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster:  # fmt: skip
        run_sweep(small(), tmp_path / "remote", log=lambda m: None,
                  scheduler=cluster.scheduler_address)  # fmt: skip
    ref = (tmp_path / "serial" / "sweep.parquet").read_bytes()
    assert (tmp_path / "local" / "sweep.parquet").read_bytes() == ref
    assert (tmp_path / "remote" / "sweep.parquet").read_bytes() == ref
    with pytest.raises(SpecraceError, match="executor 'ray': expected processes or dask"):
        run_sweep(small(), tmp_path / "x", log=lambda m: None, workers=2, executor="ray")
    assert not (tmp_path / "x").exists()


def test_extending_a_sweep_keeps_finished_points(tmp_path: Path) -> None:
    run_sweep(small("3000000", seeds=1), tmp_path, log=lambda m: None)
    (first,) = (tmp_path / "points").glob("*.jsonl")
    mtime = first.stat().st_mtime_ns
    log: list[str] = []
    df = run_sweep(small("3000000,9000000", seeds=2), tmp_path, log=log.append)
    assert log[0] == f"extending {tmp_path}: 1 -> 4 points"
    assert log[-1] == "ran 3 point-policies, 1 already done"
    assert first.stat().st_mtime_ns == mtime
    assert len(df) == 4 and sorted(df["seed"]) == [0, 0, 1, 1]
    # A shrunk or changed sweep is not an extension.
    with pytest.raises(SpecraceError, match="different sweep"):
        run_sweep(small("3000000", seeds=2), tmp_path, log=lambda m: None)


def test_progress_counts_points_with_an_eta(tmp_path: Path) -> None:
    log: list[str] = []
    run_sweep(small(), tmp_path, log=log.append)
    bars = [m for m in log if m.startswith("[")]
    assert [b.split("]")[0] for b in bars] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    assert " 100 %" in bars[-1] and "ETA 0:00" in bars[-1]


def test_sweep_cli_quiet_and_bad_workers(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "sim", "sweep", "--policy", "align", "--steps", "40",
            "--vary", "timing.gpu_forward_ns_base=3000000", "--workers", "1"]  # fmt: skip
    r = subprocess.run(
        [*args, "--quiet", "--out", str(tmp_path / "q")],
        cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300),
    )  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", r.stderr
    r = subprocess.run(
        [*args, "--out", str(tmp_path / "p")], cwd=ROOT, capture_output=True, text=True,
        timeout=limit_s(300),
    )  # fmt: skip
    assert "[1/1] 100 %" in r.stderr
    r = subprocess.run(
        [*args[:-1], "-3", "--out", str(tmp_path / "x")],
        cwd=ROOT, capture_output=True, text=True, timeout=limit_s(60),
    )  # fmt: skip
    assert r.returncode == 2 and "error: argument --workers: must be in 0..4096" in r.stderr
    assert len(r.stderr.splitlines()) == 1 and not (tmp_path / "x").exists()


def test_vector_and_simpy_sweeps_are_the_same_bytes(tmp_path: Path) -> None:
    """The default tier (vector, each schedule's points in one call) against the reference
    (SimPy, point by point): a grid over timing and an engine key, two seeds, two policies."""
    vary = parse_vary(
        ["timing.gpu_forward_ns_base=3000000,6000000", "engine.max_num_batched_tokens=300,8192"]
    )
    pols = ("unsynced", "align")
    for engine in ("vector", "simpy"):
        run_sweep(SweepSpec("qwen35-mtp3", pols, vary, 0, 2, 80, engine), tmp_path / engine,
                  log=lambda m: None)  # fmt: skip
        run_sweep(SweepSpec("qwen35-mtp3", pols, (), 3, 1, 80, engine), tmp_path / f"s{engine}",
                  log=lambda m: None)  # fmt: skip
    for name in ("", "s"):
        vec = pd.read_parquet(tmp_path / f"{name}vector" / "sweep.parquet")
        ref = pd.read_parquet(tmp_path / f"{name}simpy" / "sweep.parquet")
        assert vec["cpu_wrong"].sum() > 0  # the comparison has wrong reads to get wrong
        pd.testing.assert_frame_equal(vec, ref)
        assert (tmp_path / f"{name}vector" / "sweep.parquet").read_bytes() == (
            tmp_path / f"{name}simpy" / "sweep.parquet"
        ).read_bytes()


def test_sweep_records_its_engine_and_refuses_the_other(tmp_path: Path) -> None:
    run_sweep(small("3000000", seeds=1), tmp_path, log=lambda m: None)
    assert json.loads((tmp_path / "sweep.json").read_text())["engine"] == "vector"
    other = replace(small("3000000,9000000", seeds=1), engine="simpy")
    with pytest.raises(SpecraceError, match="--engine vector"):
        run_sweep(other, tmp_path, log=lambda m: None)
    # A spec written before the flag existed was run with the SimPy tier.
    old = {k: v for k, v in other.to_json().items() if k != "engine"}
    assert SweepSpec.from_json(old).engine == "simpy"


def test_a_schedule_is_built_once_per_engine_workload_and_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sim.explore.sweep as sweep_mod

    built: list[tuple[int, int]] = []
    real = sweep_mod.build_schedule

    def counting(scenario, seed, steps):
        built.append((scenario.engine.max_num_batched_tokens, seed))
        return real(scenario, seed, steps)

    monkeypatch.setattr(sweep_mod, "build_schedule", counting)
    vary = parse_vary(
        ["timing.gpu_forward_ns_base=3000000,6000000,9000000",
         "engine.max_num_batched_tokens=300,8192"]
    )  # fmt: skip
    df = run_sweep(SweepSpec("qwen35-mtp3", ("align", "unsynced"), vary, 0, 2, 40),
                   tmp_path, log=lambda m: None)  # fmt: skip
    assert len(df) == 3 * 2 * 2 * 2
    assert sorted(built) == [(300, 0), (300, 1), (8192, 0), (8192, 1)]


def test_sweep_cli_engine_flag(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "sim", "sweep", "--policy", "align", "--steps", "40",
            "--vary", "timing.gpu_forward_ns_base=3000000", "--workers", "1"]  # fmt: skip
    args.append("--quiet")
    r = subprocess.run([*args, "--engine", "simpy", "--out", str(tmp_path / "s")],
                       cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["engine"] == "simpy"
    r = subprocess.run([*args, "--out", str(tmp_path / "s")],  # the default: vector
                       cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300))  # fmt: skip
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "--engine simpy" in r.stderr
    assert r.stderr.count("\n") == 1


def test_auto_workers_runs_serially_where_processes_do_not_pay() -> None:
    from sim.explore.sweep import schedule_keys, serial_estimate_s
    from sim.runs.processes import AUTO_MIN_S, auto_workers

    assert auto_workers(100, AUTO_MIN_S / 3, cores=2) == 1  # too little work: never slower
    assert auto_workers(100, 60.0, cores=2) == 2
    assert auto_workers(3, 60.0, cores=16) == 3  # one process per point at most
    assert auto_workers(1, 60.0, cores=16) == 1
    assert auto_workers(100, 60.0, cores=1) == 1
    base = load_scenario("qwen35-mtp3")

    def estimate(sweep: SweepSpec) -> float:
        todo = [(p, list(sweep.policies)) for p in sweep.points()]
        return serial_estimate_s(todo, schedule_keys(base, todo), sweep.steps, sweep.engine)

    # The README's sweep (2 schedules x 300 steps, 2 policies, 12 point-policies; 1.6 s end
    # to end, imports included) runs serially; 16 schedules x 10,000 steps does not.
    readme = replace(spec("3000000,6000000,9000000"), steps=300)
    assert estimate(readme) < AUTO_MIN_S
    assert estimate(SweepSpec("qwen35-mtp3", ("synced-gather",), (), 625, 16, 10_000)) > 30
    # A schedule and its policies' calls are what a point costs first: twice the seeds, about
    # twice the estimate; the SimPy tier costs more than the vector tier for the same points.
    two = estimate(replace(readme, seeds=4))
    assert 1.9 < two / estimate(readme) < 2.1
    assert estimate(replace(readme, engine="simpy")) > 1.5 * estimate(readme)


def test_work_units_cut_a_schedules_points_only_as_far_as_the_workers_need() -> None:
    """Every unit builds its schedule: with as many schedules as workers, one unit each;
    with fewer, each schedule's points over enough units to keep every worker busy."""
    from sim.explore.sweep import CHUNK_POINTS, chunks, schedule_key, schedule_keys

    base = load_scenario("qwen35-mtp3")
    swarm = SweepSpec("qwen35-mtp3", ("align",), (), 40, 8, 40)  # 8 schedules (seeds)
    todo = [(p, ["align"]) for p in swarm.points()]
    units = chunks(base, todo, parts=8)
    assert len(units) == 8 and all(len({p["seed"] for p, _ in u}) == 1 for u in units)
    assert sorted(len(u) for u in units) == [40] * 8
    assert len(chunks(base, todo, parts=16)) == 16  # 2 per schedule
    one = [(p, ["align"]) for p in SweepSpec("qwen35-mtp3", ("align",), (), 40, 1, 40).points()]
    assert [len(u) for u in chunks(base, one, parts=4)] == [10] * 4
    big = [({"set": {"swarm": i}, "seed": 0}, ["align"]) for i in range(CHUNK_POINTS + 1)]
    assert [len(u) for u in chunks(base, big, parts=1)] == [CHUNK_POINTS, 1]
    # The keys, computed once per non-timing setting, are each point's own.
    vary = parse_vary(["timing.gpu_forward_ns_base=3000000,6000000",
                       "engine.max_num_batched_tokens=300,8192"])  # fmt: skip
    grid = [(p, ["align"]) for p in SweepSpec("qwen35-mtp3", ("align",), vary, 0, 2, 40).points()]
    from sim.explore.sweep import _scenario_for

    assert schedule_keys(base, grid) == [
        schedule_key(_scenario_for(base, p["set"]), p["seed"]) for p, _ in grid
    ]
    assert len(set(schedule_keys(base, grid))) == 4  # 2 budgets x 2 seeds


def test_a_sweep_of_one_file_per_point_resumes_and_extends(tmp_path: Path) -> None:
    """Sweeps written before unit files hold one ``<id>.json`` per point-policy: they are read
    as finished points, and a sweep extended over them is the same bytes as one run anew."""
    import json as json_mod

    from sim.explore.sweep_points import unit_lines

    old = tmp_path / "old"
    run_sweep(small("3000000"), old, log=lambda m: None)
    for unit in (old / "points").glob("*.jsonl"):  # rewrite as the older layout
        for _n, pid, row in unit_lines(unit):
            (old / "points" / f"{pid}.json").write_text(
                json_mod.dumps(row, sort_keys=True, indent=1)
            )
        unit.unlink()
    log: list[str] = []
    run_sweep(small(), old, log=log.append)
    assert log[-1] == "ran 2 point-policies, 2 already done"
    run_sweep(small(), tmp_path / "new", log=lambda m: None)
    assert (old / "sweep.parquet").read_bytes() == (tmp_path / "new" / "sweep.parquet").read_bytes()


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda t: t.replace('"seed": 0', '"seed": 1', 1), "do not give its id"),
        (lambda t: t.replace('"reads": ', '"reads": -', 1), "not a count"),
        (lambda t: t[:-10], "not a point's line"),  # a line cut short
        (lambda t: t.replace('"id": "', '"id": "x', 1), "not a point id"),
    ],
)
def test_an_edited_unit_file_is_one_clear_error(tmp_path: Path, edit, needle: str) -> None:
    argv = [sys.executable, "-m", "sim", "sweep", "--policy", "align", "--steps", "30",
            "--vary", "timing.gpu_forward_ns_base=3000000,9000000", "--workers", "1",
            "--quiet", "--out", str(tmp_path / "s")]  # fmt: skip
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300))
    assert r.returncode == 0, r.stderr
    (unit,) = (tmp_path / "s" / "points").glob("*.jsonl")
    unit.write_text(edit(unit.read_text()))
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300))
    assert r.returncode == 2 and r.stderr.startswith("error: "), r.stderr
    assert needle in r.stderr and str(unit) in r.stderr and r.stderr.count("\n") == 1


def test_a_sweep_varies_booleans_and_lists_as_typed(tmp_path: Path) -> None:
    """A point's values reach the scenario as they are: they were text again on the way
    (``str(True)`` is ``True``, which is no TOML boolean), so varying async scheduling failed."""
    from sim.cli.guards import parse_sets
    from sim.explore.sweep import _scenario_for
    from sim.model.params import with_values

    base = load_scenario("minimal-race")
    assert _scenario_for(base, {"engine.async_scheduling": False}).engine.async_scheduling is False
    probs = with_values(base, {"workload.acceptance_probs": (0.5, 0.25, 0.125)})
    assert probs == with_values(base, parse_sets(["workload.acceptance_probs=[0.5, 0.25, 0.125]"]))
    with pytest.raises(SpecraceError, match="unknown key"):
        with_values(base, {"engine.asinc_scheduling": True})
    spec = SweepSpec(scenario="minimal-race", policies=("align",), steps=20, seeds=1, swarm=0,
                     vary=parse_vary(["engine.async_scheduling=true,false"]))  # fmt: skip
    rows = run_sweep(spec, tmp_path / "sw", log=lambda _line: None)
    assert len(rows) == 2
