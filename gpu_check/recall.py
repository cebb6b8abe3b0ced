"""Synthetic associative recall: what a wrong accepted-token count does to a GDN prompt state.

Per request: a prefill writes P key->value pairs into the state in its slot 0 (keys orthonormal
per key head, beta = 1, no decay, so the state maps each key exactly to its value). At the first
spec step (1+k tokens) the tokens query P's keys with beta = 0, so the output should be
value/sqrt(K) and the state is left unchanged. Slots 1..k are zero, as v0.24.0 zeroes fresh
blocks. With the true count (1) the step reads slot 0; with 2..k+1 it reads a zeroed slot, the
prompt is lost and the per-token writes overwrite slot 0 as well (PR #45100's symptom). A second
spec step with the correct count then shows whether the loss is permanent.

The conv window is reported beside it: the same step's conv output with the read offset a-1 of
the wrong count against offset 0 (`conv_update_reference`, float64).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gpu_check.kernels.problem import QWEN35_DIMS
from gpu_check.kernels.reference import (
    conv_prefill_buffer,
    conv_update_reference,
    spec_gdn_reference,
)

__all__ = ["CPU_CONFIG", "GPU_CONFIG", "RecallConfig", "run_recall"]

IMPLS = ("reference", "triton", "fla")
GATE_OFF = -30.0  # a = -30: softplus ~ 1e-13, no decay; b = -30: beta ~ 1e-13, no write
GATE_ON = 30.0  # b = +30: beta = 1, a full delta-rule write


@dataclass(frozen=True)
class RecallConfig:
    num_reqs: int = 4
    num_spec: int = 3
    num_pairs: int = 16
    H: int = 2
    HV: int = 4
    K: int = 32
    V: int = 32
    conv_width: int = 4
    seed: int = 0

    def validate(self) -> None:
        if self.num_reqs < 1 or self.num_spec < 1:
            raise ValueError("num-reqs and k must be >= 1")
        if not self.num_spec + 1 <= self.num_pairs <= self.K:
            raise ValueError(f"pairs must be in [k+1, K={self.K}] (orthonormal keys)")
        if self.HV % self.H:
            raise ValueError(f"HV={self.HV} must be a multiple of H={self.H}")


CPU_CONFIG = RecallConfig()
GPU_CONFIG = RecallConfig(num_reqs=8, num_pairs=64, **QWEN35_DIMS)


@dataclass(frozen=True)
class _Task:
    """All inputs, on the CPU in float32; `_batch` moves a step to the device."""

    keys: torch.Tensor  # [N, H, P, K], orthonormal over P
    values: torch.Tensor  # [N, HV, P, V]
    table: torch.Tensor  # [N, 1+k] blocks, block 0 NULL
    queries: list[torch.Tensor]  # per spec step: [N, 1+k] indices into P


def _make_task(cfg: RecallConfig) -> _Task:
    gen = torch.Generator().manual_seed(cfg.seed)
    N, C, P = cfg.num_reqs, cfg.num_spec + 1, cfg.num_pairs
    basis = torch.linalg.qr(torch.randn(N * cfg.H, cfg.K, cfg.K, generator=gen)).Q
    keys = basis[:, :, :P].transpose(1, 2).reshape(N, cfg.H, P, cfg.K)
    values = torch.randn(N, cfg.HV, P, cfg.V, generator=gen)
    table = (torch.randperm(N * C, generator=gen) + 1).to(torch.int32).view(N, C)
    queries = [
        torch.stack([torch.randperm(P, generator=gen)[:C] for _ in range(N)]) for _ in range(2)
    ]
    return _Task(keys, values, table, queries)


def _step_inputs(cfg: RecallConfig, task: _Task, step: int | None, gen: torch.Generator) -> dict:
    """q, k, v, a, b, cu_seqlens of the prefill (step None) or of spec step `step`."""
    N, H, HV, K = cfg.num_reqs, cfg.H, cfg.HV, cfg.K
    if step is None:
        L = cfg.num_pairs
        k = task.keys.permute(0, 2, 1, 3)  # [N, P, H, K]: token i writes pair i
        v = task.values.permute(0, 2, 1, 3)
        q = torch.randn(N, L, H, K, generator=gen)
        b_val = GATE_ON
    else:
        L = cfg.num_spec + 1
        sel = task.queries[step]  # [N, L]
        q = torch.stack([task.keys[n][:, sel[n]].transpose(0, 1) for n in range(N)])
        k = torch.randn(N, L, H, K, generator=gen)
        v = torch.randn(N, L, HV, cfg.V, generator=gen)
        b_val = GATE_OFF
    T = N * L
    return {
        "q": q.reshape(1, T, H, K),
        "k": k.reshape(1, T, H, K).contiguous(),
        "v": v.reshape(1, T, HV, cfg.V).contiguous(),
        "a": torch.full((T, HV), GATE_OFF),
        "b": torch.full((T, HV), b_val),
        "cu_seqlens": torch.arange(0, T + 1, L, dtype=torch.int32),
    }


def _to(d: dict, device: str, dtype: torch.dtype) -> dict:
    return {
        name: t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype).contiguous()
        for name, t in d.items()
    }


def _run_impl(impl: str, inputs: dict, pool: torch.Tensor, indices, counts) -> torch.Tensor:
    """One recurrent call with `impl`; pool is updated in place. Returns float64 outputs."""
    HV = inputs["v"].shape[2]
    gate: dict[str, Any] = {
        "A_log": torch.zeros(HV, device=pool.device),
        "dt_bias": torch.zeros(HV, device=pool.device),
    }
    if impl == "reference":
        return spec_gdn_reference(
            **inputs, **gate, ssm_state=pool, ssm_state_indices=indices,
            num_accepted_tokens=counts,
        )  # fmt: skip
    if impl == "triton":
        from gpu_check.kernels.gdn_spec import spec_gdn_update

        return spec_gdn_update(
            **inputs, **gate, ssm_state=pool, ssm_state_indices=indices,
            num_accepted_tokens=counts,
        ).double()  # fmt: skip
    return _run_fla(inputs, gate, pool, indices, counts)


def _run_fla(inputs: dict, gate: dict, pool: torch.Tensor, indices, counts) -> torch.Tensor:
    from gpu_check.kernels.fla_check import fla_plain_gdn, fla_spec_kda, kda_gate_inputs

    if counts is None:  # prefill: fla's plain path from zero state, scattered into slot 0
        N = inputs["cu_seqlens"].numel() - 1
        h0 = torch.zeros(N, *pool.shape[1:], dtype=torch.float32, device=pool.device)
        o, ht = fla_plain_gdn(**inputs, **gate, initial_state=h0)
        pool[indices.long()] = ht.to(pool.dtype)
        return o.double()
    g_k, beta = kda_gate_inputs(inputs["a"], inputs["b"], **gate, K=inputs["q"].shape[-1])
    qkv = {name: inputs[name] for name in ("q", "k", "v")}
    return fla_spec_kda(
        **qkv, g_k=g_k, beta=beta, ssm_state=pool, cu_seqlens=inputs["cu_seqlens"],
        ssm_state_indices=indices, num_accepted_tokens=counts,
    ).double()  # fmt: skip


def _recall_metrics(cfg: RecallConfig, task: _Task, step: int, o: torch.Tensor) -> dict:
    """Decode each (request, token, value head) output to the nearest stored value."""
    N, L, HV = cfg.num_reqs, cfg.num_spec + 1, cfg.HV
    got = o.cpu().reshape(N, L, HV, cfg.V) * math.sqrt(cfg.K)  # undo q's K^-1/2 scale
    vals = task.values.double()  # [N, HV, P, V]
    sel = task.queries[step]
    want = torch.stack([vals[n][:, sel[n]].transpose(0, 1) for n in range(N)])  # [N, L, HV, V]
    sims = torch.einsum("nlhv,nhpv->nlhp", got, vals) / (
        got.norm(dim=-1, keepdim=True) * vals.norm(dim=-1)[:, None] + 1e-30
    )
    hit = sims.argmax(-1) == sel[:, :, None]
    close = (got - want).norm(dim=-1) < 0.5 * want.norm(dim=-1)
    err = float((got - want).norm() / want.norm()) if not torch.isnan(got).any() else math.inf
    return {"recall_acc": float((hit & close).double().mean()), "out_rel_err": err}


def _conv_rel_err(cfg: RecallConfig, task: _Task, count: int) -> float:
    """Conv output of step 0 with offset count-1 against offset 0 (float64 reference)."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    N, C, W = cfg.num_reqs, cfg.num_spec + 1, cfg.conv_width
    dim = 2 * cfg.H * cfg.K + cfg.HV * cfg.V  # conv runs over the concatenated q, k, v channels
    weight, bias = torch.randn(dim, W, generator=gen), torch.randn(dim, generator=gen)
    state = torch.zeros(1 + N * C, dim, W - 1 + cfg.num_spec, dtype=torch.float64)
    slot0 = task.table[:, 0]
    for n in range(N):
        prompt_x = torch.randn(cfg.num_pairs, dim, generator=gen)
        state[int(slot0[n])] = conv_prefill_buffer(prompt_x, W, cfg.num_spec)
    x = torch.randn(N * C, dim, generator=gen)
    cu = torch.arange(0, N * C + 1, C, dtype=torch.int32)
    outs = []
    for a in (1, count):
        counts = torch.full((N,), a, dtype=torch.int32)
        outs.append(conv_update_reference(x, state.clone(), weight, bias, cu, slot0, counts))
    return float((outs[1] - outs[0]).norm() / outs[0].norm())


