"""Where ``sim check``'s scheduler runs go: per step and per part of the search (the node's own
run, its output-length and capacity branches in ``_expand``, its arrival sequences in
``_arrivals``), and how many of the last step's children are a schedule already checked on
another branch (pruned after their run was paid for). docs/perf.md §1.2 quotes it.

    python scripts/check_runs.py [--max-rows 3] [--steps 3] [--k 3]

The search is the one ``sim check`` runs (every policy); its result is checked against a plain
run's counts, so the counting changes nothing. ``--states`` also counts the distinct engine
states the last step's runs start from (after the fork: every state array, the batch rows, the
queues, the steps in flight, the output lengths and next counts the step can see, the prompt and
prefix hit of the requests still to arrive; request names kept), with and without the KV
capacity: what a memo of the last step keyed by that state could save. ``--parents`` looks at
the last step's parents (the nodes whose children are all leaves): how many of the repeated
last-step children come from a parent whose prefix schedule (up to request names) an earlier
parent had, and whether such a parent is also the same engine state up to request names
(``parent_key``; requests that finished and are in no queue, row or step in flight left out):
a memo of parents could skip those subtrees. Where the states differ, it names the parts.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.explore.check import Space, schedule_key, search  # noqa: E402
from sim.explore.check.search import all_policy_names  # noqa: E402
from sim.model.policies import named  # noqa: E402
from sim.model.scheduler_rules import _ACCEPTED, _ARRAYS  # noqa: E402
from sim.model.scheduling import EngineRun  # noqa: E402

_SHARED = ("eng", "requests", "st", "id_index", "batch", "running", "waiting", "in_flight")


def _b(v):
    return v.tobytes() if isinstance(v, np.ndarray) else v


def state_key(e: EngineRun, with_capacity: bool) -> bytes:
    """The engine state a step starts from, as bytes (request names kept)."""
    st, b, eng = e.st, e.batch, e.eng
    own = sorted((k, _b(v)) for k, v in e.__dict__.items() if k not in (*_SHARED, "out_arr"))
    arrays = sorted((k, _b(v)) for k, v in st.__dict__.items() if k != "output_len")
    outs = tuple(x if type(x) is int else "undecided" for x in st.output_len)
    nxt = tuple(
        int(st.accepted_flat[st.spec_pos[i]]) if st.spec_pos[i] < st.accepted_end[i] else 1
        for i in range(len(st.req_ids))
    )
    rows = (tuple(b.req_ids), _b(b.num_computed_tokens_cpu), _b(b.num_prompt_tokens),
            _b(b.num_accepted_tokens_cpu), tuple(b._removed))  # fmt: skip
    flight = tuple(
        (
            t,
            *(
                _b(getattr(x, f))
                for f in ("idx", "epoch", "num_tokens", "drafts", "accepted", "samples")
            ),
            x.uniform,
        )  # fmt: skip
        for t, x in sorted(e.in_flight.items())
    )
    engine = (eng.max_num_batched_tokens, eng.async_scheduling, eng.reorder_threshold_is_one)
    if with_capacity:
        engine += (int(eng.kv_cache_capacity_tokens),)
    # requests not arrived yet: the step reads their prefix hit (and prompt) from the request
    coming = tuple((r.arrival_step, r.prompt_len, r.prefix_hit_tokens)
                   for r in e.requests[e.next_arrival :])  # fmt: skip
    doc = (own, arrays, outs, nxt, rows, flight, tuple(e.running.ids), tuple(e.waiting), engine,
           coming)  # fmt: skip
    return hashlib.sha1(pickle.dumps(doc)).digest()


_PER_REQUEST = [a for a in _ARRAYS if a not in _ACCEPTED]
PARTS = ("engine", "requests", "steps in flight", "rows", "waiting", "running", "step",
         "capacity interval")  # fmt: skip


def parent_key(root, run, cap_iv: tuple[int, int]) -> tuple:
    """A last-step parent's state up to request names, part by part (:data:`PARTS`): the
    root's token budget, reorder threshold and stop kind (what else the future depends on), the
    requests renamed in order of first sight (rows, waiting, running, steps in flight, then
    the live rest; the finished ones seen nowhere dropped), each with its scheduler arrays,
    its counts still to come, its output length (None: undecided) and, undecided, the largest
    value compared with it so far (the next step's finish candidates start above it)."""
    e, st = run.engine, run.engine.st
    order: dict[int, int] = {}
    flights = [e.in_flight[t] for t in sorted(e.in_flight)]
    sources = (e.prev_req_of_row.tolist(), e.waiting, e.running.ids,
               *(b.idx.tolist() for b in flights),
               np.flatnonzero(st.alive).tolist())  # fmt: skip
    for src in sources:
        for i in src:
            order.setdefault(int(i), len(order))
    reqs = []
    for i in sorted(order, key=order.__getitem__):
        out = st.output_len[i] if type(st.output_len[i]) is int else None
        reqs.append((
            tuple(int(getattr(st, a)[i]) for a in _PER_REQUEST),
            tuple(st.accepted_flat[st.spec_pos[i] : st.accepted_end[i]].tolist()),
            out,
            max(run.out_logs[i], default=-1) if out is None else None,
            int(e.prev_arr[i]),  # its row in the previous step's sampled rows (-1: none)
        ))  # fmt: skip
    in_flight = tuple(
        (t - e.step_no, tuple(order[int(i)] for i in b.idx),
         *(getattr(b, f).tobytes() for f in ("epoch", "num_tokens", "drafts", "accepted",
                                              "samples")), b.uniform)
        for t, b in zip(sorted(e.in_flight), flights, strict=True)
    )  # fmt: skip
    b = e.batch
    index = {rid: j for j, rid in enumerate(st.req_ids)}
    n = len(b._req_ids)
    rows = (tuple(None if r is None else order[index[r]] for r in b._req_ids),
            *(x[:n].tobytes() for x in (b.num_computed_tokens_cpu, b.num_prompt_tokens,
                                        b.num_accepted_tokens_cpu)),
            tuple(sorted(b._removed)))  # fmt: skip
    return (
        (root.budget, root.threshold_is_one, root.eos),  # the root's engine (the mode aside)
        tuple(reqs),
        in_flight,
        rows,  # the layout too (prev_req_of_row: the rows after condense, no holes)
        tuple(order[i] for i in e.waiting),
        tuple(order[i] for i in e.running.ids),
        (e.step_no, e.prev_drafts_len, e.next_arrival - len(st.req_ids)),
        tuple(cap_iv),
    )


class CountingChecker(search.Checker):
    """Counts where its runs go; the search's explorer (one, in this process) is one too, and
    its counts are added up by ``counted``."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.by_part: Counter = Counter()
        self.leaves: Counter = Counter()
        self.explorers: list[CountingChecker] = []
        self.parents = False  # --parents: look at the last step's parents (below)
        self.parent_of_leaf: dict = {}  # leaf key -> the parent that first made it
        self.prefix_parent: dict = {}  # prefix key -> (its first parent, that parent's state)
        self.origin: Counter = Counter()  # repeated last-step children by where they come from
        self.differs: Counter = Counter()  # repeated-prefix parents: the parts that differ
        self._parent: object = None

    def explorer(self):
        e = super().explorer()
        e.parents = self.parents
        self.explorers.append(e)
        return e

    def counted(self, *names: str) -> tuple[Counter, ...]:
        """The named counters of this checker and its explorers, added up."""
        return tuple(
            sum((getattr(c, n) for c in (self, *self.explorers)), Counter()) for n in names
        )

    def _expand(self, root, pols, reqs, cap_iv, records, frontiers, out_lens, cap_len, parent):
        if self.parents and len(records) == self.space.steps - 1:
            node = object()
            prefix = (root.async_scheduling, schedule_key(records))
            state = parent_key(root, parent, cap_iv)
            first = self.prefix_parent.setdefault(prefix, (node, state))
            if first[0] is not node:
                same = tuple(p for p, a, b in zip(PARTS, first[1], state, strict=True) if a == b)
                self.differs[tuple(p for p in PARTS if p not in same) or ("nothing",)] += 1
            self._parent = (node, first[0] is node)
        super()._expand(root, pols, reqs, cap_iv, records, frontiers, out_lens, cap_len, parent)

    def _run(self, root, reqs, cap, steps, parent):
        self.by_part[(steps - 1, sys._getframe(1).f_code.co_name.lstrip("_"))] += 1
        return super()._run(root, reqs, cap, steps, parent)

    def _child(self, root, pols, reqs, cap_iv, records, rec, *rest):
        if len(records) == self.space.steps - 1:
            key = (root.async_scheduling, schedule_key([*records, rec]))
            self.leaves["seen" if key in self.leaf_keys_seen else "new"] += 1
            if self.parents:
                node, first_prefix = self._parent
                made = self.parent_of_leaf.setdefault(key, node)
                if made is not node:
                    self.origin[
                        "a parent whose prefix an earlier parent had"
                        if not first_prefix
                        else "another parent, its prefix new"
                    ] += 1
                elif key in self.leaf_keys_seen:
                    self.origin["the same parent (another choice)"] += 1
        return super()._child(root, pols, reqs, cap_iv, records, rec, *rest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-rows", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--states", action="store_true", help="count the last step's start states")
    ap.add_argument("--parents", action="store_true", help="look at the last step's parents")
    args = ap.parse_args()
    states: dict[bool, set] = {True: set(), False: set()}
    last_runs = [0]
    if args.states:
        step = EngineRun.step

        def counting_step(self: EngineRun):
            if self.step_no == args.steps - 1:
                last_runs[0] += 1
                for with_cap in (True, False):
                    states[with_cap].add(state_key(self, with_cap))
            return step(self)

        EngineRun.step = counting_step  # type: ignore[method-assign]
    space = Space(args.max_rows, args.steps, args.k)
    pols = [named(n) for n in all_policy_names()]
    concrete: set[str] = set()
    t0 = time.perf_counter()
    while True:  # as sim.explore.check.search.check (counting afresh on a restart)
        last_runs[0] = 0
        states[True].clear()
        states[False].clear()
        checker = CountingChecker(space, pols, concrete)
        checker.parents = args.parents
        try:
            res = checker.run()
            break
        except search._NotSymbolic as e:
            concrete.add(e.policy)
    elapsed = time.perf_counter() - t0
    if args.states:
        EngineRun.step = step  # type: ignore[method-assign]
    plain = search.check(space, all_policy_names())
    assert (plain.runs, plain.nodes, plain.evaluations) == (res.runs, res.nodes, res.evaluations)
    n_sched = sum(res.schedules.values())
    print(f"R={args.max_rows} S={args.steps} k={args.k}: {res.runs:,} runs, {res.nodes:,} nodes, "
          f"{n_sched:,} distinct schedules, {elapsed:.1f} s counted")  # fmt: skip
    print("| step | part | runs | share |\n|---:|---|---:|---:|")
    by_part, leaves = checker.counted("by_part", "leaves")
    for (step, part), n in sorted(by_part.items()):
        print(f"| {step} | {part} | {n:,} | {100 * n / res.runs:.1f} % |")
    new, seen = leaves["new"], leaves["seen"]
    print(f"\nlast-step children: {new + seen:,}; a schedule already checked: {seen:,} "
          f"({100 * seen / max(new + seen, 1):.1f} %), new: {new:,}")  # fmt: skip
    if args.states:
        n = last_runs[0]
        print(f"last-step runs: {n:,}; distinct start states {len(states[True]):,} "
              f"({n / max(len(states[True]), 1):.2f} runs each), "
              f"{len(states[False]):,} leaving out the KV capacity "
              f"({n / max(len(states[False]), 1):.2f} each)")  # fmt: skip
    if args.parents:
        origin, differs = checker.counted("origin", "differs")
        print("\nrepeated last-step children, by where they come from:")
        for what, n in origin.most_common():
            print(f"  {what}: {n:,} ({100 * n / max(seen, 1):.1f} %)")
        total = sum(differs.values())
        same = differs[("nothing",)]
        print(
            f"last-step parents whose prefix an earlier parent had: {total:,}; the same state "
            f"up to request names: {same:,}. Where the others differ (parts of parent_key):"
        )
        for parts, n in differs.most_common():
            if parts != ("nothing",):
                print(f"  {', '.join(parts)}: {n:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
