"""gpu_check.vllm.c_ops: the stand-in for vLLM's compiled ``_C`` ops on a machine without them."""

from __future__ import annotations

import pytest
import torch

from gpu_check.vllm import c_ops


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
