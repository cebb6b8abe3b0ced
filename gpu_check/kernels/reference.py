"""Float64 PyTorch reference of vLLM v0.24.0's GDN speculative-decoding kernels.

Ground truth for `gdn_spec.py` (our Triton kernel) and for fla-core's KDA spec path: the
recurrent part (`fused_sigmoid_gating_delta_rule_update`, state pool V-first, read slot
`num_accepted_tokens[n] - 1`) and the conv part (`causal_conv1d_update`, one buffer per request
read at offset `a-1`). docs/gdn.md §8 states both exactly, with the five places where the
reference documents are unclear and what this module assumes there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NULL_BLOCK_ID = 0
L2NORM_EPS = 1e-6
SOFTPLUS_THRESHOLD = 20.0

__all__ = [
    "NULL_BLOCK_ID",
    "conv_prefill_buffer",
    "conv_update_reference",
    "gdn_gate",
    "l2norm",
    "recurrence_tokens",
    "spec_gdn_reference",
]


def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """x / sqrt(sum x^2 + eps) over the last dim (eps inside the sqrt, unlike F.normalize)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def gdn_gate(
    a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3-Next gate: g = -exp(A_log)*softplus(a+dt_bias) (log decay), beta = sigmoid(b).

    a, b: [..., HV]; A_log, dt_bias: [HV]. Computed in the dtype of the inputs.
    """
    x = a + dt_bias
    g = -torch.exp(A_log) * F.softplus(x, beta=1.0, threshold=SOFTPLUS_THRESHOLD)
    return g, torch.sigmoid(b)


def recurrence_tokens(
    S: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    use_qk_l2norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the gated delta rule over one sequence, keeping the state after every token.

    S: [HV, V, K] initial state; q, k: [T, H, K]; v: [T, HV, V]; g, beta: [T, HV].
    Returns (o [T, HV, V], states [T, HV, V, K]), computed in float64.
    """
    HV, H = v.shape[1], q.shape[1]
    group = HV // H
    # GQA: value head hv reads key head hv // group, which is repeat_interleave on key heads.
    q = q.double().repeat_interleave(group, dim=1)
    k = k.double().repeat_interleave(group, dim=1)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = q * scale
    S = S.double().clone()
    outs, states = [], []
    for t in range(v.shape[0]):
        S = S * torch.exp(g[t].double())[:, None, None]
        u = beta[t].double()[:, None] * (v[t].double() - torch.einsum("hvk,hk->hv", S, k[t]))
        S = S + u[:, :, None] * k[t][:, None, :]
        outs.append(torch.einsum("hvk,hk->hv", S, q[t]))
        states.append(S)
    return torch.stack(outs), torch.stack(states)


def _check_spec_shapes(q, k, v, a, b, ssm_state, cu_seqlens, indices, num_accepted) -> None:
    if q.dim() != 4 or q.shape[0] != 1 or k.shape != q.shape:
        raise ValueError(f"q and k must be [1, T, H, K] and equal; got {q.shape}, {k.shape}")
    if v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"v must be [1, T, HV, V] with q's T; got {v.shape}")
    HV, H = v.shape[2], q.shape[2]
    if HV % H != 0:
        raise ValueError(f"HV={HV} must be a multiple of H={H}")
    if a.shape != (q.shape[1], HV) or b.shape != a.shape:
        raise ValueError(f"a and b must be [T, HV] = {(q.shape[1], HV)}; got {a.shape}, {b.shape}")
    if ssm_state.dim() != 4 or ssm_state.shape[1:] != (HV, v.shape[3], q.shape[3]):
        raise ValueError(f"ssm_state must be [num_blocks, HV, V, K]; got {ssm_state.shape}")
    N = cu_seqlens.numel() - 1
    if num_accepted is None:
        if indices.shape != (N,):
            raise ValueError(f"non-spec ssm_state_indices must be [N]={N}; got {indices.shape}")
    elif indices.dim() != 2 or indices.shape[0] != N or num_accepted.shape != (N,):
        raise ValueError(
            f"spec ssm_state_indices must be [N, k+1] and num_accepted_tokens [N] with N={N}; "
            f"got {indices.shape}, {None if num_accepted is None else num_accepted.shape}"
        )


