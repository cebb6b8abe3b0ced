"""Invariants of the per-read verdict over swarm-drawn timing (Hypothesis picks the seeds)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.explore.swarm import draw_timing
from sim.model.params import load_scenario
from sim.model.policies import POLICIES, corrected
from sim.model.reads import build_reads
from sim.model.scheduling import build_schedule
from sim.model.simulate import simulate

BASE = load_scenario("qwen35-mtp3")


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_verdicts_are_consistent_with_the_mechanism(seed: int) -> None:
    sc = replace(BASE, timing=draw_timing(BASE.timing, seed))
    sched = build_schedule(sc, seed, 150)
    for name, policy in POLICIES.items():
        model = simulate(sched, sc.timing, policy, seed, trace=False)
        reads = build_reads(sched, model)
        kinds = set(reads.loc[reads.cpu_wrong | reads.gpu_wrong, "kind"])
        if policy.waits:  # a policy that waits never reads an unlanded count
            assert "unlanded" not in kinds, name
        if policy.consume is corrected:  # the §3 kernel repairs every drafted row
            assert not (reads.gpu_wrong & (reads.prev_drafts > 0)).any(), name
        else:  # align-like consumption: the GPU takes what the CPU read
            assert (reads.gpu_wrong == reads.cpu_wrong).all(), name
        assert not (reads.prompt_state_lost & ~reads.gpu_wrong).any()
        assert not (reads.prompt_state_lost & (reads.prev_drafts > 0)).any()
        assert (reads.gdn_slot == reads.gpu_value - 1).all()
        for step, g in reads[reads.kind != ""].groupby("step"):
            tim, land = model.timing[step], model.timing[step - 1].land_ns
            writes = [t for t, w in zip(tim.op_write_ns, tim.op_is_write, strict=True) if w]
            kind = g.kind.iloc[0]
            if kind == "unlanded":
                assert land > tim.read_ns
            elif kind == "ownership":
                assert writes and min(writes) < land <= tim.read_ns
            else:
                assert not writes or land <= min(writes)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_fixed_policies_and_sync_never_consume_a_wrong_count(seed: int) -> None:
    sc = replace(BASE, timing=draw_timing(BASE.timing, seed))
    sched = build_schedule(sc, seed, 150)
    for name in ("device-authoritative", "private-buffer", "sync-before-moves"):
        reads = build_reads(sched, simulate(sched, sc.timing, POLICIES[name], seed, trace=False))
        assert not reads.gpu_wrong.any(), name
    sync = replace(sc, engine=replace(sc.engine, async_scheduling=False))
    sched = build_schedule(sync, seed, 150)
    reads = build_reads(
        sched, simulate(sched, sync.timing, POLICIES["unsynced"], seed, trace=False)
    )
    assert not (reads.gpu_wrong | reads.cpu_wrong).any()
    assert np.all(reads.cpu_value == reads.true_count)
