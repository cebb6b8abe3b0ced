"""Built-in model presets: the GPU step time of a model from a roofline, on one H200.

The GPU side of a step in the model is ``gpu_forward_ns_base + gpu_forward_ns_per_token * n``
plus ``gpu_drafter_ns`` (k MTP forwards). A preset fills these from a roofline, **stated as
such, not measured on the model**:

- ``gpu_forward_ns_base`` = weight bytes read per decode step / H200 memory bandwidth. For a
  dense model that is every weight; for a mixture of experts, the non-expert weights plus the
  expected share of experts a decode batch of ``max_num_seqs * (1 + k)`` tokens touches
  (top-k of E experts per token, routed uniformly): ``1 - (1 - top_k / E) ** tokens``.
- ``gpu_forward_ns_per_token`` = 2 * active parameters / bf16 matmul throughput (compute).
  The sum of the two terms is a roofline upper bound (memory and compute not overlapped).
- ``gpu_drafter_ns`` = k * (one layer's share of the bytes + the LM head) / bandwidth.

Measured H200 numbers (/work/.library/device/KINDS.md, 2026-10-28 and 2026-11-04): a
device-to-device copy moved about 4.3 TB/s counting bytes read and written; an
8192^3 bf16 matrix product ran at 788 TFLOP/s (random data). docs/timing.md quotes the
nominal 4.8 TB/s; we use the measured 4.3.

The architecture numbers below are approximate public configurations (parameter counts from
the model names, layer counts, hidden sizes, vocabularies and expert counts as published for
these model families), not read from a config.json here: override any derived timing with
``--set timing.gpu_forward_ns_base=...`` etc. CPU-side timings stay at the scenario's.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import SpecraceError, did_you_mean

H200_BYTES_PER_S = 4.3e12  # D2D copy measured on the H200 we use (data/bench: 4223 GB/s)
H200_BF16_FLOP_PER_S = 788e12  # 8192^3 bf16 matmul measured on that H200 (2026-11)
DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0}


@dataclass(frozen=True)
class ModelPreset:
    name: str
    architecture: str  # what vLLM resolves the checkpoint to
    params_total_b: float  # billions
    params_active_b: float  # billions, per token
    expert_params_b: float  # billions in routed experts (0 for dense)
    num_experts: int  # routed experts per MoE layer (0 for dense)
    experts_per_token: int
    num_layers: int
    hidden_size: int
    vocab_size: int
    dtype: str  # weights as served (fits one H200 at this dtype)
    note: str

    def weight_bytes_per_step(self, tokens: int) -> float:
        dense_b = self.params_total_b - self.expert_params_b
        touched = 0.0
        if self.num_experts:
            touched = 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** tokens
        return (dense_b + self.expert_params_b * touched) * 1e9 * DTYPE_BYTES[self.dtype]

    def timing(self, max_num_seqs: int, k: int) -> dict[str, int]:
        """``timing.*`` overrides from the roofline for a full decode batch."""
        tokens = max_num_seqs * (1 + k)
        body = self.weight_bytes_per_step(tokens)
        lm_head = self.vocab_size * self.hidden_size * DTYPE_BYTES[self.dtype]
        per_draft = body / self.num_layers + lm_head
        return {
            "gpu_forward_ns_base": int(body / H200_BYTES_PER_S * 1e9),
            "gpu_forward_ns_per_token": int(
                2 * self.params_active_b * 1e9 / H200_BF16_FLOP_PER_S * 1e9
            ),
            "gpu_drafter_ns": int(k * per_draft / H200_BYTES_PER_S * 1e9),
        }


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset("qwen3.5-27b", "Qwen3_5ForConditionalGeneration", 27.0, 27.0, 0.0, 0, 0,
                    64, 5120, 248_320, "bf16", "dense hybrid GDN, 3:1 linear:full attention"),
        ModelPreset("qwen3-next-80b-a3b", "Qwen3NextForCausalLM", 80.0, 3.0, 77.0, 512, 10,
                    48, 2048, 151_936, "fp8", "hybrid GDN MoE; bf16 (160 GB) does not fit"),
        ModelPreset("qwen3.6-35b-a3b", "Qwen3_5MoeForConditionalGeneration", 35.0, 3.0, 32.0,
                    256, 8, 40, 2048, 248_320, "bf16", "hybrid GDN MoE"),
    )
}  # fmt: skip


def get_preset(name: str) -> ModelPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise SpecraceError(
            f"--model {name!r}: unknown model preset{did_you_mean(name, PRESETS)} "
            f"(known: {', '.join(PRESETS)})"
        ) from None
