"""The float64 reference: slot semantics (docs/mechanism.md §5.3) and the recurrence itself."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gpu_check.kernels.problem import make_spec_problem
from gpu_check.kernels.reference import (
    NULL_BLOCK_ID,
    conv_prefill_buffer,
    conv_update_reference,
    gdn_gate,
    l2norm,
    recurrence_tokens,
    spec_gdn_reference,
)

DIMS = {"H": 2, "HV": 4, "K": 8, "V": 6}
K_SPEC = 3
C = K_SPEC + 1


def _problem(seqlens, counts=None, seed=0):
    prob = make_spec_problem(seqlens, K_SPEC, **DIMS, seed=seed, counts=counts)
    return prob.with_pool(prob.ssm_state.double())


def _expected(prob, n):
    """Outputs and per-token states of request n, run from `src` by hand."""
    cu = prob.cu_seqlens.tolist()
    bos, eos = cu[n], cu[n + 1]
    src = int(prob.ssm_state_indices[n, int(prob.num_accepted_tokens[n]) - 1])
    g, beta = gdn_gate(prob.a.double(), prob.b.double(), prob.A_log.double(), prob.dt_bias.double())
    return recurrence_tokens(
        prob.ssm_state[src], prob.q[0, bos:eos], prob.k[0, bos:eos], prob.v[0, bos:eos],
        g[bos:eos], beta[bos:eos], DIMS["K"] ** -0.5,
    )  # fmt: skip


@pytest.mark.parametrize("count", range(1, C + 1))
def test_reads_slot_count_minus_one_exactly(count):
    prob = _problem([C, 2, 1], counts=[count] * 3)
    pool0 = prob.ssm_state.clone()
    out = spec_gdn_reference(**prob.kernel_args())
    for n in range(3):
        o_want, _ = _expected(prob.with_pool(pool0), n)
        bos, eos = prob.cu_seqlens[n], prob.cu_seqlens[n + 1]
        torch.testing.assert_close(out[0, bos:eos], o_want, rtol=0, atol=1e-13)
        # Any other slot gives a different output: the test could fail.
        for other in set(range(C)) - {count - 1}:
            wrong = prob.with_pool(pool0).with_counts(torch.full((3,), other + 1))
            o_wrong, _ = _expected(wrong, n)
            assert (o_wrong - o_want).abs().max() > 1e-6


def test_writes_state_after_token_t_to_slot_t_and_nothing_else():
    prob = _problem([C, 2, 3], counts=[2, 4, 1])
    pool0 = prob.ssm_state.clone()
    spec_gdn_reference(**prob.kernel_args())
    touched = set()
    for n, T in enumerate([C, 2, 3]):
        _, states = _expected(prob.with_pool(pool0), n)
        row = prob.ssm_state_indices[n].tolist()
        for t in range(T):
            torch.testing.assert_close(prob.ssm_state[row[t]], states[t], rtol=0, atol=1e-13)
            touched.add(row[t])
    untouched = [b for b in range(pool0.shape[0]) if b not in touched]
    assert untouched and torch.equal(prob.ssm_state[untouched], pool0[untouched])


def test_null_read_slot_writes_nothing():
    prob = _problem([C, C, C], counts=[3, 3, 1])
    prob.ssm_state_indices[1, 2] = NULL_BLOCK_ID  # request 1 would read the NULL block
    pool0 = prob.ssm_state.clone()
    out = spec_gdn_reference(**prob.kernel_args())
    assert torch.isnan(out[0, C : 2 * C]).all()
    assert not torch.isnan(out[0, :C]).any() and not torch.isnan(out[0, 2 * C :]).any()
    row1 = [b for b in prob.ssm_state_indices[1].tolist() if b > 0]
    assert torch.equal(prob.ssm_state[row1], pool0[row1])
    assert torch.equal(prob.ssm_state[NULL_BLOCK_ID], pool0[NULL_BLOCK_ID])


def test_null_write_slot_is_skipped_but_others_written():
    prob = _problem([C], counts=[1])
    prob.ssm_state_indices[0, 2] = NULL_BLOCK_ID
    pool0 = prob.ssm_state.clone()
    spec_gdn_reference(**prob.kernel_args())
    _, states = _expected(prob.with_pool(pool0), 0)
    assert torch.equal(prob.ssm_state[NULL_BLOCK_ID], pool0[NULL_BLOCK_ID])
    for t in (0, 1, 3):
        torch.testing.assert_close(prob.ssm_state[int(prob.ssm_state_indices[0, t])], states[t])


def test_zero_length_row_writes_nothing():
    prob = _problem([2, 0, 2])
    pool0 = prob.ssm_state.clone()
    spec_gdn_reference(**prob.kernel_args())
    row1 = prob.ssm_state_indices[1].tolist()
    assert torch.equal(prob.ssm_state[row1], pool0[row1])


@pytest.mark.parametrize(("count", "T"), [(0, 2), (C + 1, 2), (1, C + 1)])
def test_counts_or_lengths_past_the_row_raise(count, T):
    prob = _problem([T], counts=[count])
    with pytest.raises(ValueError, match="request 0"):
        spec_gdn_reference(**prob.kernel_args())


def test_non_spec_reads_and_writes_the_one_slot():
    prob = _problem([3, 1])
    pool0 = prob.ssm_state.clone()
    slots = prob.ssm_state_indices[:, 0].contiguous()
    args = prob.kernel_args() | {"ssm_state_indices": slots, "num_accepted_tokens": None}
    spec_gdn_reference(**args)
    for n in range(2):
        _, states = _expected(prob.with_pool(pool0).with_counts(torch.ones(2)), n)
        torch.testing.assert_close(prob.ssm_state[int(slots[n])], states[-1])


def test_recurrence_matches_closed_form():
    gen = torch.Generator().manual_seed(3)
    H, HV, K, V, T = 1, 2, 5, 3, 6
    S0 = torch.randn(HV, V, K, generator=gen, dtype=torch.float64)
    q, k = (torch.randn(T, H, K, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(T, HV, V, generator=gen, dtype=torch.float64)
    g = -torch.rand(T, HV, generator=gen, dtype=torch.float64)
    beta = torch.rand(T, HV, generator=gen, dtype=torch.float64)
    o, states = recurrence_tokens(S0, q, k, v, g, beta, scale=K**-0.5)
    S = S0.clone()
    qn, kn = l2norm(q) * K**-0.5, l2norm(k)
    eye = torch.eye(K, dtype=torch.float64)
    for t in range(T):
        for h in range(HV):
            kk = kn[t, 0]
            S[h] = math.exp(g[t, h]) * S[h] @ (eye - beta[t, h] * torch.outer(kk, kk)) + beta[
                t, h
            ] * torch.outer(v[t, h], kk)
            torch.testing.assert_close(o[t, h], S[h] @ qn[t, 0], rtol=0, atol=1e-13)
        torch.testing.assert_close(states[t], S, rtol=0, atol=1e-13)


def test_value_head_reads_key_head_hv_div_group():
    prob = _problem([2], counts=[1])
    base = spec_gdn_reference(**prob.with_pool(prob.ssm_state.clone()).kernel_args())
    k2 = prob.k.clone()
    k2[0, :, 1] += 1.0  # key head 1 serves value heads 2 and 3 (HV/H = 2)
    args = prob.with_pool(prob.ssm_state.clone()).kernel_args() | {"k": k2}
    moved = spec_gdn_reference(**args)
    diff = (moved - base).abs().amax(dim=(0, 1, 3))
    assert diff[:2].max() == 0 and diff[2:].min() > 1e-6


def test_gate_and_l2norm_formulas():
    a = torch.tensor([[-3.0, 0.5, 25.0]], dtype=torch.float64)
    A_log = torch.tensor([0.2, -1.0, 1.5], dtype=torch.float64)
    dt = torch.tensor([0.1, 0.0, -1.0], dtype=torch.float64)
    g, beta = gdn_gate(a, a, A_log, dt)
    x = a + dt
    want = -torch.exp(A_log) * torch.where(x > 20, x, torch.log1p(torch.exp(x)))
    torch.testing.assert_close(g, want, rtol=1e-15, atol=0)
    torch.testing.assert_close(beta, 1 / (1 + torch.exp(-a)))
    small = torch.full((1, 4), 1e-4, dtype=torch.float64)
    assert l2norm(small).norm() < 0.2 < F.normalize(small, dim=-1).norm()  # eps inside the sqrt


def _conv_case(count, T=C, dim=3, width=4):
    buf = torch.arange(dim * (width - 1 + K_SPEC), dtype=torch.float64).view(dim, -1) + 1
    state = torch.zeros(3, dim, width - 1 + K_SPEC, dtype=torch.float64)
    state[2] = buf
    x = -torch.arange(T * dim, dtype=torch.float64).view(T, dim) - 1
    cu = torch.tensor([0, T], dtype=torch.int32)
    return state, x, cu, torch.tensor([2]), torch.tensor([count])


@pytest.mark.parametrize("count", range(1, C + 1))
@pytest.mark.parametrize("j", range(4))
def test_conv_reads_window_at_offset_count_minus_one(count, j):
    state, x, cu, idx, acc = _conv_case(count)
    buf = state[2].clone()
    weight = torch.zeros(3, 4, dtype=torch.float64)
    weight[:, j] = 1.0  # tap j of output 0 is window column j (j = 3 is token 0 itself)
    out = conv_update_reference(x, state, weight, None, cu, idx, acc, activation=None)
    want = buf[:, count - 1 + j] if j < 3 else x[0]
    torch.testing.assert_close(out[0], want)


@pytest.mark.parametrize("count", range(1, C + 1))
def test_conv_write_back_keeps_window_ending_at_last_accepted_token(count):
    state, x, cu, idx, acc = _conv_case(count)
    window = state[2, :, count - 1 : count + 2].clone()
    conv_update_reference(x, state, torch.ones(3, 4), None, cu, idx, acc)
    torch.testing.assert_close(state[2], torch.cat([window[:, 1:], x.T], dim=1))
    for nxt in range(1, C + 1):  # next step's window ends at x_{nxt-1}
        torch.testing.assert_close(state[2, :, nxt - 1 + 2], x[nxt - 1])
    assert torch.equal(state[1], torch.zeros_like(state[1]))


def test_conv_null_and_prefill_buffer():
    state, x, cu, _, acc = _conv_case(2)
    before = state.clone()
    out = conv_update_reference(x, state, torch.ones(3, 4), None, cu, torch.tensor([0]), acc)
    assert torch.isnan(out).all() and torch.equal(state, before)
    buf = conv_prefill_buffer(torch.arange(15.0).view(5, 3), width=4, num_spec=K_SPEC)
    torch.testing.assert_close(buf[:, :3], torch.arange(6.0, 15.0).view(3, 3).T.double())
    assert torch.equal(buf[:, 3:], torch.zeros(3, K_SPEC, dtype=torch.float64))
