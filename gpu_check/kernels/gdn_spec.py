"""Triton kernel: GDN recurrent update with vLLM v0.24.0's speculative-decoding slot semantics.

Independently written (no vLLM or fla source). Semantics are those of `reference.py`
(`spec_gdn_reference`), which documents them; the state pool is V-first
`[num_blocks, HV, V, K]` as in vLLM v0.24.0, so one state row (fixed v) is contiguous in K.

Grid: (cdiv(V, BV), N * HV). Program (i_v, i_nh) owns rows i_v*BV.. of request i_n's value head
i_hv. It reads its slice of the state once, keeps it in registers for all T_n tokens and stores
it after every token (per-token checkpoints). Column `a-1` may be overwritten at t = a-1: safe,
the program read its own slice first and the slices of different programs are disjoint.

The work is memory-bound (one state read, 1+k state writes), so the code is arranged to keep
loads in flight: the whole slot row is loaded in one go (the read slot and every write slot come
from registers, not from a chain of dependent loads), and with `prefetch` the next token's inputs
are loaded before the current token's state store.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

__all__ = ["KernelConfig", "default_config", "spec_gdn_update"]


@triton.jit
def _load_token(p_q, p_k, p_v, p_a, p_b, m_k, m_v, valid):
    """Raw inputs of one token; all zero when `valid` is false (no memory touched)."""
    b_q = tl.load(p_q, mask=m_k & valid, other=0)
    b_k = tl.load(p_k, mask=m_k & valid, other=0)
    b_v = tl.load(p_v, mask=m_v & valid, other=0)
    b_a = tl.load(p_a, mask=valid, other=0)
    b_b = tl.load(p_b, mask=valid, other=0)
    return b_q, b_k, b_v, b_a, b_b


@triton.jit
def _token_update(b_h, b_q, b_k, b_v, b_a, b_b, b_A, b_dt, scale, USE_QK_L2NORM: tl.constexpr):
    """One gated-delta-rule step on the [BV, BK] state slice; returns (state, output)."""
    b_q = b_q.to(tl.float32)
    b_k = b_k.to(tl.float32)
    if USE_QK_L2NORM:
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
    b_q = b_q * scale
    b_x = b_a.to(tl.float32) + b_dt
    # softplus with torch's threshold: above 20 it is the identity.
    b_sp = tl.where(b_x > 20.0, b_x, tl.log(1.0 + tl.exp(tl.minimum(b_x, 20.0))))
    b_beta = tl.sigmoid(b_b.to(tl.float32))

    b_h = b_h * tl.exp(b_A * b_sp)
    b_u = b_beta * (b_v.to(tl.float32) - tl.sum(b_h * b_k[None, :], 1))
    b_h = b_h + b_u[:, None] * b_k[None, :]
    b_o = tl.sum(b_h * b_q[None, :], 1)
    return b_h, b_o


@triton.jit
def spec_gdn_fwd_kernel(
    q,
    k,
    v,
    a,
    b,
    A_log,
    dt_bias,
    o,
    h,
    cu_seqlens,
    ssm_state_indices,
    num_accepted_tokens,
    scale,
    stride_h_blk,
    stride_idx_seq,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    NC: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    BC: tl.constexpr,
    IS_SPEC: tl.constexpr,
    USE_QK_L2NORM: tl.constexpr,
    PREFETCH: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    STREAM: tl.constexpr,
):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)

    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    T = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
    if T <= 0:
        return  # zero-length cudagraph pad row

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    p_q = q + (bos * H + i_h) * K + o_k
    p_k = k + (bos * H + i_h) * K + o_k
    p_v = v + (bos * HV + i_hv) * V + o_v
    p_o = o + (bos * HV + i_hv) * V + o_v
    p_a = a + bos * HV + i_hv
    p_b = b + bos * HV + i_hv
    if PREFETCH:  # token 0's inputs load while the slot lookup and the state load are in flight
        b_q, b_k, b_v, b_a, b_b = _load_token(p_q, p_k, p_v, p_a, p_b, m_k, m_v, T > 0)

    # The whole slot row at once: the read slot and every write slot without dependent loads.
    o_c = tl.arange(0, BC)
    # Lanes past the row read as NULL, so a count or a length past k+1 (a caller error) can only
    # skip the row or a write, never reach outside the pool.
    p_idx = ssm_state_indices + i_n.to(tl.int64) * stride_idx_seq
    b_idx = tl.load(p_idx + o_c, mask=o_c < NC, other=0)
    if IS_SPEC:  # noqa: SIM108  (constexpr branch: no load in the non-spec kernel)
        i_c = tl.load(num_accepted_tokens + i_n).to(tl.int64) - 1
    else:
        i_c = 0
    i_src = tl.sum(tl.where(o_c == i_c, b_idx, 0)).to(tl.int64)
    if i_src <= 0:
        return  # NULL_BLOCK_ID: v0.24.0 writes neither output nor state

    m_h = m_v[:, None] & m_k[None, :]
    # Offset of this program's [BV, K] slice inside one block of the pool.
    o_h = i_hv * V * K + o_v[:, None] * K + o_k[None, :]
    if STREAM:  # the pool is touched once per call: keep it from evicting the small inputs
        b_h = tl.load(
            h + i_src * stride_h_blk + o_h, mask=m_h, other=0, eviction_policy="evict_first"
        )
    else:
        b_h = tl.load(h + i_src * stride_h_blk + o_h, mask=m_h, other=0)
    b_h = b_h.to(tl.float32)
    b_A = -tl.exp(tl.load(A_log + i_hv).to(tl.float32))
    b_dt = tl.load(dt_bias + i_hv).to(tl.float32)

    for i_t in tl.range(0, T, num_stages=NUM_STAGES):
        if PREFETCH:  # issue token t+1's loads before token t's stores
            n_q, n_k, n_v, n_a, n_b = _load_token(
                p_q + H * K, p_k + H * K, p_v + HV * V, p_a + HV, p_b + HV, m_k, m_v, i_t + 1 < T
            )
        else:
            b_q, b_k, b_v, b_a, b_b = _load_token(p_q, p_k, p_v, p_a, p_b, m_k, m_v, True)
        b_h, b_o = _token_update(b_h, b_q, b_k, b_v, b_a, b_b, b_A, b_dt, scale, USE_QK_L2NORM)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)
        if IS_SPEC:
            i_dst = tl.sum(tl.where(o_c == i_t, b_idx, 0)).to(tl.int64)
            if i_dst > 0:
                p_dst = h + i_dst * stride_h_blk + o_h
                if STREAM:
                    tl.store(p_dst, b_h.to(h.dtype.element_ty), mask=m_h, cache_modifier=".cs")
                else:
                    tl.store(p_dst, b_h.to(h.dtype.element_ty), mask=m_h)
        if PREFETCH:
            b_q, b_k, b_v, b_a, b_b = n_q, n_k, n_v, n_a, n_b
        p_q += H * K
        p_k += H * K
        p_v += HV * V
        p_o += HV * V
        p_a += HV
        p_b += HV

    if not IS_SPEC:
        tl.store(h + i_src * stride_h_blk + o_h, b_h.to(h.dtype.element_ty), mask=m_h)


@dataclass(frozen=True)
class KernelConfig:
    """Launch and code-generation choices; none of them changes a result (tests check this)."""

    block_v: int = 32  # BV: rows of the V x K state slice one program owns
    num_warps: int = 4
    prefetch: bool = False  # load token t+1 before token t's stores (software double buffer)
    num_stages: int = 1  # Triton's own loop pipelining (used without prefetch)
    stream: bool = False  # evict-first pool loads, streaming (.cs) pool stores


def default_config(V: int) -> KernelConfig:
    """BV = 16 rows per program at 1 warp, with prefetch.

    Chosen from a 36-config sweep on one H200 (data/bench/sweep.csv; Qwen3.5 dims, k = 3):
    many small programs keep the most loads and stores in flight. Against the best config per
    case it is within 3% at N = 64 and 256 for fp32 and bf16 pools, and at N = 8 within 3%
    (fp32) and 13% (bf16).
    """
    return KernelConfig(block_v=min(16, triton.next_power_of_2(V)), num_warps=1, prefetch=True)


def spec_gdn_update(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    ssm_state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    num_accepted_tokens: torch.Tensor | None = None,
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = True,
    out: torch.Tensor | None = None,
    config: KernelConfig | None = None,
) -> torch.Tensor:
    """GDN spec-decode update; `ssm_state` [num_blocks, HV, V, K] is updated in place.

    q, k: [1, T, H, K]; v: [1, T, HV, V]; a, b: [T, HV]; A_log, dt_bias: [HV];
    cu_seqlens: [N+1]; ssm_state_indices: [N, k+1] with num_accepted_tokens [N] (spec), or [N]
    with num_accepted_tokens None (non-spec). Returns `out` [1, T, HV, V] (v's dtype); positions
    of skipped rows are not written, so callers that care must pre-fill `out`.
    """
    _check(q, k, v, a, b, ssm_state, ssm_state_indices, num_accepted_tokens)
    _, _, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    N = cu_seqlens.numel() - 1
    NC = ssm_state_indices.shape[1] if ssm_state_indices.dim() == 2 else 1
    cfg = config or default_config(V)
    if out is None:
        out = torch.empty_like(v)
    is_spec = num_accepted_tokens is not None
    grid = (triton.cdiv(V, cfg.block_v), N * HV)
    spec_gdn_fwd_kernel[grid](
        q,
        k,
        v,
        a,
        b,
        A_log,
        dt_bias,
        out,
        ssm_state,
        cu_seqlens,
        ssm_state_indices,
        num_accepted_tokens if is_spec else ssm_state_indices,
        K**-0.5 if scale is None else scale,
        ssm_state.stride(0),
        ssm_state_indices.stride(0),
        H=H,
        HV=HV,
        K=K,
        V=V,
        NC=NC,
        BK=triton.next_power_of_2(K),
        BV=cfg.block_v,
        BC=triton.next_power_of_2(NC),
        IS_SPEC=is_spec,
        USE_QK_L2NORM=use_qk_l2norm_in_kernel,
        PREFETCH=cfg.prefetch,
        NUM_STAGES=cfg.num_stages,
        STREAM=cfg.stream,
        num_warps=cfg.num_warps,
    )
    return out


def _check(q, k, v, a, b, ssm_state, indices, num_accepted) -> None:
    """Shape and layout checks; the kernel trusts contiguous rows and these sizes."""
    for name, t in (("q", q), ("k", k), ("v", v), ("a", a), ("b", b)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    if q.dim() != 4 or q.shape[0] != 1 or k.shape != q.shape or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"q, k: [1, T, H, K] and v: [1, T, HV, V]; got {q.shape}, {v.shape}")
    HV, H, V, K = v.shape[2], q.shape[2], v.shape[3], q.shape[3]
    if HV % H != 0:
        raise ValueError(f"HV={HV} must be a multiple of H={H}")
    if a.shape != (q.shape[1], HV) or b.shape != a.shape:
        raise ValueError(f"a and b must be [T, HV]; got {a.shape}, {b.shape}")
    if ssm_state.shape[1:] != (HV, V, K) or ssm_state[0].stride() != (V * K, K, 1):
        raise ValueError(f"ssm_state must be [blocks, {HV}, {V}, {K}], dense per block")
    if indices.stride(-1) != 1:
        raise ValueError("ssm_state_indices rows must be contiguous")
    if (num_accepted is None) != (indices.dim() == 1):
        raise ValueError("spec needs [N, k+1] indices with counts; non-spec [N] without")
