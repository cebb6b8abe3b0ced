"""Sweeps: many runs of one scenario over a grid of parameters or a swarm of timing sets.

A sweep directory holds ``sweep.json`` (the spec), ``points/<id>.json`` (one summary per
finished point, written atomically) and, at the end, ``sweep.parquet`` (one row per point).
A killed sweep resumes: points already on disk are not run again. A directory that holds
another sweep's spec is refused rather than mixed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import SpecraceError
from sim.explore.swarm import draw_timing
from sim.model.params import Scenario, load_scenario, parse_value, with_overrides
from sim.model.policies import POLICIES
from sim.model.scheduling import build_schedule
from sim.runs.io import ensure_out_dir, read_json, write_json
from sim.runs.run import run_policy, write_parquet


@dataclass(frozen=True)
class SweepSpec:
    scenario: str
    policies: tuple[str, ...]
    vary: tuple[tuple[str, tuple[Any, ...]], ...]  # (key, values) for a grid
    swarm: int  # > 0: that many swarm timing sets instead of a grid
    seeds: int
    steps: int

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "policies": list(self.policies),
            "vary": [[k, list(v)] for k, v in self.vary],
            "swarm": self.swarm,
            "seeds": self.seeds,
            "steps": self.steps,
        }

    def points(self) -> list[dict[str, Any]]:
        """Every (settings, seed) of the sweep; policies share a point's schedule."""
        if self.swarm:
            settings = [{"swarm": i} for i in range(self.swarm)]
        else:
            keys = [k for k, _ in self.vary]
            settings = [
                dict(zip(keys, combo, strict=True))
                for combo in itertools.product(*(v for _, v in self.vary))
            ]
        return [{"set": s, "seed": seed} for s in settings for seed in range(self.seeds)]


def point_id(point: dict[str, Any], policy: str) -> str:
    key = json.dumps({"point": point, "policy": policy}, sort_keys=True)
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def parse_vary(items: list[str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    out = []
    for item in items:
        key, sep, values = item.partition("=")
        vals = tuple(parse_value(v.strip()) for v in values.split(",") if v.strip())
        if not sep or not vals:
            raise SpecraceError(f"--vary {item!r}: expected section.key=v1,v2,...")
        out.append((key.strip(), vals))
    return tuple(out)


def _scenario_for(base: Scenario, settings: dict[str, Any]) -> Scenario:
    if "swarm" in settings:
        return replace(base, timing=draw_timing(base.timing, int(settings["swarm"])))
    return with_overrides(base, {k: str(v) for k, v in settings.items()})


def run_sweep(spec: SweepSpec, out: Path, log=print) -> pd.DataFrame:
    out = ensure_out_dir(out)
    for name in spec.policies:
        if name not in POLICIES:
            raise SpecraceError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    spec_path = out / "sweep.json"
    if spec_path.exists():
        if read_json(spec_path, "sweep spec") != spec.to_json():
            raise SpecraceError(f"{out} holds a different sweep; use another --out")
    else:
        write_json(spec_path, spec.to_json())
    base = load_scenario(spec.scenario)
    points = spec.points()
    done = skipped = 0
    for point in points:
        todo = [
            p for p in spec.policies if not (out / "points" / f"{point_id(point, p)}.json").exists()
        ]
        if not todo:
            skipped += len(spec.policies)
            continue
        scenario = _scenario_for(base, point["set"])
        schedule = build_schedule(scenario, point["seed"], spec.steps)
        for name in todo:
            summary = run_policy(
                schedule, scenario, POLICIES[name], point["seed"], trace=False
            ).summary
            row = {
                **{f"set.{k}": v for k, v in point["set"].items()},
                "seed": point["seed"],
                **_flat(summary),
                **_timing_columns(scenario),
            }
            write_json(out / "points" / f"{point_id(point, name)}.json", row)
            done += 1
        log(f"point {point['set']} seed={point['seed']}: {len(todo)} policies")
    log(f"ran {done} point-policies, {skipped} already done")
    return collect(out, spec)


def collect(out: Path, spec: SweepSpec | None = None) -> pd.DataFrame:
    """Gather finished points into ``sweep.parquet`` (sorted, so the file is reproducible)."""
    files = sorted((out / "points").glob("*.json"))
    if not files:
        raise SpecraceError(f"{out}: no finished points")
    rows = [read_json(f, "sweep point") for f in files]
    df = pd.DataFrame(rows)
    sort_cols = [c for c in df.columns if c.startswith("set.")] + ["seed", "policy"]
    df = df.sort_values(sort_cols, kind="stable").reset_index(drop=True)
    write_parquet(out / "sweep.parquet", df)
    return df


def _flat(summary: dict[str, Any]) -> dict[str, Any]:
    flat = {k: v for k, v in summary.items() if k != "by_kind"}
    for kind in ("unlanded", "ownership", "double-permute"):
        flat[f"kind.{kind}"] = summary["by_kind"].get(kind, 0)
    return flat


def _timing_columns(scenario: Scenario) -> dict[str, Any]:
    t = scenario.timing
    return {f"timing.{k}": getattr(t, k) for k in t.__dataclass_fields__}
