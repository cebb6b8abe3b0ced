"""Issue #24, "Nothing lost, nothing half-done": one test per class of its examples.

- ``--force`` replaces only what specrace wrote (sim.runs.outputs), and so does every writer;
- odd output paths are one line before any work, nothing left behind;
- ``sweep --scheduler``: any address that is not a Dask scheduler is one line within 10 s;
- every count has a maximum and every search a cost estimate (``--budget``);
- schedule.json checked for meaning (sim.model.schedule_check);
- ``gpu_check vllm-compare`` of a folder that is not there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from fuzz_harness import refused, run_cli, run_schedule
from repo_root import ROOT

from gpu_check.__main__ import main as gpu_main
from sim.cli.main import main
from sim.runs.outputs import MANIFEST, MARKER, prepare_dir, prepare_file

RUN = ["run", "--scenario", "minimal-race", "--policy", "align", "--no-trace"]


def user_folder(root: Path) -> Path:
    """A folder of a user's files (as a package's source would be)."""
    d = root / "mine"
    (d / "sub").mkdir(parents=True)
    (d / "notes.txt").write_text("my notes")
    (d / "model.py").write_text("x = 1\n")
    (d / "sub" / "data.csv").write_text("a,b\n")
    return d


def snapshot(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): p.read_text() for p in sorted(d.rglob("*")) if p.is_file()}


# -- --force replaces only what specrace wrote ---------------------------------------------------
def test_force_refuses_a_folder_of_a_users_files(tmp_path: Path) -> None:
    mine = user_folder(tmp_path)
    before = snapshot(mine)
    for argv, prog in ((RUN, main), (["schedule", "--scenario", "minimal-race"], main),
                       (["replay", "--device", "cpu", "--steps", "4"], gpu_main)):  # fmt: skip
        for force in ([], ["--force"]):
            err = refused([*argv, "--out", str(mine), *force], "specrace did not write",
                          prog=prog)  # fmt: skip
            assert "notes.txt" in err or "model.py" in err, err
    assert snapshot(mine) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # nothing beside it either


def test_force_refuses_a_source_tree(tmp_path: Path) -> None:
    """The report's case: ``sim run --out sim/model --force`` deleted the package's source."""
    src = tmp_path / "model"
    shutil.copytree(ROOT / "sim" / "model", src, ignore=shutil.ignore_patterns("__pycache__"))
    before = snapshot(src)
    refused([*RUN, "--out", str(src), "--force"], "specrace did not write")
    assert snapshot(src) == before


def test_force_replaces_a_marked_run_but_not_a_file_added_to_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run_cli([*RUN, "--out", str(out)])[0] == 0
    marker = json.loads((out / MARKER).read_text())
    assert marker["kind"] == "run" and marker["command"].startswith("python -m sim run")
    refused([*RUN, "--out", str(out)], "--force replaces it")
    assert run_cli(["plot", str(out)])[0] == 0  # what other commands add is specrace's too
    assert run_cli([*RUN, "--out", str(out), "--force"])[0] == 0
    (out / "notes.txt").write_text("mine")
    err = refused([*RUN, "--out", str(out), "--force"], "notes.txt")
    assert "specrace did not write" in err and (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("kind", [[], [0, 1], {"a": 1}, 7, None])
def test_a_marker_of_no_kind_is_not_ours(tmp_path: Path, kind: object) -> None:
    """Found by the fuzz campaign (make test-slow): a marker whose kind was a list was a
    TypeError (unhashable) when a sweep resumed; a kind that is not a name is no kind."""
    out = tmp_path / "sw"
    sweep = ["sweep", "--scenario", "minimal-race", "--vary", "timing.dma_land_delay_ns=1,2",
             "--steps", "4", "--workers", "1", "--quiet", "--out", str(out)]  # fmt: skip
    assert run_cli(sweep)[0] == 0
    marker = json.loads((out / MARKER).read_text())
    (out / MARKER).write_text(json.dumps({**marker, "kind": kind}))
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    refused(sweep, "specrace did not write")
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before


def test_a_run_an_older_specrace_wrote_is_refused_with_how_to_move_it(tmp_path: Path) -> None:
    """An older specrace's marker carries no manifest: it proves nothing, so even --force
    leaves the folder as it is and says how to move it aside."""
    out = tmp_path / "old"
    assert run_cli(["run", "--scenario", "minimal-race", "--no-trace", "--out", str(out)])[0] == 0
    doc = json.loads((out / MARKER).read_text())
    (out / MARKER).write_text(json.dumps({k: v for k, v in doc.items() if k != "format"}))
    (out / MANIFEST).unlink()
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    err = refused([*RUN, "--out", str(out), "--force"], "older specrace")
    assert f"mv {out} {out}.old" in err
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before


def test_every_writer_refuses_a_users_folder_or_file(tmp_path: Path, run_dir: Path) -> None:
    mine = user_folder(tmp_path)
    before = snapshot(mine)
    sweep = ["sweep", "--scenario", "minimal-race", "--vary", "timing.dma_land_delay_ns=1,2",
             "--steps", "4", "--workers", "1", "--quiet"]  # fmt: skip
    for argv in (sweep, ["field-reports", "--only", "vllm#45100"]):
        refused([*argv, "--out", str(mine)], "specrace did not write")
    for argv in (
        ["calibrate"],
        ["vllm-forward", str(ROOT / "data" / "vllm")],
        ["vllm-export", str(ROOT / "data" / "vllm" / "v0.24.0" / "raw" / "x.json")],
    ):
        refused([*argv, "--out", str(mine)], "specrace did not write", prog=gpu_main)
    assert snapshot(mine) == before
    # A file of the user's where a command would write one is not replaced.
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    for name, argv in (("notes.png", ["plot", str(run), "--out", str(mine / "notes.png")]),
                       ("x.json", ["check", "--max-rows", "1", "--steps", "2",
                                   "--out", str(mine / "x.json")]),
                       ("x.toml", ["shrink", str(run), "--step", "4", "--req", "R",
                                   "--out", str(mine / "x.toml")])):  # fmt: skip
        (mine / name).write_text("mine")
        refused(argv, "specrace did not write it")
        assert (mine / name).read_text() == "mine"


def test_the_documented_regenerations_still_write_in_place() -> None:
    """data/ folders that commands regenerate (README, data/*/README.md) are specrace's."""
    assert prepare_dir(ROOT / "data" / "field_reports", "field-reports", replace=False)
    assert prepare_dir(ROOT / "data" / "params", "calibrate", replace=False)
    assert prepare_dir(ROOT / "data" / "vllm" / "forward", "vllm-forward", replace=False)
    for path in (*(ROOT / "data" / "check").glob("*.json"), *(ROOT / "docs/images").glob("*.*")):
        assert prepare_file(path) == path


# -- odd output paths: one line, nothing left behind ----------------------------------------------
@pytest.mark.parametrize("kind", ["loop", "dangling", "long name", "long path", "under a file",
                                  "not writable"])  # fmt: skip
def test_odd_output_paths(tmp_path: Path, kind: str, monkeypatch) -> None:
    root = tmp_path / "t"
    root.mkdir()
    (root / "f").write_text("a file")
    os.symlink(root / "loop", root / "loop")
    os.symlink(root / "nowhere", root / "dangling")
    out, needle = {
        "loop": (root / "loop" / "o", "symbolic link loop"),
        "dangling": (root / "dangling", "dangling symbolic link"),
        "long name": (root / ("n" * 300), "more than the 255"),
        "long path": (root.joinpath(*["abcdefghij"] * 500), "the file system allows"),
        "under a file": (root / "f" / "o", "is a file, not a directory"),
        "not writable": (root / "ro" / "o", "is not writable"),
    }[kind]
    if kind == "not writable":  # root may write anywhere: the check itself is what is tested
        (root / "ro").mkdir()
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, m: real(p, m) and Path(p) != root / "ro")
    before = sorted(p.name for p in root.iterdir())
    sweep = ["sweep", "--scenario", "minimal-race", "--vary", "timing.dma_land_delay_ns=1,2",
             "--steps", "4", "--workers", "1", "--quiet"]  # fmt: skip
    fields = ["field-reports", "--only", "vllm#45100"]
    for argv, prog in ((RUN, main), (sweep, main), (fields, main),
                       (["replay", "--device", "cpu", "--steps", "4"], gpu_main)):  # fmt: skip
        refused([*argv, "--out", str(out)], needle, prog=prog)
    refused(["check", "--max-rows", "1", "--steps", "2", "--out", str(out / "x.json")], needle)
    assert sorted(p.name for p in root.iterdir()) == before


def test_a_run_that_fails_removes_the_folders_it_made(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "run"
    refused(["run", "--scenario", "minimal-race", "--set", "timing.gpu_prep_ns=-1", "--out",
             str(out)], "gpu_prep_ns")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


# -- --scheduler -----------------------------------------------------------------------------------
def _server(answer: bytes | None) -> tuple[int, threading.Event]:
    """A loopback port that accepts and sends ``answer`` (None: nothing) and never speaks Dask."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    stop = threading.Event()

    def serve() -> None:
        s.settimeout(0.2)
        held = []
        while not stop.is_set():
            try:
                c, _ = s.accept()
            except TimeoutError:
                continue
            held.append(c)
            if answer is not None:
                c.sendall(answer)
        for c in held:
            c.close()
        s.close()

    threading.Thread(target=serve, daemon=True).start()
    return s.getsockname()[1], stop


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("kind", ["garbage", "http", "silent", "closed", "empty", "malformed",
                                  "bad port", "protocol"])  # fmt: skip
def test_scheduler_that_is_not_one(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("distributed")
    stop = None
    if kind in ("garbage", "http", "silent"):
        answer = {"garbage": b"\xff" * 64, "http": b"HTTP/1.1 400 Bad Request\r\n\r\n",
                  "silent": None}[kind]  # fmt: skip
        port, stop = _server(answer)
        address, needle = f"tcp://127.0.0.1:{port}", "not a Dask scheduler" if answer is None else (
            "does not speak Dask")  # fmt: skip
    else:
        address, needle = {
            "closed": (f"127.0.0.1:{_closed_port()}", "connection refused"),
            "empty": ("", "--scheduler is empty"),
            "malformed": ("tcp://", "expected [tcp://]HOST:PORT"),
            "bad port": ("127.0.0.1:99999", "not in 1..65535"),
            "protocol": ("http://127.0.0.1:80", "protocol 'http'"),
        }[kind]
    out = tmp_path / "sw"
    t = time.monotonic()
    try:
        refused(["sweep", "--scenario", "minimal-race", "--vary", "timing.dma_land_delay_ns=1,2",
                 "--steps", "4", "--quiet", "--scheduler", address, "--out", str(out)], needle,
                out)  # fmt: skip
    finally:
        if stop is not None:
            stop.set()
    assert time.monotonic() - t < 10
    assert not out.exists()


# -- bounds and cost estimates -------------------------------------------------------------------
def test_counts_have_maximums_and_searches_estimates(tmp_path: Path) -> None:
    refused(["risk", "--seeds", "1000000000"], "--seeds: must be in 1..10^6")
    refused(["risk", "--seeds", "1000000"], "CPU hours (estimate)")
    refused(["field-reports", "--seeds", str(10**12), "--out", str(tmp_path / "fr")],
            "--seeds: must be in 0..10^6")  # fmt: skip
    refused(["field-reports", "--seeds", "100000", "--out", str(tmp_path / "fr")], "--budget")
    err = refused(["check", "--max-rows", "8", "--steps", "8", "--k", "1"], "CPU hours")
    assert "more than any --budget allows" in err
    err = refused(["check", "--max-rows", "4", "--steps", "4"], "--budget 1;")
    assert "--budget 4 to run it" in err or "to run it" in err
    refused(["check", "--max-rows", "2", "--steps", "3", "--budget", "0.000001"], "estimate")
    refused(["bench", "--points", str(10**8)], "--points: must be in 1..10^6")
    refused(["bench", "--sweep", str(10**6)], "bench: about")  # in range, but days of CPU
    refused(["plot", str(tmp_path), "--step", str(10**12)], "--step: must be in")
    assert list(tmp_path.iterdir()) == []


def test_integers_of_any_length_are_refused_with_the_range(tmp_path: Path) -> None:
    huge = "9" * 5000
    out = tmp_path / "o"
    refused([*RUN, "--set", f"engine.max_num_seqs={huge}", "--out", str(out)], "(|x| <= 10^13)")
    refused([*RUN, "--set", f"timing.gpu_prep_ns=-{huge}", "--out", str(out)], "5,000 digits")
    refused(["sweep", "--scenario", "minimal-race", "--vary", f"timing.gpu_prep_ns=1,{huge}",
             "--out", str(out)], "5,000 digits")  # fmt: skip
    refused(["risk", "--set", f"timing.gpu_prep_ns={huge}"], "5,000 digits")
    for section, key in (("engine", "max_num_seqs"), ("timing", "gpu_prep_ns")):
        path = tmp_path / f"{section}.toml"
        path.write_text(f"[{section}]\n{key} = {huge}\n")
        argv = (["schedule", "--scenario", str(path)] if section == "engine"
                else ["run", "--scenario", "minimal-race", "--timing", str(path)])  # fmt: skip
        refused([*argv, "--out", str(out)], "out of range (|x| <= 10^13)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine.toml", "timing.toml"]


# -- schedule.json and scenarios checked for meaning -----------------------------------------------
MEANING = {
    "scenario {}": (lambda d: d.update(scenario={}), "scenario: missing name, engine"),
    "discard 999": (lambda d: d["steps"][4]["discard"].__setitem__(0, 999),
                    "step 4: discard[0]: 999 is not a flag"),
    "doubled op": (lambda d: d["steps"][4]["ops"].insert(0, d["steps"][4]["ops"][0]),
                   "step 4: ops"),
    "new contradicts the adds": (lambda d: d["steps"][4]["new"].clear(), "step 4: new"),
    "new seen before": (lambda d: d["steps"][4]["new"].append("R"), "step 4: new"),
    "finished not removed": (lambda d: d["steps"][5]["finished"].append("Q"),
                             "step 5: ops: 'Q' is finished or unscheduled but not removed"),
    "remove of another request": (lambda d: d["steps"][4]["ops"][0].__setitem__(3, "R"),
                                  "step 4: ops"),
    "async flipped": (lambda d: d["scenario"]["engine"].update(async_scheduling=False),
                      "scenario.engine.async_scheduling: false"),
    "seed 10^30": (lambda d: d.update(seed=10**30), "seed: 1000000000...(31 digits)"),
    "name a number": (lambda d: d["scenario"].update(name=5), "scenario.name: must be text"),
    "description a list": (lambda d: d["scenario"].update(description=[1]),
                           "scenario.description: must be text"),
    "a request twice": (lambda d: d["requests"].append(d["requests"][0]), "appears twice"),
    "requests None": (lambda d: d.update(requests=None), "requests must be a list"),
    "a request id of a list": (lambda d: d["requests"][0].update(req_id=[1]), "requests[0]"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(MEANING))
def test_schedule_meaning(tmp_path: Path, schedule: dict, case: str) -> None:
    mutate, needle = MEANING[case]
    mutate(schedule)
    run_schedule(tmp_path, schedule, needle)


# A Parquet ``discard`` is a bool column: a flag of 999 cannot be written there.
@pytest.mark.parametrize("case", sorted({**MEANING, "seed 2^64": None}.keys() - {"discard 999"}))
def test_json_and_parquet_refuse_the_same_schedules(
    tmp_path: Path,
    schedule: dict,
    case: str,
) -> None:
    """One header reader for both forms: what ``schedule.json`` refuses, ``schedule.parquet``
    refuses with the same words (the Parquet reader once skipped the header's checks, so a seed
    of 2^64 ended ``sim run --schedule`` in a traceback)."""
    from sim.model.schedule import Schedule, StepRecord
    from sim.model.schedule_parquet import write_schedule_parquet

    mutate, needle = MEANING.get(case) or (lambda d: d.update(seed=2**64), "is not in 0..2^63-1")
    mutate(schedule)
    steps = [StepRecord.from_json(s) for s in schedule["steps"]]
    raw = Schedule(schedule["scenario"], schedule["seed"], schedule["requests"], steps)
    write_schedule_parquet(tmp_path / "bad.parquet", raw)
    (tmp_path / "bad.json").write_text(json.dumps(schedule))
    for name in ("bad.json", "bad.parquet"):
        out = tmp_path / f"o-{name}"
        refused(["run", "--schedule", str(tmp_path / name), "--out", str(out)], needle, out)


def test_scenario_text_fields_are_text(tmp_path: Path) -> None:
    for field in ("name = 5", "description = [1, 2]"):
        path = tmp_path / "s.toml"
        path.write_text(field + "\n")
        refused(["schedule", "--scenario", str(path), "--out", str(tmp_path / "o")],
                "must be text")  # fmt: skip


def test_every_schedule_specrace_or_vllm_wrote_means_what_it_says() -> None:
    """The rules hold for the schedules the scheduler builds (async on and off, chunked prefill,
    preemption, prefix hits, align) and for every committed one, real vLLM exports included."""
    from sim.model import schedule as sm
    from sim.model.params import load_scenario
    from sim.model.schedule_io import read_schedule
    from sim.model.scheduling import build_schedule

    small = {"engine.max_num_seqs": 8, "engine.max_num_batched_tokens": 64,
             "workload.initial_requests": 12}  # fmt: skip
    for overrides in ({}, {"engine.async_scheduling": False},
                      {**small, "engine.kv_cache_capacity_tokens": 3000},
                      {**small, "engine.kv_cache_capacity_tokens": 3000,
                       "engine.async_scheduling": False},
                      {"engine.max_num_seqs": 8, "workload.prefix_hit_prob": 0.5,
                       "workload.initial_requests": 2, "workload.arrival_rate_per_step": 0.8},
                      {"engine.mamba_cache_mode": "align",
                       "engine.mamba_block_size": 80}):  # fmt: skip
        sc = load_scenario("qwen35-mtp3", overrides)
        for seed in range(2):
            sm.loads(sm.dumps(build_schedule(sc, seed, 200)), str(overrides))
    committed = sorted((ROOT / "data").rglob("schedule.json"))
    assert len(committed) >= 40
    for path in committed:
        read_schedule(path)


# -- gpu_check vllm-compare of a folder that is not there ------------------------------------------
def test_vllm_compare_of_a_missing_or_empty_folder(tmp_path: Path) -> None:
    refused(["vllm-compare", str(tmp_path / "nope")], "does not exist", prog=gpu_main)
    refused(["vllm-compare", str(tmp_path)], "no exported run", prog=gpu_main)


# -- an empty --out, a pre-registration's folder, an outcome someone else wrote --------------------
PLAN = ["vllm-plan", "--vllm", "0.24.0", "--modes", "align", "--configs", "16:0",
        "--num-requests", "16", "--seeds", "1"]  # fmt: skip


def test_an_empty_out_is_refused_not_taken_for_the_working_directory(tmp_path: Path) -> None:
    """``--out ""`` once wrote predictions.json (vllm-plan) or three tables (field-reports) into
    the working directory: it names no folder, so it is one line and nothing written."""
    for prog, argv in ((gpu_main, PLAN), (main, ["field-reports", "--only", "vllm#35288"])):
        code, err = run_cli([*argv, "--out", ""], prog, cwd=tmp_path)
        assert code == 2 and "--out is empty" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_plan_goes_into_a_new_folder_never_among_a_users_files(tmp_path: Path) -> None:
    mine = user_folder(tmp_path)
    before = snapshot(mine)
    code, err = run_cli([*PLAN, "--out", str(mine)], gpu_main, cwd=ROOT)
    assert code == 2 and "not an empty folder" in err, err
    assert snapshot(mine) == before and not (mine / "predictions.json").exists()


def test_outcome_force_refuses_an_outcome_it_did_not_write_before_judging(tmp_path: Path) -> None:
    prereg = tmp_path / "prereg"
    prereg.mkdir()
    shutil.copy(ROOT / "data/vllm/preregistered/ab-45100/predictions.json", prereg)
    (prereg / "outcome.json").write_text('{"mine": 1}')
    argv = ["vllm-outcome", str(prereg), "--runs", str(tmp_path / "no-runs-here"), "--force"]
    code, err = run_cli(argv, gpu_main, cwd=ROOT)  # refused before it looks for the runs
    assert code == 2 and "cannot prove it wrote" in err, err
    assert (prereg / "outcome.json").read_text() == '{"mine": 1}'
