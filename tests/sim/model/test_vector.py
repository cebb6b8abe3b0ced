"""The vector tier against the SimPy tier (the specification), read by read.

Hypothesis draws whole scenarios (engine, workload, seed) and several timing points each,
ties included (jitter off, round durations); for every policy, every read's verdict, CPU
value, GPU value, kind and margin, every step's landing, read, row-op and forward times,
and every summary must be identical. A planted difference in either tier must be caught.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.model.point_reads as point_reads
import sim.model.simulate as simulate_mod
from sim.errors import SpecraceError
from sim.explore.swarm import draw_timing
from sim.model.params import EngineParams, LengthParams, Scenario, TimingParams, load_scenario
from sim.model.policies import POLICIES, Policy
from sim.model.reads import READ_COLUMNS, build_reads, summarize
from sim.model.schedule import Schedule
from sim.model.scheduling import build_schedule
from sim.model.simulate import simulate
from sim.model.vector import READ_COLUMNS_POINTS, PointsResult, simulate_points

BASE = load_scenario("qwen35-mtp3")
MINIMAL = load_scenario("minimal-race")


def differences(
    schedule: Schedule, timings: list[TimingParams], policy: Policy, seed: int, res: PointsResult
) -> list[str]:
    """Everything in which ``res`` differs from the SimPy tier, point by point."""
    out: list[str] = []
    assert res.reads is not None and res.land_ns is not None
    for p, timing in enumerate(timings):
        model = simulate(schedule, timing, policy, seed, trace=False)
        tag = f"{policy.name} point {p}"
        for name, got in (
            ("land_ns", res.land_ns[:, p]),
            ("read_ns", res.read_ns[:, p]),
            ("forward_start_ns", res.forward_start_ns[:, p]),
            ("wait_ns", res.wait_ns[:, p]),
        ):
            want = np.array([getattr(t, name) for t in model.timing], dtype=np.int64)
            bad = np.flatnonzero(want != got)
            if bad.size:
                n = bad[0]
                out.append(f"{tag}: {name} of step {n}: simpy {want[n]}, vector {got[n]}")
        for n, t in enumerate(model.timing):
            if t.op_write_ns != res.op_write_ns[n][:, p].tolist():
                out.append(f"{tag}: row-op write times of step {n}")
        if int(res.sim_time_ns[p]) != model.env.now:
            out.append(f"{tag}: sim time simpy {model.env.now}, vector {res.sim_time_ns[p]}")
        want_reads = build_reads(schedule, model)
        got_reads = res.reads[res.reads.point == p].drop(columns="point").reset_index(drop=True)
        if len(want_reads) != len(got_reads):
            out.append(f"{tag}: {len(want_reads)} reads in simpy, {len(got_reads)} in vector")
        else:
            for col in READ_COLUMNS:
                a, b = want_reads[col].to_numpy(), got_reads[col].to_numpy()
                bad = np.flatnonzero(a != b)
                if bad.size:
                    i = bad[0]
                    out.append(f"{tag}: {col} of read {i}: simpy {a[i]!r}, vector {b[i]!r}")
        want_summary = summarize(want_reads, model, schedule)
        if want_summary != res.summaries[p]:
            out.append(f"{tag}: summary simpy {want_summary}, vector {res.summaries[p]}")
    return out


# -- scenarios ----------------------------------------------------------------------------
@st.composite
def scenarios(draw) -> tuple[Scenario, int, int]:
    k = draw(st.integers(0, 4))
    seqs = draw(st.sampled_from([2, 4, 8, 16, 32]))
    engine = EngineParams(
        max_num_seqs=seqs,
        max_num_batched_tokens=seqs * (1 + k) + draw(st.sampled_from([0, 16, 256, 4096])),
        num_speculative_tokens=k,
        async_scheduling=draw(st.booleans()),
        reorder_threshold_is_one=draw(st.booleans()),
        kv_cache_capacity_tokens=draw(st.sampled_from([0, 0, 400, 3000])),
    )
    workload = replace(
        BASE.workload,
        initial_requests=draw(st.integers(0, 2 * seqs)),
        arrival_rate_per_step=draw(st.floats(0.0, 3.0)),
        prompt_len=LengthParams("lognormal", draw(st.floats(4.0, 600.0)), 0.8, 1, 4096),
        output_len=LengthParams("lognormal", draw(st.floats(2.0, 80.0)), 0.6, 1, 1024),
        acceptance_probs=tuple(draw(st.floats(0.0, 1.0)) for _ in range(max(k, 1))),
        prefix_hit_prob=draw(st.sampled_from([0.0, 0.3])),
    )
    sc = replace(BASE, engine=engine, workload=workload)
    sc.check()
    return sc, draw(st.integers(0, 2**32)), draw(st.integers(2, 60))


@st.composite
def timing_points(draw, base: TimingParams) -> list[TimingParams]:
    points = []
    for _ in range(draw(st.integers(1, 4))):
        t = draw_timing(base, draw(st.integers(0, 10_000)))
        if draw(st.booleans()):  # vllm-forward's timing: slow phases, GPU jitter, prefill mode
            t = replace(
                t,
                worker_slow_prob=draw(st.sampled_from([0.0, 0.25, 1.0])),
                worker_slow_factor=draw(st.sampled_from([0.5, 1.0, 1.49])),
                worker_slow_persistence=draw(st.sampled_from([0.0, 0.6, 0.95])),
                gpu_jitter_frac=draw(st.sampled_from([-1.0, 0.0, 0.04])),
                worker_sample_tokens_ns_prefill=draw(st.sampled_from([0, 4_650_000])),
                worker_rpc_dispatch_ns_per_req=draw(st.sampled_from([0, 48_000])),
                worker_pre_add_ns=draw(st.sampled_from([0, 140_000])),
                worker_reorder_ns=draw(st.sampled_from([0, 130_000])),
                gpu_forward_ns_prefill=draw(st.sampled_from([0, 1_830_000])),
            )
        if draw(st.booleans()):  # ties: no jitter, round numbers, the landing on a row op
            step = draw(st.sampled_from([1_000, 10_000]))
            t = replace(
                t,
                jitter_frac=0.0,
                worker_add_ns=step * draw(st.integers(0, 4)),
                worker_swap_ns=step * draw(st.integers(0, 4)),
                worker_condense_move_ns=step * draw(st.integers(0, 4)),
                worker_remove_ns=step * draw(st.integers(0, 4)),
                worker_reorder_ns=step * draw(st.integers(0, 2)),
                dma_land_delay_ns=step * draw(st.integers(0, 6)),
                gpu_sample_ns=step * draw(st.integers(1, 20)),
                gpu_drafter_ns=step * draw(st.integers(0, 100)),
                worker_stall_prob=draw(st.sampled_from([0.0, 0.5, 1.0])),
            )
        points.append(t)
    return points


def check_all_policies(sc: Scenario, seed: int, steps: int, timings: list[TimingParams]) -> None:
    sched = build_schedule(sc, seed, steps)
    for policy in POLICIES.values():
        res = simulate_points(sched, timings, policy, seed)
        diffs = differences(sched, timings, policy, seed, res)
        assert not diffs, "\n".join(diffs[:10])
        # Counts without the table: the sparse path (only wrong CPU values) where it is exact
        # and cheaper, else dense; forced sparse wherever it is exact. Same summaries.
        for sparse_max in (point_reads.Accumulator.SPARSE_MAX, 1.0):
            saved, point_reads.Accumulator.SPARSE_MAX = (
                point_reads.Accumulator.SPARSE_MAX,
                sparse_max,
            )
            try:
                counts = simulate_points(sched, timings, policy, seed, keep_reads=False)
            finally:
                point_reads.Accumulator.SPARSE_MAX = saved
            assert counts.summaries == res.summaries, (policy.name, sparse_max)
        if len(timings) > 1:  # a point alone runs on Python ints (the one-point path)
            alone = simulate_points(sched, timings[-1:], policy, seed)
            assert alone_differences(res, len(timings) - 1, alone) == [], policy.name


def alone_differences(res: PointsResult, p: int, alone: PointsResult) -> list[str]:
    """Where point ``p`` of a several-point result differs from the same point run alone."""
    out = []
    for name in ("land_ns", "read_ns", "forward_start_ns", "wait_ns"):
        if not np.array_equal(getattr(res, name)[:, p : p + 1], getattr(alone, name)):
            out.append(name)
    ops = [w[:, p : p + 1] for w in res.op_write_ns or []]
    if len(ops) != len(alone.op_write_ns or []) or not all(
        np.array_equal(a, b) for a, b in zip(ops, alone.op_write_ns or [], strict=True)
    ):
        out.append("op_write_ns")
    if res.summaries[p] != alone.summaries[0]:
        out.append("summary")
    if (
        res.sim_time_ns[p] != alone.sim_time_ns[0]
        or res.gpu_wrong_steps[p] != alone.gpu_wrong_steps[0]
    ):
        out.append("sim_time_ns / gpu_wrong_steps")
    if res.gpu_wrong_by_kind[p] != alone.gpu_wrong_by_kind[0]:
        out.append("gpu_wrong_by_kind")
    assert res.reads is not None and alone.reads is not None
    mine = res.reads[res.reads["point"] == p].drop(columns="point").reset_index(drop=True)
    if not mine.equals(alone.reads.drop(columns="point").reset_index(drop=True)):
        out.append("reads")
    return out


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(data=st.data())
def test_tiers_identical_on_random_scenarios(data) -> None:
    sc, seed, steps = data.draw(scenarios())
    check_all_policies(sc, seed, steps, data.draw(timing_points(sc.timing)))


@pytest.mark.slow
@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(data=st.data())
def test_tiers_identical_on_random_scenarios_long(data) -> None:
    sc, seed, steps = data.draw(scenarios())
    check_all_policies(sc, seed, steps, data.draw(timing_points(sc.timing)))


@pytest.mark.parametrize("delay_ns", [0, 9_000, 20_000, 29_000, 60_000])
def test_tiers_identical_on_minimal_race(delay_ns: int) -> None:
    """§9 by hand, jitter off: 20 us lands inside the race window, 9/29 us near its edges."""
    t = replace(MINIMAL.timing, dma_land_delay_ns=delay_ns)
    check_all_policies(MINIMAL, 0, MINIMAL.default_steps, [t, MINIMAL.timing])


@pytest.mark.parametrize(("slow_prob", "persistence"), [(0.0, 0.0), (0.3, 0.0), (0.3, 0.9)])
def test_tiers_identical_with_the_records_timing(slow_prob: float, persistence: float) -> None:
    """The parameters vllm-forward calibrates from vLLM's records: slow host phases (drawn
    step by step, or clustered), the GPU's own jitter, sample_tokens' prefill mode, the GPU's
    prefill step; two points that differ in all of them."""
    t = replace(
        BASE.timing, worker_slow_prob=slow_prob, worker_slow_factor=1.49, gpu_jitter_frac=0.04,
        worker_slow_persistence=persistence,
        worker_sample_tokens_ns_prefill=4_650_000, jitter_frac=0.06,
        worker_rpc_dispatch_ns_per_req=48_000, worker_pre_add_ns=140_000,
        worker_reorder_ns=130_000, gpu_forward_ns_prefill=1_830_000,
    )  # fmt: skip
    other = replace(t, worker_slow_prob=0.5, worker_slow_factor=0.8, gpu_jitter_frac=-1.0,
                    worker_slow_persistence=0.5 if persistence else 0.0,
                    worker_rpc_dispatch_ns_per_req=0, worker_reorder_ns=0,
                    gpu_forward_ns_prefill=0)  # fmt: skip
    check_all_policies(BASE, 3, 80, [t, other])


def test_tiers_identical_on_qwen35_default_and_swarm() -> None:
    timings = [BASE.timing] + [draw_timing(BASE.timing, s) for s in range(3)]
    check_all_policies(BASE, 3, 120, timings)


# -- the comparison catches a planted difference -------------------------------------------
@pytest.fixture(scope="module")
def planted():
    sched = build_schedule(MINIMAL, 0, MINIMAL.default_steps)
    timings = [MINIMAL.timing, replace(MINIMAL.timing, dma_land_delay_ns=60_000)]
    policy = POLICIES["synced-gather"]
    res = simulate_points(sched, timings, policy, 0)
    assert differences(sched, timings, policy, 0, res) == []
    return sched, timings, policy, res


@pytest.mark.parametrize("column", ["cpu_value", "gpu_value", "kind", "margin_ns", "cpu_wrong"])
def test_a_perturbed_vector_read_is_caught(planted, column) -> None:
    sched, timings, policy, res = planted
    bad = copy.deepcopy(res)
    i = int(np.flatnonzero(bad.reads.point == 1)[-1])
    old = bad.reads.loc[i, column]
    if column == "kind":
        new = "" if old else "unlanded"
    elif column == "cpu_wrong":
        new = not old
    else:
        new = old + 1
    bad.reads.loc[i, column] = new
    diffs = differences(sched, timings, policy, 0, bad)
    assert any(f"point 1: {column}" in d for d in diffs), diffs


def test_a_perturbed_vector_time_is_caught(planted) -> None:
    sched, timings, policy, res = planted
    for name in ("land_ns", "read_ns"):
        bad = copy.deepcopy(res)
        getattr(bad, name)[3, 0] += 1
        assert any(
            f"point 0: {name} of step 3" in d for d in differences(sched, timings, policy, 0, bad)
        )


def test_a_perturbed_simpy_tier_is_caught(planted, monkeypatch) -> None:
    sched, timings, policy, res = planted
    real = simulate_mod.Model._read_counts

    def off_by_one(self, step, rec, tim):  # the SimPy tier misreads row 0 at step 4
        real(self, step, rec, tim)
        if step == 4:
            tim.cpu_counts = tim.cpu_counts.copy()
            tim.cpu_counts[0] += 1

    monkeypatch.setattr(simulate_mod.Model, "_read_counts", off_by_one)
    assert any("cpu_value" in d for d in differences(sched, timings, policy, 0, res))
    monkeypatch.undo()
    real_jit = simulate_mod.Jitter.__call__

    def one_ns_longer(self, step, slot, mean_ns):  # every SimPy-tier duration 1 ns longer
        return real_jit(self, step, slot, mean_ns) + 1

    monkeypatch.setattr(simulate_mod.Jitter, "__call__", one_ns_longer)
    diffs = differences(sched, timings, policy, 0, res)
    assert any("land_ns" in d for d in diffs) and any("read_ns" in d for d in diffs)


# -- the vector tier's own contract --------------------------------------------------------
def test_columns_and_determinism() -> None:
    sched = build_schedule(BASE, 1, 60)
    timings = [draw_timing(BASE.timing, s) for s in range(3)]
    a = simulate_points(sched, timings, POLICIES["unsynced"], 1)
    b = simulate_points(sched, timings, POLICIES["unsynced"], 1)
    assert list(a.reads.columns) == list(READ_COLUMNS_POINTS)
    assert list(a.reads.columns[1:]) == list(READ_COLUMNS)
    pd.testing.assert_frame_equal(a.reads, b.reads)
    assert a.summaries == b.summaries
    c = simulate_points(sched, timings, POLICIES["unsynced"], 1, keep_reads=False)
    assert c.reads is None and c.summaries == a.summaries  # counts without the table


def test_bad_points_are_one_clear_error() -> None:
    sched = build_schedule(MINIMAL, 0, 4)
    pol = POLICIES["synced-gather"]
    with pytest.raises(SpecraceError, match="at least one"):
        simulate_points(sched, [], pol, 0)
    with pytest.raises(ValueError, match="jitter_frac"):  # refused when made (TimingParams)
        replace(MINIMAL.timing, jitter_frac=1.5)
    zero = replace(MINIMAL.timing, gpu_sample_ns=0, dma_land_delay_ns=0)
    with pytest.raises(SpecraceError, match="both jitter to 0"):
        simulate_points(sched, [zero], pol, 0)


# -- the streamed long run: same files, bounded state --------------------------------------
@pytest.mark.parametrize(
    "scenario,steps,batch", [(BASE, 90, 7), (MINIMAL, 8, 3), (MINIMAL, 1, 4096)]
)
def test_streamed_run_writes_what_a_full_run_writes(tmp_path, scenario, steps, batch) -> None:
    import pyarrow.parquet as pq

    from sim.model import schedule as schedule_mod
    from sim.runs.run import run_policy, run_streaming

    policy = POLICIES["synced-gather"]
    summary = run_streaming(tmp_path, scenario, policy, 2, steps, batch_steps=batch)
    sched = build_schedule(scenario, 2, steps)
    assert (tmp_path / "schedule.json").read_text() == schedule_mod.dumps(sched)
    full = run_policy(sched, scenario, policy, 2, trace=False)
    assert summary == full.summary
    got = pd.read_parquet(tmp_path / "reads.parquet")
    pd.testing.assert_frame_equal(got, full.reads)
    groups = pq.ParquetFile(tmp_path / "reads.parquet").num_row_groups
    assert groups == max(1, -(-(steps - 1) // batch)) or len(got) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "meta.json",
        "reads.parquet",
        "schedule.json",
    ]


@pytest.mark.parametrize("n_points", [1, 3])
def test_streamed_reads_tables_are_the_kept_reads(n_points) -> None:
    """The Arrow tables a streamed run gets (built without pandas) hold the kept table's rows,
    columns and values, batch by batch."""
    import pyarrow as pa

    sched = build_schedule(BASE, 3, 90)
    timings = [draw_timing(BASE.timing, s) for s in range(n_points)]
    pol = POLICIES["unsynced"]
    kept = simulate_points(sched, timings, pol, 3).reads
    got: list[pa.Table] = []
    simulate_points(sched, timings, pol, 3, keep_reads=False, on_reads=got.append, batch_steps=7)
    assert len(got) > 1 and all(t.schema == point_reads.ARROW_READS_POINTS for t in got)
    assert all(t.column("point").to_numpy().tolist() == sorted(t.column("point").to_numpy())
               for t in got)  # fmt: skip
    df = pa.concat_tables(got).to_pandas().astype(READ_COLUMNS_POINTS)
    df = df.sort_values("point", kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(df, kept)


def test_streamed_reads_file_has_the_schema_of_a_full_runs(tmp_path) -> None:
    import pyarrow.parquet as pq

    from sim.runs.run import run_policy, run_streaming, write_parquet

    policy = POLICIES["synced-gather"]
    run_streaming(tmp_path / "s", BASE, policy, 2, 40, batch_steps=16)
    full = run_policy(build_schedule(BASE, 2, 40), BASE, policy, 2, trace=False)
    write_parquet(tmp_path / "full.parquet", full.reads)
    streamed = pq.ParquetFile(tmp_path / "s" / "reads.parquet").schema_arrow
    assert streamed.equals(
        pq.ParquetFile(tmp_path / "full.parquet").schema_arrow, check_metadata=True
    )


def test_sparse_nonzero_is_numpys_in_the_same_order() -> None:
    from sim.model.point_reads import _nonzero_2d

    rng = np.random.default_rng(3)
    for shape, density in (((64, 1000), 0.001), ((7, 9), 0.05), ((64, 1000), 0.3), ((3, 8), 0)):
        mask = rng.random(shape) < density
        got, want = _nonzero_2d(mask), np.nonzero(mask)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


def test_timing_is_checked_when_made_for_both_tiers() -> None:
    """One check, TimingParams.check, at construction: the Python API cannot hand either tier
    a timing the command line refuses (gpu_jitter_frac=5.0 once ran in both)."""
    for bad in ({"gpu_jitter_frac": 5.0}, {"jitter_frac": 1.0}, {"dma_land_delay_ns": -1}):
        with pytest.raises(ValueError, match="timing."):
            TimingParams(**bad)
