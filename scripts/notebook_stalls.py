"""How often a notebook's run stalls for a cell's time limit: one CSV row per run.

    python scripts/notebook_stalls.py notebooks/explore_timing.ipynb --runs 25 \
        [--client sliced|nbclient] [--limit 60] >> data/bench/waits/notebook-stalls-DATE.csv

``--client nbclient`` is nbclient's own client; ``sliced`` (the default) is the one the tests
use (tests/notebook_client.py), which reads a reply its socket's lost wake-up left unread
within half a second. ``lag_s`` is the longest a cell's reply, sent (the kernel's clock,
the same machine's), waited for the client to be done with the cell; a run whose lag passes
:data:`STALL_S` stalled. For a stalled run the script prints, on stderr, each cell's two
times. Load the machine beside it to see the stalls (this machine, both cores busy: 5 of 15
nbclient runs, each waiting out the limit; data/bench/waits/notebook-stalls-2026-12-03.csv).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from notebook_client import NotebookClient  # noqa: E402

CLIENTS = {"sliced": NotebookClient, "nbclient": nbclient.NotebookClient}
STALL_S = 2.0  # a reply read this long after it was sent (normally a few ms)


def _when(stamp: object, t0: float) -> float:
    if isinstance(stamp, str):
        stamp = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert isinstance(stamp, datetime.datetime)
    return round(stamp.timestamp() - t0, 2)


def one_run(path: Path, client_name: str, limit: int) -> tuple[float, float, list[str]]:
    """Wall seconds of one run, its lag, and for each code cell when its reply left the
    kernel and when the client was done with it."""
    nb = nbformat.read(path, as_version=4)
    done: dict[int, float] = {}
    t0 = time.time()

    def executed(cell: object = None, cell_index: int = 0, **_kw: object) -> None:
        done[cell_index] = round(time.time() - t0, 2)

    client = CLIENTS[client_name](
        nb, timeout=limit, kernel_name="python3", record_timing=True,
        resources={"metadata": {"path": str(path.parent)}}, on_cell_executed=executed,
    )  # fmt: skip
    client.execute()
    wall = time.time() - t0
    times = [
        (i, _when(c.metadata["execution"]["shell.execute_reply"], t0), done[i])
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and "shell.execute_reply" in c.metadata.get("execution", {})
    ]
    lag = max((d - sent for _i, sent, d in times), default=0.0)
    cells = [f"cell {i}: reply sent {sent} s, client done {d} s" for i, sent, d in times]
    return wall, lag, cells


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebook", type=Path)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--client", choices=sorted(CLIENTS), default="sliced")
    ap.add_argument("--limit", type=int, default=60, help="a cell's time limit, seconds")
    a = ap.parse_args(argv)
    if not a.notebook.is_file():
        raise SystemExit(f"error: {a.notebook}: no such notebook")
    os.environ["PYTHONPATH"] = str(ROOT)
    os.environ.pop("MPLBACKEND", None)
    print("notebook,client,run,wall_s,lag_s,stalled", flush=True)
    for run in range(a.runs):
        wall, lag, cells = one_run(a.notebook, a.client, a.limit)
        stalled = lag > STALL_S
        print(f"{a.notebook.name},{a.client},{run},{wall:.1f},{lag:.2f},{stalled}", flush=True)
        if stalled:
            print("\n".join(cells), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
