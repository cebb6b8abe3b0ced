"""Hostile inputs: each is one clear line naming the input and a non-zero exit, never a
traceback, a hang or a judgement against nonsense.

- tracebacks: a ``--grid`` of wrong-typed values, a truncated or endless raw record;
- hangs: a FIFO given where a file is read (``sim.runs.inputs``: refused before it is opened);
- accepted-invalid: a ``predictions.json`` of impossible values, ``vllm-figure --req`` of no
  request, ``upstream-test --out`` naming a folder;
- ``--out`` holding a byte that is not UTF-8.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_harness import refused, run_cli
from load import limit_s
from repo_root import ROOT

from gpu_check.__main__ import main as gpu_main
from sim.cli.main import main
from sim.errors import SpecraceError
from sim.runs.inputs import read_bounded, read_json, regular_file

VLLM = ROOT / "data" / "vllm"
RAW = VLLM / "v0.24.0" / "raw" / "raw_align_s16_d15ms.json.gz"
RUN = VLLM / "v0.24.0" / "align_s16_d15ms"  # an exported run, its raw record in ../raw/
PREDICTIONS = VLLM / "preregistered" / "ab-45100" / "predictions.json"


def one_line(code: int, err: str, *needles: str) -> str:
    """The refusal: a non-zero exit, one line on stderr holding every needle, no traceback."""
    assert code not in (0, -1), (code, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], err
    for needle in needles:
        assert needle in lines[0], (needle, err)
    return lines[0]


# -- 1. tracebacks ----------------------------------------------------------------------------
GRID = {"name": '"a"', "vllm": '"0.24.0"', "k": "1", "modes": '"align"', "configs": '"16:0"'}
BAD_GRIDS = {  # key = value -> what the line says
    "k = [3]": "k must be an integer in 1..15, got [3]",
    "num_requests = inf": "num_requests must be an integer in 1..1,000,000, got inf",
    "name = [1]": "name must be a folder name",
    "vllm = 3": "vllm must be a release sim models",
    'vllm = "9.9.9"': "got '9.9.9'",
    "seed = -1": "seed must be an integer",
    "k = true": "k must be an integer",
    "repeats = 1.5": "repeats must be an integer in 1..100",
    'arrivals = ["staggered"]': "arrivals must be a string",
    "baseline = 1": "baseline must be true or false",
    'name = "../up"': "name must be a folder name",
    'configs = "99999999:0"': "max_num_seqs must be in 1..65,536",
    'output_range = "9:1"': "--output-range '9:1'",
}


@pytest.mark.parametrize("line", sorted(BAD_GRIDS))
def test_a_grid_value_of_the_wrong_type_or_range_is_one_line(tmp_path: Path, line: str) -> None:
    key = line.split(" = ")[0]
    grid = tmp_path / "g.toml"
    body = [f"{k} = {v}" for k, v in GRID.items() if k != key]
    grid.write_text("[[run]]\n" + "\n".join([*body, line]) + "\n")
    out = tmp_path / "o"
    err = refused(["vllm-plan", "--grid", str(grid), "--out", str(out)], BAD_GRIDS[line],
                  out, prog=gpu_main)  # fmt: skip
    assert str(grid) in err and not out.exists()


def test_a_grid_of_other_top_level_keys_is_one_line(tmp_path: Path) -> None:
    grid = tmp_path / "g.toml"
    grid.write_text("runs = 3\n")
    refused(["vllm-plan", "--grid", str(grid), "--out", str(tmp_path / "o")],
            "unknown top-level keys ['runs']", prog=gpu_main)  # fmt: skip


def test_a_truncated_raw_record_is_one_line(tmp_path: Path) -> None:
    data = RAW.read_bytes()
    cut = tmp_path / "raw_cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    err = refused(["vllm-export", str(cut), "--out", str(tmp_path / "e")], "truncated gzip",
                  tmp_path / "e", prog=gpu_main)  # fmt: skip
    assert str(cut) in err
    bad = tmp_path / "raw_bad.json.gz"
    bad.write_bytes(data[:100] + b"\x00" * 100 + data[200:])
    refused(["vllm-export", str(bad), "--out", str(tmp_path / "e")], "corrupt gzip data",
            tmp_path / "e", prog=gpu_main)  # fmt: skip
    plain = tmp_path / "raw_plain.json.gz"
    plain.write_text("{}")
    refused(["vllm-export", str(plain), "--out", str(tmp_path / "e")], "not gzip-compressed",
            tmp_path / "e", prog=gpu_main)  # fmt: skip


def test_an_endless_device_as_a_raw_record_is_one_line(tmp_path: Path) -> None:
    refused(["vllm-export", "/dev/zero", "--out", str(tmp_path / "e")],
            "vllm-run record /dev/zero is not a regular file (a character device)",
            tmp_path / "e", prog=gpu_main)  # fmt: skip


def test_a_raw_record_past_its_bound_once_decompressed_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip bomb: the bound holds on the decompressed size (64 KiB here, 1 GiB for real)."""
    import gpu_check.vllm.export as export

    monkeypatch.setattr(export, "RAW_MAX", 64 << 10)
    bomb = tmp_path / "raw_bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (1 << 20)))
    assert bomb.stat().st_size < 64 << 10
    refused(["vllm-export", str(bomb), "--out", str(tmp_path / "e")],
            f"vllm-run record {bomb}: more than 64 KiB once decompressed", tmp_path / "e",
            prog=gpu_main)  # fmt: skip


