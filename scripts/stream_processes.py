"""A streamed run in one process against two (the schedule built in the second), side by side.

    python scripts/stream_processes.py --out DIR [--steps 20000,1000000] [--repeats 2]

For each step count, ``run_streaming`` (the function ``sim run --stream`` calls; qwen35-mtp3,
``align``, seed 0, schedule.parquet) runs with ``workers`` 1 and 2, alternating, ``--repeats``
times each, every run in a fresh Python process into a fresh folder. Per run: wall seconds
after the imports, the peak RSS of each process (the second one's as it reports it), and the
sha256 of reads.parquet and schedule.parquet, which must be the same for every run of a step
count. Also the machine's own ceiling for two processes: two pure-Python loops at once, as a
speed-up over one (``sweep_scaling.ceiling``; shared or hyperthreaded cores show there).
Writes ``stream.csv`` and ``stream.json`` (machine, versions, date, commit).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from sweep_scaling import _ints, ceiling  # noqa: E402

from gpu_check.environment import cpu_model, environment  # noqa: E402
from sim.runs.io import atomic_write_text, write_json  # noqa: E402
from sim.runs.run import versions  # noqa: E402

CHILD = """
import hashlib, json, resource, sys, time
from pathlib import Path
from sim.model.params import load_scenario
from sim.model.policies import POLICIES
from sim.runs.run import run_streaming
if __name__ == "__main__":
    a = json.loads(sys.argv[1])
    out, stats = Path(a["out"]), {}
    t0 = time.perf_counter()
    run_streaming(out, load_scenario("qwen35-mtp3"), POLICIES["align"], 0, a["steps"],
                  schedule_format="parquet", workers=a["workers"], stats=stats)
    wall = time.perf_counter() - t0
    digest = {f: hashlib.sha256((out / f).read_bytes()).hexdigest()
              for f in ("reads.parquet", "schedule.parquet")}
    print(json.dumps({"wall_s": wall, "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "second_rss_kib": stats.get("schedule_process_peak_rss_kib", 0), **digest}))
"""


def _run(steps: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="specrace-stream-") as d:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
        arg = json.dumps({"out": str(Path(d) / "run"), "steps": steps, "workers": workers})
        r = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True,
                           env=env, check=False)  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"error: a measured run failed: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the folder to write")
    ap.add_argument("--steps", default="20000,1000000")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--ceiling-iterations", type=int, default=20_000_000)
    ap.add_argument("--tag", default="", help="a name for the machine, kept in stream.json")
    a = ap.parse_args(argv)
    steps_list = _ints(a.steps)
    if a.repeats < 1:
        raise SystemExit("error: --repeats must be >= 1")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    loops = {n: min(ceiling(n, a.ceiling_iterations) for _ in range(2)) for n in (1, 2)}
    two = round(2 * loops[1] / loops[2], 3)
    print(f"pure-Python ceiling of 2 processes: {two}x", flush=True)
    rows = []
    for steps in steps_list:
        for rep in range(a.repeats):
            for workers in (1, 2) if rep % 2 == 0 else (2, 1):
                t0 = time.perf_counter()
                r = _run(steps, workers)
                rows.append({"steps": steps, "workers": workers, "repeat": rep,
                             "wall_s": round(r["wall_s"], 2),
                             "process_s": round(time.perf_counter() - t0, 2),
                             "rss_mb": round(r["rss_kib"] / 1024, 1),
                             "second_rss_mb": round(r["second_rss_kib"] / 1024, 1),
                             "reads_sha256": r["reads.parquet"],
                             "schedule_sha256": r["schedule.parquet"]})  # fmt: skip
                print(f"steps={steps} workers={workers}: {r['wall_s']:.1f} s, "
                      f"{r['rss_kib'] / 1024:.0f} + {r['second_rss_kib'] / 1024:.0f} MB",
                      flush=True)  # fmt: skip
    same = all(
        len({(r["reads_sha256"], r["schedule_sha256"]) for r in rows if r["steps"] == s}) == 1
        for s in steps_list
    )
    header = list(rows[0])
    csv = "\n".join([",".join(header)] + [",".join(str(r[h]) for h in header) for r in rows])
    atomic_write_text(out / "stream.csv", csv + "\n")
    write_json(out / "stream.json", {
        "what": "run_streaming (sim run --stream), qwen35-mtp3, align, seed 0, schedule.parquet: "
                "wall seconds after the imports, each run a fresh process; workers 2 builds "
                "the schedule in a second process (which also wrote it before 6f2272f)",
        **environment("cpu"), "tag": a.tag, "cpu": cpu_model(), "cores": os.cpu_count(),
        "platform": platform.platform(), "versions": versions(), "steps": steps_list,
        "repeats": a.repeats, "same_bytes": same, "python_ceiling_2": two,
    })  # fmt: skip
    print(f"wrote {out}/stream.csv, stream.json; same bytes: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
