"""``sim check``: the fixes are safe for every interleaving of small batches, the races have
the minimal counterexamples the reference describes, and every counterexample reproduces in
the SimPy model (timing chosen for its landing) and in the CPU replay (scripted landing)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from repo_root import ROOT

from gpu_check.replay import ReplayConfig, ScriptedCounts, replay
from sim.cli.main import main
from sim.explore import check as check_mod
from sim.explore.check import (
    Checker,
    RecordingLimits,
    Space,
    all_policy_names,
    check,
    result_json,
    scenario_for,
    schedule_key,
    story,
)
from sim.explore.shrink import deterministic, model_landing, read_of, realize
from sim.model.params import TimingParams
from sim.model.policies import POLICIES, SYNC_SCHEDULING, Policy, named
from sim.model.scheduling import build_schedule

FIXED = ("device-authoritative", "private-buffer", "sync-before-moves", "async-off")
DOCUMENTED_SAFE = (*FIXED, "mrv2", "ascend-13865")  # README's "safe for every interleaving"


@pytest.fixture(scope="module")
def small():
    """Every policy at 2 rows, 3 steps, k = 3 (well under a second)."""
    return check(Space(2, 3, 3), all_policy_names())


@pytest.fixture(scope="module")
def unlanded():
    """The unsynced path needs a fourth step for a stale count other than 1."""
    return check(Space(1, 4, 3), ["unsynced"])


def test_the_checks_limits_record_what_the_scheduler_asks() -> None:
    """The scheduler asks its limits (sim.model.limits); the check's answer as plain
    comparisons do and records each value asked of an undecided length and of the capacity."""
    out_logs: list[list[int] | None] = [[], None]
    cap_log: list[int] = []
    lim = RecordingLimits(out_logs, cap_log)
    got = lim.reached(np.array([0, 1, 0]), np.array([7, 3, 2]), np.array([5, 5, 5]))
    assert got.tolist() == [True, False, False]
    assert out_logs == [[7, 2], None]  # request 1's length is decided: nothing to record
    assert lim.exceeds(9, 5) is True and lim.exceeds(5, 5) is False
    assert cap_log == [9, 5]


def test_fixed_policies_are_safe_for_every_interleaving(small) -> None:
    for name in FIXED:
        p = small.policies[name]
        assert p.safe, (name, p.failing)
        assert p.interleavings > 50  # something was checked
    assert small.schedules[True] > 50 and small.schedules[False] > 50


def test_racy_policies_fail(small) -> None:
    for name in ("unsynced", "synced-gather", "align"):
        assert not small.policies[name].safe, name


def _race_shape(cx) -> None:
    """docs/mechanism.md §9: F finishes in row j, Q is added into j, the copy lands, R (first
    spec step) is swapped from i to j and reads F's count."""
    rec = cx.records[-1]
    kinds = [op.kind for op in rec.ops]
    land = cx.landings[-1]
    assert kinds[:land].count("add") == 1 and "swap" in kinds[land:]
    (w,) = cx.wrong
    assert w.true == 1 and w.cpu == w.gpu > 1
    assert any(op.kind == "remove" and op.req_id in rec.finished for op in rec.ops[:land])


def test_minimal_race_is_two_rows_for_synced_gather_and_align(small) -> None:
    for name in ("synced-gather", "align"):
        cx = small.policies[name].minimal["ownership"]
        # 2 rows; the copy of step 1 lands among step 2's ops (3 engine steps: 0 prefill,
        # 1 F decodes and R prefills, 2 the race).
        assert cx.key[:2] == (2, 3), (name, cx.key)
    cx = small.policies["synced-gather"].minimal["ownership"]
    _race_shape(cx)
    text = story(cx)
    assert "finishes in row 0" in text and "is swapped from row 1 to 0" in text
    assert "'s 4 instead of 1" in text
    assert set(small.policies["synced-gather"].failing) == {"ownership"}


def test_align_also_double_permutes(small) -> None:
    cx = small.policies["align"].minimal["double-permute"]
    assert cx.landings[-1] == 0 and cx.key[:2] == (2, 3)
    (w,) = cx.wrong
    assert w.cpu != w.true and w.gpu == w.cpu  # align consumes the CPU value


def test_unsynced_unlanded(unlanded) -> None:
    res = unlanded.policies["unsynced"]
    cx = res.minimal["unlanded"]
    assert cx.landings[-1] == -1 and cx.key[0] == 1
    assert "has not landed at the read" in story(cx)


def _counterexamples(*results):
    """(space, counterexample) pairs: a counterexample's scenario needs its own space."""
    for res in results:
        for p in res.policies.values():
            for cx in p.minimal.values():
                yield res.space, cx