# -- 2. hangs: a FIFO is never opened ---------------------------------------------------------
@contextlib.contextmanager
def fifo(path: Path) -> Iterator[Path]:
    """A FIFO at ``path`` and a watchdog: should a command open it to read (and so wait for a
    writer forever), the watchdog opens it to write and closes it at once, so the reader sees
    the end of the file instead of hanging the test, and the test fails."""
    os.mkfifo(path)
    opened, stop = [], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # succeeds only with a reader
            except OSError:
                time.sleep(0.05)
                continue
            opened.append(True)
            os.close(fd)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield path
    finally:
        stop.set()
        t.join()
    assert not opened, f"{path}: the command opened the FIFO to read it"


FIFO_CASES = {  # name -> (file name, argv with FILE for it, prog, what the line says)
    "vllm-export": ("raw_f.json.gz", ["vllm-export", "FILE", "--out", "OUT"], gpu_main,
                    "vllm-run record FILE is not a regular file (a FIFO)"),
    "vllm-plan --grid": ("g.toml", ["vllm-plan", "--grid", "FILE", "--out", "OUT"], gpu_main,
                         "--grid FILE is not a regular file (a FIFO)"),
    "sim --scenario": ("s.toml", ["schedule", "--scenario", "FILE", "--out", "OUT"], main,
                       "scenario file FILE is not a regular file"),
    "sim --timing": ("t.toml", ["run", "--scenario", "minimal-race", "--timing", "FILE",
                                "--out", "OUT"], main, "timing file FILE is not a regular file"),
    "sim params --timing": ("t.toml", ["params", "--timing", "FILE"], main,
                            "timing file FILE is not a regular file"),
    "sim --schedule json": ("schedule.json", ["run", "--schedule", "FILE", "--out", "OUT"],
                            main, "schedule FILE is not a regular file"),
    "sim --schedule parquet": ("schedule.parquet", ["run", "--schedule", "FILE", "--out",
                                                    "OUT"], main,
                               "schedule FILE is not a regular file"),
    "replay --schedule": ("schedule.json", ["replay", "--device", "cpu", "--schedule", "FILE",
                                            "--out", "OUT"], gpu_main,
                          "schedule FILE is not a regular file"),
    "replay --scenario": ("s.toml", ["replay", "--device", "cpu", "--scenario", "FILE",
                                     "--out", "OUT"], gpu_main,
                          "scenario file FILE is not a regular file"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FIFO_CASES))
def test_a_fifo_where_a_file_is_read_is_one_line_at_once(tmp_path: Path, name: str) -> None:
    filename, argv, prog, needle = FIFO_CASES[name]
    out = tmp_path / "o"
    with fifo(tmp_path / filename) as path:
        argv = [str(path) if a == "FILE" else str(out) if a == "OUT" else a for a in argv]
        t = time.monotonic()
        code, err = run_cli(argv, prog)
        one_line(code, err, needle.replace("FILE", str(path)))
        assert time.monotonic() - t < limit_s(15)
    assert not out.exists()


def test_a_fifo_among_a_folders_raw_records_is_one_line(tmp_path: Path) -> None:
    from gpu_check.vllm.tables import export_folder

    (tmp_path / "raw").mkdir()
    with fifo(tmp_path / "raw" / "raw_align_s16_d0ms.json.gz") as path:
        with pytest.raises(SpecraceError, match="is not a regular file \\(a FIFO\\)") as e:
            export_folder(tmp_path)
        assert str(path) in str(e.value)


def test_a_fifo_as_predictions_json_is_one_line(tmp_path: Path) -> None:
    with fifo(tmp_path / "predictions.json") as path:
        argv = ["vllm-outcome", str(tmp_path), "--runs", str(VLLM / "ab")]
        one_line(*run_cli(argv, gpu_main), f"{path} is not a regular file (a FIFO)")
    assert not (tmp_path / "outcome.json").exists()


