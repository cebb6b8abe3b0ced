"""A streamed run's schedule built in a second process (sim.runs.step_source): the same steps
and the same files as in one process, its errors raised here, and it stops when we do."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from load import limit_s
from repo_root import ROOT

from sim.errors import SpecraceError
from sim.model.params import load_scenario
from sim.model.policies import POLICIES
from sim.model.schedule_io import open_schedule
from sim.model.schedule_parquet import write_schedule_parquet
from sim.model.scheduling import build_schedule
from sim.runs import step_source
from sim.runs.run import run_streaming
from sim.runs.step_source import StepsFromProcess, generated, pack_steps, unpack_steps

BASE = load_scenario("qwen35-mtp3")
TIGHT = replace(
    BASE,
    engine=replace(BASE.engine, kv_cache_capacity_tokens=3000, max_num_seqs=16,
                   max_num_batched_tokens=300),
)  # fmt: skip
SYNC = replace(BASE, engine=replace(BASE.engine, async_scheduling=False))
ARRAYS = step_source._ARRAYS


def _same_records(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.to_json() == w.to_json()
        for f in ARRAYS:
            assert getattr(g, f).dtype == getattr(w, f).dtype, f


@pytest.mark.parametrize("scenario", [BASE, TIGHT, SYNC], ids=["base", "preempting", "sync"])
def test_packed_steps_unpack_to_the_same_records(scenario) -> None:
    recs = build_schedule(scenario, 1, 300).steps
    for size in (1, 7, 300):
        got = [
            r
            for i in range(0, len(recs), size)
            for r in unpack_steps(pack_steps(recs[i : i + size]))
        ]
        _same_records(got, recs)
    # a chunk whose steps disagree on a dtype (a schedule made by hand) goes as it is
    mixed = [recs[0], replace(recs[1], drafts=recs[1].drafts.astype(np.int16))]
    assert pack_steps(mixed)[0] == "records"
    _same_records(unpack_steps(pack_steps(mixed)), mixed)
    assert pack_steps(recs[:2])[0] == "packed"


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.parametrize("fmt", ["parquet", "json"])
@pytest.mark.parametrize("scenario", [BASE, TIGHT], ids=["base", "preempting"])
def test_a_second_process_writes_the_same_files(tmp_path: Path, fmt: str, scenario) -> None:
    steps = 2 * step_source.CHUNK_STEPS + 37  # three chunks, the last one short
    out = {}
    for workers in (1, 2):
        out[workers] = tmp_path / f"w{workers}"
        stats: dict = {}
        summary = run_streaming(out[workers], scenario, POLICIES["align"], 4, steps,
                                schedule_format=fmt, workers=workers, stats=stats)  # fmt: skip
        assert summary["reads"] > 0
        assert ("schedule_process_peak_rss_kib" in stats) == (workers == 2)
    assert _files(out[1]) == _files(out[2])
    assert stats["schedule_process_peak_rss_kib"] > 10_000  # a Python process's, in KiB
    if fmt == "parquet":  # a schedule file read in the second process: the same again
        source = functools.partial(open_schedule, out[1] / "schedule.parquet")
        again = tmp_path / "again"
        run_streaming(again, scenario, POLICIES["align"], 4, steps, schedule_format=fmt,
                      source=source, workers=2)  # fmt: skip
        assert _files(again) == _files(out[1])


def _tampered(tmp_path: Path) -> Path:
    """A schedule.parquet whose step 700 (in its second chunk) is no longer what its row ops
    give."""
    path = tmp_path / "s.parquet"
    write_schedule_parquet(path, build_schedule(BASE, 0, 800))
    t = pq.read_table(path)
    ids = t.column("req_ids").to_pylist()
    ids[700] = list(reversed(ids[700]))
    bad = tmp_path / "bad.parquet"
    pq.write_table(t.set_column(t.schema.get_field_index("req_ids"), "req_ids", pa.array(ids)),
                   bad)  # fmt: skip
    return bad


def test_errors_of_the_second_process_are_raised_here(tmp_path: Path) -> None:
    bad = _tampered(tmp_path)
    for workers in (1, 2):
        out = tmp_path / f"o{workers}"
        source = functools.partial(open_schedule, bad)
        with pytest.raises(SpecraceError, match="step 700: ops: replaying them"):
            run_streaming(out, BASE, POLICIES["align"], 0, 800, schedule_format="parquet",
                          source=source, workers=workers)  # fmt: skip
        # nothing half-written: the temporaries are gone
        assert not out.exists() or list(out.iterdir()) == []
    missing = tmp_path / "missing.parquet"
    with pytest.raises(SpecraceError) as here:
        open_schedule(missing)
    with pytest.raises(SpecraceError) as there:
        _open_apart(functools.partial(open_schedule, missing), tmp_path)
    assert str(there.value) == str(here.value)
    with pytest.raises(ValueError, match="invalid literal"):  # not a SpecraceError: as it is
        _open_apart(functools.partial(int, "x"), tmp_path)
    with pytest.raises(SpecraceError, match=r"stopped \(exit code 3\)"):
        _open_apart(functools.partial(os._exit, 3), tmp_path)


def _open_apart(source, tmp_path: Path) -> None:
    with StepsFromProcess(source):
        pass


def test_a_second_process_that_dies_or_is_left_early_is_seen_and_stopped(tmp_path: Path) -> None:
    source = functools.partial(generated, BASE, 0, 200_000)
    pipe = StepsFromProcess(source)
    with pipe as (_, steps, n):
        assert n == 200_000 and next(steps).step == 0
    assert pipe._proc.exitcode is not None  # stopped, not left running
    pipe = StepsFromProcess(source)
    with pipe as (_, steps, _n):
        next(steps)
        os.kill(pipe._proc.pid, signal.SIGKILL)
        with pytest.raises(SpecraceError, match="stopped"):
            for _ in steps:
                pass


def test_how_many_processes_a_stream_takes() -> None:
    sw = step_source.stream_workers
    assert sw(0, 100, cores=2) == 1  # under a second of work: no second process
    assert sw(0, 100_000, cores=2) == 2
    assert sw(0, 100_000, cores=1) == 1
    assert sw(1, 100_000, cores=16) == 1
    assert sw(7, 100, cores=1) == 2  # asked for: the source in a second process


def test_cli_workers_is_for_stream(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "sim", "run", "--workers", "2", "--steps", "10",
                        "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True,
                       timeout=limit_s(60))  # fmt: skip
    assert r.returncode == 2 and r.stderr == (
        "error: --workers is for --stream (a run without it is one process)\n"
    )
    assert not (tmp_path / "o").exists()


def _default_sigint() -> None:  # as a terminal's foreground command has it (test_boundary.py)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _tagged(tag: str) -> list[int]:
    """The processes whose environment holds ``tag`` (Linux /proc)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if tag.encode() in (d / "environ").read_bytes():
                    pids.append(int(d.name))
            except OSError:  # gone, or not ours to read
                pass
    return pids


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_ctrl_c_of_a_stream_on_two_processes_leaves_no_process_and_no_file(
    tmp_path: Path,
) -> None:
    """SIGINT to ``run --stream --workers 2`` once it is under way (its first line printed, then
    a moment for the second process to start): one line, exit 130, no output, and no process
    of the run left (each is found by a tag in its environment, which its children inherit)."""
    import time
    import uuid

    tag = f"SPECRACE_TEST_TAG={uuid.uuid4().hex}"
    env = {**os.environ, tag.split("=")[0]: tag.split("=")[1]}
    out = tmp_path / "o"
    p = subprocess.Popen([sys.executable, "-m", "sim", "run", "--stream", "--policy", "align",
                          "--workers", "2", "--steps", "200000", "--out", str(out)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=_default_sigint)  # fmt: skip
    assert p.stdout is not None
    assert p.stdout.readline().startswith("SEED="), p.stderr
    deadline = time.monotonic() + limit_s(10)
    while len(_tagged(tag)) < 3 and time.monotonic() < deadline:  # run, fork server, source
        time.sleep(0.05)
    assert len(_tagged(tag)) >= 3
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=limit_s(60))
    assert p.returncode == 130 and err.strip() == "error: interrupted", err
    while _tagged(tag) and time.monotonic() < deadline + limit_s(10):
        time.sleep(0.05)
    assert _tagged(tag) == []
    assert sorted(q.name for q in tmp_path.iterdir()) == []
