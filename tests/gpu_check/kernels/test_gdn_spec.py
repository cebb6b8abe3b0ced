"""Our Triton kernel against the float64 reference.

Without CUDA this runs in Triton's CPU interpreter (conftest sets TRITON_INTERPRET=1) on small
shapes, non-powers-of-two included; with CUDA the same tests run the compiled kernel.
Outputs are poisoned with NaN before each run so an unwritten output fails loudly.
"""

from __future__ import annotations

import pytest
import torch

from gpu_check.kernels.gdn_spec import KernelConfig, spec_gdn_update
from gpu_check.kernels.problem import make_spec_problem, rel_err
from gpu_check.kernels.reference import NULL_BLOCK_ID, spec_gdn_reference

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)
SHAPES = [  # (H, HV, K, V)
    (2, 4, 16, 8),
    (1, 3, 12, 10),  # non-powers of two, GQA group of 3
    (3, 6, 7, 5),
    (2, 2, 32, 33),  # V spans two V-blocks of 32, the last one ragged
]
K_SPEC = 3


def _run_both(prob, **kernel_kw):
    """(kernel out, kernel pool, reference out, reference pool) from the same inputs."""
    pool_k = prob.ssm_state.clone()
    out_k = torch.full_like(prob.v, float("nan"))
    spec_gdn_update(**prob.with_pool(pool_k).kernel_args(), out=out_k, **kernel_kw)
    pool_r = prob.ssm_state.double().clone()
    out_r = spec_gdn_reference(**prob.with_pool(pool_r).kernel_args())
    return out_k, pool_k, out_r, pool_r


def _assert_match(out_k, pool_k, out_r, pool_r, tol):
    written = ~torch.isnan(out_r)
    assert torch.equal(torch.isnan(out_k), ~written), "kernel wrote a different set of outputs"
    assert rel_err(out_k[written], out_r[written]) <= tol
    assert rel_err(pool_k, pool_r) <= tol


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_reference_fp32(shape, device):
    H, HV, K, V = shape
    prob = make_spec_problem([4, 1, 3, 0, 4, 2], K_SPEC, H, HV, K, V, seed=sum(shape),
                             device=device)  # fmt: skip
    _assert_match(*_run_both(prob), tol=1e-5)


def test_kernel_skips_null_rows_and_writes(device):
    prob = make_spec_problem([4, 4, 4], K_SPEC, 2, 4, 16, 8, seed=5, counts=[2, 3, 1],
                             device=device)  # fmt: skip
    prob.ssm_state_indices[0, 1] = NULL_BLOCK_ID  # request 0 reads NULL: nothing at all
    prob.ssm_state_indices[2, 3] = NULL_BLOCK_ID  # request 2 reads slot 0, skips its 4th write
    out_k, pool_k, out_r, pool_r = _run_both(prob)
    assert torch.isnan(out_k[0, :4]).all() and not torch.isnan(out_k[0, 4:]).any()
    assert torch.equal(pool_k[NULL_BLOCK_ID], prob.ssm_state[NULL_BLOCK_ID])
    _assert_match(out_k, pool_k, out_r, pool_r, tol=1e-5)


def test_kernel_non_spec_path(device):
    prob = make_spec_problem([3, 1, 2], K_SPEC, 2, 4, 16, 8, seed=6, device=device)
    slots = prob.ssm_state_indices[:, 0].contiguous()
    prob = type(prob)(**(prob.kernel_args() | {"ssm_state_indices": slots}))
    pool_k = prob.ssm_state.clone()
    out_k = torch.full_like(prob.v, float("nan"))
    args = prob.kernel_args() | {"num_accepted_tokens": None}
    spec_gdn_update(**(args | {"ssm_state": pool_k}), out=out_k)
    pool_r = prob.ssm_state.double().clone()
    out_r = spec_gdn_reference(**(args | {"ssm_state": pool_r}))
    _assert_match(out_k, pool_k, out_r, pool_r, tol=1e-5)


def test_wrong_count_changes_only_its_request(device):
    prob = make_spec_problem([4, 4, 4], K_SPEC, 2, 4, 16, 8, seed=7, counts=[1, 1, 1],
                             device=device)  # fmt: skip
    good, _, _, _ = _run_both(prob)
    bad, _, _, _ = _run_both(prob.with_counts(torch.tensor([1, 4, 1])))
    assert torch.equal(good[0, :4], bad[0, :4]) and torch.equal(good[0, 8:], bad[0, 8:])
    assert rel_err(bad[0, 4:8], good[0, 4:8]) > 0.05


@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.bfloat16])
def test_kernel_bf16_inputs(pool_dtype, device):
    prob = make_spec_problem([4, 2, 3], K_SPEC, 2, 4, 16, 8, seed=8, dtype=torch.bfloat16,
                             pool_dtype=pool_dtype, device=device)  # fmt: skip
    _assert_match(*_run_both(prob), tol=1e-2)


CONFIGS = [
    KernelConfig(block_v=4, num_warps=1),
    KernelConfig(block_v=8, num_warps=2, prefetch=True),
    KernelConfig(block_v=16, num_warps=1, num_stages=2, stream=True),
    KernelConfig(block_v=16, num_warps=2, prefetch=True, stream=True),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_kernel_config_does_not_change_results(cfg, device):
    prob = make_spec_problem([4, 3, 0, 1], K_SPEC, 2, 4, 16, 12, seed=9, device=device)
    prob.ssm_state_indices[1, 0] = 0  # a NULL write slot as well
    _assert_match(*_run_both(prob, config=cfg), tol=1e-5)


def test_counts_and_lengths_past_the_row_stay_inside_it(device):
    # k = 2: 3 slots per row, padded to 4 lanes in the kernel. Request 0 has a count of 4,
    # request 1 has 4 tokens; the reference refuses both, the kernel must not write outside.
    prob = make_spec_problem([2, 4], 2, 2, 4, 16, 8, seed=4, counts=[4, 1], device=device)
    pool = prob.ssm_state.clone()
    out = torch.full_like(prob.v, float("nan"))
    spec_gdn_update(**prob.with_pool(pool).kernel_args(), out=out)
    assert torch.isnan(out[0, :2]).all()  # request 0 read lane 3: NULL, skipped
    assert not torch.isnan(out[0, 2:]).any()
    row0 = prob.ssm_state_indices[0].long()
    outside = torch.ones(pool.shape[0], dtype=torch.bool, device=device)
    outside[prob.ssm_state_indices[1].long()] = False
    assert torch.equal(pool[outside], prob.ssm_state[outside])
    assert torch.equal(pool[row0], prob.ssm_state[row0])


def test_bad_layouts_are_rejected(device):
    prob = make_spec_problem([2], K_SPEC, 2, 4, 16, 8, seed=1, device=device)
    q3 = torch.randn(1, 2, 3, 16, device=device)  # H = 3 does not divide HV = 4
    with pytest.raises(ValueError, match="multiple"):
        spec_gdn_update(**(prob.kernel_args() | {"q": q3, "k": q3.clone()}))
    with pytest.raises(ValueError, match="contiguous"):
        spec_gdn_update(**(prob.kernel_args() | {"v": prob.v.transpose(2, 3)}))
    with pytest.raises(ValueError, match="non-spec"):
        spec_gdn_update(**(prob.kernel_args() | {"num_accepted_tokens": None}))
