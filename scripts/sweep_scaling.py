"""How a vector-tier sweep scales over worker processes on one machine (issue #27's curve).

    python scripts/sweep_scaling.py --out data/bench/scaling [--workers 1,2,4,8,16]
        [--seeds 16] [--points 10000] [--steps 1000,20000] [--executors processes,dask]
        [--tag NAME]

For each step count, the same swarm sweep (``--points`` timing sets spread over ``--seeds``
seeds: one schedule per seed, ``synced-gather``) runs once per worker count and executor,
end to end as a user's command runs it: each in a fresh Python process (its imports
included) calling ``run_sweep``, the function ``sim sweep`` calls, into a fresh folder.
N = 1 is serial in that process; more is ``processes`` (the pool ``sim sweep --workers N``
starts from a fork server, the default) or ``dask`` (a LocalCluster of N workers, started in
the run). Every run's sweep.parquet must be the same bytes. Writes ``scaling.csv`` (one row
per step count, executor and worker count: wall seconds, speed-up and efficiency over N = 1,
the parquet's sha256), ``scaling.json`` (machine, versions, date, commit, the spec, the
goal's verdict) and ``scaling.png``. Beside each parallel run, ``start_s``: the time to
start that executor with N workers and close it, on its own, in a fresh process (the part of
a parallel run that is not the work); and the machine's ceiling: n pure-Python loops on n
processes at once as a speed-up over one (``python_ceiling``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_check.environment import cpu_model, environment  # noqa: E402
from sim.runs.io import atomic_write, atomic_write_text, write_json  # noqa: E402
from sim.runs.run import versions  # noqa: E402

GOAL = 0.7  # speed-up at the most workers >= GOAL x workers
POLICY = "synced-gather"


def _ints(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"error: {text!r}: expected comma-separated integers") from None
    if not vals or min(vals) < 1:
        raise SystemExit(f"error: {text!r}: expected integers >= 1")
    return vals


def _versions() -> dict[str, str]:
    out = versions()  # the simulator's, as every run records them
    for mod in ("dask", "distributed"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = "absent"
    return out


def _spin(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


CEILING_ITERATIONS = 20_000_000  # about 1-2 s of pure Python on one core


def ceiling(n: int, iterations: int = CEILING_ITERATIONS) -> float:
    """The machine's own ceiling for ``n`` processes: ``n`` copies of a pure-Python loop on
    ``n`` processes at once, as a speed-up over one copy alone (shared or hyperthreaded
    cores, a lower clock under load, all show here, with no sweep code involved)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(n) as pool:
        pool.map(_spin, [1000] * n)  # the workers started before the clock
        t0 = time.perf_counter()
        pool.map(_spin, [iterations] * n)
        wall = time.perf_counter() - t0
    return wall


# A child's work: the sweep (or the executor's start alone) timed after the child's imports,
# then its wall end to end; the child prints one JSON line.
CHILD = """
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
from sim.explore.sweep import SweepSpec, run_sweep
a = json.loads(sys.argv[1])
t1 = time.perf_counter()
if a["start_only"] and a["executor"] == "dask":
    from distributed import Client
    from sim.explore.sweep import local_cluster
    cluster = local_cluster(a["workers"])
    client = Client(cluster)
    client.wait_for_workers(a["workers"])
    client.close()
    cluster.close()
elif a["start_only"]:
    from sim.runs.processes import map_units
    map_units(len, [[]] * a["workers"], a["workers"], preload=("sim.explore.sweep",))
else:
    spec = SweepSpec("qwen35-mtp3", (a["policy"],), (), a["per_seed"], a["seeds"], a["steps"])
    run_sweep(spec, Path(a["out"]), log=lambda _m: None, workers=a["workers"],
              executor=a["executor"])
t2 = time.perf_counter()
print(json.dumps({"after_imports_s": t2 - t1, "child_s": t2 - t0}))
"""