def test_a_fifo_as_the_carried_vllm_archive_is_one_line(tmp_path: Path) -> None:
    from gpu_check.vllm.carry import CarryError, find_zip

    with fifo(tmp_path / "vllm-0.24.0.zip"), pytest.raises(CarryError, match="a FIFO"):
        find_zip(tmp_path)


def test_the_input_helper(tmp_path: Path) -> None:
    """``sim.runs.inputs``: a link to a regular file is one; everything else that is not a
    regular file, or not text where text is read, is one line naming the input."""
    good = tmp_path / "good.json"
    good.write_text('{"a": 1}')
    (tmp_path / "link.json").symlink_to(good)
    assert read_json(tmp_path / "link.json", "thing", 1 << 10) == {"a": 1}
    packed = tmp_path / "packed.json.gz"
    packed.write_bytes(gzip.compress(b'{"b": 2}'))
    assert read_json(packed, "thing", 1 << 10) == {"b": 2}
    assert regular_file(good, "thing") == good
    (tmp_path / "dangling").symlink_to(tmp_path / "absent")
    (tmp_path / "big").write_bytes(b"x" * 2048)
    (tmp_path / "nul").write_bytes(b"a\x00b")
    (tmp_path / "latin").write_bytes(b"caf\xe9")
    (tmp_path / "bad.json").write_text("{")
    cases = {
        "absent": "cannot read thing {}: no such file",
        "dangling": "a dangling symbolic link",
        ".": "is a directory, not a file",
        "big": "more than 1 KiB, larger than any thing",
        "nul": "binary, not text (a NUL byte at offset 1)",
        "latin": "binary, not UTF-8 text (byte 0xe9 at offset 3)",
        "bad.json": "not valid JSON",
    }
    for name, needle in cases.items():
        path = tmp_path / name
        with pytest.raises(SpecraceError) as e:
            read_json(path, "thing", 1 << 10)
        assert needle.format(path) in str(e.value) and "\n" not in str(e.value)
    with fifo(tmp_path / "f") as path:
        (tmp_path / "to-fifo").symlink_to(path)
        for p in (path, tmp_path / "to-fifo"):
            with pytest.raises(SpecraceError, match="is not a regular file \\(a FIFO\\)"):
                read_bounded(p, "thing", 1 << 10)
    assert read_bounded(packed, "thing", 1 << 10, text=False) == b'{"b": 2}'


# -- 3. accepted-invalid ------------------------------------------------------------------------
BAD_PREDICTIONS = {  # name -> (key of configs[0], value, what the line says)
    "rate NaN": ("rate", float("nan"), "rate must be a finite number in [0, 1], got nan"),
    "rate -1": ("rate", -1, "rate must be a finite number in [0, 1], got -1"),
    "rate off its counts": ("rate", 0.5, "rate 0.5 is not what its counts give"),
    "rate_ci95 x": ("rate_ci95", "x", "rate_ci95 must be [low, high]"),
    "rate_ci95 reversed": ("rate_ci95", [0.01, 0.001], "must be ordered"),
    "rate outside its interval": ("rate_ci95", [0.1, 0.2], "lies outside its interval"),
    "reads 0": ("reads", 0, "reads must be a positive integer, got 0"),
    "reads 1.5": ("reads", 1.5, "reads must be a positive integer, got 1.5"),
    "wrong > reads": ("wrong", 10**9, "wrong must be an integer in 0..reads"),
    "release 9.9.9": ("vllm", "9.9.9", "vllm must be a release sim models"),
    "mode": ("mode", "both", "mode must be align or none"),
    "patch": ("patch", "magic", "patch must be one of none"),
    "config path": ("config", "../x", "config must be a folder name"),
    "step_ms 0": ("step_ms", 0, "step_ms must be a finite number of milliseconds > 0"),
    "landing": ("landing", {"entry": 2}, "landing must be shares of entry"),
    "per 10k": ("per_10k_transitions", float("inf"), "per_10k_transitions must be a finite"),
    "seeds": ("wrong_per_seed", [1], "wrong_per_seed must be a count >= 0 per seed"),
}


