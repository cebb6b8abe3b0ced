"""One verdict: sim.model.verdict against the hand-worked cases, and every caller held to it.

The callers that judge a step at a landing (the checker, the timeline, the hardware replay's
prediction, the vLLM agreement) must give the verdict's answer on the same inputs; the SimPy
tier is held to the same cases in tests/sim/model/test_simulate.py and the vector tier to the SimPy
tier in tests/sim/model/test_vector.py. A probe policy whose copy lands only in the private buffer
while its CPU reads the pinned one tells apart a caller that lands the copy where the policy says
from one that always lands it in the pinned buffer (the disagreement of issue #21).
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from gpu_check.replay import _verdicts
from gpu_check.vllm.agreement import predict_step
from policy_cases import CASES, Case, arrays
from sim.explore.check import _read as check_read
from sim.explore.check import evaluate, landings
from sim.explore.timeline import landing_outcomes, replay_buffer
from sim.model.policies import POLICIES, Policy
from sim.model.schedule import StepRecord
from sim.model.verdict import (
    KINDS,
    NOT_LANDED,
    HazardKind,
    at_landing,
    hazard_kind,
    kind_and_margin,
    kind_codes,
    landing_position,
    landing_positions,
    margins,
    seen_landing,
)

# A copy into the private buffer, read from the pinned one: only where the copy lands decides
# what it reads (no real vLLM path does this; it exists to catch a caller that ignores it).
PRIVATE_COPY_PINNED_READ = replace(
    POLICIES["synced-gather"], name="probe-private-copy", dma_into_private=True
)


def _steps(case: Case) -> tuple[StepRecord, StepRecord]:
    prior, dma, pp, pnd = arrays(case)
    n_prev, n = len(dma), len(pp)
    a = np.asarray
    prev = StepRecord(0, [], [], [], [], [], [f"p{i}" for i in range(n_prev)], a([1] * n_prev),
                      a([10] * n_prev), a([10] * n_prev), pnd, dma, np.zeros(n_prev, bool),
                      a([-1] * n_prev), a([], dtype=np.int64))  # fmt: skip
    cur = StepRecord(1, [], [], [], [], list(case.ops), [f"r{i}" for i in range(n)], a([1] * n),
                     a([10] * n), a([10] * n), a([0] * n), a([1] * n), np.zeros(n, bool), pp,
                     pnd)  # fmt: skip
    return prev, cur


def _callers(pol: Policy, case: Case, land: int) -> dict[str, tuple[int, int]]:
    """(CPU value, consumed value) of the case's request by every caller at one landing."""
    prior, dma, pp, pnd = arrays(case)
    prev, cur = _steps(case)
    row = case.row
    out = {}
    v = at_landing(pol, dma, cur, prior, prior, land)
    out["verdict"] = (int(v.cpu[row]), int(v.gpu[row]))
    state = (tuple(prior), tuple(prior))
    _buf, _priv, r = check_read(pol, state, case.ops, dma, pp, pnd, len(pp), land)
    i = list(r[0]).index(row)
    out["check"] = (int(r[3][i]), int(r[4][i]))
    o = evaluate(pol, state, case.ops, dma, pp, pnd, len(pp), land)
    assert (row in {w.row for w in o.wrong}) == (out["check"][1] != case.true)
    schedule = SimpleNamespace(steps=[prev, cur], async_scheduling=True, max_num_reqs=len(prior))
    write_ns = list(range(10, 10 * (len(case.ops) + 1), 10))
    read_ns = 10 * (len(case.ops) + 1)
    outcomes = landing_outcomes(schedule, pol, 1, row, prior, prior, write_ns, read_ns, 0, 999)
    by_pos = {oc.position: (oc.cpu_value, oc.gpu_value) for oc in outcomes}
    if land in by_pos:
        out["timeline"] = by_pos[land]
    if seen_landing(pol, land, len(case.ops)) == land:
        cpu, gpu = predict_step(pol, prev, cur, prior, land)
        out["agreement"] = (int(cpu[row]), int(gpu[row]))
    # The replay predicts the CPU read and judges what real memory returned: feed it the
    # verdict's CPU values as the observed ones.
    rows = _verdicts(schedule, 1, pol, prior, land, v.cpu)  # type: ignore[arg-type]
    mine = next(r for r in rows if r["row"] == row)
    out["replay"] = (mine["cpu_predicted"], mine["gpu_consumed"])
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_verdict_gives_the_hand_worked_outcomes(case: Case) -> None:
    prior, dma, _pp, _pnd = arrays(case)
    _prev, cur = _steps(case)
    for name, outcomes in case.expect.items():
        for land, expected in outcomes.items():
            v = at_landing(POLICIES[name], dma, cur, prior, prior, land)
            assert (int(v.cpu[case.row]), int(v.gpu[case.row])) == expected, (name, land)
            assert v.true[case.row] == case.true


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_caller_gives_the_verdict(case: Case) -> None:
    for name, outcomes in case.expect.items():
        for land, expected in outcomes.items():
            got = _callers(POLICIES[name], case, land)
            assert set(got.values()) == {expected}, (case.name, name, land, got)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_caller_lands_the_copy_where_the_policy_says(case: Case) -> None:
    """The probe's copy never reaches B, so at every landing it reads what the row ops alone
    left there: the same as a copy that has not landed."""
    pol = PRIVATE_COPY_PINNED_READ
    prior, dma, _pp, _pnd = arrays(case)
    _prev, cur = _steps(case)
    stale = at_landing(POLICIES["unsynced"], dma, cur, prior, prior, NOT_LANDED).cpu[case.row]
    for land in range(len(case.ops) + 1):
        got = _callers(pol, case, land)
        assert {cpu for cpu, _gpu in got.values()} == {int(stale)}, (case.name, land, got)