def _child(**kw: object) -> dict:
    """Run :data:`CHILD` with ``kw``; its JSON line and the wall seen from here."""
    import json
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(kw)], capture_output=True,
                       text=True, env=env, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"error: a measured run failed ({kw}): {r.stderr.strip()[-400:]}")
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the folder to write (required unless --replot)")
    ap.add_argument("--replot", metavar="DIR",
                    help="instead: draw DIR/scaling.png again from its tables")  # fmt: skip
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--steps", default="1000,20000")
    ap.add_argument("--executors", default="processes",
                    help="comma-separated: processes (default), dask (LocalCluster)")  # fmt: skip
    ap.add_argument("--tag", default="", help="a name for the machine, kept in scaling.json")
    ap.add_argument("--ceiling-iterations", type=int, default=CEILING_ITERATIONS,
                    help="length of the pure-Python loop of the ceiling")  # fmt: skip
    a = ap.parse_args(argv)
    if a.replot:
        return replot(Path(a.replot))
    if not a.out:
        raise SystemExit("error: give --out DIR (or --replot DIR)")
    workers, steps_list = _ints(a.workers), _ints(a.steps)
    executors = [e.strip() for e in a.executors.split(",") if e.strip()]
    if not executors or not set(executors) <= {"processes", "dask"}:
        raise SystemExit(f"error: --executors {a.executors!r}: expected processes and/or dask")
    if 1 not in workers:
        raise SystemExit("error: --workers must include 1 (the baseline)")
    if a.seeds < 1 or a.points < a.seeds:
        raise SystemExit("error: --points must be >= --seeds >= 1")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    per_seed = a.points // a.seeds
    it = a.ceiling_iterations
    loops = {n: min(ceiling(n, it), ceiling(n, it)) for n in sorted(workers)}  # best of two
    ceilings = {n: round(n * loops[1] / t, 3) for n, t in loops.items()}
    print(f"pure-Python ceiling (speed-up of n loops on n processes): {ceilings}", flush=True)
    rows = []
    for steps in steps_list:
        base_s = None
        for executor, n in [("serial", 1)] + [(e, n) for e in executors for n in sorted(workers)
                                               if n > 1]:  # fmt: skip
            folder = Path(tempfile.mkdtemp(prefix="specrace-scaling-"))
            try:
                wall = _child(out=str(folder / "sweep"), workers=n, steps=steps,
                              executor="processes" if executor == "serial" else executor,
                              per_seed=per_seed, seeds=a.seeds, policy=POLICY,
                              start_only=False)["wall_s"]  # fmt: skip
                digest = hashlib.sha256((folder / "sweep" / "sweep.parquet").read_bytes())
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            start_s = 0.0
            if n > 1:
                alone = _child(out="", workers=n, steps=0, executor=executor, per_seed=0,
                               seeds=0, policy=POLICY, start_only=True)  # fmt: skip
                start_s = alone["after_imports_s"]
            base_s = wall if n == 1 else base_s
            assert base_s is not None
            rows.append({"steps": steps, "executor": executor, "workers": n,
                         "points": per_seed * a.seeds, "seeds": a.seeds,
                         "wall_s": round(wall, 3), "start_s": round(start_s, 3),
                         "speedup": round(base_s / wall, 3),
                         "python_ceiling": ceilings[n],
                         "efficiency": round(base_s / wall / n, 3),
                         "sha256": digest.hexdigest()})  # fmt: skip
            print(f"steps={steps} {executor} workers={n}: {wall:.1f} s, speed-up "
                  f"{base_s / wall:.2f} (start alone {start_s:.2f} s)", flush=True)  # fmt: skip
    same = all(len({r["sha256"] for r in rows if r["steps"] == s}) == 1 for s in steps_list)
    top = max(workers)
    verdict = {  # the default executor's
        str(s): next(r["efficiency"] for r in rows if r["steps"] == s and r["workers"] == top
                     and r["executor"] in ("serial", executors[0])) >= GOAL
        for s in steps_list
    }  # fmt: skip
    header = list(rows[0])
    csv = "\n".join([",".join(header)] + [",".join(str(r[h]) for h in header) for r in rows])
    atomic_write_text(out / "scaling.csv", csv + "\n")
    write_json(out / "scaling.json", {
        "what": "sim sweep --swarm, vector tier, wall seconds end to end, each run a fresh "
                "process (imports and the executor's start included); speed-up over "
                "workers = 1 (serial in that process)",
        **environment("cpu"), "tag": a.tag, "cpu": cpu_model(), "cores": os.cpu_count(),
        "platform": platform.platform(), "versions": _versions(), "policy": POLICY,
        "seeds": a.seeds, "points": per_seed * a.seeds,
        "steps": steps_list, "workers": sorted(workers), "executors": executors,
        "same_bytes": same,
        "goal": f"speed-up >= {GOAL} x workers at {top} workers",
        "python_ceiling": {str(k): v for k, v in ceilings.items()},
        "goal_met_by_steps": verdict,
    })  # fmt: skip
    _figure(out / "scaling.png", rows, steps_list, sorted(workers), os.cpu_count() or 1)
    print(f"wrote {out}/scaling.csv, scaling.json, scaling.png; same bytes: {same}")
    return 0 if same else 1