def _policy(name: str) -> Policy:
    return POLICIES.get(name, SYNC_SCHEDULING)


def test_every_counterexample_reproduces_in_simpy(small, unlanded) -> None:
    seen = 0
    for space, cx in _counterexamples(small, unlanded):
        scn = scenario_for(space, cx.root, cx.reqs, cx.cap, len(cx.records))
        sched = build_schedule(scn, 0, len(cx.records))
        assert schedule_key(sched.steps) == schedule_key(cx.records)  # the script is the schedule
        (w,) = cx.wrong[:1]
        req = cx.records[-1].req_ids[w.row]

        def shows(m, cx=cx, sched=sched, req=req, w=w):
            r = read_of(m, sched, cx.step, req)
            return (
                r is not None
                and r["cpu_value"] == w.cpu
                and bool(r["gpu_wrong"])
                and (r["kind"] == cx.kind)
            )

        found = realize(sched, _policy(cx.policy), cx.step, cx.landings[-1],
                        deterministic(TimingParams()), shows)  # fmt: skip
        assert found is not None, (cx.policy, cx.kind, story(cx))
        assert model_landing(found[1], cx.step) == cx.landings[-1]
        seen += 1
    assert seen >= 4


class _PriorCounts(ScriptedCounts):
    """ScriptedCounts whose buffers start as the counterexample's (``prior_buffer`` assumes a
    right gather at step n-1; vLLM's empty-``prev_req_id_to_index`` branch can leave a count)."""

    def __init__(self, max_num_reqs, land_before, prior) -> None:
        super().__init__(max_num_reqs, land_before)
        self._prior = prior

    def reset(self, prior, step) -> None:
        super().reset(prior, step)
        self.buf[:] = self._prior[0][: len(self.buf)]
        self.private[:] = self._prior[1][: len(self.private)]


def test_every_counterexample_reproduces_in_the_cpu_replay(small, unlanded) -> None:
    for space, cx in _counterexamples(small, unlanded):
        scn = scenario_for(space, cx.root, cx.reqs, cx.cap, len(cx.records))
        sched = build_schedule(scn, 0, len(cx.records))
        dev = _PriorCounts(sched.max_num_reqs, [cx.landings[-1]], cx.prior)
        df = replay(sched, _policy(cx.policy), dev, ReplayConfig(TimingParams()), steps=[cx.step])
        for w in cx.wrong:
            row = df[df["row"] == w.row].iloc[0]
            assert row["cpu_observed"] == w.cpu and row["gpu_wrong"], (cx.policy, cx.kind)
            assert row["land_pos"] == cx.landings[-1]


def test_new_policies_are_covered_without_edits(monkeypatch) -> None:
    """A policy added to POLICIES is checked like the others (no name is special)."""
    clone = replace(POLICIES["synced-gather"], name="clone-of-synced-gather")
    monkeypatch.setitem(POLICIES, clone.name, clone)
    res = check(Space(2, 3, 3), [clone.name, "synced-gather"])
    a, b = res.policies[clone.name], res.policies["synced-gather"]
    assert a.failing == b.failing and a.interleavings == b.interleavings
    assert clone.name in all_policy_names()


def test_a_policy_that_computes_with_counts_is_checked_concretely(monkeypatch) -> None:
    """The symbolic last step is checked against concrete counts: a policy that is not a pure
    copy (here: off by one for counts above 2) is caught and evaluated on every count tuple,
    not silently mis-scored."""

    def odd(buf, private, pp, n):
        out = buf[:n].astype(np.int64)
        return np.where(out > 2, out - 1, out)

    pol = replace(POLICIES["sync-before-moves"], name="odd", build=odd)
    monkeypatch.setitem(POLICIES, "odd", pol)
    monkeypatch.setitem(check_mod.__dict__, "POLICIES", POLICIES)
    res = check(Space(2, 3, 3), ["odd", "sync-before-moves"])
    odd, fixed = res.policies["odd"], res.policies["sync-before-moves"]
    assert not odd.symbolic and fixed.symbolic
    assert not odd.safe and fixed.safe
    # same interleavings, concretely counted
    assert odd.interleavings + sum(odd.failing.values()) == fixed.interleavings
    (cx,) = odd.minimal.values()
    assert all(w.true > 2 and w.cpu == w.true - 1 for w in cx.wrong)


def test_result_is_deterministic() -> None:
    a = json.dumps(result_json(check(Space(2, 3, 2), ["align"])), sort_keys=True)
    b = json.dumps(result_json(check(Space(2, 3, 2), ["align"])), sort_keys=True)
    assert a == b