def spec_gdn_reference(
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
) -> torch.Tensor:
    """Reference of the v0.24.0 recurrent spec-decode kernel; same signature as `spec_gdn_update`.

    Updates `ssm_state` in place (each stored state is rounded to the pool's dtype once, as the
    kernel does; the running state stays float64). Writes `out` if given, else returns a float64
    `[1, T, HV, V]` tensor in which every position the kernel would not write is NaN.
    """
    _check_spec_shapes(q, k, v, a, b, ssm_state, cu_seqlens, ssm_state_indices, num_accepted_tokens)
    K = q.shape[-1]
    scale = K**-0.5 if scale is None else scale
    if out is None:
        out = torch.full(v.shape, float("nan"), dtype=torch.float64, device=v.device)
    g, beta = gdn_gate(a.double(), b.double(), A_log.double(), dt_bias.double())
    cu = cu_seqlens.tolist()
    idx = ssm_state_indices.tolist()
    acc = None if num_accepted_tokens is None else num_accepted_tokens.tolist()
    for n in range(len(cu) - 1):
        bos, eos = cu[n], cu[n + 1]
        if eos <= bos:
            continue  # zero-length cudagraph pad row
        if acc is None:
            src, dsts = idx[n], None
        else:
            src, dsts = _spec_slots(idx[n], acc[n], eos - bos, n)
        if src <= NULL_BLOCK_ID:
            continue  # v0.24.0: the whole program returns, nothing is written
        o_n, states = recurrence_tokens(
            ssm_state[src],
            q[0, bos:eos],
            k[0, bos:eos],
            v[0, bos:eos],
            g[bos:eos],
            beta[bos:eos],
            scale,
            use_qk_l2norm_in_kernel,
        )
        out[0, bos:eos] = o_n.to(out.dtype)
        if dsts is None:
            ssm_state[src] = states[-1].to(ssm_state.dtype)
            continue
        for t, dst in enumerate(dsts):
            if dst > NULL_BLOCK_ID:
                ssm_state[dst] = states[t].to(ssm_state.dtype)
    return out


def _spec_slots(row: list[int], count: int, T: int, n: int) -> tuple[int, list[int]]:
    """(read block, per-token write blocks) of one spec row; raises where vLLM would overrun."""
    if not 1 <= count <= len(row):
        raise ValueError(f"request {n}: num_accepted_tokens={count} outside [1, {len(row)}]")
    if len(row) < T:
        raise ValueError(f"request {n}: {T} tokens but only {len(row)} state slots")
    return row[count - 1], row[:T]


def conv_prefill_buffer(x_prompt: torch.Tensor, width: int, num_spec: int) -> torch.Tensor:
    """Conv buffer [dim, W-1+k] as this module assumes a prefill leaves it (docstring, item 2).

    x_prompt: [L, dim] conv inputs of the prompt; columns W-1.. stay zero (fresh block).
    """
    L, dim = x_prompt.shape
    buf = torch.zeros(dim, width - 1 + num_spec, dtype=torch.float64, device=x_prompt.device)
    hist = x_prompt[max(0, L - (width - 1)) :].double().T  # [dim, <= W-1]
    buf[:, width - 1 - hist.shape[1] : width - 1] = hist
    return buf


def conv_update_reference(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens: torch.Tensor,
    conv_state_indices: torch.Tensor,
    num_accepted_tokens: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Reference of `causal_conv1d_update` on spec rows; updates `conv_state` in place.

    x: [T_tot, dim]; conv_state: [num_blocks, dim, W-1+k]; weight: [dim, W];
    conv_state_indices: [N], slot 0's block of each request (`spec_state_indices[:, 0]`).
    Returns float64 [T_tot, dim], NaN where nothing is written (NULL rows, pad rows).
    """
    dim, width = weight.shape
    state_len = conv_state.shape[-1]
    if conv_state.dim() != 3 or conv_state.shape[1] != dim or state_len < width - 1:
        raise ValueError(
            f"conv_state must be [blocks, {dim}, >= {width - 1}]; got {conv_state.shape}"
        )
    if activation not in (None, "silu"):
        raise ValueError(f"activation must be None or 'silu'; got {activation!r}")
    out = torch.full(x.shape, float("nan"), dtype=torch.float64, device=x.device)
    w = weight.double()
    cu = cu_seqlens.tolist()
    for n, blk in enumerate(conv_state_indices.tolist()):
        bos, eos = cu[n], cu[n + 1]
        if eos <= bos or blk <= NULL_BLOCK_ID:
            continue
        count = 1 if num_accepted_tokens is None else int(num_accepted_tokens[n])
        offset = count - 1
        if offset < 0 or offset + width - 1 > state_len or (eos - bos) + width - 2 > state_len:
            raise ValueError(f"request {n}: count {count} / {eos - bos} tokens overrun the buffer")
        window = conv_state[blk, :, offset : offset + width - 1].double()  # [dim, W-1]
        xs = torch.cat([window, x[bos:eos].double().T], dim=1)  # [dim, W-1+T]
        y = torch.stack([(xs[:, t : t + width] * w).sum(1) for t in range(eos - bos)], dim=1)
        if bias is not None:
            y = y + bias.double()[:, None]
        out[bos:eos] = (F.silu(y) if activation == "silu" else y).T
        new = xs[:, 1:]
        conv_state[blk, :, : new.shape[1]] = new.to(conv_state.dtype)
    return out
