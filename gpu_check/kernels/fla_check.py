"""fla-core 0.6.0 as the independent upstream cross-check (docs/gdn.md §2).

* `fla_plain_gdn`: `fused_recurrent_gated_delta_rule`, the non-speculative path, with its fused
  Qwen3-Next gate. Called with keywords only: its positional order is q, k, v, g, gk, gv, beta.
* `fla_spec_kda`: `fla.ops.kda.fused_recurrent.fused_recurrent_kda_fwd`, the only fla kernel with
  vLLM's slot semantics. With the GDN gate broadcast over K, KDA computes GDN exactly. It has no
  PAD/NULL guard (index 0 is an ordinary slot, -1 is out of bounds), so this wrapper refuses any
  row whose indices are <= 0 or whose length is 0.

fla is imported lazily so that importing this module costs nothing where fla is absent.
Set FLA_DISABLE_BACKEND_DISPATCH=1 so fla's own Triton kernels run, not an optional backend.
"""

from __future__ import annotations

import torch

from gpu_check.kernels.reference import gdn_gate

__all__ = ["fla_plain_gdn", "fla_spec_kda", "kda_gate_inputs"]


def kda_gate_inputs(
    a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor, K: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """GDN gate as KDA inputs: g [1, T, HV, K] (log decay broadcast over K), beta [1, T, HV]."""
    g, beta = gdn_gate(a.float(), b.float(), A_log.float(), dt_bias.float())
    return g[None, :, :, None].expand(1, *g.shape, K).contiguous(), beta[None].contiguous()


def fla_spec_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g_k: torch.Tensor,
    beta: torch.Tensor,
    ssm_state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    scale: float | None = None,
    check: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """fla KDA spec path on a V-first pool, updated in place; returns o [1, T, HV, V].

    g_k, beta from `kda_gate_inputs`. `check=False` skips the host-side NULL/PAD check (it
    synchronises); use it only on inputs already checked, e.g. inside a timing loop.
    """
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    if check:
        _refuse_padding(cu_seqlens, ssm_state_indices)
    o, _ = fused_recurrent_kda_fwd(
        q=q,
        k=k,
        v=v,
        g=g_k,
        beta=beta,
        initial_state=ssm_state,
        scale=scale,
        inplace_final_state=True,
        state_v_first=True,
        cu_seqlens=cu_seqlens.long(),
        ssm_state_indices=ssm_state_indices,
        num_accepted_tokens=num_accepted_tokens,
        use_qk_l2norm_in_kernel=True,
        out=out,
    )
    return o


def _refuse_padding(cu_seqlens: torch.Tensor, indices: torch.Tensor) -> None:
    if bool((indices <= 0).any()):
        raise ValueError("fla's KDA kernel has no NULL guard: indices must all be > 0")
    if bool((cu_seqlens.diff() <= 0).any()):
        raise ValueError("fla's KDA kernel must not see zero-length (padding) rows")


def fla_plain_gdn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    initial_state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fla's non-spec fused recurrent GDN; initial_state [N, HV, V, K]. Returns (o, final fp32)."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    return fused_recurrent_gated_delta_rule(
        q=q,
        k=k,
        v=v,
        g=a[None].contiguous(),
        beta=b[None].contiguous(),
        scale=scale,
        initial_state=initial_state,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True,
        A_log=A_log,
        dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=True,
        state_v_first=True,
        cu_seqlens=cu_seqlens.long(),
    )
