"""``python -m sim check`` (every interleaving of small batches) and ``python -m sim shrink``
(a wrong read of a run -> a minimal scripted scenario)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sim.cli.guards import BUDGET_H, check_budget, check_search_s
from sim.errors import SpecraceError
from sim.runs import tables
from sim.runs.args import budget_arg, file_arg, int_in, step_index_arg


def register(sub) -> None:
    c = sub.add_parser(
        "check", help="every schedule of up to R rows and S steps, every landing of the copy"
    )
    c.add_argument("--max-rows", type=int, default=4, help="max_num_seqs")
    c.add_argument("--steps", type=int, default=3, help="engine steps")
    c.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    c.add_argument("--budget", type=budget_arg, default=BUDGET_H, metavar="HOURS",
                   help="refuse a search estimated to take longer (CPU hours)")  # fmt: skip
    c.add_argument("--policy", default="all", help="a policy, a comma list, async-off, or all")
    c.add_argument(
        "--classes", default="p,h,L", help="prompt classes of arrivals (p whole, h hit, L chunked)"
    )
    c.add_argument("--sync-classes", default="p", help="prompt classes for the async-off family")
    c.add_argument("--workers", type=int_in(0, 4096, "0..4096"), default=0,
                   help="processes exploring the search's subtrees (0: one per core where "
                   "the search pays for it; 1: this process); the same result on any "
                   "number")  # fmt: skip
    c.add_argument("--json", action="store_true", help="print the JSON result")
    c.add_argument("--out", type=file_arg, help="also write the JSON result to this file")
    tables.add_format_arg(c, "the verdict per policy")
    c.set_defaults(func=cmd_check)
    s = sub.add_parser("shrink", help="a wrong read of a run -> a minimal scripted scenario TOML")
    s.add_argument("run", help="a run directory (python -m sim run --out DIR, one policy)")
    s.add_argument("--step", type=step_index_arg, required=True,
                   help="the step of the wrong read")  # fmt: skip
    s.add_argument("--req", required=True, help="the request that read wrong")
    s.add_argument("--out", type=file_arg, help="TOML path (default: RUN/shrunk-STEP-REQ.toml)")
    s.set_defaults(func=cmd_shrink)


def _classes(text: str, flag: str) -> tuple[str, ...]:
    out = tuple(c.strip() for c in text.split(",") if c.strip())
    if not out:
        raise SpecraceError(f"{flag} {text!r}: give at least one of p, h, L")
    return out


def cmd_check(args: argparse.Namespace) -> int:
    from sim.explore.check import Space, check, result_json
    from sim.model.policies import named, select
    from sim.runs.io import write_json
    from sim.runs.processes import auto_workers

    if args.out:  # before the search, which may take minutes
        from sim.runs.outputs import prepare_file

        prepare_file(Path(args.out))
    names = [p.name for p in select(args.policy, async_off=True)]
    space = Space(
        args.max_rows,
        args.steps,
        args.k,
        _classes(args.classes, "--classes"),
        _classes(args.sync_classes, "--sync-classes"),
    )
    space.check()  # the ranges first: the estimate grows as steps^rows
    cpu_s = check_search_s(args.max_rows, args.steps)
    check_budget(f"check --max-rows {args.max_rows} --steps {args.steps}", cpu_s, args.budget,
                 "fewer rows or steps")  # fmt: skip
    # The units are the subtrees of step 0's children: 24, 58, 124, 254 at 1-4 rows. Measured
    # on 2 cores: R = 2 (estimate 3 s) is slower on two workers, R = 3 (20 s) faster.
    workers = args.workers or auto_workers(12 * 2**args.max_rows, cpu_s, min_s=10.0)
    print(
        f"check max_rows={space.max_rows} steps={space.steps} k={space.k} "
        f"classes={','.join(space.classes)} sync_classes={','.join(space.sync_classes)} "
        f"policies={','.join(names)}" + (f" workers={workers}" if workers > 1 else "")
    )
    t0 = time.perf_counter()
    res = check(space, names, workers)
    elapsed = time.perf_counter() - t0
    print(
        f"schedules: async {res.schedules[True]}, async off {res.schedules[False]}; "
        f"search nodes {res.nodes}, build_schedule runs {res.runs}, evaluations "
        f"{res.evaluations}; {elapsed:.1f} s"
    )

    def verdicts() -> None:
        for name, p in res.policies.items():
            print_verdict(name, p)

    tables.show(args.table_format, policy_rows(res), verdicts)
    doc = result_json(res)
    if args.out:
        write_json(Path(args.out), doc, sign=True)  # a file anywhere: it carries its proof
        print(f"wrote {args.out}")
    if args.json:
        print(json.dumps(doc, sort_keys=True))
    broken = [n for n, p in res.policies.items() if not p.safe and named(n).documented_safe]
    if broken:
        print(f"error: documented safe, but fails: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


def policy_rows(res) -> list[dict]:
    """One row per policy: its verdict and, per hazard kind, the interleavings that fail."""
    from sim.model.verdict import HAZARD_KINDS

    found = sorted({k for p in res.policies.values() for k in p.failing})
    kinds = list(dict.fromkeys([*HAZARD_KINDS, *found]))
    return [
        {
            "policy": name,
            "vllm": p.vllm,
            "safe": p.safe,
            "interleavings": p.interleavings + sum(p.failing.values()),
            "failing": sum(p.failing.values()),
            **{f"failing_{k}": p.failing.get(k, 0) for k in kinds},
            "repaired_cpu_wrong": p.repaired,
        }
        for name, p in res.policies.items()
    ]


def print_verdict(name: str, p) -> None:
    from sim.explore.check import story

    if p.safe:
        print(f"{name}: safe for all {p.interleavings} interleavings", end="")
        print(f" ({p.repaired} CPU-wrong reads repaired on the GPU)" if p.repaired else "")
        return
    total = p.interleavings + sum(p.failing.values())
    fails = ", ".join(f"{k} {v}" for k, v in sorted(p.failing.items()))
    print(f"{name}: FAILS in {sum(p.failing.values())} of {total} interleavings ({fails})")
    for kind, cx in sorted(p.minimal.items()):
        rows, steps, ops = cx.key[:3]
        print(f"  minimal {kind}: {rows} rows, {steps} steps, {ops} row ops")
        for line in story(cx).splitlines():
            print(f"    {line}")


def cmd_shrink(args: argparse.Namespace) -> int:
    from sim.explore.shrink import shrink_run
    from sim.runs.outputs import prepare_file

    out = Path(args.out) if args.out else Path(args.run) / f"shrunk-{args.step}-{args.req}.toml"
    prepare_file(out)
    result = shrink_run(Path(args.run), args.step, args.req, out)
    print(result.summary())
    print(f"wrote {out}: rerun with python -m sim run --scenario {out} --policy {result.policy}")
    return 0
