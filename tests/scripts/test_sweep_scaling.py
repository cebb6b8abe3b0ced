"""scripts/sweep_scaling.py on a tiny sweep: rows, the same bytes at each count, the figure."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from load import limit_s
from repo_root import ROOT


def test_the_scaling_script_measures_every_count_on_the_same_bytes(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    out = tmp_path / "scaling"
    r = subprocess.run(
        [sys.executable, "scripts/sweep_scaling.py", "--out", str(out), "--workers", "1,2",
         "--seeds", "2", "--points", "4", "--steps", "12", "--executors", "processes,dask",
         "--ceiling-iterations", "10000"],
        cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((out / "scaling.csv").open()))
    assert [(r["executor"], r["workers"]) for r in rows] == [
        ("serial", "1"), ("processes", "2"), ("dask", "2")
    ]  # fmt: skip
    assert len({r["sha256"] for r in rows}) == 1  # the same bytes on every executor
    assert float(rows[0]["speedup"]) == 1.0 and float(rows[0]["start_s"]) == 0
    assert all(float(r["start_s"]) > 0 and float(r["wall_s"]) > 0 for r in rows[1:])
    meta = json.loads((out / "scaling.json").read_text())
    assert meta["same_bytes"] is True and meta["cores"] >= 1 and meta["points"] == 4
    assert meta["executors"] == ["processes", "dask"]
    assert set(meta["python_ceiling"]) == {"1", "2"} and meta["python_ceiling"]["1"] == 1.0
    assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = subprocess.run([sys.executable, "scripts/sweep_scaling.py", "--out", str(out),
                          "--workers", "2,4"], cwd=ROOT, capture_output=True, text=True,
                         timeout=limit_s(60))  # fmt: skip
    assert bad.returncode != 0 and "include 1" in bad.stderr
    bad = subprocess.run([sys.executable, "scripts/sweep_scaling.py", "--out", str(out),
                          "--executors", "ray"], cwd=ROOT, capture_output=True, text=True,
                         timeout=limit_s(60))  # fmt: skip
    assert bad.returncode != 0 and "--executors 'ray'" in bad.stderr


def test_a_committed_run_is_drawn_again_from_its_tables(tmp_path: Path) -> None:
    """``--replot DIR`` redraws scaling.png from the committed tables (the core count from the
    run's JSON, not this machine's); a run from before the executor column is one line."""
    import shutil

    run = tmp_path / "e800637"
    shutil.copytree(ROOT / "data" / "bench" / "scaling" / "e800637", run)
    (run / "scaling.png").unlink()
    r = subprocess.run([sys.executable, "scripts/sweep_scaling.py", "--replot", str(run)],
                       cwd=ROOT, capture_output=True, text=True, timeout=limit_s(60))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (run / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    old = subprocess.run([sys.executable, "scripts/sweep_scaling.py", "--replot",
                          str(ROOT / "data" / "bench" / "scaling" / "dbabeef")], cwd=ROOT,
                         capture_output=True, text=True, timeout=limit_s(60))  # fmt: skip
    assert old.returncode != 0 and old.stderr.startswith("error: ") and "executor" in old.stderr
    assert len(old.stderr.splitlines()) == 1
