"""Wall seconds of each notebook run top to bottom in a real kernel (nbclient, with the client
tests/project/test_notebooks.py uses), and of its slowest cells; one JSON line per notebook.

    python scripts/notebook_times.py > data/bench/waits/notebooks-DATE.jsonl

Needs the notebook extra (``pip install '.[notebooks]'``); the kernel imports ``sim`` from
this checkout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from notebook_client import NotebookClient  # noqa: E402  (tests/: the client the tests use)


def main() -> None:
    os.environ["PYTHONPATH"] = str(ROOT)
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        meta = {"metadata": {"path": str(path.parent)}}
        client = NotebookClient(nb, timeout=600, kernel_name="python3", resources=meta)
        t0 = time.perf_counter()
        cells = []
        with client.setup_kernel():
            for i, cell in enumerate(nb.cells):
                t = time.perf_counter()
                client.execute_cell(cell, i)
                cells.append((round(time.perf_counter() - t, 2), i))
        slowest = [{"cell": i, "s": s} for s, i in sorted(cells, reverse=True)[:3]]
        row = {"notebook": path.name, "wall_s": round(time.perf_counter() - t0, 2),
               "slowest_cells": slowest}  # fmt: skip
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
