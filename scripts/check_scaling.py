"""How ``sim check`` scales with worker processes on one machine (issue #27).

    python scripts/check_scaling.py --out DIR [--max-rows 4] [--steps 3] [--k 3]
        [--workers 1,2,4,8,16] [--oracle data/check/r4-s3-k3.json]

Runs ``python -m sim check --max-rows R --steps S --k K --workers N --out DIR/wN.json`` once
per worker count, end to end as a user runs it (the pool's start included), and checks that
every run wrote the same bytes (and, with ``--oracle``, the committed table's). Writes
``check_scaling.csv`` (per worker count: wall seconds, speed-up and efficiency over the fewest
workers, the JSON's sha256) and ``check_scaling.json`` (machine, Python, date, commit, the
space, the rows). Needs only what ``sim check`` needs (numpy).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_check.environment import cpu_model, environment  # noqa: E402
from sim.runs.io import atomic_write_text, ensure_out_dir, write_json  # noqa: E402


def _ints(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"error: --workers {text!r}: expected comma-separated integers") from None
    if not vals or min(vals) < 1:
        raise SystemExit(f"error: --workers {text!r}: expected integers >= 1")
    return vals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the runs' JSON and the tables")
    ap.add_argument("--max-rows", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--oracle", default="", help="a committed table every run must equal")
    args = ap.parse_args()
    workers = _ints(args.workers)
    try:
        oracle = Path(args.oracle).read_bytes() if args.oracle else None
    except OSError as e:
        raise SystemExit(f"error: --oracle {args.oracle}: {e.strerror or e}") from None
    out = Path(args.out)
    ensure_out_dir(out, "bench")  # marked: its tables are rewritten only where specrace wrote them
    rows = []
    for n in workers:
        path = out / f"w{n}.json"
        cmd = [sys.executable, "-m", "sim", "check", "--max-rows", str(args.max_rows),
               "--steps", str(args.steps), "--k", str(args.k), "--workers", str(n),
               "--out", str(path), "--budget", "100"]  # fmt: skip
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
        if done.returncode:  # sim check said what was wrong in one line
            raise SystemExit(done.stderr.strip() or f"error: sim check exited {done.returncode}")
        wall = time.perf_counter() - t0
        data = path.read_bytes()
        rows.append({"workers": n, "wall_s": round(wall, 2),
                     "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
        print(f"workers {n}: {wall:.1f} s", flush=True)
    base = rows[0]["wall_s"]
    for r in rows:
        r["speedup"] = round(base / r["wall_s"], 2)
        r["efficiency"] = round(base / r["wall_s"] / (r["workers"] / rows[0]["workers"]), 2)
    same = len({r["sha256"] for r in rows}) == 1
    matches = None if oracle is None else rows[0]["sha256"] == hashlib.sha256(oracle).hexdigest()
    head = "workers,wall_s,speedup,efficiency,sha256"
    lines = [head] + [",".join(str(r[c]) for c in head.split(",")) for r in rows]
    atomic_write_text(out / "check_scaling.csv", "\n".join(lines) + "\n")
    write_json(out / "check_scaling.json", {
        **environment("cpu"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "space": {"max_rows": args.max_rows, "steps": args.steps, "k": args.k},
        "same_bytes_on_every_count": same,
        "equals_oracle": matches,
        "oracle": args.oracle or None,
        "rows": rows,
    })  # fmt: skip
    print("\n".join(lines))
    if not same or matches is False:
        print("error: the runs' JSON differ" + (" from the oracle" if matches is False else ""))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