def test_the_timeline_buffer_has_no_copy_into_B_for_a_private_target() -> None:
    """replay_buffer rebuilds B from a trace: under a private target the D2H writes nothing."""
    import pandas as pd

    from sim.model.input_batch import RowOp

    rec = SimpleNamespace(accepted=np.array([3, 2]), ops=[RowOp("swap", 1, 0, "D")],
                          prev_positions=np.array([-1, -1]), num_reqs=2)  # fmt: skip
    schedule = SimpleNamespace(steps=[rec], max_num_reqs=2)
    trace = pd.DataFrame(
        [(5, 0, 0, "default_stream", "counts_d2h_land")],
        columns=["time_ns", "dur_ns", "step", "actor", "event"],
    )
    for pol, writers in ((POLICIES["align"], {"dma"}), (POLICIES["private-buffer"], set())):
        rep = replay_buffer(trace, schedule, pol)  # type: ignore[arg-type]
        assert set(rep.writes["writer"]) == writers, pol.name


def test_landing_positions_and_what_a_read_sees() -> None:
    un, sg, sbm = POLICIES["unsynced"], POLICIES["synced-gather"], POLICIES["sync-before-moves"]
    assert landing_positions(un, 2) == [2, 1, 0, NOT_LANDED]
    assert landing_positions(sg, 2) == [2, 1, 0]
    assert landing_positions(sbm, 2) == [0]
    assert landing_positions(un, 2, async_scheduling=False) == [0]
    assert [seen_landing(p, -1, 3) for p in (un, sg, sbm)] == [-1, 3, 0]
    ops = CASES[0].ops  # remove, add, swap
    # landings() merges positions only a remove apart (0 and 1 here): 4 + not landed = 5
    assert sum(m for _p, m in landings(un, True, ops)) == 5
    assert [hazard_kind(ops, p) for p in (-1, 0, 1, 2, 3)] == [
        HazardKind.UNLANDED, *[HazardKind.DOUBLE_PERMUTE] * 2, *[HazardKind.OWNERSHIP] * 2
    ]  # fmt: skip


def test_kind_and_margin_from_times_on_one_step_and_over_points() -> None:
    writes = [100, 200]  # the writing ops' stores
    cases = [  # land, read -> kind, margin
        (50, 300, HazardKind.DOUBLE_PERMUTE, 50),
        (100, 300, HazardKind.DOUBLE_PERMUTE, 0),  # a tie: the copy lands before the op
        (150, 300, HazardKind.OWNERSHIP, 50),
        (350, 300, HazardKind.UNLANDED, 50),
        (-1, 300, HazardKind.UNLANDED, -1),
    ]
    for land, read, kind, margin in cases:
        assert kind_and_margin(land, read, writes) == (kind, margin)
    land = np.array([c[0] for c in cases])
    read = np.array([c[1] for c in cases])
    w = [np.full(len(cases), t) for t in writes]
    codes, unlanded = kind_codes(land, read, w)
    assert [KINDS[c] for c in codes] == [c[2].value for c in cases]
    assert margins(land, read, w, unlanded).tolist() == [c[3] for c in cases]
    assert [landing_position(a, b, writes) for a, b, *_ in cases] == [0, 0, 1, -1, -1]
    assert KINDS == ("", "unlanded", "ownership", "double-permute")


def test_one_close_call_threshold_for_the_replay_and_vllm() -> None:
    """Strictly within 100 µs, in whole ns: vLLM's agreement and export and the replay's
    close_calls all ask sim.model.verdict (they once disagreed at exactly 100 µs)."""
    import pandas as pd

    from sim.model.verdict import CLOSE_CALL_NS, is_close_call

    margins = [-1, 0, CLOSE_CALL_NS - 1, CLOSE_CALL_NS, CLOSE_CALL_NS + 1]
    expected = [False, True, True, False, False]
    assert [bool(is_close_call(m)) for m in margins] == expected
    assert is_close_call(pd.Series(margins)).tolist() == expected


def test_consumed_wrong_is_the_one_judgement_of_a_measured_read() -> None:
    """align's family is scored on the CPU value of every read, the others on the GPU value of
    the rows that consume (gpu_check.vllm.agreement and export_v2 both ask this)."""
    from sim.model.policies import POLICIES
    from sim.model.verdict import consumed_wrong

    cpu, gpu, true = np.array([4, 1, 2]), np.array([1, 3, 2]), np.array([1, 1, 2])
    consumed = np.array([True, False, True])
    assert consumed_wrong(POLICIES["align"], cpu, gpu, true, consumed).tolist() == [
        True, False, False]  # fmt: skip
    assert consumed_wrong(POLICIES["synced-gather"], cpu, gpu, true, consumed).tolist() == [
        False, False, False]  # fmt: skip
    assert consumed_wrong(POLICIES["mrv2"], cpu, gpu, true, ~consumed).tolist() == [
        False, True, False]  # fmt: skip