def test_cli_check_runs_in_seconds_and_proves_the_fixes(capsys, tmp_path) -> None:
    out = tmp_path / "c.json"
    assert main(["check", "--max-rows", "2", "--steps", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for name in FIXED:
        assert f"{name}: safe for all " in text
    assert "synced-gather: FAILS" in text and "minimal ownership: 2 rows, 3 steps" in text
    doc = json.loads(out.read_text())
    assert doc["policies"]["private-buffer"]["safe"] is True
    assert doc["policies"]["align"]["counterexamples"]["double-permute"]["landing"] == 0


def test_the_same_result_on_any_number_of_workers(tmp_path) -> None:
    """The subtrees explored on two processes and merged in order give the bytes of one
    search: counts, evaluations, and counterexamples, some found inside the explorers (3 steps
    of 4) and some in the merge (the last step's)."""
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}.json"
        assert main(["check", "--max-rows", "2", "--steps", "4", "--k", "1", "--classes", "p",
                     "--policy", "unsynced,align,synced-gather", "--workers", workers,
                     "--out", str(out)]) == 0  # fmt: skip
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    doc = json.loads(outs[0])
    found = [cx["steps"] for p in doc["policies"].values() for cx in p["counterexamples"].values()]
    assert sorted(set(found)) == [3, 4], found


def test_the_documented_safe_policies_are_the_readmes() -> None:
    flagged = [n for n in all_policy_names() if named(n).documented_safe]
    assert sorted(flagged) == sorted(DOCUMENTED_SAFE)


def test_a_documented_safe_policy_that_fails_exits_non_zero(monkeypatch, capsys) -> None:
    """A fix that the bounded check finds failing is an error, not a table row."""
    broken = replace(POLICIES["unsynced"], documented_safe=True)
    monkeypatch.setitem(POLICIES, "unsynced", broken)
    argv = ["check", "--max-rows", "1", "--steps", "4", "--policy", "unsynced", "--workers", "1"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "unsynced: FAILS" in captured.out
    assert "error: documented safe, but fails: unsynced" in captured.err


def test_the_json_counts_add_up(small, tmp_path) -> None:
    """Per policy: every interleaving, the passing ones and the failing ones per kind."""
    doc = result_json(small)
    for name, p in doc["policies"].items():
        assert p["interleavings"] == p["passing"] + sum(p["failing"].values()), name
        assert p["passing"] == small.policies[name].interleavings


def _reversed_moves(monkeypatch) -> None:
    """Condense's moves logged from destination to source: the rows and the log disagree."""
    from sim.model import input_batch as ib

    condense = ib.InputBatchRows.condense

    def planted(self) -> None:
        n = len(self.ops)
        condense(self)
        self.ops[n:] = [ib.RowOp("move", o.b, o.a, o.req_id) if o.kind == "move" else o
                        for o in self.ops[n:]]  # fmt: skip

    monkeypatch.setattr(ib.InputBatchRows, "condense", planted)


def _swap_out_of_range(monkeypatch) -> None:
    """swap_states one row past the batch: the model itself raises IndexError."""
    from sim.model import input_batch as ib

    swap = ib.InputBatchRows.swap_states
    monkeypatch.setattr(ib.InputBatchRows, "swap_states",
                        lambda self, i1, i2: swap(self, i1, len(self._req_ids)))  # fmt: skip


@pytest.mark.parametrize("plant", [_reversed_moves, _swap_out_of_range])
def test_a_broken_row_order_is_reported_not_crashed_on(monkeypatch, capsys, plant) -> None:
    plant(monkeypatch)
    argv = ["check", "--max-rows", "2", "--steps", "3", "--policy", "align", "--workers", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the model") and "not a verdict on a policy" in err, err
    assert "Traceback" not in err


def test_cli_bad_input(capsys) -> None:
    assert main(["check", "--max-rows", "0"]) == 2
    assert "error: --max-rows 0" in capsys.readouterr().err
    assert main(["check", "--policy", "nope"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
    assert main(["check", "--classes", "x"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("rows,steps,workers", [(4, 3, 2), (2, 4, 1)])
def test_committed_tables_regenerate(rows: int, steps: int, workers: int) -> None:
    """data/check/rR-sS-k3.json is what ``sim check --max-rows R --steps S --k 3`` gives, on
    one process or explored on two."""
    path = ROOT / "data" / "check" / f"r{rows}-s{steps}-k3.json"
    doc = json.loads(path.read_text())
    doc.pop("specrace_sha256")  # the committed file carries its proof (sim.runs.signature)
    res = check(Space(rows, steps, 3), all_policy_names(), workers)
    assert doc == json.loads(json.dumps(result_json(res)))


def test_evaluator_matches_the_hand_derived_policy_cases() -> None:
    """tests/policy_cases.py (worked out by hand from docs/mechanism.md) through the checker's
    evaluator: the CPU value and the consumed value per policy and landing."""
    from policy_cases import CASES, arrays
    from sim.explore.check import _read

    for case in CASES:
        prior, dma, pp, pnd = arrays(case)
        state = (tuple(int(x) for x in prior), tuple(int(x) for x in prior))
        for name, outcomes in case.expect.items():
            pol = POLICIES[name]
            seen = {p for p, _m in check_mod.landings(pol, True, case.ops)}
            for land, (cpu, gpu) in outcomes.items():
                _b, _p, r = _read(pol, state, case.ops, dma, pp, pnd, len(pp), land)
                rows, _src, _true, cpu_r, gpu_r, _cw = r
                i = list(rows).index(case.row)
                assert (int(cpu_r[i]), int(gpu_r[i])) == (cpu, gpu), (case.name, name, land)
            # every landing the table lists is one the checker visits (up to removes)
            for land in outcomes:
                assert (
                    land in seen
                    or case.ops[land].kind == "remove"
                    or (land > 0 and case.ops[land - 1].kind == "remove")
                ), (case.name, name, land)


def test_counts_are_consistent_across_wait_points(small) -> None:
    """Policies with the same wait point see the same interleavings."""
    tot = {n: p.interleavings + sum(p.failing.values()) for n, p in small.policies.items()}
    assert tot["unsynced"] == tot["device-authoritative"]
    assert tot["synced-gather"] == tot["align"] == tot["private-buffer"]
    assert tot["sync-before-moves"] < tot["synced-gather"] < tot["unsynced"]


@pytest.mark.slow
def test_admission_splits_the_capacity_class() -> None:
    """An arrival's admission compares its blocks with the KV capacity: at 3 rows a capacity
    class that ignored those sums spliced records of two capacities into one counterexample
    (device-authoritative then "failed" on schedules no capacity gives). Every counterexample
    must be a schedule that a fresh ``build_schedule`` gives, and #45100's path is safe."""
    space = Space(3, 3, 3)
    res = check(space, ["device-authoritative", "synced-gather"])
    assert not res.policies["device-authoritative"].failing
    seen = 0
    for cx in res.policies["synced-gather"].minimal.values():
        scn = scenario_for(space, cx.root, cx.reqs, cx.cap, len(cx.records))
        sched = build_schedule(scn, 0, len(cx.records))
        assert schedule_key(sched.steps) == schedule_key(cx.records), story(cx)
        seen += 1
    assert seen >= 1


def test_every_resumed_run_is_the_run_from_step_0(small) -> None:
    """The search runs only each node's last step, from a fork of its parent's state
    (EngineRun.fork); verified, every one of those runs is also run from step 0 and must give
    the same record and the same probe logs, and the result is the unverified search's."""
    checker = Checker(Space(2, 3, 3), [named(n) for n in all_policy_names()], verify_resume=True)
    res = checker.run()
    assert checker.verified > 4000
    assert json.dumps(result_json(res), sort_keys=True) == json.dumps(
        result_json(small), sort_keys=True
    )


def test_every_leaf_is_a_schedule_of_every_capacity_in_its_class(monkeypatch) -> None:
    """The search's invariant: a leaf's records are what ``build_schedule`` gives for its
    decisions at every capacity of its class (both ends checked), so no leaf splices two
    capacities' schedules. At 2 rows this held for 138 leaves, where a class that ignored an
    admission's comparisons had 169, 31 of them schedules of no capacity."""
    from sim.explore.check import search

    seen: list[int] = [0, 0]
    child = search.Checker._child

    def checked(self, root, pols, reqs, cap_iv, records, rec, *rest):
        if len(records) == self.space.steps - 1:
            want = schedule_key([*records, rec])
            for cap in {cap_iv[0], cap_iv[1]}:
                scn = scenario_for(self.space, root, reqs, cap, len(records) + 1)
                got = schedule_key(build_schedule(scn, 0, len(records) + 1).steps)
                seen[0] += 1
                seen[1] += got != want
        return child(self, root, pols, reqs, cap_iv, records, rec, *rest)

    monkeypatch.setattr(search.Checker, "_child", checked)
    res = check(Space(2, 3, 3), ["device-authoritative"])
    assert res.schedules[True] > 50 and seen[0] > 100
    assert seen[1] == 0, f"{seen[1]} of {seen[0]} leaf/capacity pairs are not schedules"