def replot(folder: Path) -> int:
    """Draw ``folder/scaling.png`` again from the committed ``scaling.csv`` and
    ``scaling.json`` of a run (one with an ``executor`` column: from e800637 on)."""
    import csv
    import json

    try:
        meta = json.loads((folder / "scaling.json").read_text())
        with (folder / "scaling.csv").open() as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            for k in ("steps", "workers", "points"):
                r[k] = int(r[k])
            for k in ("wall_s", "speedup", "python_ceiling"):
                r[k] = float(r[k])
        if not rows or "executor" not in rows[0]:  # a run from before the column
            raise KeyError("executor")
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"error: {folder}: not a scaling run with executors ({e})") from None
    _figure(folder / "scaling.png", rows, meta["steps"], meta["workers"], meta["cores"])
    print(f"wrote {folder / 'scaling.png'}")
    return 0


def _figure(
    path: Path, rows: list[dict], steps_list: list[int], workers: list[int], cores: int
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.plot(workers, workers, color="0.6", lw=1, ls="--", label="ideal")
    ax.plot(workers, [GOAL * w for w in workers], color="0.6", lw=1, ls=":",
            label=f"goal ({GOAL} x workers)")  # fmt: skip
    first = [r for r in rows if r["steps"] == steps_list[0]]
    ax.plot([r["workers"] for r in first], [r["python_ceiling"] for r in first], color="k",
            lw=1.2, marker="x", label="ceiling: n pure-Python loops at once")  # fmt: skip
    serial = {r["steps"]: r for r in rows if r["workers"] == 1}
    for steps in steps_list:
        for executor in dict.fromkeys(r["executor"] for r in rows if r["workers"] > 1):
            mine = [serial[steps]] + [r for r in rows if r["steps"] == steps
                                      and r["executor"] == executor]  # fmt: skip
            ax.plot([r["workers"] for r in mine], [r["speedup"] for r in mine], marker="o",
                    ls="-" if executor == "processes" else "--",
                    label=f"{executor}: {mine[0]['points']:,} points x {steps:,} steps "
                          f"(serial {mine[0]['wall_s']:.0f} s)")  # fmt: skip
            for r in mine[1:]:  # each parallel point's speed-up, written beside it
                ax.annotate(f"{r['speedup']:.2f}x", (r["workers"], r["speedup"]), fontsize=8,
                            xytext=(-36, 6), textcoords="offset points")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(workers, [str(w) for w in workers])
    ticks = [2**i for i in range(max(workers).bit_length())]  # 1, 2, 4, ... up to the most
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("worker processes (1: serial, in process)")
    ax.set_ylabel("speed-up over serial (wall, start included)")
    ax.set_title(f"sim sweep, vector tier, on {cores} cores")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
