"""Sweeps: many runs of one scenario over a grid of parameters or a swarm of timing sets.

A sweep directory holds ``sweep.json`` (the spec), ``points/<id>.json`` (one summary per
finished point and policy, written atomically by the driver as results arrive) and
``sweep.parquet`` (one row per point and policy, sorted, so the file is the same bytes
whatever the number of workers or the order in which points finished).

Resume and extend: points already on disk are not run again, so a killed sweep resumes
where it stopped, and a spec that only adds grid values, seeds, swarm sets or policies to
the one on disk extends it. Any other change (scenario, steps, a removed value) is refused
rather than mixed.

Points run serially in this process or in parallel on a Dask distributed cluster (a
``LocalCluster`` of ``workers`` processes, or an existing scheduler's address). What one
point computes is :func:`run_point`: the one function a faster timing tier replaces.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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

    @staticmethod
    def from_json(d: dict[str, Any]) -> SweepSpec:
        return SweepSpec(
            d["scenario"],
            tuple(d["policies"]),
            tuple((k, tuple(v)) for k, v in d["vary"]),
            int(d["swarm"]),
            int(d["seeds"]),
            int(d["steps"]),
        )

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

    def extends(self, old: SweepSpec) -> bool:
        """Whether this spec holds every point and policy of ``old`` (same scenario, steps
        and swept keys), so ``old``'s finished points belong to it."""
        if (self.scenario, self.steps) != (old.scenario, old.steps):
            return False
        if not set(old.policies) <= set(self.policies) or self.seeds < old.seeds:
            return False
        if bool(self.swarm) != bool(old.swarm) or self.swarm < old.swarm:
            return False
        mine = dict(self.vary)
        if [k for k, _ in self.vary] != [k for k, _ in old.vary]:
            return False
        return all(set(v) <= set(mine[k]) for k, v in old.vary)


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
        if len(set(vals)) != len(vals):
            raise SpecraceError(f"--vary {item!r}: a value appears twice")
        out.append((key.strip(), vals))
    return tuple(out)


def _scenario_for(base: Scenario, settings: dict[str, Any]) -> Scenario:
    if "swarm" in settings:
        return replace(base, timing=draw_timing(base.timing, int(settings["swarm"])))
    return with_overrides(base, {k: str(v) for k, v in settings.items()})


def run_point(
    base: Scenario, point: dict[str, Any], policies: list[str], steps: int
) -> list[dict[str, Any]]:
    """One point of a sweep: its schedule, simulated under each policy -> one row each.

    The per-point simulation lives here only, so another timing tier can replace it."""
    scenario = _scenario_for(base, point["set"])
    schedule = build_schedule(scenario, point["seed"], steps)
    rows = []
    for name in policies:
        summary = run_policy(schedule, scenario, POLICIES[name], point["seed"], trace=False).summary
        rows.append(
            {
                **{f"set.{k}": v for k, v in point["set"].items()},
                "seed": point["seed"],
                "scenario": base.name,
                **_flat(summary),
                **_timing_columns(scenario),
            }
        )
    return rows


def _task(scenario: str, point: dict[str, Any], policies: list[str], steps: int) -> list[dict]:
    """What a Dask worker runs: plain arguments in, plain rows out (no file I/O there, so a
    remote cluster needs no shared disk)."""
    return run_point(load_scenario(scenario), point, policies, steps)


class Progress:
    """``[ 12/100]  12 %  0:05 elapsed, ETA 0:37  <what>`` per finished point."""

    def __init__(self, total: int, log: Callable[[str], None]) -> None:
        self.total, self.log, self.done = total, log, 0
        self.t0 = time.monotonic()

    def step(self, what: str) -> None:
        self.done += 1
        el = time.monotonic() - self.t0
        eta = el / self.done * (self.total - self.done)
        w = len(str(self.total))
        pct = 100 * self.done // max(self.total, 1)
        self.log(
            f"[{self.done:>{w}}/{self.total}] {pct:3d} %  {_hms(el)} elapsed, "
            f"ETA {_hms(eta)}  {what}"
        )


def _hms(s: float) -> str:
    s = int(round(s))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def terminal_log(quiet: bool = False) -> Callable[[str], None]:
    """Progress lines for the CLI: on stderr, rewritten in place on a terminal."""
    if quiet:
        return lambda _msg: None
    tty = sys.stderr.isatty()

    def log(msg: str) -> None:
        if tty and msg.startswith("["):
            sys.stderr.write("\r\033[K" + msg[:160])
            sys.stderr.flush()
        else:
            sys.stderr.write(("\n" if tty else "") + msg + "\n")

    return log


def _prepare(spec: SweepSpec, out: Path, log: Callable[[str], None]) -> None:
    for name in spec.policies:
        if name not in POLICIES:
            raise SpecraceError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    spec_path = out / "sweep.json"
    if spec_path.exists():
        on_disk = read_json(spec_path, "sweep spec")
        if on_disk == spec.to_json():
            return
        try:
            old = SweepSpec.from_json(on_disk)
        except (KeyError, TypeError, ValueError):
            raise SpecraceError(f"{spec_path}: not a sweep spec") from None
        if not spec.extends(old):
            raise SpecraceError(
                f"{out} holds a different sweep (an extension may only add grid values, "
                "seeds, swarm sets or policies); use another --out"
            )
        log(f"extending {out}: {len(old.points())} -> {len(spec.points())} points")
    write_json(spec_path, spec.to_json())