@pytest.mark.parametrize("name", sorted(BAD_PREDICTIONS))
def test_predictions_of_impossible_values_are_refused_before_judging(
    tmp_path: Path, name: str
) -> None:
    key, value, needle = BAD_PREDICTIONS[name]
    doc = json.loads(PREDICTIONS.read_text())
    doc["configs"][0][key] = value
    (tmp_path / "predictions.json").write_text(json.dumps(doc))
    err = refused(["vllm-outcome", str(tmp_path), "--runs", str(VLLM / "ab")], needle,
                  prog=gpu_main)  # fmt: skip
    assert f"{tmp_path / 'predictions.json'}: configs[0]" in err
    assert not (tmp_path / "outcome.json").exists()


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"schema": "x"},
        {"schema": "specrace.vllm_predictions"},
        {"schema": "specrace.vllm_predictions", "configs": [3]},
    ],
)
def test_predictions_of_another_shape_are_one_line(tmp_path: Path, doc: object) -> None:
    (tmp_path / "predictions.json").write_text(json.dumps(doc))
    refused(["vllm-outcome", str(tmp_path), "--runs", str(VLLM / "ab")], "predictions.json",
            prog=gpu_main)  # fmt: skip


def test_every_committed_prediction_passes_the_check() -> None:
    from gpu_check.vllm.outcome import check_predictions

    for path in sorted((VLLM / "preregistered").glob("*/predictions.json")):
        assert check_predictions(json.loads(path.read_text()), str(path))


def test_figure_of_a_request_the_run_does_not_hold_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "f.png"
    err = refused(["vllm-figure", str(RUN), "--req", "NOPE", "--out", str(out)],
                  "--req 'NOPE': no read of that request in this run (requests: ",
                  prog=gpu_main)  # fmt: skip
    assert "s16_d15ms-0" in err and "in all" in err and not out.exists()
    refused(["vllm-figure", str(RUN), "--step", "9999999", "--out", str(out)],
            "--step 9999999: no read at that step in this run (steps 1..",
            prog=gpu_main)  # fmt: skip
    refused(["vllm-figure", str(RUN), "--step", "5", "--req", "NOPE", "--out", str(out)],
            "--req 'NOPE': no read of that request at step 5", prog=gpu_main)  # fmt: skip
    assert not out.exists()


def test_figure_of_one_request_draws_that_request(tmp_path: Path) -> None:
    from gpu_check.vllm.figure import pick
    from sim.runs.io import read_parquet

    reads = read_parquet(RUN / "observed_vllm.parquet", "reads")
    wrong = reads[reads["wrong"]]
    req = str(wrong["req_id"].iloc[-1])
    read = pick(reads, None, req)
    assert read["req_id"] == req and read["wrong"]


def test_upstream_test_out_with_a_trailing_slash_is_one_line(tmp_path: Path) -> None:
    code, err = run_cli(["upstream-test", "--vllm", "0.24.0", "--out", "t.py/"], main, tmp_path)
    one_line(code, err, "--out t.py/: a file name is needed, not a directory")
    assert list(tmp_path.iterdir()) == []


# -- --out holding a byte that is not UTF-8 -------------------------------------------------------
BAD_BYTE = os.fsdecode(b"o\xff")  # as argv gives it (surrogateescape)
OUT_COMMANDS = {
    "sim schedule": ["-m", "sim", "schedule", "--scenario", "minimal-race", "--steps", "4"],
    "sim run": ["-m", "sim", "run", "--scenario", "minimal-race", "--policy", "align",
                "--no-trace", "--steps", "4"],
    "sim upstream-test": ["-m", "sim", "upstream-test", "--vllm", "0.24.0"],
    "gpu_check replay": ["-m", "gpu_check", "replay", "--device", "cpu", "--steps", "4"],
    "gpu_check vllm-export": ["-m", "gpu_check", "vllm-export", str(RAW)],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OUT_COMMANDS))
def test_out_with_a_byte_that_is_not_utf8_is_one_line(tmp_path: Path, name: str) -> None:
    out = BAD_BYTE + (".py" if name == "sim upstream-test" else "")
    argv = [sys.executable, *OUT_COMMANDS[name], "--out", out]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env,
                       errors="backslashreplace", timeout=limit_s(120))  # fmt: skip
    one_line(r.returncode, r.stderr, "--out o\\xff", "UTF-8")
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_in_an_exported_run_is_one_line(tmp_path: Path) -> None:
    """vllm-compare reads the export's tables and its export.json: a FIFO in place of either is
    one line naming it, not a wait (sim.runs.io.read_json and read_parquet go through
    sim.runs.inputs)."""
    import shutil

    for name in ("export.json", "steps_vllm.parquet"):
        run = tmp_path / name.replace(".", "-") / "align_s16_d0ms"
        shutil.copytree(VLLM / "v0.23.0" / "align_s16_d0ms", run)
        (run / name).unlink()
        with fifo(run / name) as path:
            one_line(*run_cli(["vllm-compare", str(run)], gpu_main),
                     f"{path} is not a regular file (a FIFO)")  # fmt: skip
