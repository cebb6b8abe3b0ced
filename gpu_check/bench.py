"""Benchmark of the spec-decode GDN update on decode-shaped batches (needs CUDA).

Work per call: N requests x (1+k) tokens at Qwen3.5 dims; each (request, value head) reads one
V x K state and stores 1+k of them. Floor = (state bytes read + written + q/k/v/o/a/b bytes) over
the copy bandwidth measured in the same run (a large device-to-device copy, read + write bytes).
Beside it, `slot_copy_kernel` moves the same bytes in the same pattern with no arithmetic: the
floor this access pattern actually gets on the device.

Timing: each call is captured once into a CUDA graph and its replays are timed with
`triton.testing.do_bench` (CUDA events, L2 flushed before every replay, median). The graph keeps
Python launch overhead (ours and fla's wrappers differ) out of the kernel time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any

import torch
import triton
import triton.language as tl
import triton.testing

from gpu_check.kernels.fla_check import fla_spec_kda, kda_gate_inputs
from gpu_check.kernels.gdn_spec import KernelConfig, default_config, spec_gdn_update
from gpu_check.kernels.problem import QWEN35_DIMS, SpecProblem, make_spec_problem, rel_err

__all__ = ["copy_bandwidth", "run_bench", "summarize"]

NS = (8, 16, 32, 64, 128, 256)
TARGET_RATIO = 1.5  # ours / floor at N >= TARGET_MIN_N
TARGET_MIN_N = 64


def _variants(sweep: bool) -> list[KernelConfig]:
    """Configs of our kernel to time: the default plus neighbours, or the full sweep."""
    tiles = (
        ((8, 1), (16, 1), (16, 2), (32, 2), (32, 4), (64, 4))
        if sweep
        else ((8, 1), (16, 1), (32, 4))
    )
    pipes = ((False, 1), (False, 2), (True, 1)) if sweep else ((False, 1), (True, 1))
    streams = (False, True) if sweep else (False,)
    configs = [
        KernelConfig(bv, w, prefetch=pf, num_stages=st, stream=sm)
        for bv, w in tiles
        for pf, st in pipes
        for sm in streams
    ]
    default = default_config(QWEN35_DIMS["V"])
    return configs if default in configs else [default, *configs]


def _config_name(cfg: KernelConfig) -> str:
    pipe = "pf" if cfg.prefetch else f"s{cfg.num_stages}"
    return f"bv{cfg.block_v}w{cfg.num_warps}-{pipe}" + ("-cs" if cfg.stream else "")


@triton.jit
def slot_copy_kernel(
    h,
    ssm_state_indices,
    stride_h_blk,
    HV: tl.constexpr,
    V: tl.constexpr,
    K: tl.constexpr,
    NC: tl.constexpr,
    BV: tl.constexpr,
    BC: tl.constexpr,
):
    """The kernel's memory pattern with no arithmetic: read slot 0's slice, store it to every
    slot of the row. Its time is what the memory system gives this access pattern."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    o_c = tl.arange(0, BC)
    b_idx = tl.load(ssm_state_indices + i_n.to(tl.int64) * NC + o_c, mask=o_c < NC, other=0)
    o_v = i_v * BV + tl.arange(0, BV)
    o_h = i_hv * V * K + o_v[:, None] * K + tl.arange(0, K)[None, :]
    i_src = tl.sum(tl.where(o_c == 0, b_idx, 0)).to(tl.int64)
    b_h = tl.load(h + i_src * stride_h_blk + o_h)
    for i_t in tl.static_range(NC):
        i_dst = tl.sum(tl.where(o_c == i_t, b_idx, 0)).to(tl.int64)
        tl.store(h + i_dst * stride_h_blk + o_h, b_h)


