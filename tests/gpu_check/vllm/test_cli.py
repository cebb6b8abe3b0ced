"""vllm-run's clean refusals, vllm-export/compare on the command line (the set-up pieces:
test_config.py, test_c_ops.py, test_carry.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from load import limit_s
from repo_root import ROOT


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpu_check", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=limit_s(300),
    )


def _one_line_error(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: error: "), res.stderr
    return lines[0]


def test_vllm_run_without_cuda_is_one_line(tmp_path: Path) -> None:
    res = _cli("vllm-run", "--out", str(tmp_path), env={"CUDA_VISIBLE_DEVICES": ""})
    assert "CUDA device" in _one_line_error(res)
    assert not any(tmp_path.iterdir())


def test_vllm_run_bad_configs_are_one_line(tmp_path: Path) -> None:
    res = _cli("vllm-run", "--out", str(tmp_path), "--modes", "all")
    assert "--modes" in _one_line_error(res)
    res = _cli("vllm-run", "--out", str(tmp_path), "--configs", "16:x")
    assert "MAX_NUM_SEQS" in _one_line_error(res)


def test_vllm_run_refuses_the_v1_runner_from_0_34(tmp_path: Path) -> None:
    from gpu_check.vllm.run import release, runner_refusal

    res = _cli("vllm-run", "--out", str(tmp_path), "--vllm-version", "0.34.0")
    assert "--runner v2" in _one_line_error(res) and not any(tmp_path.iterdir())
    assert release("0.34.0") == (0, 34, 0) and release("0.34.1rc1+cu130") == (0, 34, 1)
    assert release("0.9.2") < release("0.33.0") < release("0.34.0") and release("") == ()
    assert runner_refusal("v2", "0.34.0") is None and runner_refusal("v1", "0.33.0") is None
    assert runner_refusal("v1", "") is None  # unknown until vLLM is imported


def test_set_concurrency_sets_admission_too() -> None:
    from types import SimpleNamespace

    from gpu_check.vllm.run import set_concurrency

    def llm(sched):
        return SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace(
            engine_core=SimpleNamespace(scheduler=sched))))  # fmt: skip

    new = SimpleNamespace(max_num_running_reqs=64, max_num_active_reqs=64)  # 0.33.0 and later
    set_concurrency(llm(new), 16)
    assert (new.max_num_running_reqs, new.max_num_active_reqs) == (16, 16)
    old = SimpleNamespace(max_num_running_reqs=64)  # 0.24.0: one limit
    set_concurrency(llm(old), 16)
    assert vars(old) == {"max_num_running_reqs": 16}


def test_vllm_run_with_cuda_but_no_vllm_is_one_line(monkeypatch, tmp_path: Path) -> None:
    try:
        import vllm  # noqa: F401

        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    from gpu_check.vllm.run import Unavailable, ensure_vllm

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(Unavailable, match="cannot import it.*not found"):
        ensure_vllm(str(tmp_path / "no-such-carry"))


def test_export_of_a_missing_record_is_one_line(tmp_path: Path) -> None:
    res = _cli("vllm-export", str(tmp_path / "nope.json"), "--out", str(tmp_path / "x"))
    assert "cannot read" in _one_line_error(res)


def test_compare_prints_the_results_table() -> None:
    res = _cli("vllm-compare", "data/vllm")
    assert res.returncode == 0, res.stderr
    assert "device-authoritative" in res.stdout and "0.33.0" in res.stdout
