"""Where ``sim check``'s scheduler runs go: per step and per part of the search (the node's own
run, its output-length and capacity branches in ``_expand``, its arrival sequences in
``_arrivals``), and how many of the last step's children are a schedule already checked on
another branch (pruned after their run was paid for). docs/perf.md §1.2 quotes it.

    python scripts/check_runs.py [--max-rows 3] [--steps 3] [--k 3]

The search is the one ``sim check`` runs (every policy); its result is checked against a plain
run's counts, so the counting changes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.explore.check import Space, schedule_key, search  # noqa: E402
from sim.explore.check.search import all_policy_names  # noqa: E402
from sim.model.policies import named  # noqa: E402


class CountingChecker(search.Checker):
    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.by_part: Counter = Counter()
        self.leaves: Counter = Counter()

    def _run(self, root, reqs, cap, steps, parent):
        self.by_part[(steps - 1, sys._getframe(1).f_code.co_name.lstrip("_"))] += 1
        return super()._run(root, reqs, cap, steps, parent)

    def _child(self, root, pols, reqs, cap_iv, records, rec, *rest):
        if len(records) == self.space.steps - 1:
            key = (root.async_scheduling, schedule_key([*records, rec]))
            self.leaves["seen" if key in self.leaf_keys_seen else "new"] += 1
        return super()._child(root, pols, reqs, cap_iv, records, rec, *rest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-rows", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--k", type=int, default=3)
    args = ap.parse_args()
    space = Space(args.max_rows, args.steps, args.k)
    pols = [named(n) for n in all_policy_names()]
    concrete: set[str] = set()
    t0 = time.perf_counter()
    while True:  # as sim.explore.check.search.check
        checker = CountingChecker(space, pols, concrete)
        try:
            res = checker.run()
            break
        except search._NotSymbolic as e:
            concrete.add(e.policy)
    elapsed = time.perf_counter() - t0
    plain = search.check(space, all_policy_names())
    assert (plain.runs, plain.nodes, plain.evaluations) == (res.runs, res.nodes, res.evaluations)
    n_sched = sum(res.schedules.values())
    print(f"R={args.max_rows} S={args.steps} k={args.k}: {res.runs:,} runs, {res.nodes:,} nodes, "
          f"{n_sched:,} distinct schedules, {elapsed:.1f} s counted")  # fmt: skip
    print("| step | part | runs | share |\n|---:|---|---:|---:|")
    for (step, part), n in sorted(checker.by_part.items()):
        print(f"| {step} | {part} | {n:,} | {100 * n / res.runs:.1f} % |")
    new, seen = checker.leaves["new"], checker.leaves["seen"]
    print(f"\nlast-step children: {new + seen:,}; a schedule already checked: {seen:,} "
          f"({100 * seen / max(new + seen, 1):.1f} %), new: {new:,}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
