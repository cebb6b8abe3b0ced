"""scripts/profile_table.py turns the committed py-spy profiles into docs/perf.md's tables."""

from __future__ import annotations

import gzip
import lzma
import re
import subprocess
import sys
from pathlib import Path

from repo_root import ROOT

SCRIPT = ROOT / "scripts" / "profile_table.py"
PROFILES = sorted((ROOT / "data" / "bench" / "profiles").glob("*.raw.[gx]z"))


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_every_committed_profile_gives_its_table() -> None:
    assert len(PROFILES) >= 3 and {p.suffix for p in PROFILES} == {".gz", ".xz"}
    for path in PROFILES:
        r = run(path, "--top", "5", "--skip", "0")
        assert r.returncode == 0, r.stderr
        unpack = gzip.decompress if path.suffix == ".gz" else lzma.decompress
        text = unpack(path.read_bytes()).decode()  # (a -c command line may span lines)
        total = sum(int(n) for n in re.findall(r" (\d+)$", text, re.M))
        assert r.stdout.startswith(f"{total:,} samples")
        rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| `")]
        assert len(rows) == 5
        shares = [
            float(m) for m in re.findall(r"\| ([\d.]+) % \| [\d.]+ % \|$", "\n".join(rows), re.M)
        ]
        assert len(shares) == 5 and shares == sorted(shares, reverse=True) and shares[0] <= 100


def test_shares_are_of_every_sample_inclusive_and_self(tmp_path: Path) -> None:
    raw = tmp_path / "p.raw"
    raw.write_text("main (/x/sim/a.py:1);f (/x/sim/b.py:2) 3\nmain (/x/sim/a.py:1) 1\n 1\n")
    r = run(raw, "--skip", "0")
    assert r.returncode == 0, r.stderr
    assert "| `main (sim/a.py)` | 80.0 % | 20.0 % |" in r.stdout
    assert "| `f (sim/b.py)` | 60.0 % | 60.0 % |" in r.stdout


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.raw.gz"
    bad.write_bytes(b"not gzip")
    bad_xz = tmp_path / "bad.raw.xz"
    bad_xz.write_bytes(b"not xz")
    text = tmp_path / "t.raw"
    text.write_text("no count here\n")
    for path in (bad, bad_xz, text, tmp_path / "missing.raw"):
        r = run(path)
        assert (
            r.returncode != 0 and r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1
        ), r.stderr


def test_by_package_gives_each_sample_to_its_deepest_frame(tmp_path: Path) -> None:
    raw = tmp_path / "p.raw"
    raw.write_text(
        "main (/x/sim/a.py:1);f (pandas/core/frame.py:2) 4\n"
        "main (/x/sim/a.py:1);g (/x/sim/model/b.py:3) 3\n"
        'process 1:"python -c import os\nprint(1)";_load (<frozen importlib._bootstrap>:4) 2\n'
        "main (/x/sim/a.py:1);wait (subprocess.py:5) 1\n"
    )  # the third sample's command line spans two lines, as py-spy writes a -c script's
    r = run(raw, "--by-package")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("10 samples")
    for row in ("| pandas | 40.0 % |", "| sim/model/b.py | 30.0 % |", "| (imports) | 20.0 % |",
                "| (python: one-file modules, frozen, builtins) | 10.0 % |"):  # fmt: skip
        assert row in r.stdout, r.stdout
