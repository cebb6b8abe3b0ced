"""H200 checks at Qwen3.5 dimensions (H=16, HV=32, K=V=128, k=3). Skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

from gpu_check.kernels.fla_check import fla_spec_kda, kda_gate_inputs
from gpu_check.kernels.gdn_spec import spec_gdn_update
from gpu_check.kernels.problem import QWEN35_DIMS, make_spec_problem, rel_err
from gpu_check.kernels.reference import NULL_BLOCK_ID, spec_gdn_reference

pytestmark = pytest.mark.gpu
K_SPEC = 3
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _lens(N: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, K_SPEC + 2, (N,), generator=gen).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("N", [1, 7, 64, 256])
def test_qwen35_kernel_matches_reference(N, dtype):
    prob = make_spec_problem(_lens(N, N), K_SPEC, **QWEN35_DIMS, seed=N, dtype=dtype,
                             device="cuda")  # fmt: skip
    if N > 1:  # one NULL read row: must produce nothing
        prob.ssm_state_indices[N // 2, int(prob.num_accepted_tokens[N // 2]) - 1] = NULL_BLOCK_ID
    pool_k = prob.ssm_state.clone()
    out_k = torch.full_like(prob.v, float("nan"))
    spec_gdn_update(**prob.with_pool(pool_k).kernel_args(), out=out_k)
    pool_r = prob.ssm_state.double()
    out_r = spec_gdn_reference(**prob.with_pool(pool_r).kernel_args())
    written = ~torch.isnan(out_r)
    assert torch.equal(torch.isnan(out_k), ~written)
    assert rel_err(out_k[written], out_r[written]) <= TOL[dtype]
    assert rel_err(pool_k, pool_r) <= 1e-5  # the fp32 pool keeps fp32 accuracy


@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_qwen35_kernel_matches_fla_kda(pool_dtype):
    prob = make_spec_problem(
        [K_SPEC + 1] * 64, K_SPEC, **QWEN35_DIMS, seed=3, dtype=torch.bfloat16,
        pool_dtype=pool_dtype, device="cuda",
    )  # fmt: skip
    pool_a, pool_b = prob.ssm_state.clone(), prob.ssm_state.clone()
    out_a = spec_gdn_update(**prob.with_pool(pool_a).kernel_args())
    g_k, beta = kda_gate_inputs(prob.a, prob.b, prob.A_log, prob.dt_bias, QWEN35_DIMS["K"])
    out_b = fla_spec_kda(
        q=prob.q, k=prob.k, v=prob.v, g_k=g_k, beta=beta, ssm_state=pool_b,
        cu_seqlens=prob.cu_seqlens, ssm_state_indices=prob.ssm_state_indices,
        num_accepted_tokens=prob.num_accepted_tokens,
    )  # fmt: skip
    assert rel_err(out_a, out_b) <= 1e-2
    assert rel_err(pool_a, pool_b) <= (1e-5 if pool_dtype == torch.float32 else 1e-2)


@pytest.mark.parametrize("num_reqs", [72, 70])
def test_full_cudagraph_padding_replays_equal_eager(num_reqs):
    from gpu_check.padding import plan_padding
    from gpu_check.padding_graph import graph_padding_check

    result = graph_padding_check(plan_padding(num_reqs, K_SPEC), replays=5)
    assert result["num_actual_tokens"]["batch_size"] == 288
    assert result["num_reqs"]["batch_size"] == 72
    for rule, r in result.items():
        assert r["ok"], (rule, r)


def test_recall_on_gpu_kernels():
    from gpu_check.recall import GPU_CONFIG, run_recall

    rows = run_recall(GPU_CONFIG, device="cuda", impls=("triton", "fla"), dtype=torch.bfloat16)
    for r in rows["rows"]:
        if r["count_used"] == 1:
            assert r["recall_acc"] == 1.0 and r["out_rel_err"] < 5e-2
        else:
            assert r["recall_acc"] == 0.0 and r["next_step_recall_acc"] == 0.0
