"""sim.runs.outputs.settle: a file written again in a marked folder leaves one manifest line,
so a command run twice leaves the same bytes; appends from other processes are never lost."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

from load import limit_s
from repo_root import ROOT

from sim.runs.io import atomic_write_text
from sim.runs.outputs import MANIFEST, MARKER, claim_dir, manifest, proved_file, record


def lines(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / MANIFEST).read_text().splitlines()]


def test_a_file_written_three_times_is_one_line_and_proved(tmp_path: Path) -> None:
    out = claim_dir(tmp_path / "o", "field-reports")
    record(out, "other.json", "0" * 64)
    record(out, ".pending.json.abcd1234.tmp", temp=True)  # another writer's, not yet created
    for text in ("a", "bb", "ccc"):
        atomic_write_text(out / "raw.json", text)
    got = lines(out)
    assert got[:2] == [{"path": "other.json", "sha256": "0" * 64},
                       {"path": ".pending.json.abcd1234.tmp", "temp": True}]  # fmt: skip
    assert [e for e in got if "raw.json" in e["path"]] == [
        {"path": "raw.json", "sha256": manifest(out)[0]["raw.json"].pop()}
    ]
    assert len(got) == 3 and proved_file(out / "raw.json")
    # settling rewrites the manifest in place: it leaves no file of its own beside it
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, MARKER, "raw.json"]


def test_a_temporary_still_there_stays_listed(tmp_path: Path) -> None:
    """A kill's leftover temporary of the same file is still the folder's to clean: kept."""
    out = claim_dir(tmp_path / "o", "field-reports")
    left = out / ".raw.json.deadbeef.tmp"
    record(out, left.name, temp=True)
    left.write_text("half")
    atomic_write_text(out / "raw.json", "whole")
    assert {"path": left.name, "temp": True} in lines(out)


def _writer(folder: str, who: int) -> None:
    for i in range(25):
        atomic_write_text(Path(folder) / f"f{who}.json", f"{who}-{i}")


def test_writers_in_many_processes_lose_no_line(tmp_path: Path) -> None:
    """Each process rewrites its own file while the others settle theirs: every file ends
    proved by its last content, and no temporary line is left behind."""
    out = claim_dir(tmp_path / "o", "field-reports")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(out), w)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(limit_s(120))
        assert p.exitcode == 0
    got = lines(out)
    assert sorted(e["path"] for e in got) == [f"f{w}.json" for w in range(6)]
    assert all(proved_file(out / f"f{w}.json") for w in range(6))


def test_field_reports_twice_leave_the_bytes_of_once(tmp_path: Path) -> None:
    """The marker names the --out given, so it alone differs between the two folders."""
    argv = [sys.executable, "-m", "sim", "field-reports", "--only", "vllm#35288", "--seeds", "1"]

    def run(out: Path) -> dict[str, bytes]:
        r = subprocess.run([*argv, "--out", str(out)], cwd=ROOT, capture_output=True,
                           text=True, timeout=limit_s(300))  # fmt: skip
        assert r.returncode == 0, r.stderr
        return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != MARKER}

    once = run(tmp_path / "once")
    run(tmp_path / "twice")
    assert run(tmp_path / "twice") == once
    assert b'"temp"' not in once[MANIFEST]
