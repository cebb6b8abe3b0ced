"""scripts/import_vllm_run.py: a GPU machine's vllm-run folder into data/vllm, as specrace's."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest
from repo_root import ROOT

from sim.errors import SpecraceError
from sim.runs.io import atomic_write_text
from sim.runs.outputs import claim_dir, foreign_files, marker

SCRIPT = ROOT / "scripts" / "import_vllm_run.py"


def _module():
    spec = importlib.util.spec_from_file_location("import_vllm_run", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _device_folder(path: Path) -> Path:
    claim_dir(path, "vllm-run")
    atomic_write_text(path / "summary.json", '{"errors": []}\n')
    atomic_write_text(path / "run.log", "a\n[jit_monitor] noise\nb\n")
    atomic_write_text(path / "raw_align_s16_d0ms.json", '{"steps": []}\n')
    return path


def test_an_import_is_specraces_own_folder_and_the_same_bytes_twice(tmp_path):
    run = _module().import_run
    src = _device_folder(tmp_path / "src")
    a, b = tmp_path / "a", tmp_path / "b"
    run(src, a)
    run(src, b)
    assert marker(a)["kind"] == "vllm-run" and foreign_files(a) == []
    assert (a / "run.log").read_text() == "a\nb\n"
    raw = a / "raw" / "raw_align_s16_d0ms.json.gz"
    assert gzip.decompress(raw.read_bytes()) == b'{"steps": []}\n'
    assert raw.read_bytes() == (b / "raw" / raw.name).read_bytes()


def test_an_unmarked_source_or_an_existing_destination_is_refused(tmp_path):
    run = _module().import_run
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "raw_x.json").write_text("{}")
    with pytest.raises(SpecraceError, match="no vllm-run marker"):
        run(plain, tmp_path / "out")
    src = _device_folder(tmp_path / "src")
    (tmp_path / "taken").mkdir()
    with pytest.raises(SpecraceError, match="exists"):
        run(src, tmp_path / "taken")
