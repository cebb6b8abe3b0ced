"""EngineRun.fork: a run resumed from a copy of another's state is the run from step 0."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from sim.model.params import load_scenario
from sim.model.scheduler_rules import _ARRAYS, ReqStates
from sim.model.scheduling import EngineRun
from sim.model.workload import draw_workload


def _key(rec) -> dict:
    return rec.to_json()


def _records(eng, requests, steps, fork_at=None, later=()):
    run = EngineRun(eng, requests)
    out = []
    for s in range(steps):
        if s == fork_at:
            run = run.fork(eng, [*requests, *later])
        out.append(_key(run.step()))
    return out


def _scenario(variant: str):
    scn = load_scenario("qwen35-mtp3")
    eng = {
        "plain": scn.engine,
        "kv-limited": dataclasses.replace(scn.engine, kv_cache_capacity_tokens=60_000),
        "align": dataclasses.replace(scn.engine, mamba_cache_mode="align", mamba_block_size=64),
        "async-off": dataclasses.replace(scn.engine, async_scheduling=False),
    }[variant]
    return dataclasses.replace(scn, engine=eng)


SCENARIOS = ("plain", "kv-limited", "align", "async-off")


@settings(max_examples=25, deadline=None)
@given(name=hs.sampled_from(SCENARIOS), seed=hs.integers(0, 50), at=hs.integers(1, 30))
def test_a_fork_with_later_arrivals_added_is_the_whole_run(name, seed, at) -> None:
    """Requests that arrive at or after the fork's step, added only at the fork, give the
    records of the run that had them from the start; the parent run is not touched."""
    scn = _scenario(name)
    steps = 40
    requests = draw_workload(scn, seed, steps)
    whole = _records(scn.engine, requests, steps)
    early = [r for r in requests if r.arrival_step < at]
    late = [r for r in requests if r.arrival_step >= at]
    assert _records(scn.engine, early, steps, at, late) == whole
    parent = EngineRun(scn.engine, early)
    for _ in range(at):
        parent.step()
    child = parent.fork(scn.engine, [*early, *late])
    for _ in range(steps - at):
        child.step()
    alone = _records(scn.engine, early, steps)
    rest = [_key(parent.step()) for _ in range(steps - at)]
    assert rest == alone[at:]


def test_a_fork_takes_counts_of_steps_still_in_flight() -> None:
    """Accepted counts that grow at the fork reach the in-flight step that drew them as 1."""
    scn = load_scenario("qwen35-mtp3")
    requests = draw_workload(scn, 0, 30)
    bare = [dataclasses.replace(r, accepted=r.accepted[:0]) for r in requests]
    run = EngineRun(scn.engine, bare)
    recs = [run.step() for _ in range(3)]
    drafted = [rid for rid, d in zip(recs[-1].req_ids, recs[-1].drafts, strict=True) if d > 0]
    assert drafted
    # every drafted request has drawn exactly one count so far (its first speculative step)
    grown = [dataclasses.replace(r, accepted=r.accepted[:1]) if r.req_id in drafted else r
             for r in bare]  # fmt: skip
    forked = run.fork(scn.engine, grown)
    want = EngineRun(scn.engine, grown)
    for _ in range(3):
        want.step()
    assert [_key(forked.step()) for _ in range(6)] == [_key(want.step()) for _ in range(6)]


def test_a_fork_refuses_inputs_the_run_so_far_contradicts() -> None:
    scn = load_scenario("qwen35-mtp3")
    requests = draw_workload(scn, 0, 30)
    run = EngineRun(scn.engine, requests)
    for _ in range(5):
        run.step()
    with pytest.raises(ValueError, match="engine.max_num_seqs"):
        run.fork(dataclasses.replace(scn.engine, max_num_seqs=7))
    with pytest.raises(ValueError, match="changed more than its outcome"):
        run.fork(None, [dataclasses.replace(requests[0], prompt_len=999), *requests[1:]])
    with pytest.raises(ValueError, match="dropped"):
        run.fork(None, requests[:-1])
    late = dataclasses.replace(requests[-1], req_id="late", arrival_step=2)
    with pytest.raises(ValueError, match="arrives before the step reached"):
        run.fork(None, [*requests, late])


def test_every_state_array_is_copied_by_a_fork() -> None:
    """A field added to ReqStates without its name in the copy list would be shared."""
    scn = load_scenario("qwen35-mtp3")
    st = ReqStates(draw_workload(scn, 0, 10))
    arrays = {n for n, v in vars(st).items() if isinstance(v, np.ndarray)}
    assert arrays == set(_ARRAYS)
    cp = st.copy()
    assert all(getattr(cp, n) is not getattr(st, n) for n in (*_ARRAYS, "req_ids", "output_len"))
