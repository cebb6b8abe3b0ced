"""Random spec-decode problems shared by tests, the benchmark and the padding check.

Every small tensor is drawn on the CPU from one `torch.Generator` seeded explicitly (no global
RNG), then moved, so a seed gives the same inputs on every device. The state pool is drawn on its
device from a generator with the same seed (deterministic per device, not across devices).
The gate follows docs/timing.md §5: A = exp(A_log) in [1, 16], dt_bias ~ N(0, 1),
a ~ N(0, 1), beta = sigmoid(N(0, 1)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any

import torch

QWEN35_DIMS: dict[str, Any] = {"H": 16, "HV": 32, "K": 128, "V": 128}

__all__ = ["QWEN35_DIMS", "SpecProblem", "make_spec_problem", "rel_err"]


@dataclass(frozen=True)
class SpecProblem:
    """Inputs of one `spec_gdn_update` call; block 0 of `ssm_state` is the NULL block."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    A_log: torch.Tensor
    dt_bias: torch.Tensor
    ssm_state: torch.Tensor
    cu_seqlens: torch.Tensor
    ssm_state_indices: torch.Tensor
    num_accepted_tokens: torch.Tensor

    def kernel_args(self) -> dict[str, Any]:
        """Keyword arguments for `spec_gdn_update` / `spec_gdn_reference`."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def with_pool(self, ssm_state: torch.Tensor) -> SpecProblem:
        return replace(self, ssm_state=ssm_state)

    def with_counts(self, counts: torch.Tensor) -> SpecProblem:
        return replace(self, num_accepted_tokens=counts.to(self.num_accepted_tokens))


def make_spec_problem(
    seqlens: list[int],
    num_spec: int,
    H: int,
    HV: int,
    K: int,
    V: int,
    seed: int,
    dtype: torch.dtype = torch.float32,
    pool_dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    counts: list[int] | None = None,
) -> SpecProblem:
    """A spec batch: request n has seqlens[n] tokens and k+1 = num_spec+1 private blocks.

    Block ids are a random permutation of 1..N*(k+1) (block 0 stays NULL). Counts default to
    random values in [1, k+1]. The pool is random (not zero: zeros hide indexing bugs).
    """
    gen = torch.Generator().manual_seed(seed)
    N, C, T = len(seqlens), num_spec + 1, sum(seqlens)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    cu = torch.tensor([0, *accumulate(seqlens)], dtype=torch.int32)
    idx = (torch.randperm(N * C, generator=gen) + 1).to(torch.int32).view(N, C)
    if counts is None:
        acc = torch.randint(1, C + 1, (N,), generator=gen, dtype=torch.int32)
    else:
        acc = torch.tensor(counts, dtype=torch.int32)
    # A = exp(A_log) uniform in [1, 16]; log-space keeps decays realistic (docs/timing.md §5).
    A_log = torch.rand(HV, generator=gen) * math.log(16.0)
    # The pool is the one large tensor: drawn where it lives (its own seeded generator there).
    pool_gen = torch.Generator(device=device).manual_seed(seed)
    pool = torch.randn(1 + N * C, HV, V, K, generator=pool_gen, device=device) * 0.1

    def dev(x: torch.Tensor, dt: torch.dtype | None = None) -> torch.Tensor:
        return x.to(device=device, dtype=dt or x.dtype).contiguous()

    return SpecProblem(
        q=dev(randn(1, T, H, K), dtype),
        k=dev(randn(1, T, H, K), dtype),
        v=dev(randn(1, T, HV, V), dtype),
        a=dev(randn(T, HV), dtype),
        b=dev(randn(T, HV), dtype),
        A_log=dev(A_log),
        dt_bias=dev(randn(HV)),
        ssm_state=dev(pool, pool_dtype),
        cu_seqlens=dev(cu),
        ssm_state_indices=dev(idx),
        num_accepted_tokens=dev(acc),
    )


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / ||ref|| in float64; NaN anywhere in x gives inf (an unwritten output)."""
    x, ref = x.double(), ref.double()
    if bool(torch.isnan(x).any()):
        return math.inf
    return float((x - ref).norm() / ref.norm().clamp_min(1e-300))
