"""Command line: ``schedule`` now; ``run`` and ``bench`` are added by the timing model.

Every :class:`SpecraceError` becomes one ``error: ...`` line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim import schedule as schedule_mod
from sim.errors import SpecraceError
from sim.io import atomic_write_text, ensure_out_dir
from sim.params import Scenario, load_scenario
from sim.scheduling import build_schedule


def _overrides(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecraceError(f"--set {item!r}: expected section.key=value")
        out[key.strip()] = value.strip()
    return out


def print_parameters(scenario: Scenario, seed: int) -> None:
    print(f"SEED={seed}")
    print(f"scenario={scenario.name}")
    for section in ("engine", "workload", "timing"):
        for key, value in scenario.to_dict()[section].items():
            if key == "requests":
                value = f"<{len(value)} scripted requests>"
            print(f"{section}.{key}={value}")


def cmd_schedule(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, _overrides(args.set))
    steps = args.steps or scenario.default_steps
    print_parameters(scenario, args.seed)
    sched = build_schedule(scenario, args.seed, steps)
    out = ensure_out_dir(Path(args.out))
    atomic_write_text(out / "schedule.json", schedule_mod.dumps(sched))
    s = sched.summary()
    print(
        f"steps={s['steps']} requests_arrived={s['requests_arrived']} "
        f"requests_scheduled={s['requests_scheduled']} "
        f"requests_finished={s['requests_finished']}"
    )
    print("row_ops " + " ".join(f"{k}={v}" for k, v in s["row_ops"].items()))
    print(f"first_spec_steps={s['first_spec_steps']}")
    print(f"wrote {out / 'schedule.json'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("schedule", help="write the timing-free schedule.json")
    s.add_argument("--scenario", default="qwen35-mtp3", help="built-in name or TOML path")
    s.add_argument("--steps", type=int, default=0, help="engine steps (default: scenario's)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True)
    s.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    s.set_defaults(func=cmd_schedule)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "steps", 0) and args.steps < 0:
            raise SpecraceError("--steps must be > 0")
        return args.func(args)
    except SpecraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
