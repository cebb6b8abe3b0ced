"""Checks before work starts: what a run or a sweep would cost this machine, and a sweep's
every grid value. A command that would need more memory or time than there is is refused up
front with the estimate, not discovered by the OOM killer hours later."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import SpecraceError
from sim.model.params import Scenario
from sim.runs.io import remove_stale
from sim.runs.limits import guard_resources

if TYPE_CHECKING:
    from sim.explore.sweep import SweepSpec

# A 100-point sweep of 2,000-step runs under the 9 policies took 138 s serial (README, Speed).
POLICY_POINT_STEPS_PER_S = 13_000
SWEEP_CPU_S_MAX = 30 * 86_400
GRID_CHECKED_MAX = 5_000  # grid combinations validated one by one (beyond: each value alone)


def check_sweep(spec: SweepSpec, base: Scenario, out: Path) -> None:
    """Everything a sweep will need, before ``sweep.json`` is written: every grid value (and
    combination) a valid scenario, a size this machine can run, an ``--out`` that can be a
    directory. Stale temporaries of a killed sweep are removed (resume)."""
    import math

    from sim.model.params import with_overrides

    settings = spec.swarm or math.prod(len(v) for _k, v in spec.vary)
    n_points = settings * spec.seeds
    cpu_s = n_points * spec.steps * len(spec.policies) / POLICY_POINT_STEPS_PER_S
    if cpu_s > SWEEP_CPU_S_MAX:
        raise SpecraceError(
            f"the sweep has {n_points:,} points x {spec.steps:,} steps x {len(spec.policies)} "
            f"policies: about {cpu_s / 86_400:,.0f} CPU days at {POLICY_POINT_STEPS_PER_S:,} "
            "policy-point-steps/s; sweep fewer points or steps"
        )

    def scenario(values: dict) -> None:
        try:
            sc = with_overrides(base, {k: str(v) for k, v in values.items()})
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
    """The finished points a resumed sweep will collect: each a summary of its own name (the
    file name is the hash of its settings, seed and policy), with counts that are counts, so
    an edited or foreign point is named here instead of becoming a row of sweep.parquet."""
    import math
    import re

    from sim.explore.sweep import point_id
    from sim.model.policies import POLICIES
    from sim.runs.io import read_json

    folder = out / "points"
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        if not re.fullmatch(r"[0-9a-f]{16}\.json", path.name):
            continue
        row = read_json(path, "sweep point")

        def fail(why: str, path: Path = path) -> SpecraceError:
            return SpecraceError(f"{path}: not a point of this sweep ({why}); delete it to run "
                                 "the point again")  # fmt: skip

        if not isinstance(row, dict):
            raise fail("not a JSON object")
        policy, seed = row.get("policy"), row.get("seed")
        if not isinstance(policy, str) or policy not in POLICIES or type(seed) is not int:
            raise fail("no known policy or no integer seed")
        settings = {k[4:]: v for k, v in row.items() if k.startswith("set.")}
        if point_id({"set": settings, "seed": seed}, policy) != path.stem:
            raise fail("its settings, seed and policy do not give its name")
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


def check_vary(items: list[str]) -> None:
    """``--vary KEY=V1,V2,...`` values as ``sim.explore.sweep.parse_vary`` splits them: each a
    number, string or boolean (a grid point of a list or a table has no meaning)."""
    from sim.model.params import parse_value

    for item in items:
        key, _sep, values = item.partition("=")
        for v in values.split(","):
            if isinstance(parse_value(v.strip()), list | dict):
                raise SpecraceError(f"--vary {key.strip()}: {v.strip()!r} is not one value "
                                    "(a number, a string or true/false)")  # fmt: skip
