"""scripts/check_scaling.py on a one-row check: a row per worker count, the same bytes, the
oracle compared, bad input one line."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from load import limit_s
from repo_root import ROOT


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/check_scaling.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=limit_s(120))  # fmt: skip


def test_the_check_scaling_script_times_every_count_on_the_same_bytes(tmp_path: Path) -> None:
    out = tmp_path / "c"
    oracle = tmp_path / "oracle.json"
    first = _script("--out", str(out), "--max-rows", "1", "--workers", "1")
    assert first.returncode == 0, first.stderr
    oracle.write_bytes((out / "w1.json").read_bytes())
    r = _script("--out", str(out), "--max-rows", "1", "--workers", "1,2", "--oracle", str(oracle))
    assert r.returncode == 0, r.stderr + r.stdout
    rows = list(csv.DictReader((out / "check_scaling.csv").open()))
    assert [row["workers"] for row in rows] == ["1", "2"]
    assert rows[0]["sha256"] == rows[1]["sha256"] and float(rows[0]["speedup"]) == 1.0
    meta = json.loads((out / "check_scaling.json").read_text())
    assert meta["same_bytes_on_every_count"] is True and meta["equals_oracle"] is True
    assert meta["space"] == {"max_rows": 1, "steps": 3, "k": 3} and meta["cores"] >= 1
    # a table of another space is not the oracle: the script says so and fails
    other = _script("--out", str(tmp_path / "d"), "--max-rows", "1", "--steps", "2",
                    "--workers", "1", "--oracle", str(oracle))  # fmt: skip
    assert other.returncode == 1 and "differ from the oracle" in other.stdout
    for args, says in (
        (("--workers", "two"), "--workers 'two'"),
        (("--oracle", str(tmp_path / "none.json")), "--oracle"),
        (("--max-rows", "0"), "--max-rows 0"),
    ):
        bad = _script("--out", str(tmp_path / "e"), *args)
        assert bad.returncode != 0 and says in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
