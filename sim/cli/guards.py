"""Checks before work starts: what a run or a sweep would cost this machine, and a sweep's
every grid value. A command that would need more memory or time than there is is refused up
front with the estimate, not discovered by the OOM killer hours later."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.errors import SpecraceError
from sim.model.params import Scenario
from sim.runs.io import remove_stale
from sim.runs.limits import guard_resources

if TYPE_CHECKING:
    from sim.explore.sweep import SweepSpec

SWEEP_CPU_S_MAX = 30 * 86_400
GRID_CHECKED_MAX = 5_000  # grid combinations validated one by one (beyond: each value alone)


def check_sweep(spec: SweepSpec, base: Scenario, out: Path) -> None:
    """Everything a sweep will need, before ``sweep.json`` is written: every grid value (and
    combination) a valid scenario, a size this machine can run, an ``--out`` that can be a
    directory. Stale temporaries of a killed sweep are removed (resume)."""
    import math

    from sim.explore.sweep import SIMPY_POINT_STEPS_PER_S as rate
    from sim.model.params import with_values

    settings = spec.swarm or math.prod(len(v) for _k, v in spec.vary)
    n_points = settings * spec.seeds
    cpu_s = n_points * spec.steps * len(spec.policies) / rate
    if cpu_s > SWEEP_CPU_S_MAX:
        raise SpecraceError(
            f"the sweep has {n_points:,} points x {spec.steps:,} steps x {len(spec.policies)} "
            f"policies: about {cpu_s / 86_400:,.0f} CPU days at {rate:,} "
            "policy-point-steps/s; sweep fewer points or steps"
        )

    def scenario(values: dict) -> None:
        try:
            sc = with_values(base, values)
        except SpecraceError as e:
            shown = ", ".join(f"{k}={v}" for k, v in values.items())
            raise SpecraceError(f"--vary {shown}: {str(e).removeprefix('--set: ')}") from None
        guard_resources(sc, spec.steps)

    for key, values in spec.vary:
        for v in values:
            scenario({key: v})
    if spec.vary and settings > 1 and len(spec.vary) > 1:
        for combo in itertools.islice(
            itertools.product(*(v for _k, v in spec.vary)), GRID_CHECKED_MAX
        ):
            scenario(dict(zip([k for k, _v in spec.vary], combo, strict=True)))
    if not spec.vary:
        guard_resources(base, spec.steps)
    from sim.runs.outputs import prepare_dir

    out = prepare_dir(out, "sweep", replace=False)
    remove_stale(out)
    remove_stale(out / "points")
    check_spec_file(out / "sweep.json")
    check_points(out)


def check_spec_file(path: Path) -> None:
    """The ``sweep.json`` of a sweep to resume or extend: the shape ``SweepSpec.to_json``
    writes, so comparing it with the new spec cannot fail halfway."""
    from sim.model.policies import POLICIES
    from sim.runs.io import read_json

    if not path.is_file():
        return
    d = read_json(path, "sweep spec")

    def scalar(v: object) -> bool:
        return isinstance(v, str | int | float | bool)

    keys = {"scenario", "policies", "vary", "swarm", "seeds", "steps"}
    # "engine" is written since the vectorized tier became the default (older specs lack it)
    ok = isinstance(d, dict) and set(d) in (keys, keys | {"engine"})
    ok = ok and d.get("engine", "simpy") in ("simpy", "vector")
    ok = ok and isinstance(d["scenario"], str) and isinstance(d["policies"], list)
    ok = ok and all(isinstance(p, str) and p in POLICIES for p in d["policies"])
    ok = ok and all(type(d[k]) is int and d[k] >= 0 for k in ("swarm", "seeds", "steps"))
    ok = ok and isinstance(d["vary"], list) and all(
        isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], str)
        and isinstance(kv[1], list) and all(scalar(v) for v in kv[1])
        for kv in d["vary"]
    )  # fmt: skip
    if not ok:
        raise SpecraceError(f"{path}: not a sweep spec (python -m sim sweep writes it)")


def check_points(out: Path) -> None:
    """The finished points a resumed sweep will collect (``sim.explore.sweep_points``): each a
    summary of its own id (the hash of its settings, seed and policy: an older sweep's file
    name, a unit file's line), with counts that are counts, so an edited or foreign point is
    named here instead of becoming a row of sweep.parquet."""
    from sim.explore.sweep_points import POINT_FILE, UNIT_FILE, unit_lines
    from sim.runs.io import read_json

    folder = out / "points"
    if not folder.is_dir():
        return
    for path in sorted(folder.iterdir()):
        if POINT_FILE.fullmatch(path.name):
            check_point_row(read_json(path, "sweep point"), path.stem, str(path))
        elif UNIT_FILE.fullmatch(path.name):
            for n, pid, row in unit_lines(path):
                check_point_row(row, pid, f"{path} line {n}")


def check_point_row(row: object, pid: str, where: str) -> None:
    import math

    from sim.explore.sweep import point_id
    from sim.model.policies import POLICIES

    def fail(why: str) -> SpecraceError:
        return SpecraceError(f"{where}: not a point of this sweep ({why}); delete the file to "
                             "run its points again")  # fmt: skip

    if not isinstance(row, dict):
        raise fail("not a JSON object")
    policy, seed = row.get("policy"), row.get("seed")
    if not isinstance(policy, str) or policy not in POLICIES or type(seed) is not int:
        raise fail("no known policy or no integer seed")
    settings = {k[4:]: v for k, v in row.items() if k.startswith("set.")}
    if point_id({"set": settings, "seed": seed}, policy) != pid:
        raise fail("its settings, seed and policy do not give its id")
    for key in ("steps", "reads", "cpu_wrong", "gpu_wrong", "corrupted_requests"):
        v = row.get(key)
        if type(v) is not int or v < 0:
            raise fail(f"{key} is {v!r}, not a count")
    for key, v in row.items():
        if key.startswith("set.") or key == "policy":
            continue
        if key == "scenario":
            if not isinstance(v, str):
                raise fail(f"scenario is {v!r}, not a name")
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise fail(f"{key} is {v!r}, not a number")


INT_DIGITS_MAX = 30  # past every parameter's range (|x| <= 10^13) and any count's


def check_int_text(flag: str, key: str, value: str) -> None:
    """An integer literal of any length is refused with the range, before it is parsed (Python
    refuses to parse one of more than 4,300 digits, and parsing a long one is slow)."""
    import re

    digits = value.strip().lstrip("+-").replace("_", "")
    if len(digits) > INT_DIGITS_MAX and re.fullmatch(r"[0-9]+", digits):
        raise SpecraceError(f"{flag} {key}={value.strip()[:12]}...: an integer of {len(digits):,} "
                            "digits is out of range (|x| <= 10^13)")  # fmt: skip


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``--set SECTION.KEY=VALUE`` items as typed values: the one place a command line's
    parameter text becomes a value (a TOML value; a bare word is a string). From here on a
    parameter travels as that value to the scenario, which checks its key and value when it is
    made (``sim.model.params.with_values``)."""
    from sim.model.params import parse_value

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecraceError(f"--set {item!r}: expected section.key=value")
        check_int_text("--set", key, value)
        out[key] = parse_value(value.strip())
    return out


def check_vary(items: list[str]) -> None:
    """``--vary KEY=V1,V2,...`` values as ``sim.explore.sweep.parse_vary`` splits them: each a
    number, string or boolean (a grid point of a list or a table has no meaning)."""
    from sim.model.params import parse_value

    for item in items:
        key, _sep, values = item.partition("=")
        for v in values.split(","):
            check_int_text("--vary", key.strip(), v)
            if isinstance(parse_value(v.strip()), list | dict):
                raise SpecraceError(f"--vary {key.strip()}: {v.strip()!r} is not one value "
                                    "(a number, a string or true/false)")  # fmt: skip


# -- what a search costs: refused past --budget, with the estimate ------------------------------
BUDGET_H = 1.0  # the default --budget: CPU hours
# sim check: the search's build_schedule runs plus evaluations, fitted to measured spaces (rows
# R, steps S; k leaves them alone): 200 * 3.2^(R-1) at S = 2 (measured 172, 655, 2,086, 5,948
# for R = 1..4), each further step x 2.5 * 2^(R-1) * (S-1)^R (measured 2.5-4.3 at R = 1, 4.8
# and 24.7 at R = 2, 10.2 at R = 3, 24.1 at R = 4); 1 ms each since the admission capacity
# split of issue #22 (`sim check --k 3` on the quiet 2-core machine, 2026-12-03: R x S = 2 x 3
# 1.3 s, 2 x 4 32.9 s, 3 x 2 1.1 s, 3 x 3 15.8 s, 4 x 2 4.4 s, 4 x 3 141 s; the estimate is
# 0.9-2.5 times those).
CHECK_UNIT_S = 1.0e-3
# risk and field-reports: one run of S steps x R rows, schedule built and simulated; measured
# ~0.6 s for 2,000 x 64 on the vector tier; the SimPy tier taken 4 times slower.
ROW_STEPS_PER_S = {"vector": 200_000, "simpy": 50_000}
RISK_ESTIMATES_MAX = 6  # the configuration and its mitigations, each a distinct path at most


def check_search_s(rows: int, steps: int) -> float:
    units = 200 * 3.2 ** (rows - 1)
    for s in range(2, steps):
        units *= 2.5 * 2 ** (rows - 1) * (s - 1) ** rows
    return units * CHECK_UNIT_S


def runs_s(runs: int, steps: int, rows: int, engine: str = "vector") -> float:
    return runs * steps * rows / ROW_STEPS_PER_S.get(engine, ROW_STEPS_PER_S["simpy"])


def check_budget(what: str, cpu_s: float, budget_h: float, fewer: str) -> None:
    """Refuse work estimated to take more than ``budget_h`` CPU hours, saying how much."""
    import math

    from sim.runs.args import BUDGET_H_MAX

    if cpu_s <= budget_h * 3600:
        return
    need = math.ceil(cpu_s / 3600)
    if need > BUDGET_H_MAX:
        raise SpecraceError(f"{what}: about 10^{math.log10(need):.0f} CPU hours (estimate), "
                            f"more than any --budget allows; {fewer}")  # fmt: skip
    raise SpecraceError(f"{what}: about {need:,} CPU hours (estimate), more than --budget "
                        f"{budget_h:g}; {fewer}, or --budget {need} to run it")  # fmt: skip


def bench_s(steps: int, points: int, vector_steps: int, long_steps: int, sweep: int) -> float:
    """``sim bench``'s CPU time, from its own rates measured here: the SimPy tier ~8,000 steps/s
    (and as long again for bare SimPy and the schedule rates), 8 sampled points at ~6,000
    point-steps/s, the vector tier ~10^6 point-steps/s, the long runs ~1,000 streamed steps/s
    (docs/reference.md, Speed: 10^6 steps in 542-1,017 s); ``--sweep``: 100 points of 2,000
    steps took ~35 s over its three tiers."""
    if sweep:
        return sweep * steps * 2e-4
    return (3 * steps / 8_000 + 8 * vector_steps / 6_000 + points * vector_steps / 1e6
            + 2.5 * long_steps / 1_000)  # fmt: skip
