"""Long runs' compact schedule (sim.model.schedule_parquet): schedule.parquet holds
schedule.json's schedule exactly, and a bad binary schedule gets one error line (``run
--stream`` and the vector tier's files: tests/sim/runs/test_run.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from repo_root import ROOT

from sim.errors import SpecraceError
from sim.model import schedule_parquet
from sim.model.params import load_scenario
from sim.model.schedule import dumps
from sim.model.schedule_parquet import read_schedule_parquet, write_schedule_parquet
from sim.model.scheduling import build_schedule


def run_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def schedules():
    base = load_scenario("qwen35-mtp3")
    tight = replace(
        base,
        engine=replace(base.engine, kv_cache_capacity_tokens=3000, max_num_seqs=16,
                       max_num_batched_tokens=300),
    )  # fmt: skip
    sync = replace(base, engine=replace(base.engine, async_scheduling=False))
    yield build_schedule(load_scenario("minimal-race"), 0, 8)
    yield build_schedule(base, 1, 300)
    yield build_schedule(tight, 2, 200)  # preemption: resumed requests
    yield build_schedule(sync, 0, 50)
    yield build_schedule(base, 0, 0)  # no step at all


def test_parquet_schedule_is_the_json_schedule_exactly(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(schedule_parquet, "STEPS_PER_GROUP", 64)  # several row groups
    for i, sched in enumerate(schedules()):
        path = tmp_path / f"{i}.parquet"
        write_schedule_parquet(path, sched)
        assert dumps(read_schedule_parquet(path)) == dumps(sched)
        again = tmp_path / f"{i}b.parquet"
        write_schedule_parquet(again, sched)
        assert again.read_bytes() == path.read_bytes()  # same schedule, same bytes
    monkeypatch.undo()  # compactness is claimed at the real row-group size
    big = build_schedule(load_scenario("qwen35-mtp3"), 0, 300)
    write_schedule_parquet(tmp_path / "big.parquet", big)
    assert (tmp_path / "big.parquet").stat().st_size * 8 < len(dumps(big))  # compact


def test_a_tampered_parquet_schedule_is_refused_with_the_step(tmp_path: Path) -> None:
    sched = build_schedule(load_scenario("qwen35-mtp3"), 0, 40)
    path = tmp_path / "s.parquet"
    write_schedule_parquet(path, sched)
    t = pq.read_table(path)
    ids = t.column("req_ids").to_pylist()
    ids[7] = list(reversed(ids[7]))  # rows no longer what the row ops give
    bad = t.set_column(t.schema.get_field_index("req_ids"), "req_ids", pa.array(ids))
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(SpecraceError, match="step 7: ops: replaying them"):
        read_schedule_parquet(tmp_path / "bad.parquet")
    flat = t.set_column(t.schema.get_field_index("ops_a"), "ops_a", pa.array([0] * len(t)))
    pq.write_table(flat, tmp_path / "flat.parquet")  # a column of the wrong type
    with pytest.raises(SpecraceError, match="malformed schedule.parquet"):
        read_schedule_parquet(tmp_path / "flat.parquet")
    pq.write_table(t.replace_schema_metadata(None), tmp_path / "nohead.parquet")
    with pytest.raises(SpecraceError, match="not a specrace schedule.parquet"):
        read_schedule_parquet(tmp_path / "nohead.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    r = run_sim("run", "--schedule", str(tmp_path / "junk.parquet"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: ") and "junk.parquet" in r.stderr
    assert not (tmp_path / "o").exists()


def _headers():
    """Header edits the JSON reader refuses (issue 47: the parquet reader once skipped them)."""
    yield "seed 2**64", lambda d: d.update(seed=2**64)
    yield "negative seed", lambda d: d.update(seed=-1)
    yield "duplicated req_id", lambda d: d["requests"].append(dict(d["requests"][0]))


@pytest.mark.parametrize(("what", "edit"), list(_headers()), ids=[w for w, _ in _headers()])
def test_the_json_and_parquet_readers_refuse_the_same_headers(what, edit, tmp_path) -> None:
    import zlib

    from sim.model.schedule_io import read_schedule

    sched = build_schedule(load_scenario("minimal-race"), 0, 8)
    doc = json.loads(dumps(sched))
    edit(doc)
    (tmp_path / "s.json").write_text(json.dumps(doc))
    with pytest.raises(SpecraceError) as as_json:
        read_schedule(tmp_path / "s.json")
    write_schedule_parquet(tmp_path / "ok.parquet", sched)
    t = pq.read_table(tmp_path / "ok.parquet")
    head = json.loads(zlib.decompress(t.schema.metadata[schedule_parquet.META_KEY]))
    edit(head)
    meta = {schedule_parquet.META_KEY: zlib.compress(json.dumps(head).encode())}
    pq.write_table(t.replace_schema_metadata(meta), tmp_path / "s.parquet")
    with pytest.raises(SpecraceError) as as_parquet:
        read_schedule_parquet(tmp_path / "s.parquet")
    # the same rule refused both: the message past the file's name is the same
    assert str(as_json.value).split(": ", 1)[1] == str(as_parquet.value).split(": ", 1)[1]
