"""Our kernel against fla-core 0.6.0: its KDA spec path and its plain GDN fused recurrent.

Interpreter on the CPU, compiled kernels with CUDA (docs/gdn.md §2, §5).
"""

from __future__ import annotations

import pytest
import torch

from gpu_check.kernels.fla_check import fla_plain_gdn, fla_spec_kda, kda_gate_inputs
from gpu_check.kernels.gdn_spec import spec_gdn_update
from gpu_check.kernels.problem import make_spec_problem, rel_err

pytestmark = [
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Triton is not supported:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning"),
]
K_SPEC = 3


@pytest.mark.parametrize("shape", [(2, 4, 16, 8), (1, 3, 12, 10)], ids=["pow2", "odd"])
def test_ours_matches_fla_kda_spec_path(shape, device):
    H, HV, K, V = shape
    prob = make_spec_problem([4, 2, 4, 1], K_SPEC, H, HV, K, V, seed=11, device=device)
    pool_ours, pool_fla = prob.ssm_state.clone(), prob.ssm_state.clone()
    out_ours = spec_gdn_update(**prob.with_pool(pool_ours).kernel_args())
    g_k, beta = kda_gate_inputs(prob.a, prob.b, prob.A_log, prob.dt_bias, K)
    out_fla = fla_spec_kda(
        q=prob.q, k=prob.k, v=prob.v, g_k=g_k, beta=beta, ssm_state=pool_fla,
        cu_seqlens=prob.cu_seqlens, ssm_state_indices=prob.ssm_state_indices,
        num_accepted_tokens=prob.num_accepted_tokens,
    )  # fmt: skip
    assert rel_err(out_ours, out_fla) <= 1e-5
    assert rel_err(pool_ours, pool_fla) <= 1e-5
    assert rel_err(pool_ours, prob.ssm_state) > 1e-2  # the pool did change


def test_ours_matches_fla_plain_gdn_on_the_non_spec_path(device):
    H, HV, K, V = 2, 4, 16, 8
    prob = make_spec_problem([4, 3, 1], K_SPEC, H, HV, K, V, seed=12, counts=[1, 1, 1],
                             device=device)  # fmt: skip
    pool = prob.ssm_state.clone()
    out_ours = spec_gdn_update(**prob.with_pool(pool).kernel_args())
    h0 = prob.ssm_state[prob.ssm_state_indices[:, 0].long()]  # count 1: the read slot is 0
    out_fla, ht = fla_plain_gdn(
        q=prob.q, k=prob.k, v=prob.v, a=prob.a, b=prob.b, A_log=prob.A_log,
        dt_bias=prob.dt_bias, initial_state=h0, cu_seqlens=prob.cu_seqlens,
    )  # fmt: skip
    last = [int(prob.ssm_state_indices[n, T - 1]) for n, T in enumerate([4, 3, 1])]
    assert rel_err(out_ours, out_fla) <= 1e-5
    assert rel_err(pool[last], ht) <= 1e-5


def test_fla_wrapper_refuses_null_and_padding_rows(device):
    prob = make_spec_problem([4, 4], K_SPEC, 2, 4, 16, 8, seed=13, device=device)
    g_k, beta = kda_gate_inputs(prob.a, prob.b, prob.A_log, prob.dt_bias, 16)
    kw = {"q": prob.q, "k": prob.k, "v": prob.v, "g_k": g_k, "beta": beta,
          "ssm_state": prob.ssm_state, "num_accepted_tokens": prob.num_accepted_tokens}  # fmt: skip
    null_idx = prob.ssm_state_indices.clone()
    null_idx[1, 0] = 0
    with pytest.raises(ValueError, match="NULL"):
        fla_spec_kda(**kw, cu_seqlens=prob.cu_seqlens, ssm_state_indices=null_idx)
    pad_cu = torch.tensor([0, 8, 8], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="padding"):
        fla_spec_kda(**kw, cu_seqlens=pad_cu, ssm_state_indices=prob.ssm_state_indices)
