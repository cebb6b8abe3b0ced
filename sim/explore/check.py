"""Bounded-exhaustive check: every schedule of up to R rows and S steps, every landing.

The schedules are produced by the project's own scheduler and row model
(:func:`sim.model.scheduling.build_schedule` on a scripted workload, which drives
:class:`sim.model.input_batch.InputBatchRows`); nothing here re-implements a scheduling or
row decision. What the checker chooses is the *workload*, lazily, one engine step at a time,
and it asks the scheduler itself which choices matter (a stateless model checker's
re-execution): every step re-runs ``build_schedule`` for the steps so far.

Choices per step ``s`` (each one a branch of the search tree):

- **finishes**: a request whose output the engine core processes at ``s`` (step ``s - lag``'s,
  lag 2 under async scheduling: a finish is seen one step late) finishes or not. Its
  ``output_len`` is a probe (:class:`_Probe`) that records the ``generated`` value the
  scheduler compares it with; "finish" sets ``output_len`` to exactly that value.
- **preemption**: ``engine.kv_cache_capacity_tokens`` is a probe too; the sums the scheduler
  compares it with split the capacity interval into classes, one branch each (so every
  preemption/resume pattern a capacity can cause is visited once).
- **arrivals**: a sequence of new requests, each of a prompt class (:data:`CLASSES`: a whole
  prefill, a prefix hit that leaves one token, a prompt longer than the token budget that is
  chunked). Only admitted arrivals are branched: a request that arrives and waits is the same
  as one that arrives a step later first in line (FCFS, no row op while waiting).
- **accepted counts** (1..1+drafts) of every drafted row: branched in the tree while they can
  still change the schedule (step ``s + lag < S``; with async off, where every read is right
  by construction, only 1 + drafts), afterwards all ``prod(1 + drafts)`` tuples are evaluated
  at once on symbolic counts (:func:`symbolic_masks`: a read returns another row's count or a
  number), verified against a concrete run per transition.

Roots: reorder threshold ``1 + k`` and 1, async scheduling on (the policies of
:data:`sim.model.policies.POLICIES`) and off (:data:`SYNC_SCHEDULING`); the token budget
``R * (1 + k)`` (the smallest vLLM allows here: chunking and clipped drafts) forks into the
unlimited one at the first chunked prompt or preemption (:class:`Root`).

Reductions: request names and finish-or-unscheduled are not part of a schedule's key
(:func:`schedule_key`: symmetry), landings only a ``remove`` apart are one (:func:`landings`),
identical buffer states merge, and every (policy, step transition, state) is evaluated once.

For every step ``n >= 1`` of a schedule, every landing position of step ``n-1``'s copy among
step ``n``'s row operations (0..len(ops)) and "not landed at the read" (-1) is judged by
:func:`sim.model.verdict.at_landing`, the project's one verdict. The wait point prunes
landings (:func:`sim.model.verdict.landing_positions`): a policy that waits before the read
never sees -1, one that waits before the moves sees only 0, and with async scheduling off
the copy has landed before ``_update_states`` (0). A copy that has not landed
at the read lands right after it (before the next step's operations): later landings are not
explored. Buffer states are carried from step to step (a wrong read written back changes
later reads); identical states merge, with their path counts added.

A *counterexample* is an interleaving in which the GDN kernel consumes a wrong count
(``gpu_consumed != true``); its hazard kind is :func:`sim.model.verdict.hazard_kind`'s
(unlanded, landed after a writing op: ownership, before every writing op: double-permute).
CPU-wrong reads that the correction kernel repairs are counted apart. Per policy and kind the
smallest counterexample (fewest rows, then steps, then row operations) is kept and told as a
story.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sim.errors import SpecraceError
from sim.model.params import (
    EngineParams,
    Scenario,
    ScriptedRequest,
    TimingParams,
    WorkloadParams,
)
from sim.model.policies import ALL, SYNC_SCHEDULING, Policy, named, select
from sim.model.schedule import StepRecord
from sim.model.scheduling import build_schedule
from sim.model.verdict import Transition, at_landing, hazard_kind, landing_positions

BIG = 10**7  # "never": an output length or a KV capacity no run reaches (MAX_TOKENS)
# Prompt classes: (prompt_len, prefix_hit_tokens) as a function of the token budget.
CLASSES = ("p", "h", "L")
_CLASS_WORD = {"p": "whole prompt", "h": "prefix hit", "L": "chunked prompt"}


def class_prompt(cls: str, budget: int) -> tuple[int, int]:
    if cls == "p":
        return 2, 0
    if cls == "h":
        return 2, 1
    return budget + 2, 0


class _Probe(int):
    """An int the scheduler compares with; it records the other side of each comparison.

    ``generated >= output_len`` and ``need > capacity`` on a plain ``int`` left operand call
    the reflected method of this subclass first (Python's rule for subclasses), so the probe
    sees the value without any change to the scheduler.
    """

    log: list[int]

    def __new__(cls, value: int, log: list[int]) -> _Probe:
        obj = int.__new__(cls, value)
        obj.log = log
        return obj

    def __le__(self, other: object) -> bool:  # reflected ``other >= self``
        self.log.append(int(other))  # type: ignore[call-overload]
        return int(self) <= other  # type: ignore[operator]

    def __lt__(self, other: object) -> bool:  # reflected ``other > self``
        self.log.append(int(other))  # type: ignore[call-overload]
        return int(self) < other  # type: ignore[operator]

    def __deepcopy__(self, memo: dict) -> int:
        return int(self)

    def __reduce__(self):
        return (int, (int(self),))


# -- the search space -------------------------------------------------------------------------


@dataclass(frozen=True)
class Space:
    max_rows: int
    steps: int
    k: int
    classes: tuple[str, ...] = CLASSES
    # Async off reads right whatever the schedule (the copy landed before the moves and the
    # read is direct): its family is a check of that claim over whole prefills only, unless
    # asked for more (it is the larger tree: finishes are seen a step earlier).
    sync_classes: tuple[str, ...] = ("p",)

    def check(self) -> None:
        if not 1 <= self.max_rows <= 8:
            raise SpecraceError(f"--max-rows {self.max_rows}: must be in 1..8")
        if not 2 <= self.steps <= 8:
            raise SpecraceError(f"--steps {self.steps}: must be in 2..8 (a read needs 2 steps)")
        if not 1 <= self.k <= 7:
            raise SpecraceError(f"--k {self.k}: must be in 1..7")
        if (self.k + 1) ** self.max_rows > 1 << 20:
            raise SpecraceError(
                f"--k {self.k} --max-rows {self.max_rows}: (k+1)^rows count tuples is too many"
            )
        bad = [c for c in (*self.classes, *self.sync_classes) if c not in CLASSES]
        if bad or not self.classes or not self.sync_classes:
            raise SpecraceError(f"--classes {','.join(self.classes)}: known {','.join(CLASSES)}")


BIG_BUDGET = 1 << 20


@dataclass(frozen=True)
class Root:
    """The engine configuration of a subtree. ``mode``: the token budget only matters once a
    prompt longer than ``1 + k`` tokens is scheduled (a chunked prompt, or a preempted
    request's recompute): until then every row takes at most ``1 + k`` tokens and ``R`` rows
    fit the small budget ``R * (1 + k)``, so the small and the unlimited budget give the same
    records. A "plain" subtree (small budget, no such event yet) stands for both; at the first
    such event it forks into a "fixed" small-budget child and, from the same node, a "relevant"
    unlimited-budget search that keeps only the children with such an event."""

    async_scheduling: bool
    threshold_is_one: bool
    budget: int
    mode: str = "fixed"  # fixed | plain | relevant


@dataclass(frozen=True)
class Req:
    """One scripted request as decided so far. ``output_len`` None: not finished yet (probe)."""

    cls: str
    arrival: int
    output_len: int | None = None
    accepted: tuple[int, ...] = ()


def req_name(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"R{i}"


def scenario_for(
    space: Space, root: Root, reqs: tuple[Req, ...], cap: int, steps: int, timing=None
) -> Scenario:
    """The scripted scenario of a decision set (plain ints: no probes)."""
    k = space.k
    scripted = []
    for i, r in enumerate(reqs):
        prompt, hit = class_prompt(r.cls, root.budget)
        scripted.append(
            ScriptedRequest(
                req_id=req_name(i),
                arrival_step=r.arrival,
                prompt_len=prompt,
                output_len=r.output_len if r.output_len is not None else BIG,
                accepted=r.accepted,
                prefix_hit_tokens=hit,
            )
        )
    return Scenario(
        name="check",
        description="",
        default_steps=steps,
        engine=EngineParams(
            max_num_seqs=space.max_rows,
            max_num_batched_tokens=root.budget,
            num_speculative_tokens=k,
            async_scheduling=root.async_scheduling,
            reorder_threshold_is_one=root.threshold_is_one,
            kv_cache_capacity_tokens=0 if cap >= BIG else cap,
        ),
        workload=WorkloadParams(
            arrival="scripted", acceptance_probs=(0.5,) * k, requests=tuple(scripted)
        ),
        timing=timing or TimingParams(),
    )


class _CheckScenario(Scenario):
    """A scenario whose ``to_dict`` (stored in the schedule, unused here) costs nothing:
    ``dataclasses.asdict`` was half of every ``build_schedule`` call."""

    def to_dict(self) -> dict[str, Any]:
        return {"engine": {"async_scheduling": self.engine.async_scheduling}}


@dataclass
class _Run:
    records: list[StepRecord]
    out_logs: list[list[int]]  # per request: generated values compared with output_len
    cap_log: list[int]  # sums compared with the KV capacity


def _run(
    space: Space, root: Root, reqs: tuple[Req, ...], cap: int, steps: int, cache: dict | None = None
) -> _Run:
    """``build_schedule`` with probes in place of undecided output lengths and the capacity.
    ``cache`` keeps the frozen parameter objects (and their probes) between runs."""
    cache = {} if cache is None else cache
    scripted = []
    logs: list[list[int] | None] = []
    for i, r in enumerate(reqs):
        key = (i, r, root.budget)
        hit = cache.get(key)
        if hit is None:
            prompt, prefix = class_prompt(r.cls, root.budget)
            log: list[int] | None = [] if r.output_len is None else None
            if log is not None:
                out: int = _Probe(BIG, log)
            else:
                assert r.output_len is not None
                out = r.output_len
            hit = cache[key] = (ScriptedRequest(req_name(i), r.arrival, prompt, out, r.accepted,
                                                prefix), log)  # fmt: skip
        scripted.append(hit[0])
        if hit[1] is not None:
            hit[1].clear()
        logs.append(hit[1])
    ekey = ("engine", root.budget, root.async_scheduling, root.threshold_is_one, cap)
    if ekey not in cache:
        cap_log: list[int] = []
        cache[ekey] = (
            EngineParams(
                max_num_seqs=space.max_rows,
                max_num_batched_tokens=root.budget,
                num_speculative_tokens=space.k,
                async_scheduling=root.async_scheduling,
                reorder_threshold_is_one=root.threshold_is_one,
                kv_cache_capacity_tokens=_Probe(cap, cap_log),
            ),
            cap_log,
        )
    eng, cap_log = cache[ekey]
    cap_log.clear()
    scn = _CheckScenario(
        "check", "", steps, eng, WorkloadParams(arrival="scripted", requests=tuple(scripted)),
        _TIMING,
    )  # fmt: skip
    records = build_schedule(scn, 0, steps).steps
    return _Run(records, [list(x) if x is not None else [] for x in logs], list(cap_log))


_TIMING = TimingParams()


# -- the evaluator ----------------------------------------------------------------------------

State = tuple[tuple[int, ...], tuple[int, ...]]  # (pinned buffer B, private buffer)


@dataclass(frozen=True)
class Wrong:
    row: int
    prev_row: int
    true: int
    cpu: int
    gpu: int


@dataclass(frozen=True)
class Outcome:
    landing: int
    state: State | None  # None: the interleaving ended in a counterexample
    kind: str
    wrong: tuple[Wrong, ...]  # GPU-consumed wrong reads
    repaired: int  # CPU-wrong reads the correction kernel repaired


def landings(policy: Policy, async_scheduling: bool, ops) -> list[tuple[int, int]]:
    """:func:`sim.model.verdict.landing_positions` as (position, how many positions it stands
    for), the usual one (after every op) first. Positions only a ``remove`` apart (it writes
    nothing) give the same buffer and kind: one evaluation, the later position speaking."""
    out: list[tuple[int, int]] = []
    for p in landing_positions(policy, len(ops), async_scheduling):
        if out and p >= 0 and ops[p].kind == "remove":
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


def _verdict(policy, state, ops, dma, prev_positions, prev_num_draft_tokens, num_reqs, landing):
    cur = Transition(ops, prev_positions, prev_num_draft_tokens, num_reqs)
    return at_landing(policy, dma, cur, np.asarray(state[0]), np.asarray(state[1]), landing)


def _read(policy, state, ops, dma, prev_positions, prev_num_draft_tokens, num_reqs, landing):
    """The buffers after the step and the read; per read row: source row, true, CPU, GPU,
    CPU-wrong, from :func:`sim.model.verdict.at_landing` (None: nothing read)."""
    v = _verdict(policy, state, ops, dma, prev_positions, prev_num_draft_tokens, num_reqs, landing)
    rows = v.rows
    if not rows.size:
        return v.buffer, v.private, None
    r = (rows, v.prev_rows[rows], v.true[rows], v.cpu[rows], v.gpu[rows], v.cpu_wrong[rows])
    return v.buffer, v.private, r


def evaluate(
    policy: Policy,
    state: State,
    ops,
    dma: np.ndarray | None,
    prev_positions: np.ndarray,
    prev_num_draft_tokens: np.ndarray,
    num_reqs: int,
    landing: int,
) -> Outcome:
    """One step's row operations with step n-1's copy landing at ``landing``, then the read."""
    v = _verdict(policy, state, ops, dma, prev_positions, prev_num_draft_tokens, num_reqs, landing)
    wrong = tuple(
        Wrong(int(r), int(v.prev_rows[r]), int(v.true[r]), int(v.cpu[r]), int(v.gpu[r]))
        for r in np.flatnonzero(v.gpu_wrong)
    )
    repaired = int((v.cpu_wrong & ~v.gpu_wrong).sum())
    new_state = (
        None if wrong else (tuple(int(x) for x in v.buffer), tuple(int(x) for x in v.private))
    )
    return Outcome(landing, new_state, v.kind.value, wrong, repaired)


TAG = 1000  # symbolic count of step n-1's row q: TAG + q (real counts are <= 16)


def all_counts(bounds: tuple[int, ...]) -> np.ndarray:
    """Every count tuple (1 <= c[q] <= bounds[q]) as rows of a matrix, ascending."""
    if not bounds:
        return np.zeros((1, 0), dtype=np.int64)
    grids = np.meshgrid(*(np.arange(1, b + 1) for b in bounds), indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)


def symbolic_masks(policy, state, ops, n_prev, prev_positions, pnd, num_reqs, landing, counts):
    """GPU-wrong and repaired-CPU-wrong per count tuple (rows of ``counts``), from one run of the
    step on symbolic counts (tags): a read returns a tag (another row's count) or a number.

    Valid for a policy that only copies counts (never computes with them); every result is
    verified against a concrete run by the caller."""
    tags = np.arange(TAG, TAG + n_prev, dtype=np.int64)
    _buf, _priv, r = _read(policy, state, ops, tags, prev_positions, pnd, num_reqs, landing)
    m = len(counts)
    if r is None:
        return np.zeros(m, dtype=bool), np.zeros(m, dtype=np.int64), []
    rows, src, _true, cpu_r, gpu, cpu_wrong = r
    fail = np.zeros(m, dtype=bool)
    repaired = np.zeros(m, dtype=np.int64)
    per_row = []
    for i in range(len(rows)):
        t = counts[:, src[i]]
        g = _differs(gpu[i], t, counts, n_prev)
        c = _differs(cpu_r[i], t, counts, n_prev) & bool(cpu_wrong[i])
        fail |= g
        repaired += c & ~g
        per_row.append(g)
    return fail, repaired, per_row


def _differs(value: int, true: np.ndarray, counts: np.ndarray, n_prev: int) -> np.ndarray:
    value = int(value)
    if TAG <= value < TAG + n_prev:
        return counts[:, value - TAG] != true
    if value >= TAG:
        raise SpecraceError(f"symbolic evaluation: unexpected tag {value}")
    return true != value


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
        self, space: Space, policies: list[Policy], concrete: set[str] | None = None
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
        self.leaf_keys_seen: set = set()
        self.prefix_seen: set = set()
        self.nodes = 0
        self.runs = 0
        self.evaluations = 0
        self._cache: dict = {}

    # -- tree ------------------------------------------------------------------------------
    def roots(self) -> Iterator[Root]:
        t = 1 + self.space.k
        families = ([True] if self.async_policies else []) + ([False] if self.sync else [])
        for async_ in families:
            for thr1 in (False, True):
                yield Root(async_, thr1, self.space.max_rows * t, "plain")

    def run(self) -> CheckResult:
        for root in self.roots():
            pols = self.async_policies if root.async_scheduling else [SYNC_SCHEDULING]
            init = (tuple([1] * self.space.max_rows), tuple([1] * self.space.max_rows))
            frontiers: dict[str, dict[tuple, list]] = {p.name: {init: [1, [], None]} for p in pols}
            self._expand(root, pols, (), (1, BIG), [], frontiers, [], 0)
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

    def _run(self, root, reqs, cap, steps) -> _Run:
        self.runs += 1
        if len(self._cache) > 200_000:
            self._cache.clear()
        return _run(self.space, root, reqs, cap, steps, self._cache)

    def _expand(self, root, pols, reqs, cap_iv, records, frontiers, out_lens, cap_len) -> None:
        """Children of the prefix ``records`` (steps 0..s-1): every choice for step s."""
        s = len(records)
        self.nodes += 1
        # 1. finishes: requests whose output is compared at step s
        base = self._run(root, reqs, cap_iv[1], s + 1)
        out_lens = list(out_lens) + [0] * (len(reqs) - len(out_lens))
        cands = [
            (i, base.out_logs[i][out_lens[i]])
            for i in range(len(reqs))
            if reqs[i].output_len is None and len(base.out_logs[i]) > out_lens[i]
        ]
        for mask in itertools.product((False, True), repeat=len(cands)):
            r1 = list(reqs)
            for (i, g), fin in zip(cands, mask, strict=True):
                if fin:
                    r1[i] = replace(r1[i], output_len=g)
            r1t = tuple(r1)
            new_out = [len(x) for x in base.out_logs]
            # 2. preemption: split the capacity interval by the sums compared at step s
            lo, hi = cap_iv
            while hi >= lo:
                run = (
                    base if (not any(mask) and hi == cap_iv[1]) else self._run(root, r1t, hi, s + 1)
                )
                at_s = run.cap_log[cap_len:]
                stop = [v for v in at_s if v <= hi]
                cls_lo = max(lo, stop[-1]) if stop else lo
                preempting = any(v > hi for v in at_s)
                args = (pols, r1t, (cls_lo, hi), records, frontiers, new_out, len(run.cap_log))
                if preempting and root.mode == "plain":
                    # a preemption fixes the budget (its recompute may exceed 1 + k tokens):
                    # the small budget's child, and the unlimited one's (same comparisons)
                    self._arrivals(replace(root, mode="fixed"), *args, run, preempting)
                    big = replace(root, budget=BIG_BUDGET, mode="fixed")
                    self._arrivals(big, *args, self._run(big, r1t, hi, s + 1), preempting)
                else:
                    self._arrivals(root, *args, run, preempting)
                hi = cls_lo - 1

    def _arrivals(
        self, root, pols, reqs, cap_iv, records, frontiers, out_lens, cap_len, run, preempting
    ):
        """3. admitted arrival sequences at step s (the empty one first). A chunked arrival
        in a plain subtree fixes the budget: both budgets' runs are followed from there."""
        s = len(records)
        stack: list[tuple[tuple[Req, ...], _Run, Root]] = [(reqs, run, root)]
        while stack:
            cur, cur_run, sub = stack.pop()
            self._accepted(sub, pols, cur, cap_iv, records, frontiers, out_lens, cap_len, cur_run)
            rec = cur_run.records[s]
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
                    r = self._run(f, nxt, cap_iv[1], s + 1)
                    if req_name(len(nxt) - 1) in r.records[s].new:
                        stack.append((nxt, r, f))

    def _accepted(self, root, pols, reqs, cap_iv, records, frontiers, out_lens, cap_len, run):
        """4. accepted counts of step s's drafted rows, while they can change the schedule."""
        s = len(records)
        rec = run.records[s]
        drafted = [i for i in range(rec.num_reqs) if rec.drafts[i] > 0]
        affects = s + self._lag(root) < self.space.steps
        out = [len(x) for x in run.out_logs]  # comparisons up to step s
        if not drafted or not affects:
            self._child(root, pols, reqs, cap_iv, records, rec, frontiers, out, cap_len)
            return
        index = {req_name(i): i for i in range(len(reqs))}
        bounds = [int(1 + rec.drafts[i]) for i in drafted]
        if root.async_scheduling:
            choices = itertools.product(*(range(1, b + 1) for b in bounds))
        else:
            # Async off: the read is direct after the copy landed, right whatever the counts
            # (each row carries its own); counts only shape the schedule, and finishes and
            # preemptions are branched by their probes whatever the count: all accepted.
            choices = iter([tuple(bounds)])
        for vals in choices:
            r1 = list(reqs)
            acc = rec.accepted.copy()
            for row, v in zip(drafted, vals, strict=True):
                j = index[rec.req_ids[row]]
                r1[j] = replace(r1[j], accepted=(*r1[j].accepted, v))
                acc[row] = v
            child = replace(rec, accepted=acc)
            self._child(root, pols, tuple(r1), cap_iv, records, child, frontiers, out, cap_len)

    def _child(self, root, pols, reqs, cap_iv, records, rec, frontiers, out_lens, cap_len):
        s = len(records)
        new_records = [*records, rec]
        last = s == self.space.steps - 1
        free = s >= 1 and (s - 1) + self._lag(root) >= self.space.steps
        pkey: list = []  # the prefix's schedule key, computed once when first needed

        def prefix_key() -> tuple:
            if not pkey:
                pkey.append((root.async_scheduling, schedule_key(new_records)))
            return pkey[0]

        if last and prefix_key() in self.leaf_keys_seen:
            return  # the same schedule (up to names) was checked on another branch
        # The same prefix reached by other choices has the same interleavings: count them once.
        count = prefix_key() not in self.prefix_seen
        self.prefix_seen.add(prefix_key())
        trans = None
        if s >= 1:  # the step transition, once for every policy (memo key)
            prev = records[s - 1]
            trans = (
                root.async_scheduling,
                tuple((op.kind, op.a, op.b) for op in rec.ops),
                rec.prev_positions.tobytes(),
                rec.prev_num_draft_tokens.tobytes(),
                rec.num_reqs,
                prev.drafts.tobytes() if free else prev.accepted.tobytes(),
                free,
                last,
            )
        new_frontiers = {}
        oks = {}
        for pol in pols:
            new_frontiers[pol.name], oks[pol.name] = self._step(
                pol, root, reqs, cap_iv, new_records, frontiers[pol.name], free, last, count,
                trans,
            )  # fmt: skip
        if last:
            self.leaf_keys_seen.add(prefix_key())
            self.leaf_keys[root.async_scheduling].add(prefix_key())
            for name, ok in oks.items():
                self.results[name].interleavings += ok
            return
        self._expand(root, pols, reqs, cap_iv, new_records, new_frontiers, out_lens, cap_len)

    # -- evaluation ------------------------------------------------------------------------
    def _step(self, pol, root, reqs, cap_iv, records, frontier, free, last, count, trans):
        """Step s of every interleaving in ``frontier``: the new frontier (or, at the last
        step, only the number of complete interleavings without a wrong consumed count)."""
        s = len(records) - 1
        cur = records[s]
        res = self.results[pol.name]
        out: dict[State, list] = {}
        ok_total = 0
        if s == 0:  # no copy in flight: the ops and the read only
            for state, (n, wit, cnt) in frontier.items():
                o = self._eval(pol, state, cur, None, 0)
                _merge(out, o.state, n, wit, cnt)
            return out, sum(v[0] for v in out.values())
        prev = records[s - 1]
        base_key = (pol.name, trans)
        for state, (n, wit, cnt) in frontier.items():
            key = (base_key, state)
            agg = self.memo.get(key)
            if agg is None:
                agg = self._aggregate(pol, root, state, cur, prev, free, last)
                self.memo[key] = agg
            ok_total += n * agg.ok
            if count:
                res.repaired += n * agg.repaired
                for kind, m in agg.failing.items():
                    res.failing[kind] = res.failing.get(kind, 0) + n * m
            if agg.failing:
                for land, counts, o in agg.first_fail.values():
                    self._counterexample(
                        pol, o, root, reqs, cap_iv, records, [*wit, land],
                        counts if free else None, state,
                    )  # fmt: skip
            for st, mult, land, counts in agg.states:
                _merge(out, st, n * mult, [*wit, land], counts if free else cnt)
        return out, ok_total

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
        self.results[pol.name].minimal[o.kind] = Counterexample(
            pol.name, o.kind, root, tuple(r1), cap_iv[1], recs, list(wit), o.wrong, key, prior
        )


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


def check(space: Space, policy_names: list[str]) -> CheckResult:
    """Run the bounded-exhaustive check for the named policies (``async-off`` included)."""
    pols = [named(name) for name in policy_names]
    concrete: set[str] = set()
    while True:
        try:
            return Checker(space, pols, concrete).run()
        except _NotSymbolic as e:  # computes with counts: every tuple concretely, from scratch
            concrete.add(e.policy)


class _NotSymbolic(Exception):
    def __init__(self, policy: str) -> None:
        super().__init__(policy)
        self.policy = policy


def all_policy_names() -> list[str]:
    return [p.name for p in select(ALL, async_off=True)]


# -- stories and JSON -------------------------------------------------------------------------


def story(cx: Counterexample, header: str | None = None) -> str:
    """The counterexample as a short story: one line per step, the row operations in vLLM's
    order with the copy's landing among them, and the wrong read."""
    recs = cx.records
    thr = 1 if cx.root.threshold_is_one else "1+k"
    budget = "unlimited" if cx.root.budget >= BIG_BUDGET else str(cx.root.budget)
    who = ", ".join(f"{req_name(i)} {_CLASS_WORD[r.cls]}" for i, r in enumerate(cx.reqs))
    cap = f", KV capacity {cx.cap} tokens" if cx.cap < BIG else ""
    lines = [header or f"(reorder threshold {thr}, token budget {budget}{cap}; {who})"]
    for s, rec in enumerate(recs):
        words = _op_words(rec)
        land = cx.landings[s - 1] if s else None
        last = s == len(recs) - 1
        if land is not None:
            if land >= 0:
                words.insert(land, f"step {s - 1}'s copy lands")
            else:
                words.append(f"step {s - 1}'s copy has not landed at the read")
        if last:
            words.append(_read_words(cx))
        rows = ", ".join(_row_words(rec, i, last) for i in range(rec.num_reqs))
        lines.append(f"step {s} [{rows}]" + (": " + "; ".join(words) if words else ""))
    return "\n".join(lines)


def _row_words(rec: StepRecord, i: int, last: bool) -> str:
    r = rec.req_ids[i]
    if rec.drafts[i] > 0:
        return f"{r} decode" if last else f"{r} decode, count {int(rec.accepted[i])}"
    if rec.discard[i]:
        return f"{r} prefill chunk"
    return f"{r} prefill" if rec.num_computed[i] < rec.num_prompt[i] else f"{r} decode"


def _op_words(rec: StepRecord) -> list[str]:
    out = []
    for op in rec.ops:
        if op.kind == "remove":
            why = "finishes" if op.req_id in rec.finished else "is unscheduled"
            out.append(f"{op.req_id} {why} in row {op.a}")
        elif op.kind == "add":
            how = "resumes into" if op.req_id in rec.resumed else "is added into"
            out.append(f"{op.req_id} {how} row {op.a}")
        elif op.kind == "move":
            out.append(f"{op.req_id} is moved from row {op.a} to {op.b}")
        else:
            out.append(f"{op.req_id} is swapped from row {op.a} to {op.b}")
    return out


def _read_words(cx: Counterexample) -> str:
    cur = cx.records[-1]
    said = []
    for w in cx.wrong:
        consumed = "" if w.gpu == w.cpu else f" and the GDN kernel consumes {w.gpu}"
        said.append(
            f"{cur.req_ids[w.row]} (row {w.row}, row {w.prev_row} before) reads "
            f"{_provenance(cx, w)} instead of {w.true}{consumed}"
        )
    return "; ".join(said)


def _provenance(cx: Counterexample, w: Wrong) -> str:
    """Whose count the wrong read returned: the same step replayed on tagged values (100 + row
    for step n-1's copy, 200 + row for what the buffer held before the step)."""
    pol = named(cx.policy)
    cur, prev = cx.records[-1], cx.records[-2]
    land = cx.landings[-1]
    size = max(prev.num_reqs, cur.num_reqs, max((max(o.a, o.b) for o in cur.ops), default=0) + 1)
    tag_dma = np.arange(100, 100 + prev.num_reqs, dtype=np.int64)
    buf = np.arange(200, 200 + size, dtype=np.int64)
    tag = int(at_landing(pol, tag_dma, cur, buf, buf, land).cpu[w.row])
    if 100 <= tag < 100 + prev.num_reqs:
        owner = prev.req_ids[tag - 100]
        return f"{owner}'s {w.cpu}" if owner != cur.req_ids[w.row] else f"its own {w.cpu}"
    if 200 <= tag < 200 + size:
        return f"the stale {w.cpu} left in row {tag - 200}"
    return f"{w.cpu}"


def counterexample_json(cx: Counterexample, space: Space) -> dict[str, Any]:
    scn = scenario_for(space, cx.root, cx.reqs, cx.cap, len(cx.records))
    eng = scn.engine
    return {
        "kind": cx.kind,
        "rows": cx.key[0],
        "steps": cx.key[1],
        "ops": cx.key[2],
        "read_step": cx.step,
        "landing": cx.landings[-1],
        "landings": cx.landings,
        "wrong": [
            {
                "req_id": cx.records[-1].req_ids[w.row],
                "row": w.row,
                "prev_row": w.prev_row,
                "true": w.true,
                "cpu": w.cpu,
                "gpu": w.gpu,
            }
            for w in cx.wrong
        ],
        "story": story(cx),
        "engine": {
            "max_num_seqs": eng.max_num_seqs,
            "max_num_batched_tokens": eng.max_num_batched_tokens,
            "num_speculative_tokens": eng.num_speculative_tokens,
            "async_scheduling": eng.async_scheduling,
            "reorder_threshold_is_one": eng.reorder_threshold_is_one,
            "kv_cache_capacity_tokens": eng.kv_cache_capacity_tokens,
        },
        "requests": [
            {
                "req_id": r.req_id,
                "arrival_step": r.arrival_step,
                "prompt_len": r.prompt_len,
                "output_len": r.output_len,
                "accepted": list(r.accepted),
                "prefix_hit_tokens": r.prefix_hit_tokens,
            }
            for r in scn.workload.requests
        ],
    }


def result_json(res: CheckResult) -> dict[str, Any]:
    sp = res.space
    return {
        "space": {
            "max_rows": sp.max_rows,
            "steps": sp.steps,
            "k": sp.k,
            "classes": list(sp.classes),
            "sync_classes": list(sp.sync_classes),
        },
        "schedules": {"async": res.schedules[True], "sync": res.schedules[False]},
        "nodes": res.nodes,
        "build_schedule_runs": res.runs,
        "evaluations": res.evaluations,
        "policies": {
            name: {
                "vllm": p.vllm,
                "safe": p.safe,
                "interleavings": p.interleavings,
                "failing": dict(sorted(p.failing.items())),
                "repaired_cpu_wrong": p.repaired,
                "symbolic_counts": p.symbolic,
                "counterexamples": {
                    k: counterexample_json(cx, sp) for k, cx in sorted(p.minimal.items())
                },
            }
            for name, p in res.policies.items()
        },
    }
