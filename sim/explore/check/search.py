"""The bounded check's search: the tree of schedules, frontiers of buffer states, results."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from sim.explore.check.space import BIG, BIG_BUDGET, Req, Root, Space, _Run, _run, req_name
from sim.explore.check.step import (
    Outcome,
    State,
    Wrong,
    all_counts,
    evaluate,
    landings,
    symbolic_masks,
)
from sim.explore.check.tasks import Leaf, Part, Task
from sim.model.policies import ALL, SYNC_SCHEDULING, Policy, named, select
from sim.model.schedule import StepRecord
from sim.model.verdict import hazard_kind

# -- the search -------------------------------------------------------------------------------


@dataclass
class Counterexample:
    policy: str
    kind: str
    root: Root
    reqs: tuple[Req, ...]
    cap: int
    records: list[StepRecord]
    landings: list[int]  # per step 1..n (index 0: step 1)
    wrong: tuple[Wrong, ...]
    key: tuple
    prior: State | None = None  # the buffers before the failing step

    @property
    def step(self) -> int:
        return len(self.records) - 1


@dataclass
class PolicyResult:
    name: str
    vllm: str
    interleavings: int = 0  # complete interleavings without a wrong consumed count
    failing: dict[str, int] = field(default_factory=dict)  # kind -> failing interleavings
    repaired: int = 0  # CPU-wrong reads the correction kernel repaired
    minimal: dict[str, Counterexample] = field(default_factory=dict)
    symbolic: bool = True  # last step's counts evaluated symbolically (a pure copy policy)

    @property
    def safe(self) -> bool:
        return not self.failing


@dataclass
class CheckResult:
    space: Space
    schedules: dict[bool, int]  # async on/off -> distinct complete schedules
    nodes: int  # search-tree nodes (schedule prefixes) visited
    runs: int  # build_schedule calls
    evaluations: int  # distinct (policy, step transition, state, landing) evaluations
    policies: dict[str, PolicyResult]


class Checker:
    def __init__(
        self,
        space: Space,
        policies: list[Policy],
        concrete: set[str] | None = None,
        verify_resume: bool = False,
    ) -> None:
        space.check()
        self.space = space
        self.policies = policies
        self.async_policies = [p for p in policies if p is not SYNC_SCHEDULING]
        self.sync = SYNC_SCHEDULING in policies
        self.memo: dict[tuple, Outcome] = {}
        # Policies whose read is not a pure copy of counts (found by the symbolic check's
        # verification): their last step is evaluated on every count tuple concretely.
        self.concrete = concrete or set()
        self.count_memo: dict[tuple, np.ndarray] = {}
        self.results = {
            p.name: PolicyResult(p.name, p.vllm, symbolic=p.name not in self.concrete)
            for p in policies
        }
        self.leaf_keys: dict[bool, set] = {True: set(), False: set()}
        # Seen so far: leaves (schedules of every step) and prefixes. In the merging checker
        # every one of the search; in an explorer, those of the subtrees it explored.
        self.leaf_keys_seen: set = set()
        self.prefix_seen: set = set()
        self.evaluated: set = set()  # memo keys of the subtrees' steps, once each (merging)
        self.shipped: dict[tuple, tuple] = {}  # last steps' aggregates from explorers (merging)
        self.nodes = 0
        self.runs = 0
        self.evaluations = 0
        self._cache: dict = {}
        # Also run every resumed run from step 0 and compare (tests/sim/explore/test_check.py).
        self.verify_resume = verify_resume
        self.verified = 0
        # An explorer (a checker that explores subtrees for a merging one) fills a Part.
        self.part: Part | None = None
        self.tasks: list[Task] = []

    # -- tree ------------------------------------------------------------------------------
    def roots(self) -> Iterator[Root]:
        t = 1 + self.space.k
        families = ([True] if self.async_policies else []) + ([False] if self.sync else [])
        for async_ in families:
            for thr1 in (False, True):
                for eos in (False, True) if async_ else (False,):
                    yield Root(async_, thr1, self.space.max_rows * t, "plain", eos)

    def run(self, workers: int = 1) -> CheckResult:
        """The search. Step 0 of every root is explored here; each of its children is a task
        whose subtree an explorer explores (this process, or ``workers`` processes), with the
        aggregates of its last steps. The parts are merged here in the tasks' order, each leaf
        counted if no earlier one had its schedule: the counts, the evaluations and the
        counterexamples are those of one search in that order, whichever process explored
        what."""
        self.tasks = []
        for root in self.roots():
            pols = self._policies(root)
            init = (tuple([1] * self.space.max_rows), tuple([1] * self.space.max_rows))
            frontiers: dict[str, dict[tuple, list]] = {p.name: {init: [1, [], None]} for p in pols}
            self._expand(root, pols, (), (1, BIG), [], frontiers, [], 0, None)
        tasks, self.tasks = self.tasks, []
        if workers <= 1:
            explorer = self.explorer()
            parts: Generator[Part, None, None] = (explorer.explore(t) for t in tasks)
        else:
            parts = explore_in_processes(self, tasks, workers)
        with contextlib.closing(parts):  # an error here: the tasks not begun are dropped
            for part in parts:
                self._merge(part)
        return CheckResult(
            self.space,
            {a: len(k) for a, k in self.leaf_keys.items()},
            self.nodes,
            self.runs,
            self.evaluations,
            self.results,
        )

    def _classes(self, root: Root, s: int) -> tuple[str, ...]:
        """At the last step a chunked prompt is a whole one that takes the rest of the budget
        (no later arrival is admitted; its discarded row is never read): the same schedule key."""
        classes = self.space.classes if root.async_scheduling else self.space.sync_classes
        if s == self.space.steps - 1 and "p" in classes:
            return tuple(c for c in classes if c != "L")
        return classes

    def _lag(self, root: Root) -> int:
        return 2 if root.async_scheduling else 1

    def _run(self, root, reqs, cap, steps, parent: _Run | None) -> _Run:
        """Steps 0..steps-1 of ``reqs``; ``parent``: the run of the prefix (steps 0..steps-2)
        whose last step this one resumes from (None at step 0)."""
        self.runs += 1
        if len(self._cache) > 200_000:
            self._cache.clear()
        run = _run(self.space, root, reqs, cap, steps, self._cache, parent)
        if self.verify_resume and parent is not None:
            whole = _run(self.space, root, reqs, cap, steps)
            if (run.record.to_json(), run.out_logs, run.cap_log) != (
                whole.record.to_json(), whole.out_logs, whole.cap_log,
            ):  # fmt: skip
                raise AssertionError(f"resumed run differs from the whole run: {root} {reqs}")
            self.verified += 1
        return run

    def _expand(
        self, root, pols, reqs, cap_iv, records, frontiers, out_lens, cap_len, parent
    ) -> None:
        """Children of the prefix ``records`` (steps 0..s-1, run as ``parent``): every choice
        for step s."""
        s = len(records)
        self.nodes += 1
        # 1. finishes: requests whose output is compared at step s
        base = self._run(root, reqs, cap_iv[1], s + 1, parent)
        out_lens = list(out_lens) + [0] * (len(reqs) - len(out_lens))
        # Each value compared at s above every earlier one is an output length that keeps the
        # earlier comparisons false: finish at its processing, or (async) the scheduler's
        # "sure to reach max_tokens" skip (scheduler_rules.sure_to_finish) one step before.
        cands = []
        for i in range(len(reqs)):
            log = base.out_logs[i]
            if reqs[i].output_len is None and len(log) > out_lens[i]:
                seen = max(log[: out_lens[i]], default=-1)
                cands.append((i, sorted({v for v in log[out_lens[i] :] if v > seen})))
        for pick in itertools.product(*((None, *vals) for _, vals in cands)):
            r1 = list(reqs)
            for (i, _), g in zip(cands, pick, strict=True):
                if g is not None:
                    r1[i] = replace(r1[i], output_len=g)
            mask = [g is not None for g in pick]
            r1t = tuple(r1)
            new_out = [len(x) for x in base.out_logs]
            # 2. preemption: split the capacity interval by the sums compared at step s
            lo, hi = cap_iv
            while hi >= lo:
                run = (
                    base
                    if (not any(mask) and hi == cap_iv[1])
                    else self._run(root, r1t, hi, s + 1, parent)
                )
                at_s = run.cap_log[cap_len:]
                stop = [v for v in at_s if v <= hi]
                cls_lo = max(lo, max(stop)) if stop else lo  # every sum <= hi compared
                preempting = any(v > hi for v in at_s)
                args = (pols, r1t, (cls_lo, hi), records, frontiers, new_out, cap_len, parent)
                if preempting and root.mode == "plain":
                    # a preemption fixes the budget (its recompute may exceed 1 + k tokens):
                    # the small budget's child, and the unlimited one's (same comparisons)
                    self._arrivals(replace(root, mode="fixed"), *args, run, preempting)
                    big = replace(root, budget=BIG_BUDGET, mode="fixed")
                    big_run = self._run(big, r1t, hi, s + 1, parent)
                    self._arrivals(big, *args, big_run, preempting)
                else:
                    self._arrivals(root, *args, run, preempting)
                hi = cls_lo - 1

    def _arrivals(
        self, root, pols, reqs, cap_iv, records, frontiers, out_lens, cap_len, parent, run,
        preempting,
    ):  # fmt: skip
        """3. admitted arrival sequences at step s (the empty one first). A chunked arrival
        in a plain subtree fixes the budget: both budgets' runs are followed from there.
        Admitting an arrival compares its blocks with the KV capacity (vLLM's allocate_slots
        for a waiting request), so each arrival sequence splits the capacity class again by
        the sums its own run compares at step s; ``cap_len`` (the comparisons before step s)
        is the same for all of them, and each child counts its own run's comparisons."""
        s = len(records)
        stack = [(reqs, run, root, cap_iv)]
        while stack:
            cur, cur_run, sub, iv = stack.pop()
            self._accepted(
                sub, pols, cur, iv, records, frontiers, out_lens, len(cur_run.cap_log), cur_run
            )
            rec = cur_run.record
            # The scheduler admits only with budget left and a free row (scheduling.py
            # _schedule_step): skip the runs that cannot admit anyone. A preemption at this
            # step blocks admission too.
            if (
                preempting
                or rec.num_reqs >= self.space.max_rows
                or int(rec.num_scheduled.sum()) >= sub.budget
            ):
                continue
            for cls in reversed(self._classes(sub, s)):
                nxt = (*cur, Req(cls, s))
                forks = [sub]
                if cls == "L" and sub.mode == "plain":
                    forks = [replace(sub, mode="fixed"),
                             replace(sub, budget=BIG_BUDGET, mode="fixed")]  # fmt: skip
                for f in forks:
                    lo, hi = iv
                    while hi >= lo:
                        r = self._run(f, nxt, hi, s + 1, parent)
                        stop = [v for v in r.cap_log[cap_len:] if v <= hi]
                        cls_lo = max(lo, max(stop)) if stop else lo
                        if req_name(len(nxt) - 1) in r.record.new:
                            stack.append((nxt, r, f, (cls_lo, hi)))
                        hi = cls_lo - 1

    def _accepted(self, root, pols, reqs, cap_iv, records, frontiers, out_lens, cap_len, run):
        """4. accepted counts of step s's drafted rows, while they can change the schedule."""
        s = len(records)
        rec = run.record
        drafted = [i for i in range(rec.num_reqs) if rec.drafts[i] > 0]
        affects = s + self._lag(root) < self.space.steps
        out = [len(x) for x in run.out_logs]  # comparisons up to step s
        if not drafted or not affects:
            self._child(root, pols, reqs, cap_iv, records, rec, frontiers, out, cap_len, run)
            return
        index = {req_name(i): i for i in range(len(reqs))}
        bounds = [int(1 + rec.drafts[i]) for i in drafted]
        if root.async_scheduling:
            choices = itertools.product(*(range(1, b + 1) for b in bounds))
        else:
            # Async off: the read is direct after the copy landed, right whatever the counts
            # (each row carries its own); counts only shape the schedule, and finishes and
            # preemptions are branched by their recorded values whatever the count: all accepted.
            choices = iter([tuple(bounds)])
        for vals in choices:
            r1 = list(reqs)
            acc = rec.accepted.copy()
            for row, v in zip(drafted, vals, strict=True):
                j = index[rec.req_ids[row]]
                r1[j] = replace(r1[j], accepted=(*r1[j].accepted, v))
                acc[row] = v
            child = replace(rec, accepted=acc)
            self._child(root, pols, tuple(r1), cap_iv, records, child, frontiers, out, cap_len, run)

    def _child(self, root, pols, reqs, cap_iv, records, rec, frontiers, out_lens, cap_len, run):
        s = len(records)
        new_records = [*records, rec]
        key = (root.async_scheduling, schedule_key(new_records))
        if s == self.space.steps - 1:
            # A leaf: its last step's aggregates are evaluated here (_ship) and counted by the
            # merge, in order (_leaf). The same schedule (up to names) reached on another
            # branch explored here is left out already.
            if key not in self.leaf_keys_seen:
                self.leaf_keys_seen.add(key)
                assert self.part is not None
                free = s >= 1 and (s - 1) + self._lag(root) >= self.space.steps
                trans = self._transition(root, records[s - 1], rec, free, True)
                leaf = Leaf(key, root, reqs, cap_iv, new_records, frontiers, free, trans)
                self.part.leaves.append(leaf)
                self._ship(leaf)
            return
        # The same prefix reached by other choices has the same interleavings: count them once.
        count = key not in self.prefix_seen
        self.prefix_seen.add(key)
        trans = None if s == 0 else self._transition(root, records[s - 1], rec, False, False)
        new_frontiers = {}
        for pol in pols:
            new_frontiers[pol.name], _ok, repaired, failing = self._step(
                pol, root, reqs, cap_iv, new_records, frontiers[pol.name], False, False, trans
            )
            if count and (repaired or failing):
                if self.part is not None:
                    self.part.counted.append((key, pol.name, repaired, failing))
                else:
                    self._count(pol.name, repaired, failing)
        args = (reqs, cap_iv, new_records, new_frontiers, out_lens, cap_len, run)
        if s == 0 and self.part is None:
            self.tasks.append(Task(root, *args))  # the subtree: explored by an explorer
            return
        self._expand(root, pols, *args)

    def _transition(self, root, prev, rec, free, last) -> tuple:
        """A step transition, once for every policy (memo key)."""
        return (
            root.async_scheduling,
            tuple((op.kind, op.a, op.b) for op in rec.ops),
            rec.prev_positions.tobytes(),
            rec.prev_num_draft_tokens.tobytes(),
            rec.num_reqs,
            prev.drafts.tobytes() if free else prev.accepted.tobytes(),
            free,
            last,
        )

    def _count(self, name: str, repaired: int, failing: dict[str, int]) -> None:
        res = self.results[name]
        res.repaired += repaired
        for kind, m in failing.items():
            res.failing[kind] = res.failing.get(kind, 0) + m

    # -- explorers and the merge -----------------------------------------------------------
    def explorer(self) -> Checker:
        """A checker that explores this one's tasks in their order (``explore``)."""
        new = type(self)(self.space, self.policies, self.concrete, self.verify_resume)
        new.part = Part()
        return new

    def explore(self, task: Task) -> Part:
        """The subtree of one task: its runs and nodes, its steps evaluated, its last step's
        schedules kept for the merge to count. Tasks must come in the order of the search
        (what this explorer has seen is then a subset of what the merge has seen)."""
        assert self.part is not None
        self.part = part = Part()
        runs, nodes, verified = self.runs, self.nodes, self.verified
        self._expand(*task.args(self._policies(task.root)))
        part.runs, part.nodes = self.runs - runs, self.nodes - nodes
        part.verified = self.verified - verified
        return part

    def _merge(self, part: Part) -> None:
        """One task's part, in the order of the search."""
        for key, agg, n in part.shipped:
            if key not in self.memo and key not in self.shipped:
                self.shipped[key] = (agg, n)
        self.runs += part.runs
        self.nodes += part.nodes
        self.verified += part.verified
        for key, n in part.evaluated:
            if key not in self.evaluated:
                self.evaluated.add(key)
                self.evaluations += n
        fresh = set()  # prefixes first seen in this part (each policy's share is an entry)
        for key, name, repaired, failing in part.counted:
            if key not in self.prefix_seen:
                self.prefix_seen.add(key)
                fresh.add(key)
            if key in fresh:
                self._count(name, repaired, failing)
        for name, cx in part.offers:
            self._offer(name, cx)
        for leaf in part.leaves:
            self._leaf(leaf)

    def _policies(self, root: Root) -> list[Policy]:
        return self.async_policies if root.async_scheduling else [SYNC_SCHEDULING]

    def _ship(self, leaf: Leaf) -> None:
        """An explorer's share of a leaf's evaluation: the aggregate of every (policy, buffer
        state) of its last step that this explorer has not evaluated yet, for the merge's
        memo (the merge counts and uses only those its new leaves look up)."""
        assert self.part is not None
        free, trans = leaf.free, leaf.trans
        s = len(leaf.records) - 1
        cur, prev = leaf.records[s], leaf.records[s - 1]
        for pol in self._policies(leaf.root):
            for state in leaf.frontiers[pol.name]:
                key = ((pol.name, trans), state)
                if key in self.memo:
                    continue
                before = self.evaluations
                try:
                    agg: _Agg | None = self._aggregate(pol, leaf.root, state, cur, prev, free, True)
                except _NotSymbolic:  # the merge raises it if a new leaf needs this one
                    agg = None
                self.memo[key] = agg  # type: ignore[assignment]
                self.part.shipped.append((key, agg, self.evaluations - before))

    def _leaf(self, leaf: Leaf) -> None:
        """The last step of a schedule not seen before: every policy's interleavings."""
        key, root, reqs, cap_iv, records = leaf.key, leaf.root, leaf.reqs, leaf.cap_iv, leaf.records
        if key in self.leaf_keys_seen:
            return  # the same schedule (up to names) was checked on another branch
        self.leaf_keys_seen.add(key)
        self.leaf_keys[root.async_scheduling].add(key)
        free, trans, pols = leaf.free, leaf.trans, self._policies(root)
        for pol in pols:
            _out, ok, repaired, failing = self._step(
                pol, root, reqs, cap_iv, records, leaf.frontiers[pol.name], free, True, trans
            )
            self._count(pol.name, repaired, failing)
            self.results[pol.name].interleavings += ok

    # -- evaluation ------------------------------------------------------------------------
    def _step(self, pol, root, reqs, cap_iv, records, frontier, free, last, trans):
        """Step s of every interleaving in ``frontier``: the new frontier (empty at the last
        step), the number of interleavings without a wrong consumed count, and the CPU-wrong
        reads repaired and the failing interleavings (per kind) it adds."""
        s = len(records) - 1
        cur = records[s]
        out: dict[State, list] = {}
        ok_total = 0
        repaired = 0
        failing: dict[str, int] = {}
        if s == 0:  # no copy in flight: the ops and the read only
            for state, (n, wit, cnt) in frontier.items():
                o = self._eval(pol, state, cur, None, 0)
                _merge(out, o.state, n, wit, cnt)
            return out, sum(v[0] for v in out.values()), 0, failing
        prev = records[s - 1]
        base_key = (pol.name, trans)
        for state, (n, wit, cnt) in frontier.items():
            key = (base_key, state)
            agg = self.memo.get(key)
            if agg is None:
                got = self.shipped.pop(key, None)
                if got is not None:  # evaluated by an explorer (_ship): counted here, once
                    if got[0] is None:
                        raise _NotSymbolic(pol.name)
                    agg = got[0]
                    self.evaluations += got[1]
                else:
                    before = self.evaluations
                    agg = self._aggregate(pol, root, state, cur, prev, free, last)
                    if self.part is not None:  # counted once by the merge, whoever evaluated it
                        self.part.evaluated.append((key, self.evaluations - before))
                self.memo[key] = agg
            ok_total += n * agg.ok
            repaired += n * agg.repaired
            for kind, m in agg.failing.items():
                failing[kind] = failing.get(kind, 0) + n * m
            if agg.failing:
                for land, counts, o in agg.first_fail.values():
                    self._counterexample(
                        pol, o, root, reqs, cap_iv, records, [*wit, land],
                        counts if free else None, state,
                    )  # fmt: skip
            for st, mult, land, counts in agg.states:
                _merge(out, st, n * mult, [*wit, land], counts if free else cnt)
        return out, ok_total, repaired, failing

    def _aggregate(self, pol, root, state, cur, prev, free, last) -> _Agg:
        """Every count tuple and landing of one step transition from one buffer state."""
        agg = _Agg()
        lands = landings(pol, root.async_scheduling, cur.ops)
        if free:  # counts read at the last step only: every tuple at once, symbolically
            assert last
            bounds = tuple(int(1 + d) for d in prev.drafts)
            if bounds not in self.count_memo:
                self.count_memo[bounds] = all_counts(bounds)
            counts = self.count_memo[bounds]
            if pol.name not in self.concrete:
                for land, mult in lands:
                    self._symbolic(pol, state, cur, prev, counts, land, mult, agg)
                return agg
            choices = [tuple(int(x) for x in row) for row in counts[::-1]]  # largest first
        else:
            choices = [tuple(int(x) for x in prev.accepted)]
        for c in choices:
            self._concrete(pol, state, cur, c, lands, last, agg)
        return agg

    def _concrete(self, pol, state, cur, counts, lands, last, agg) -> None:
        dma = np.asarray(counts, dtype=np.int64)
        for land, mult in lands:
            o = self._eval(pol, state, cur, dma, land)
            self.evaluations += 1
            agg.repaired += o.repaired * mult
            if o.state is None:
                agg.failing[o.kind] = agg.failing.get(o.kind, 0) + mult
                agg.first_fail.setdefault(o.kind, (land, counts, o))
            else:
                agg.ok += mult
                if not last:
                    agg.states.append((o.state, mult, land, counts))

    def _symbolic(self, pol, state, cur, prev, counts, land, mult, agg) -> None:
        fail, repaired, _ = symbolic_masks(
            pol, state, cur.ops, prev.num_reqs, cur.prev_positions, cur.prev_num_draft_tokens,
            cur.num_reqs, land, counts,
        )  # fmt: skip
        self.evaluations += 1
        # Verified on concrete counts: the largest tuple once per transition and state, and the
        # largest failing one (the witness) the first time a kind fails.
        idx = np.flatnonzero(fail)
        kind = hazard_kind(cur.ops, land).value
        checks = set()
        if not agg.verified:
            checks.add(len(counts) - 1)
            agg.verified = True
        if idx.size and kind not in agg.first_fail:
            checks.add(int(idx[-1]))
        witness = None
        for j in sorted(checks):
            c = tuple(int(x) for x in counts[j])
            o = self._eval(pol, state, cur, np.asarray(c, dtype=np.int64), land)
            self.evaluations += 1
            if (o.state is None) != bool(fail[j]) or o.repaired != int(repaired[j]):
                raise _NotSymbolic(pol.name)
            if o.state is None:
                witness = (land, c, o)
        n_fail = int(fail.sum())
        agg.repaired += int(repaired.sum()) * mult
        agg.ok += (len(counts) - n_fail) * mult
        if n_fail:
            agg.failing[kind] = agg.failing.get(kind, 0) + n_fail * mult
            if kind not in agg.first_fail:
                agg.first_fail[kind] = witness

    def _eval(self, pol, state, cur, dma, land) -> Outcome:
        return evaluate(
            pol,
            state,
            cur.ops,
            dma,
            cur.prev_positions,
            cur.prev_num_draft_tokens,
            cur.num_reqs,
            land,
        )

    def _counterexample(self, pol, o, root, reqs, cap_iv, records, wit, free_counts, prior) -> None:
        rows = max(r.num_reqs for r in records)
        ops = sum(len(r.ops) for r in records)
        odd = sum(1 for i, x in enumerate(wit) if x != len(records[i + 1].ops))
        plain = sum(1 for r in reqs if r.cls != "p")  # then the plainest prompts
        cheap = (rows, len(records), ops, len(reqs), plain, odd)
        best = self.results[pol.name].minimal.get(o.kind)
        if best is not None and best.key[:6] < cheap:
            return
        key = (*cheap, repr((root, reqs, wit, free_counts)))
        if best is not None and best.key <= key:
            return
        recs = list(records)
        r1 = list(reqs)
        if free_counts is not None:  # the evaluator chose step n-1's counts: script them
            prev = recs[-2]
            recs[-2] = replace(prev, accepted=np.asarray(free_counts, dtype=np.int64))
            index = {req_name(i): i for i in range(len(reqs))}
            for row, v in enumerate(free_counts):
                if prev.drafts[row] > 0:
                    j = index[prev.req_ids[row]]
                    r1[j] = replace(r1[j], accepted=(*r1[j].accepted, int(v)))
        cx = Counterexample(
            pol.name, o.kind, root, tuple(r1), cap_iv[1], recs, list(wit), o.wrong, key, prior
        )
        self.results[pol.name].minimal[o.kind] = cx
        if self.part is not None:
            self.part.offers.append((pol.name, cx))

    def _offer(self, name: str, cx: Counterexample) -> None:
        """An explorer's counterexample: kept if smaller than every one before it (the rule
        of _counterexample; the first of equal ones stays)."""
        best = self.results[name].minimal.get(cx.kind)
        if best is None or cx.key < best.key:
            self.results[name].minimal[cx.kind] = cx


