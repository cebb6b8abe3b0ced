"""A pure-torch stand-in for vLLM's compiled extension ``vllm/_C_stable_libtorch.abi3.so``.

The GPU machine gets vLLM's Python files only (the compiled extension is 87 MB compressed and
the run needs almost none of it). ``vllm/platforms/cuda.py`` imports that extension
unconditionally; on the GPU machine ``carry.prepare`` puts a two-line module
``vllm/_C_stable_libtorch.py`` there that imports this one. It registers, in the
``torch.ops._C`` namespace:

- three ops the tiny dense bf16 model really calls, written in plain torch (slower than the
  CUDA kernels; the same maths): ``silu_and_mul``, ``rms_norm``, ``fused_add_rms_norm``;
- capability queries that vLLM asks at import time, all answering "not supported", which keeps
  every quantized and CUTLASS path off;
- ``get_cuda_view_from_cpu_tensor``, which MRv2's ``UvaBuffer`` uses: a CUDA tensor over the
  pinned host memory of a CPU tensor (Unified Virtual Addressing: on a 64-bit CUDA host the
  device address of ``cudaHostAlloc`` memory is its host address), made by handing that pointer
  to ``torch.as_tensor`` through ``__cuda_array_interface__``; zero-copy, as the kernel's view;
- ops that vLLM's compilation passes only *name* at import time (``torch.ops._C.x.default``
  in pattern tables); calling one raises ``NotImplementedError`` naming it.

Every other ``torch.ops._C`` op stays missing, so code that checks with ``hasattr`` falls back
to its Python or Triton path and code that needs one fails loudly. ``CALLS`` counts the calls
of each implemented op; the run's summary reports it, so a reader sees what the stand-in did.
The list of names was found by importing vLLM 0.24.0's modules against a scan (see
data/vllm/README.md); another vLLM release may need more names.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F

CALLS: Counter[str] = Counter()

CAPABILITY_QUERIES = (
    "cutlass_scaled_mm_supports_fp8",
    "cutlass_scaled_mm_supports_block_fp8",
    "cutlass_scaled_mm_supports_fp4",
    "cutlass_group_gemm_supported",
    "mxfp4_experts_quant_supported",
)

NAMED_ONLY = (
    "silu_and_mul_per_block_quant",
    "fused_qk_norm_rope",
    "silu_and_mul_quant",
    "rms_norm_per_block_quant",
    "rms_norm_dynamic_per_token_quant",
    "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_static_fp8_quant",
    "dynamic_per_token_scaled_fp8_quant",
    "dynamic_scaled_fp8_quant",
    "static_scaled_fp8_quant",
    "rotary_embedding",
)


def _normalize(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype)


def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
    CALLS["silu_and_mul"] += 1
    gate, up = x.chunk(2, dim=-1)
    out.copy_(F.silu(gate) * up)


def rms_norm(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> None:
    CALLS["rms_norm"] += 1
    out.copy_(_normalize(x, weight, eps))


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float
) -> None:
    """In place, like the kernel: ``residual <- x + residual``, ``x <- rms_norm(residual)``."""
    CALLS["fused_add_rms_norm"] += 1
    total = (x.float() + residual.float()).to(x.dtype)
    residual.copy_(total)
    x.copy_(_normalize(total, weight, eps))


_TYPESTR = {
    torch.int8: "|i1",
    torch.uint8: "|u1",
    torch.int16: "<i2",
    torch.int32: "<i4",
    torch.int64: "<i8",
    torch.float32: "<f4",
    torch.float64: "<f8",
    torch.bool: "|b1",
}
_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class _HostPointer:
    """A CPU tensor's pinned memory described as CUDA memory (``__cuda_array_interface__`` v3)."""

    def __init__(self, t: torch.Tensor, typestr: str) -> None:
        size = t.element_size()
        self.__cuda_array_interface__ = {
            "shape": tuple(t.shape),
            "strides": tuple(st * size for st in t.stride()),
            "typestr": typestr,
            "data": (t.data_ptr(), False),
            "version": 3,
        }


def get_cuda_view_from_cpu_tensor(cpu_tensor: torch.Tensor) -> torch.Tensor:
    CALLS["get_cuda_view_from_cpu_tensor"] += 1
    if not cpu_tensor.is_pinned():
        raise ValueError("get_cuda_view_from_cpu_tensor: the CPU tensor must be pinned")
    dtype = cpu_tensor.dtype
    if dtype in _TYPESTR:
        return torch.as_tensor(_HostPointer(cpu_tensor, _TYPESTR[dtype]), device="cuda")
    as_int = cpu_tensor.view(_SAME_SIZE_INT[cpu_tensor.element_size()])  # bf16, fp16, ...
    return torch.as_tensor(_HostPointer(as_int, _TYPESTR[as_int.dtype]), device="cuda").view(dtype)


_LIB: torch.library.Library | None = None


def register() -> torch.library.Library:
    """Define the ops once per process (a second call returns the same library)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    lib = torch.library.Library("_C", "FRAGMENT")
    schemas = {
        "silu_and_mul": ("silu_and_mul(Tensor! result, Tensor input) -> ()", silu_and_mul),
        "rms_norm": (
            "rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon) -> ()",
            rms_norm,
        ),
        "fused_add_rms_norm": (
            "fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor? weight, "
            "float epsilon) -> ()",
            fused_add_rms_norm,
        ),
    }
    schemas["get_cuda_view_from_cpu_tensor"] = (
        "get_cuda_view_from_cpu_tensor(Tensor cpu_tensor) -> Tensor",
        get_cuda_view_from_cpu_tensor,
    )
    for name, (schema, fn) in schemas.items():
        lib.define(schema)
        lib.impl(name, fn, "CompositeExplicitAutograd")
    for name in CAPABILITY_QUERIES:
        lib.define(f"{name}(int cuda_device_capability) -> bool")
        lib.impl(name, _answer_no(name), "CompositeExplicitAutograd")
    for name in NAMED_ONLY:
        lib.define(f"{name}(Tensor[] args) -> ()")
        lib.impl(name, _refuse(name), "CompositeExplicitAutograd")
    _LIB = lib
    return lib


def _answer_no(name: str):
    def query(capability: int) -> bool:
        CALLS[name] += 1
        return False

    return query


def _refuse(name: str):
    def op(*args, **kwargs):
        raise NotImplementedError(f"specrace's _C stand-in: torch.ops._C.{name} is not provided")

    return op
