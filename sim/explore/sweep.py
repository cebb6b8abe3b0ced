"""Sweeps: many runs of one scenario over a grid of parameters or a swarm of timing sets.

A sweep directory holds ``sweep.json`` (the spec), ``points/`` (the summaries of the finished
points and policies, one file per finished work unit, written atomically by the driver as
results arrive: :mod:`sim.explore.sweep_points`) and
``sweep.parquet`` (one row per point and policy, sorted, so the file is the same bytes
whatever the number of workers or the order in which points finished).

Resume and extend: points already on disk are not run again, so a killed sweep resumes
where it stopped, and a spec that only adds grid values, seeds, swarm sets or policies to
the one on disk extends it. Any other change (scenario, steps, a removed value) is refused
rather than mixed.

Points run serially in this process, on a pool of local worker processes started from a
fork server that has imported the simulator (:mod:`sim.runs.processes`: a worker is ready in
milliseconds), or on a Dask distributed cluster: an existing scheduler's address, or a
``LocalCluster`` that :func:`run_sweep` starts when asked (``executor="dask"``). On one
machine the pool is the default: a LocalCluster's start (about 3 s for 16 workers) and its
scheduler process buy nothing that CPU-bound units of pure Python need.

Schedules built once: :func:`run_points` groups points by what their schedule depends on
(the scenario's engine and workload sections, and the seed; a timing setting never changes
it), builds each distinct schedule once and simulates all of that group's timing points on
it. ``engine`` picks the timing tier: ``vector`` (the default: every point of a group in one
:func:`sim.model.vector.simulate_points` call) or ``simpy`` (the reference, point by point);
both give the same summaries (tests/sim/explore/test_sweep.py holds them to the same bytes), and the
spec records the tier, so a sweep is never resumed with the other one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import SpecraceError, did_you_mean
from sim.explore.swarm import draw_timing
from sim.explore.sweep_points import finished, write_unit
from sim.model.params import Scenario, load_scenario, parse_value, with_values
from sim.model.policies import POLICIES
from sim.model.scheduling import build_schedule
from sim.model.vector import simulate_points
from sim.model.verdict import HAZARD_KINDS
from sim.runs import processes
from sim.runs.io import read_json, write_json
from sim.runs.outputs import check_path, claim_dir, prepare_dir
from sim.runs.run import run_policy, write_parquet

ENGINES = ("vector", "simpy")  # timing tiers; the first is the default
# Timing points per vector-tier call: large batches amortize the per-step Python loop, and a
# chunk is also what the progress line and a Dask task count in.
CHUNK_POINTS = 1024


@dataclass(frozen=True)
class SweepSpec:
    scenario: str
    policies: tuple[str, ...]
    vary: tuple[tuple[str, tuple[Any, ...]], ...]  # (key, values) for a grid
    swarm: int  # > 0: that many swarm timing sets instead of a grid
    seeds: int
    steps: int
    engine: str = ENGINES[0]  # the timing tier (ENGINES)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "policies": list(self.policies),
            "vary": [[k, list(v)] for k, v in self.vary],
            "swarm": self.swarm,
            "seeds": self.seeds,
            "steps": self.steps,
            "engine": self.engine,
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
            str(d.get("engine", "simpy")),  # sweeps from before the flag ran the SimPy tier
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
        if (self.scenario, self.steps, self.engine) != (old.scenario, old.steps, old.engine):
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
    return with_values(base, settings)  # typed: str(True) would not read back as true


def run_point(
    base: Scenario, point: dict[str, Any], policies: list[str], steps: int, engine: str = "simpy"
) -> list[dict[str, Any]]:
    """One point of a sweep: its schedule, simulated under each policy -> one row each."""
    return run_points(base, [(point, policies)], steps, engine)[0]


def schedule_key(scenario: Scenario, seed: int) -> str:
    """What a point's schedule depends on: the engine and workload sections and the seed
    (``build_schedule`` reads no timing)."""
    d = scenario.to_dict()
    return json.dumps([d["engine"], d["workload"], seed], sort_keys=True, default=str)


def schedule_keys(base: Scenario, todo: list[tuple[dict[str, Any], list[str]]]) -> list[str]:
    """:func:`schedule_key` of every point of ``todo``, each computed once per distinct
    (non-timing settings, seed): a timing setting or a swarm set changes only the timing
    section, which no schedule reads, so points that differ only there share the key."""
    memo: dict[tuple, str] = {}
    keys = []
    for point, _ in todo:
        kept = {
            k: v for k, v in point["set"].items() if k != "swarm" and not k.startswith("timing.")
        }
        mk = (json.dumps(kept, sort_keys=True, default=str), point["seed"])
        if mk not in memo:
            memo[mk] = schedule_key(_scenario_for(base, kept), point["seed"])
        keys.append(memo[mk])
    return keys


def run_points(
    base: Scenario,
    todo: list[tuple[dict[str, Any], list[str]]],
    steps: int,
    engine: str = ENGINES[0],
) -> list[list[dict[str, Any]]]:
    """Rows of several ``(point, policies)``, in ``todo``'s order: each distinct schedule is
    built once, then its points are simulated under each policy (``engine``: the tier)."""
    if engine not in ENGINES:
        raise SpecraceError(f"--engine {engine!r}: expected {' or '.join(ENGINES)}")
    scenarios = [_scenario_for(base, point["set"]) for point, _ in todo]
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(schedule_keys(base, todo)):
        groups.setdefault(key, []).append(i)
    summaries: list[dict[str, dict]] = [{} for _ in todo]
    for members in groups.values():
        seed = todo[members[0]][0]["seed"]
        schedule = build_schedule(scenarios[members[0]], seed, steps)
        for name in dict.fromkeys(p for i in members for p in todo[i][1]):
            who = [i for i in members if name in todo[i][1]]
            if engine == "vector":
                res = simulate_points(
                    schedule,
                    [scenarios[i].timing for i in who],
                    POLICIES[name],
                    seed,
                    keep_reads=False,
                    keep_timing=False,
                )
                for i, summary in zip(who, res.summaries, strict=True):
                    summaries[i][name] = summary
            else:
                for i in who:
                    summaries[i][name] = run_policy(
                        schedule, scenarios[i], POLICIES[name], seed, trace=False
                    ).summary
    return [
        [_row(base, point, scenarios[i], summaries[i][name]) for name in names]
        for i, (point, names) in enumerate(todo)
    ]


def _row(base: Scenario, point: dict[str, Any], scenario: Scenario, summary: dict) -> dict:
    return {
        **{f"set.{k}": v for k, v in point["set"].items()},
        "seed": point["seed"],
        "scenario": base.name,
        **_flat(summary),
        **_timing_columns(scenario),
    }


def chunks(
    base: Scenario,
    todo: list[tuple[dict[str, Any], list[str]]],
    parts: int = 1,
    keys: list[str] | None = None,
) -> list[list[tuple[dict[str, Any], list[str]]]]:
    """``todo`` cut into work units: points of one schedule together, at most
    :data:`CHUNK_POINTS` each, and cut further only as far as ``parts`` (the workers) need to
    all be busy: a schedule's points over ``ceil(parts / schedules)`` units, since every unit
    builds its schedule again (with as many schedules as workers, one unit each). ``keys``:
    :func:`schedule_keys` of ``todo`` if the caller has them."""
    groups: dict[str, list[tuple[dict[str, Any], list[str]]]] = {}
    keys = schedule_keys(base, todo) if keys is None else keys
    for item, key in zip(todo, keys, strict=True):
        groups.setdefault(key, []).append(item)
    per_group = -(-max(parts, 1) // max(len(groups), 1))
    out = []
    for items in groups.values():
        size = min(CHUNK_POINTS, -(-len(items) // per_group))
        out += [items[i : i + size] for i in range(0, len(items), size)]
    return out


def _task(
    scenario: str, todo: list[tuple[dict[str, Any], list[str]]], steps: int, engine: str
) -> list[list[dict]]:
    """What a worker runs: plain arguments in, plain rows out (no file I/O there, so a remote
    cluster needs no shared disk)."""
    return run_points(load_scenario(scenario), todo, steps, engine)


def _unit(args: tuple[str, list[tuple[dict[str, Any], list[str]]], int, str]) -> list[list[dict]]:
    """:func:`_task` of one packed unit (what the process pool maps)."""
    return _task(*args)


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
            hint = did_you_mean(name, POLICIES)
            raise SpecraceError(f"unknown policy {name!r}{hint} (known: {', '.join(POLICIES)})")
    if spec.engine not in ENGINES:
        raise SpecraceError(f"--engine {spec.engine!r}: expected {' or '.join(ENGINES)}")
    spec_path = out / "sweep.json"
    if spec_path.exists():
        on_disk = read_json(spec_path, "sweep spec")
        if on_disk == spec.to_json():
            return
        try:
            old = SweepSpec.from_json(on_disk)
        except (KeyError, TypeError, ValueError):
            raise SpecraceError(f"{spec_path}: not a sweep spec") from None
        if old.engine != spec.engine:
            raise SpecraceError(
                f"{out} holds a sweep run with --engine {old.engine}: resume it with "
                f"--engine {old.engine}, or use another --out"
            )
        if not spec.extends(old):
            raise SpecraceError(
                f"{out} holds a different sweep (an extension may only add grid values, "
                "seeds, swarm sets or policies); use another --out"
            )
        log(f"extending {out}: {len(old.points())} -> {len(spec.points())} points")
    claim_dir(out, "sweep")
    write_json(spec_path, spec.to_json())


EXECUTORS = ("processes", "dask")


def run_sweep(
    spec: SweepSpec,
    out: Path,
    log: Callable[[str], None] = print,
    workers: int = 1,
    scheduler: str = "",
    executor: str = EXECUTORS[0],
) -> pd.DataFrame:
    """Run every unfinished point of ``spec`` into ``out`` and return ``sweep.parquet``'s table.

    ``scheduler``: on that existing Dask cluster. Otherwise ``workers`` 1 runs in this process
    and more on as many local processes: a pool started from a fork server
    (``executor="processes"``; at most one process per core) or a Dask LocalCluster
    (``"dask"``); 0 lets ``sim.runs.processes.auto_workers`` choose from the work's estimate,
    serial where processes do not pay. The bytes are the same whichever runs."""
    if executor not in EXECUTORS:
        raise SpecraceError(f"executor {executor!r}: expected {' or '.join(EXECUTORS)}")
    out = prepare_dir(out, "sweep", replace=False)
    client = None
    if scheduler:  # one line, before anything is written, if it cannot be reached
        from sim.explore.dask_address import connect

        client = connect(scheduler)
    try:
        _prepare(spec, out, log)
    except BaseException:
        if client is not None:
            client.close()
        raise
    points = spec.points()
    todo: list[tuple[dict[str, Any], list[str]]] = []
    skipped = 0
    done_ids = set(finished(out / "points"))
    for point in points:
        left = [p for p in spec.policies if point_id(point, p) not in done_ids]
        skipped += len(spec.policies) - len(left)
        if left:
            todo.append((point, left))
    base = load_scenario(spec.scenario)
    keys = schedule_keys(base, todo)
    if workers == 0 and client is None:
        # One per core up to one per point, or serial below AUTO_MIN_S of work: the pool's fork
        # server imports the simulator first (about a second); the README's sweep is 0.7 s.
        est = serial_estimate_s(todo, keys, spec.steps, spec.engine)
        workers = processes.auto_workers(len(todo), est)
        log(
            f"{workers} worker processes (about {est:.0f} s of work serially)"
            if workers > 1
            else f"serial in this process ({os.cpu_count() or 1} cores, {len(todo)} points, "
            f"about {est:.1f} s of work: processes pay from {processes.AUTO_MIN_S:.0f} s)"
        )
    folder = out / "points"
    check_path(folder)  # once, not for each file
    folder.mkdir(parents=True, exist_ok=True)
    progress = Progress(len(todo), log)
    done = 0
    if client is not None or (executor == "dask" and workers > 1):
        results = _dask(spec, base, todo, keys, workers, client)
    elif workers > 1:
        cores = os.cpu_count() or 1
        if workers > cores:  # more would only rebuild schedules (each unit builds its own)
            log(f"--workers {workers} on {cores} cores: {cores} processes")
            workers = cores
        results = _processes(spec, chunks(base, todo, workers, keys), workers)
    else:
        results = _serial(spec, base, chunks(base, todo, 1, keys))
    for unit in results:  # a unit's rows in one file, then its points' progress lines
        write_unit(folder, [(point_id(point, name), row) for point, names, rows in unit
                            for name, row in zip(names, rows, strict=True)])  # fmt: skip
        for point, names, _rows in unit:
            done += len(names)
            progress.step(f"{point['set']} seed={point['seed']}: {len(names)} policies")
    log(f"ran {done} point-policies, {skipped} already done")
    return collect(out, spec)


# What a sweep costs serially, for ``--workers 0``'s choice (measured on this 2-core machine
# with qwen35-mtp3's 64 rows; a rough figure is enough to tell a 1-second sweep from a
# 1-minute one): building a schedule, per step; the vector tier's per-step constant for each
# (schedule, policy) call of several points (one point takes a path of its own, about a third
# of it) and its rate over the points of a call; the SimPy tier's rate (a 100-point sweep of
# 2,000-step runs under the 9 policies took 138 s serial: docs/reference.md, Speed), which
# `sweep`'s size guard also assumes, and its constant per run.
BUILD_S_PER_STEP = 2.0e-4
VECTOR_S_PER_STEP = 4.5e-4
VECTOR_POINT_STEPS_PER_S = 3e6
SIMPY_POINT_STEPS_PER_S = 13_000
SIMPY_S_PER_RUN = 0.07


def serial_estimate_s(
    todo: list[tuple[dict[str, Any], list[str]]], keys: list[str], steps: int, engine: str
) -> float:
    """Seconds ``todo`` takes in one process, roughly: each distinct schedule built once, then
    each of its policies over its points."""
    policies: dict[str, set[str]] = {}
    point_policies = 0
    for (_point, names), key in zip(todo, keys, strict=True):
        policies.setdefault(key, set()).update(names)
        point_policies += len(names)
    s = len(policies) * steps * BUILD_S_PER_STEP
    if engine == "vector":
        calls = sum(len(v) for v in policies.values())  # (schedule, policy) calls
        s += calls * steps * VECTOR_S_PER_STEP
        return s + point_policies * steps / VECTOR_POINT_STEPS_PER_S
    return s + point_policies * (SIMPY_S_PER_RUN + steps / SIMPY_POINT_STEPS_PER_S)


Unit = list[tuple[dict[str, Any], list[str], list[dict]]]  # (point, policies, rows) of a unit


def _serial(spec: SweepSpec, base: Scenario, units: list) -> Iterator[Unit]:
    for chunk in units:
        rows = run_points(base, chunk, spec.steps, spec.engine)
        yield [(point, names, r) for (point, names), r in zip(chunk, rows, strict=True)]


def _processes(spec: SweepSpec, units: list, workers: int) -> Iterator[Unit]:
    """On a pool of ``workers`` local processes, results in the units' order."""
    packed = [(spec.scenario, unit, spec.steps, spec.engine) for unit in units]
    results = processes.iter_units(_unit, packed, workers, preload=("sim.explore.sweep",))
    for chunk, rows in zip(units, results, strict=True):
        yield [(point, names, r) for (point, names), r in zip(chunk, rows, strict=True)]


