"""gpu_check.vllm.carry: the stubs that let vLLM import where its optional modules are missing,
and the carried release a run picks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_check.vllm.carry import write_stubs


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