# The explorer of a worker process, kept from task to task (the pool hands each worker its
# tasks in the search's order).
_EXPLORERS: dict[tuple, Checker] = {}


def _explore_unit(unit: tuple) -> Part:
    space, names, concrete, verify, task = unit
    key = (space, tuple(names), concrete, verify)
    explorer = _EXPLORERS.get(key)
    if explorer is None:
        _EXPLORERS.clear()
        pols = [named(n) for n in names]
        explorer = _EXPLORERS[key] = Checker(space, pols, set(concrete), verify).explorer()
    return explorer.explore(task)


def explore_in_processes(
    checker: Checker, tasks: list[Task], workers: int
) -> Generator[Part, None, None]:
    names = [p.name for p in checker.policies]
    concrete = tuple(sorted(checker.concrete))
    units = [(checker.space, names, concrete, checker.verify_resume, t) for t in tasks]
    from sim.runs.processes import iter_units

    return iter_units(_explore_unit, units, workers, preload=["sim.explore.check"])


@dataclass
class _Agg:
    ok: int = 0
    repaired: int = 0
    failing: dict[str, int] = field(default_factory=dict)
    first_fail: dict[str, tuple] = field(default_factory=dict)
    states: list[tuple] = field(default_factory=list)
    verified: bool = False


def _merge(out: dict, state: State, n: int, wit: list, cnt) -> None:
    cur = out.get(state)
    if cur is None:
        out[state] = [n, wit, cnt]
    else:
        cur[0] += n