def run_sweep(
    spec: SweepSpec,
    out: Path,
    log: Callable[[str], None] = print,
    workers: int = 1,
    scheduler: str = "",
) -> pd.DataFrame:
    """Run every unfinished point of ``spec`` into ``out`` and return ``sweep.parquet``'s table.

    ``workers`` 1 and no ``scheduler``: in this process. Otherwise on Dask: ``scheduler`` is
    an existing cluster's address, else a LocalCluster of ``workers`` processes (0: one per
    core)."""
    out = ensure_out_dir(out)
    _prepare(spec, out, log)
    points = spec.points()
    todo: list[tuple[dict[str, Any], list[str]]] = []
    skipped = 0
    for point in points:
        left = [p for p in spec.policies if not _point_path(out, point, p).exists()]
        skipped += len(spec.policies) - len(left)
        if left:
            todo.append((point, left))
    progress = Progress(len(todo), log)
    done = 0
    results = (
        _serial(spec, todo)
        if workers == 1 and not scheduler
        else _dask(spec, todo, workers, scheduler)
    )
    for point, names, rows in results:
        for name, row in zip(names, rows, strict=True):
            write_json(_point_path(out, point, name), row)
        done += len(names)
        progress.step(f"{point['set']} seed={point['seed']}: {len(names)} policies")
    log(f"ran {done} point-policies, {skipped} already done")
    return collect(out, spec)


def _point_path(out: Path, point: dict[str, Any], policy: str) -> Path:
    return out / "points" / f"{point_id(point, policy)}.json"


def _serial(spec: SweepSpec, todo: list) -> Iterator[tuple[dict, list[str], list[dict]]]:
    base = load_scenario(spec.scenario)
    for point, names in todo:
        yield point, names, run_point(base, point, names, spec.steps)


def _dask(
    spec: SweepSpec, todo: list, workers: int, scheduler: str
) -> Iterator[tuple[dict, list[str], list[dict]]]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise SpecraceError(
            "parallel sweeps need Dask: pip install 'specrace[dask]' (or --workers 1)"
        ) from None
    if not todo:
        return
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as e:
            raise SpecraceError(f"--scheduler {scheduler}: cannot connect ({e})") from None
        cluster = None
    else:
        n = workers or os.cpu_count() or 1
        # Processes, one thread each: the simulation is pure Python (the GIL).
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            local_directory=tempfile.gettempdir(),
        )
        client = Client(cluster)
    try:
        futures = [
            client.submit(_task, spec.scenario, point, names, spec.steps, pure=False)
            for point, names in todo
        ]
        which = {f.key: item for f, item in zip(futures, todo, strict=True)}
        for fut in as_completed(futures):
            point, names = which[fut.key]
            yield point, names, fut.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def collect(out: Path, spec: SweepSpec | None = None) -> pd.DataFrame:
    """Gather finished points into ``sweep.parquet``, sorted so the file is reproducible.
    With ``spec``: that spec's points only."""
    if spec is None:
        files = sorted((out / "points").glob("*.json"))
    else:
        files = [
            f
            for f in (_point_path(out, pt, p) for pt in spec.points() for p in spec.policies)
            if f.exists()
        ]
    if not files:
        raise SpecraceError(f"{out}: no finished points")
    rows = [read_json(f, "sweep point") for f in files]
    df = pd.DataFrame(rows)
    sort_cols = [c for c in df.columns if c.startswith("set.")] + ["seed", "policy"]
    df = df.sort_values(sort_cols, kind="stable").reset_index(drop=True)
    df = df[sorted(df.columns, key=_column_order)]
    write_parquet(out / "sweep.parquet", df)
    return df


def _column_order(c: str) -> tuple[int, str]:
    """set.* first, then the summary, then timing.*; within a group by name (stable bytes)."""
    return (0 if c.startswith("set.") else 2 if c.startswith("timing.") else 1, c)


def _flat(summary: dict[str, Any]) -> dict[str, Any]:
    flat = {k: v for k, v in summary.items() if k != "by_kind"}
    for kind in ("unlanded", "ownership", "double-permute"):
        flat[f"kind.{kind}"] = summary["by_kind"].get(kind, 0)
    return flat


def _timing_columns(scenario: Scenario) -> dict[str, Any]:
    t = scenario.timing
    return {f"timing.{k}": getattr(t, k) for k in t.__dataclass_fields__}


def sweep_bench(
    workers: int,
    points: int = 100,
    steps: int = 2000,
    policies: tuple[str, ...] = ("synced-gather",),
) -> dict[str, Any]:
    """``python -m sim bench --sweep``: a swarm sweep of ``points`` ``steps``-step qwen35-mtp3
    runs in a temporary directory on ``workers`` (1: in this process), timed end to end
    (cluster start included)."""
    spec = SweepSpec("qwen35-mtp3", policies, (), points, 1, steps)
    with tempfile.TemporaryDirectory(prefix="specrace-sweep-bench-") as tmp:
        t0 = time.perf_counter()
        df = run_sweep(spec, Path(tmp), log=lambda _m: None, workers=workers)
        wall = time.perf_counter() - t0
    runs = len(df)
    return {
        "workers": workers,
        "points": points,
        "policies": len(policies),
        "steps_per_run": steps,
        "wall_s": round(wall, 2),
        "runs_per_s": round(runs / wall, 3),
        "steps_per_s": round(runs * steps / wall, 1),
        "s_per_1000_points": round(wall / points * 1000, 1),
    }