def _slot_copy(prob: SpecProblem, block_v: int = 32) -> None:
    pool, idx = prob.ssm_state, prob.ssm_state_indices
    NC = idx.shape[1]
    grid = (pool.shape[2] // block_v, idx.shape[0] * pool.shape[1])
    slot_copy_kernel[grid](
        pool, idx, pool.stride(0), HV=pool.shape[1], V=pool.shape[2], K=pool.shape[3], NC=NC,
        BV=block_v, BC=triton.next_power_of_2(NC), num_warps=4,
    )  # fmt: skip


def _median_us(fn: Callable[[], object]) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e3


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Bytes/s of a large D2D copy, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    t_us = _median_us(lambda: dst.copy_(src))
    return 2 * nbytes / (t_us * 1e-6)


def work_bytes(prob: SpecProblem) -> int:
    """Fewest bytes one call must move: state read once per program slice, stored per token."""
    n_req = prob.cu_seqlens.numel() - 1
    T = prob.q.shape[1]
    state = prob.ssm_state[0].numel() * prob.ssm_state.element_size()  # one block
    io = (
        2 * prob.q[0].numel() + 2 * prob.v[0].numel() + 2 * prob.a.numel()
    ) * prob.q.element_size()
    return n_req * state + T * state + io


def _graph(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # compile outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def _bench_case(
    N: int, k: int, pool_dtype: torch.dtype, bw: float, seed: int, configs: list[KernelConfig]
) -> list[dict]:
    prob = make_spec_problem(
        [k + 1] * N, k, **QWEN35_DIMS, seed=seed, dtype=torch.bfloat16,
        pool_dtype=pool_dtype, device="cuda",
    )  # fmt: skip
    cu64 = prob.cu_seqlens.long()
    args = prob.kernel_args() | {"cu_seqlens": cu64}
    g_k, beta = kda_gate_inputs(prob.a, prob.b, prob.A_log, prob.dt_bias, QWEN35_DIMS["K"])
    fla_kw: dict[str, Any] = {
        "q": prob.q, "k": prob.k, "v": prob.v, "g_k": g_k, "beta": beta, "cu_seqlens": cu64,
        "ssm_state_indices": prob.ssm_state_indices,
        "num_accepted_tokens": prob.num_accepted_tokens,
    }  # fmt: skip
    floor_us = work_bytes(prob) / bw * 1e6
    base = {
        "N": N, "k": k, "tokens": N * (k + 1), **QWEN35_DIMS, "in_dtype": "bfloat16",
        "pool_dtype": str(pool_dtype).removeprefix("torch."), "bytes": work_bytes(prob),
        "floor_us": floor_us, "copy_bw_GBps": bw / 1e9,
        "slot_copy_us": _median_us(_graph(partial(_slot_copy, prob)).replay),
    }  # fmt: skip
    out = torch.empty_like(prob.v)
    fla_fn = partial(fla_spec_kda, **fla_kw, ssm_state=prob.ssm_state, out=out, check=False)
    fla_us = _median_us(_graph(fla_fn).replay)
    rows = [base | {"impl": "fla", "variant": "fla-bv32w4-s2", "time_us": fla_us, "default": True}]
    for cfg in configs:
        fn = partial(spec_gdn_update, **args, out=out, config=cfg)
        rows.append(
            base | {
                "impl": "ours", "variant": _config_name(cfg), **asdict(cfg),
                "time_us": _median_us(_graph(fn).replay),
                "default": cfg == default_config(QWEN35_DIMS["V"]),
                "out_rel_diff_vs_fla": _agreement(args | {"config": cfg}, fla_kw),
            }
        )  # fmt: skip
    for r in rows:
        r["ratio_to_floor"] = r["time_us"] / floor_us
        r["ratio_to_fla"] = r["time_us"] / fla_us
    return rows


def _agreement(args: dict, fla_kw: dict) -> float:
    """Ours vs fla on the same pool and inputs (checked once, with fla's NULL guard on)."""
    pool_a, pool_b = args["ssm_state"].clone(), args["ssm_state"].clone()
    o_ours = spec_gdn_update(**(args | {"ssm_state": pool_a}))
    o_fla = fla_spec_kda(**fla_kw, ssm_state=pool_b)
    return max(rel_err(o_ours, o_fla), rel_err(pool_a, pool_b))


def run_bench(
    ns: tuple[int, ...] = NS,
    k: int = 3,
    pool_dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16),
    seed: int = 0,
    sweep: bool = False,
) -> tuple[list[dict], float]:
    """All rows (fla and every variant of ours) and the measured copy bandwidth in bytes/s."""
    if not torch.cuda.is_available():
        raise RuntimeError("the benchmark needs a CUDA device")
    bw = copy_bandwidth()
    rows: list[dict[str, Any]] = []
    for pool_dtype in pool_dtypes:
        for N in ns:
            rows += _bench_case(N, k, pool_dtype, bw, seed + N, _variants(sweep))
            torch.cuda.empty_cache()
    return rows, bw


def summarize(rows: list[dict], bw: float, env: dict) -> dict:
    """Per (pool dtype, N): default ours, best ours, fla, floor; and the target verdict."""
    per_case = []
    for key in sorted({(r["pool_dtype"], r["N"]) for r in rows}):
        case = [r for r in rows if (r["pool_dtype"], r["N"]) == key]
        ours = [r for r in case if r["impl"] == "ours"]
        default = next(r for r in ours if r["default"])
        best = min(ours, key=lambda r: r["time_us"])
        fla_row = next(r for r in case if r["impl"] == "fla")
        per_case.append({
            "pool_dtype": key[0], "N": key[1], "floor_us": default["floor_us"],
            "slot_copy_us": default["slot_copy_us"],
            "ours_variant": default["variant"], "ours_us": default["time_us"],
            "ours_ratio_to_floor": default["ratio_to_floor"],
            "ours_ratio_to_slot_copy": default["time_us"] / default["slot_copy_us"],
            "best_variant": best["variant"], "best_ours_us": best["time_us"],
            "fla_us": fla_row["time_us"], "fla_ratio_to_floor": fla_row["ratio_to_floor"],
            "ours_ratio_to_fla": default["ratio_to_fla"],
            "max_out_rel_diff_vs_fla": max(r["out_rel_diff_vs_fla"] for r in ours),
        })  # fmt: skip
    big = [c for c in per_case if c["N"] >= TARGET_MIN_N]
    return env | {
        "copy_bw_GBps": bw / 1e9,
        "target": f"ours <= {TARGET_RATIO}x floor at N >= {TARGET_MIN_N}, and <= fla",
        "target_floor_met": all(c["ours_ratio_to_floor"] <= TARGET_RATIO for c in big),
        "target_fla_met": all(c["ours_ratio_to_fla"] <= 1.0 for c in per_case),
        "cases": per_case,
    }
