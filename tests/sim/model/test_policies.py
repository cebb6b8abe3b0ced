"""Every policy's three answers, table-driven from hand-derived cases (tests/policy_cases.py)."""

from __future__ import annotations

import numpy as np
import pytest

from policy_cases import CASES, Case, arrays
from sim.model.counts_buffer import apply_step
from sim.model.policies import POLICIES, SYNC_SCHEDULING, WaitPoint


def outcome(case: Case, name: str, land: int) -> tuple[int, int]:
    """The CPU value and the consumed value of the request under test, landing at ``land``."""
    policy = POLICIES[name]
    prior, dma, pp, pnd = arrays(case)
    buf = apply_step(prior, case.ops, dma if land >= 0 else None, max(land, 0))
    private = prior.copy()
    if land >= 0:
        private[: len(dma)] = dma
    cpu = policy.cpu_read(buf, private, pp, len(pp))
    rows = np.flatnonzero(pp >= 0)
    consumed = policy.gpu_consumed(cpu[rows], dma[pp[rows]], pnd[pp[rows]] > 0)
    return int(cpu[case.row]), int(consumed[list(rows).index(case.row)])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_policy_has_its_outcomes_written_down(case: Case) -> None:
    assert set(case.expect) == set(POLICIES)


@pytest.mark.parametrize(
    ("case", "name", "land"),
    [(c, n, land) for c in CASES for n in c.expect for land in c.expect[n]],
    ids=lambda v: v.name if isinstance(v, Case) else str(v),
)
def test_cpu_and_consumed_value_by_landing(case: Case, name: str, land: int) -> None:
    assert outcome(case, name, land) == case.expect[name][land]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_landings_listed_are_those_the_wait_allows(case: Case) -> None:
    every = set(range(-1, len(case.ops) + 1))
    for name, outcomes in case.expect.items():
        policy = POLICIES[name]
        if policy.wait is WaitPoint.BEFORE_MOVES:
            assert set(outcomes) == {0}, name
        elif policy.waits:
            assert set(outcomes) == every - {-1}, name
        else:
            assert set(outcomes) == every, name


def test_gather_writes_back_and_the_others_leave_the_buffer() -> None:
    for name, policy in POLICIES.items():
        buf = np.array([7, 9, 5], dtype=np.int64)
        got = policy.cpu_read(buf, np.array([3, 8, 5]), np.array([1, -1]), 2)
        if policy.build.__name__ == "gather_write_back":
            assert buf.tolist() == [9, 1, 5] and got.tolist() == [9, 1], name
        elif policy.build.__name__ == "gather_private_write_back":
            # #13865 gathers its own buffer ([3, 8, 5]) and writes the result into B.
            assert buf.tolist() == [8, 1, 5] and got.tolist() == [8, 1], name
        else:
            assert buf.tolist() == [7, 9, 5], name


def test_ascend_13865_fills_one_without_a_previous_mapping() -> None:
    # _sync_num_accepted_tokens: an all-new async batch gets 1, not the buffer's values.
    got = POLICIES["ascend-13865"].cpu_read(
        np.array([2, 3]), np.array([2, 3]), np.array([-1, -1]), 2
    )
    assert got.tolist() == [1, 1]


def test_mrv2_consumes_the_truth_whatever_the_buffers_hold() -> None:
    """By construction: MRv2 reads no CPU buffer and consumes each request's own slot, so no
    buffer content, row operation or landing can make it wrong."""
    policy = POLICIES["mrv2"]
    assert not policy.reads_buffer and not policy.waits
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        buf = rng.integers(-1, 9, size=n + 4)
        private = rng.integers(-1, 9, size=n + 4)
        before = (buf.copy(), private.copy())
        pp = rng.integers(-1, n, size=n)
        cpu = policy.cpu_read(buf, private, pp, n)
        true = rng.integers(1, 5, size=n)
        consumed = policy.gpu_consumed(cpu, true, rng.random(n) < 0.5)
        assert (consumed == true).all()
        assert not policy.cpu_wrong(cpu, true).any()
        assert (buf == before[0]).all() and (private == before[1]).all()


def test_empty_prev_map_takes_values_directly() -> None:
    # vLLM's branch for an empty prev_req_id_to_index: no row is gathered.
    for name in ("synced-gather", "private-buffer"):
        got = POLICIES[name].cpu_read(np.array([2, 3]), np.array([2, 3]), np.array([-1, -1]), 2)
        assert got.tolist() == [2, 3], name


def test_fill_one_is_not_a_read_and_cannot_be_wrong() -> None:
    policy = POLICIES["device-authoritative"]
    assert not policy.reads_buffer
    assert not policy.cpu_wrong(np.array([1, 1]), np.array([4, 1])).any()
    assert POLICIES["align"].cpu_wrong(np.array([1, 1]), np.array([4, 1])).tolist() == [True, False]


def test_sync_scheduling_reads_directly_after_the_landing() -> None:
    assert SYNC_SCHEDULING.waits_before_read and SYNC_SCHEDULING.read_mode == "direct"


def test_select_names_policies_as_every_command_takes_them() -> None:
    from sim.errors import SpecraceError
    from sim.model.policies import ALL, NO_SPEC, POLICIES, SYNC_SCHEDULING, named, select

    assert select(ALL) == tuple(POLICIES.values())
    assert select(ALL, async_off=True) == (*POLICIES.values(), SYNC_SCHEDULING)
    assert [p.name for p in select("align,unsynced")] == ["align", "unsynced"]
    assert select("async-off", async_off=True) == (SYNC_SCHEDULING,)
    assert named("async-off") is SYNC_SCHEDULING
    for bad, kw in (("async-off", {}), ("nope", {}), ("align,unsynced", {"many": False}),
                    (NO_SPEC, {"async_off": True})):  # fmt: skip
        with pytest.raises(SpecraceError, match="unknown policy"):
            select(bad, **kw)
    with pytest.raises(SpecraceError, match="appears twice"):
        select("align,align")