def schedule_key(records: list[StepRecord]) -> tuple:
    """What the verdicts depend on, and nothing else: per step the row ops (kind, rows), the
    layout's size, prev_positions, prev_num_draft_tokens, drafts and counts. Request names are
    left out (symmetry: who is who changes no read), and so are finish-or-unscheduled (both a
    remove) and a discarded row (it shows in the next step's prev_positions)."""
    return tuple(
        (
            tuple((op.kind, op.a, op.b) for op in rec.ops),
            rec.num_reqs,
            rec.prev_positions.tobytes(),
            rec.prev_num_draft_tokens.tobytes(),
            rec.drafts.tobytes(),
            rec.accepted.tobytes(),
        )
        for rec in records
    )


def check(space: Space, policy_names: list[str], workers: int = 1) -> CheckResult:
    """Run the bounded-exhaustive check for the named policies (``async-off`` included), its
    subtrees explored on ``workers`` processes (the same result on any number)."""
    pols = [named(name) for name in policy_names]
    concrete: set[str] = set()
    while True:
        try:
            return Checker(space, pols, concrete).run(workers)
        except _NotSymbolic as e:  # computes with counts: every tuple concretely, from scratch
            concrete.add(e.policy)


class _NotSymbolic(Exception):
    def __init__(self, policy: str) -> None:
        super().__init__(policy)
        self.policy = policy


def all_policy_names() -> list[str]:
    return [p.name for p in select(ALL, async_off=True)]
