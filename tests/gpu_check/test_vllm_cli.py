"""vllm-run's clean refusals, vllm-export/compare on the command line, the set-up pieces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from load import limit_s

from gpu_check.vllm import c_ops
from gpu_check.vllm.carry import write_stubs
from gpu_check.vllm.config import EngineConfig, RunConfig, parse_plan, workload

ROOT = Path(__file__).resolve().parents[2]


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


def test_plan_and_workload() -> None:
    plan = parse_plan("align,none", "align=16:0,16:8000;none=64")
    assert [c.name for c in plan["align"]] == ["s16_d0ms", "s16_d8ms"]
    assert [c.max_num_seqs for c in plan["none"]] == [64]
    assert list(parse_plan("none", "16")) == ["none"]
    with pytest.raises(ValueError):
        parse_plan("align", "fast=16")
    a, b = workload(RunConfig(num_requests=20)), workload(RunConfig(num_requests=20))
    assert a == b and all(4 <= len(r["prompt_token_ids"]) <= 703 for r in a)
    kw = EngineConfig(mamba_cache_mode="align").llm_kwargs("/m")
    assert kw["enable_prefix_caching"] and kw["async_scheduling"]
    assert not EngineConfig(mamba_cache_mode="none").llm_kwargs("/m")["enable_prefix_caching"]


def test_c_ops_stand_in_matches_torch() -> None:
    c_ops.register()
    assert c_ops.register() is c_ops.register()  # once per process
    x = torch.randn(3, 16)
    out = torch.empty(3, 8)
    torch.ops._C.silu_and_mul(out, x)
    torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :8]) * x[:, 8:])
    w = torch.rand(16)
    torch.ops._C.rms_norm(out2 := torch.empty_like(x), x, w, 1e-6)
    torch.testing.assert_close(out2, torch.nn.functional.rms_norm(x, (16,), w, 1e-6))
    res, y = torch.randn(3, 16), x.clone()
    torch.ops._C.fused_add_rms_norm(y, res_copy := res.clone(), w, 1e-6)
    torch.testing.assert_close(res_copy, x + res)
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x + res, (16,), w, 1e-6))
    assert torch.ops._C.cutlass_scaled_mm_supports_fp8(90) is False
    with pytest.raises(NotImplementedError, match="rotary_embedding"):
        torch.ops._C.rotary_embedding([x])


def test_stubs_import_any_submodule_and_stay_inert(tmp_path: Path) -> None:
    write_stubs(tmp_path)
    code = (
        "import xgrammar.structural_tag as st, llguidance.torch, lmformatenforcer.integrations\n"
        "obj = st.AnyTextFormat(1, x=2)\n"
        "assert obj.anything() is not None\n"
        "import importlib.util; assert importlib.util.find_spec('json') is not None\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})  # fmt: skip
    assert res.stdout.strip() == "ok", res.stderr


# What vLLM 0.34.0's CuTeDSL kernel modules do at import time (vllm/cute_utils/*.py,
# model_executor/layers/mamba/ops/gdn_chunk_cutedsl/__init__.py), none of it run by the tiny model.
CUTEDSL_IMPORT_TIME = """
from functools import cache
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Constexpr, Float32, Int32, Uint32, cute as cute2
from cutlass._mlir import ir
from cutlass._mlir.dialects import llvm, nvvm, vector
from cutlass.cute.nvgpu import cpasync
from cutlass.cutlass_dsl import T, dsl_user_op
from cuda.bindings.driver import CUstream
from quack.compile_utils import make_fake_tensor


class PrepMetaKernel(cutlass.cute.Struct):
    def __init__(self, BT: int) -> None:
        self.BT = BT

    @cute.jit
    def __call__(self, cu_seqlens: cute.Tensor, n: Constexpr[int], stream: CUstream) -> None:
        pass


@dsl_user_op
def cvt(x: Float32 | None, *, loc=None, ip=None) -> Uint32:
    return x


@cache
def compiled(bt: int):
    return cute.compile(PrepMetaKernel(bt), make_fake_tensor(Int32, (bt,)))


MASK = (Int32(1) << 3) | Int32(4)
assert isinstance(PrepMetaKernel(64), PrepMetaKernel) and compiled(64) is not None
assert cpasync.CopyG2SOp().anything[0] is not None and cute2.nvgpu.warp.MmaOp is not None
print("ok")
"""


def test_stubs_let_cutedsl_kernel_modules_import(tmp_path: Path) -> None:
    write_stubs(tmp_path)
    assert not (tmp_path / "cuda").exists()  # a finder-only root: a real cuda-python wins
    res = subprocess.run([sys.executable, "-c", CUTEDSL_IMPORT_TIME], cwd=tmp_path,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})  # fmt: skip
    assert res.stdout.strip() == "ok", res.stderr


def test_the_newest_carried_release_is_picked(tmp_path: Path) -> None:
    from gpu_check.vllm.carry import CarryError, find_zip

    with pytest.raises(CarryError, match="vllm_inputs.sh"):
        find_zip(tmp_path)
    for v in ("0.9.0", "0.24.0", "0.33.0"):
        (tmp_path / f"vllm-{v}.zip").write_bytes(b"")
    assert find_zip(tmp_path).name == "vllm-0.33.0.zip"
    assert find_zip(tmp_path, "0.24.0").name == "vllm-0.24.0.zip"
