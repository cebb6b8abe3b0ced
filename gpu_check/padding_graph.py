"""Run a padded FULL-cudagraph GDN spec step through a real CUDA graph (needs CUDA).

For each `batch_size` rule of `padding.py` (before / after PR #45100): persistent buffers sized
like vLLM's GDN builder, views `[:batch_size]`, tail filled as v0.24.0 fills it, and our kernel
captured once into a CUDA graph (after an uncaptured warm-up), then replayed. The replay must
equal an eager run on the unpadded batch bitwise (programs are independent, so grid size cannot
change a value), must leave the NULL block, every unowned block and every pad-token output
untouched, and its replay time shows what the fake rows cost.
"""

from __future__ import annotations

from typing import Any

import torch

from gpu_check.kernels.gdn_spec import default_config, spec_gdn_update
from gpu_check.kernels.problem import QWEN35_DIMS, make_spec_problem
from gpu_check.padding import RULES, PaddingPlan, gdn_full_metadata

__all__ = ["graph_padding_check"]


def graph_padding_check(plan: PaddingPlan, seed: int = 0, replays: int = 50) -> dict:
    """Capture and replay both rules for `plan` on CUDA; returns a JSON-ready result per rule."""
    if not torch.cuda.is_available():
        raise RuntimeError("the CUDA-graph padding check needs a CUDA device")
    if not plan.full_cudagraph:
        raise ValueError("batch is not FULL-cudagraph eligible; nothing to capture")
    q_len = plan.num_spec + 1
    prob = make_spec_problem(
        [q_len] * plan.num_reqs, plan.num_spec, **QWEN35_DIMS, seed=seed,
        dtype=torch.bfloat16, device="cuda",
    )  # fmt: skip
    eager_pool = prob.ssm_state.clone()
    eager_out = spec_gdn_update(**prob.with_pool(eager_pool).kernel_args())
    return {rule: _check_rule(plan, rule, prob, eager_out, eager_pool, replays) for rule in RULES}


def _check_rule(plan, rule, prob, eager_out, eager_pool, replays) -> dict:
    meta = gdn_full_metadata(
        plan, rule, prob.ssm_state_indices.tolist(), prob.num_accepted_tokens.tolist()
    )
    dev = prob.q.device
    bufs = _persistent_buffers(plan, dev)
    bs = meta.batch_size
    # Views exactly as the builder hands them to the kernels.
    idx = bufs["spec_state_indices"][:bs]
    acc = bufs["num_accepted_tokens"][:bs]
    qsl = bufs["spec_query_start_loc"][: bs + 1]
    idx.copy_(torch.tensor(meta.spec_state_indices, dtype=torch.int32))
    acc.copy_(torch.tensor(meta.num_accepted_tokens, dtype=torch.int32))
    qsl.copy_(torch.tensor(meta.spec_query_start_loc, dtype=torch.int32))

    T_pad, T_real = plan.num_tokens_padded, plan.num_tokens
    static: dict[str, Any] = {
        name: _pad_tokens(getattr(prob, name), T_pad, dim=1 if name in ("q", "k", "v") else 0)
        for name in ("q", "k", "v", "a", "b")
    }
    pool = prob.ssm_state.clone()
    out = torch.full_like(static["v"], float("nan"))

    def step() -> None:
        spec_gdn_update(
            **static, A_log=prob.A_log, dt_bias=prob.dt_bias, ssm_state=pool,
            cu_seqlens=qsl, ssm_state_indices=idx, num_accepted_tokens=acc, out=out,
        )  # fmt: skip

    graph = _capture(step)
    pool.copy_(prob.ssm_state)  # the warm-up before capture ran the step once
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()

    owned = torch.zeros(pool.shape[0], dtype=torch.bool, device=dev)
    owned[prob.ssm_state_indices.flatten().long()] = True
    num_v_blocks = -(-pool.shape[2] // default_config(pool.shape[2]).block_v)
    result = {
        "batch_size": bs,
        "grid_programs": bs * pool.shape[1] * num_v_blocks,
        "real_rows_equal_eager": bool(torch.equal(out[:, :T_real], eager_out)),
        "pool_equal_eager": bool(torch.equal(pool, eager_pool)),
        "null_block_untouched": bool(torch.equal(pool[0], prob.ssm_state[0])),
        "unowned_blocks_untouched": bool(torch.equal(pool[~owned], prob.ssm_state[~owned])),
        "pad_token_outputs_unwritten": bool(torch.isnan(out[:, T_real:]).all()),
        "replay_us_median": _time_replays(graph, replays),
    }
    result["ok"] = all(v for k, v in result.items() if isinstance(v, bool))
    return result


def _persistent_buffers(plan: PaddingPlan, dev: torch.device) -> dict[str, torch.Tensor]:
    """GDN builder buffers sized `decode_cudagraph_max_bs` rows, poisoned so stale rows show."""
    bs, q = plan.decode_cudagraph_max_bs, plan.num_spec + 1
    return {
        "spec_state_indices": torch.full((bs, q), -7, dtype=torch.int32, device=dev),
        "num_accepted_tokens": torch.full((bs,), -7, dtype=torch.int32, device=dev),
        "spec_query_start_loc": torch.full((bs + 1,), -7, dtype=torch.int32, device=dev),
    }


def _pad_tokens(x: torch.Tensor, T_pad: int, dim: int) -> torch.Tensor:
    """Token buffer of the graph's padded size; pad tokens hold nonzero junk, so a kernel that
    wrongly ran them would change something visible."""
    shape = list(x.shape)
    shape[dim] = T_pad - x.shape[dim]
    junk = torch.full(shape, 3.0, dtype=x.dtype, device=x.device)
    return torch.cat([x, junk], dim=dim).contiguous()


def _capture(step) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # compiles the kernel outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def _time_replays(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]