def _state_rel_change(after: torch.Tensor, before: torch.Tensor) -> float:
    return float((after.double() - before.double()).norm() / before.double().norm())


def _run_counts(cfg, task, impl, device, dtype, prompt_pool, steps) -> list[dict]:
    """Rows for counts 1..k+1 at the first spec step; the second step always uses count 1."""
    table = task.table.to(device)
    slot0 = task.table[:, 0].long().to(device)
    rows = []
    for count in range(1, cfg.num_spec + 2):
        pool = prompt_pool.clone()
        counts = torch.full((cfg.num_reqs,), count, dtype=torch.int32, device=device)
        o1 = _run_impl(impl, steps[0], pool, table, counts)
        row = {"impl": impl, "true_count": 1, "count_used": count}
        row.update(_recall_metrics(cfg, task, 0, o1))
        row["slot0_state_rel_change"] = _state_rel_change(pool[slot0], prompt_pool[slot0])
        ones = torch.ones(cfg.num_reqs, dtype=torch.int32, device=device)
        o2 = _run_impl(impl, steps[1], pool, table, ones)
        row["next_step_recall_acc"] = _recall_metrics(cfg, task, 1, o2)["recall_acc"]
        row["conv_out_rel_err"] = _conv_rel_err(cfg, task, count)
        rows.append(row)
    return rows


def run_recall(
    cfg: RecallConfig,
    device: str = "cpu",
    impls: tuple[str, ...] = ("reference",),
    dtype: torch.dtype = torch.float32,
) -> dict:
    """Run the task for every impl and count; returns {"config": ..., "rows": [...]}."""
    cfg.validate()
    unknown = set(impls) - set(IMPLS)
    if unknown:
        raise ValueError(f"unknown impl(s) {sorted(unknown)}; choose from {IMPLS}")
    task = _make_task(cfg)
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    prefill = _to(_step_inputs(cfg, task, None, gen), device, dtype)
    steps = [_to(_step_inputs(cfg, task, s, gen), device, dtype) for s in (0, 1)]
    slot0 = task.table[:, 0].contiguous().to(device)
    rows = []
    for impl in impls:
        pool = torch.zeros(1 + task.table.numel(), cfg.HV, cfg.V, cfg.K, device=device)
        _run_impl(impl, prefill, pool, slot0, None)
        rows += _run_counts(cfg, task, impl, device, dtype, pool, steps)
    config = asdict(cfg) | {"device": device, "dtype": str(dtype).removeprefix("torch.")}
    return {"config": config, "rows": rows}