def local_cluster(n: int) -> Any:
    """A Dask LocalCluster of ``n`` worker processes as a sweep starts one: one thread each
    (the simulation is pure Python: the GIL), quiet (no port or "worker still alive"
    chatter)."""
    from distributed import LocalCluster

    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                        dashboard_address=None, silence_logs=logging.ERROR,
                        local_directory=tempfile.gettempdir())  # fmt: skip


def _dask(
    spec: SweepSpec, base: Scenario, todo: list, keys: list[str], workers: int, client: Any
) -> Iterator[Unit]:
    """On ``client`` (a connected scheduler's, closed here) or on a LocalCluster."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise SpecraceError(
            "a Dask cluster needs Dask: pip install 'specrace[dask]' (or --workers N: local "
            "processes)"
        ) from None
    if not todo:
        if client is not None:
            client.close()
        return
    cluster = None
    if client is None:
        cluster = local_cluster(workers or os.cpu_count() or 1)
        client = Client(cluster)
    try:
        parts = sum(client.nthreads().values()) or 1
        units = chunks(base, todo, parts, keys)
        futures = [
            client.submit(_task, spec.scenario, unit, spec.steps, spec.engine, pure=False)
            for unit in units
        ]
        which = {f.key: unit for f, unit in zip(futures, units, strict=True)}
        for fut in as_completed(futures):
            yield [
                (point, names, rows)
                for (point, names), rows in zip(which[fut.key], fut.result(), strict=True)
            ]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def collect(out: Path, spec: SweepSpec | None = None) -> pd.DataFrame:
    """Gather finished points into ``sweep.parquet``, sorted so the file is reproducible.
    With ``spec``: that spec's points only."""
    done = finished(out / "points")
    if spec is not None:
        ids = [point_id(pt, p) for pt in spec.points() for p in spec.policies]
        done = {i: done[i] for i in ids if i in done}
    if not done:
        raise SpecraceError(f"{out}: no finished points")
    rows = list(done.values())
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
    for kind in HAZARD_KINDS:
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
    engine: str = ENGINES[0],
) -> dict[str, Any]:
    """``python -m sim bench --sweep``: a swarm sweep of ``points`` ``steps``-step qwen35-mtp3
    runs in a temporary directory on ``workers`` (1: in this process) with the ``engine``
    tier, timed end to end (cluster start included)."""
    spec = SweepSpec("qwen35-mtp3", policies, (), points, 1, steps, engine)
    with tempfile.TemporaryDirectory(prefix="specrace-sweep-bench-") as tmp:
        t0 = time.perf_counter()
        df = run_sweep(spec, Path(tmp), log=lambda _m: None, workers=workers)
        wall = time.perf_counter() - t0
    runs = len(df)
    return {
        "engine": engine,
        "workers": workers,
        "points": points,
        "policies": len(policies),
        "steps_per_run": steps,
        "wall_s": round(wall, 2),
        "runs_per_s": round(runs / wall, 3),
        "steps_per_s": round(runs * steps / wall, 1),
        "s_per_1000_points": round(wall / points * 1000, 1),
    }
