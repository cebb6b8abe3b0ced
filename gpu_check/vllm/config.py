"""The model, the engine arguments and the workload of ``vllm-run`` (no vLLM needed here).

The model is a tiny hybrid Qwen3-Next: three Gated-DeltaNet (linear attention) layers and one
full-attention layer, dense MLPs (no experts), one MTP layer for the drafter, a 2048-token
vocabulary and no tokenizer. Weights are vLLM's dummy weights, then zeroed on the GPU, so the
logits are all zero, greedy sampling always picks token 0 and every draft is accepted: decode
rows accept k + 1 tokens, prefill rows 1. The text is meaningless; the counts are what we need.
``vllm-run --weights gdn-bit`` sets them instead so that the tokens depend on the GDN state and
drafts are accepted about 70 % of the time (:mod:`gpu_check.vllm.weights`).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

VOCAB = 2048

TINY_QWEN3_NEXT: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "vocab_size": VOCAB,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "num_experts": 0,  # dense MLPs: keeps the run off the compiled MoE kernels
    "num_experts_per_tok": 1,
    "decoder_sparse_step": 1,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "norm_topk_prob": True,
    "num_nextn_predict_layers": 1,  # the MTP drafter
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "partial_rotary_factor": 0.25,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": VOCAB - 2,
    "eos_token_id": VOCAB - 1,
}


def write_model_dir(path: Path) -> Path:
    """``config.json`` of the tiny model; vLLM reads nothing else (dummy weights, no tokenizer)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(TINY_QWEN3_NEXT, indent=1) + "\n")
    return path


@dataclass(frozen=True)
class EngineConfig:
    mamba_cache_mode: str = "align"  # align | none
    num_speculative_tokens: int = 3
    max_num_seqs: int = 64  # engine capacity; a config may run fewer (RunConfig.max_num_seqs)
    max_num_batched_tokens: int = 2048
    max_model_len: int = 2048
    gpu_memory_utilization: float = 0.25
    seed: int = 0
    async_scheduling: bool = True  # False: the reference arm of vllm-run --reference async-off
    weights: str = "zero"  # gpu_check.vllm.weights: what the dummy weights are set to

    def llm_kwargs(self, model_dir: str) -> dict[str, Any]:
        """``vllm.LLM(**kwargs)``: V1 runner, eager, async scheduling, MTP, Triton backends."""
        return {
            "model": model_dir,
            "skip_tokenizer_init": True,
            "load_format": "dummy",
            "dtype": "bfloat16",
            "enforce_eager": True,
            "compilation_config": {"custom_ops": ["none"]},
            "attention_backend": "TRITON_ATTN",
            "speculative_config": {
                "method": "mtp",
                "num_speculative_tokens": self.num_speculative_tokens,
                # the drafter picks its own backend otherwise (FlashAttention, not carried)
                "attention_backend": "TRITON_ATTN",
            },
            "async_scheduling": self.async_scheduling,
            # prefix caching on is what makes a hybrid model resolve to "align"
            "enable_prefix_caching": self.mamba_cache_mode == "align",
            "mamba_cache_mode": self.mamba_cache_mode,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "seed": self.seed,
            # on SM90 "auto" picks FlashInfer's GDN prefill, which is not carried
            "additional_config": {"gdn_prefill_backend": "triton"},
        }


PROMPT_LENS = (8, 16, 40, 100, 300, 700)


@dataclass(frozen=True)
class RunConfig:
    """One measured configuration on a live engine: concurrency, workload, GPU delay."""

    max_num_seqs: int = 16
    num_requests: int = 192
    gpu_delay_us: int = 0  # torch.cuda._sleep before each target forward (GPU-bound run)
    seed: int = 0
    prompt_lens: tuple[int, ...] = PROMPT_LENS
    prompt_jitter: int = 3
    output_min: int = 8
    output_max: int = 160
    arrivals: str = "all-at-start"  # or "staggered": one new request per `arrival_every` steps
    arrival_every: int = 2
    baseline: bool = True  # also time a pass with the row/read hooks off
    patch: str = "none"  # gpu_check.vllm.patches: the fix installed for this arm
    rep: int = 0  # repeat of an arm (vllm-run --arm-repeats / --repeats): throughput, repeatability
    label: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        tail = "" if self.arrivals == "all-at-start" else f"_stag{self.arrival_every}"
        if self.patch != "none":
            tail += f"_{self.patch}"
        if self.rep:
            tail += f"_r{self.rep}"
        ms = self.gpu_delay_us / 1000  # 13500 us -> d13.5ms (names must differ per config)
        return self.label or f"s{self.max_num_seqs}_d{ms:g}ms{tail}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["prompt_lens"] = list(self.prompt_lens)
        d["name"] = self.name
        return d


def reference_name(cfg: RunConfig) -> str:
    """The async-off reference of a configuration is per workload: a patch arm or a repeat
    shares its unpatched configuration's (``ref_<mode>_<name>.json``)."""
    return replace(cfg, patch="none", rep=0).name


def run_config_of(d: dict[str, Any]) -> RunConfig:
    """A :class:`RunConfig` from its ``to_dict`` (a raw record's ``config``); keys a record
    of an older vllm-run lacks take their defaults."""
    known = {f.name for f in fields(RunConfig)}
    kw = {k: v for k, v in d.items() if k in known}
    if "prompt_lens" in kw:
        kw["prompt_lens"] = tuple(kw["prompt_lens"])
    return RunConfig(**kw)


def workload(cfg: RunConfig) -> list[dict[str, Any]]:
    """Token-id prompts with mixed lengths, so rows free up and new prefills land low.

    Each request: ``req_index``, ``prompt_token_ids``, ``max_tokens`` (output length, EOS
    ignored) and ``arrival_step`` (0 for all, or staggered). Same seed -> same list.
    """
    rng = random.Random(cfg.seed)
    out = []
    for i in range(cfg.num_requests):
        plen = max(
            4, rng.choice(cfg.prompt_lens) + rng.randint(-cfg.prompt_jitter, cfg.prompt_jitter)
        )
        prompt = [rng.randint(1, VOCAB - 3) for _ in range(plen)]
        arrival = 0 if cfg.arrivals == "all-at-start" else i * cfg.arrival_every
        out.append(
            {
                "req_index": i,
                "prompt_token_ids": prompt,
                "max_tokens": rng.randint(cfg.output_min, cfg.output_max),
                "arrival_step": arrival,
            }
        )
    return out


def parse_configs(text: str, base: RunConfig | None = None) -> list[RunConfig]:
    """``"16:0,64:0,16:8000"`` -> one RunConfig per ``max_num_seqs:gpu_delay_us`` item."""
    base = base or RunConfig()
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        parts = item.split(":")
        if len(parts) not in (1, 2) or not all(p.isdigit() for p in parts):
            raise ValueError(f"config {item!r}: expected MAX_NUM_SEQS[:GPU_DELAY_US]")
        seqs = int(parts[0])
        delay = int(parts[1]) if len(parts) == 2 else 0
        if seqs < 1:
            raise ValueError(f"config {item!r}: max_num_seqs must be >= 1")
        out.append(RunConfig(**{**asdict(base), "max_num_seqs": seqs, "gpu_delay_us": delay}))
    if not out:
        raise ValueError("no configurations given")
    return out


MODES = ("align", "none")


def parse_plan(
    modes: str, configs: str, base: RunConfig | None = None
) -> dict[str, list[RunConfig]]:
    """Which configurations run under which mamba mode.

    ``configs`` is one list for every mode (``"16:0,64:0"``) or one per mode,
    ``"align=16:0,16:8000;none=16:0"`` (a mode not named there gets none and is skipped).
    """
    names = [m for m in modes.split(",") if m]
    bad = [m for m in names if m not in MODES]
    if bad or not names:
        raise ValueError(f"--modes takes a comma list of {','.join(MODES)}; got {modes!r}")
    if "=" not in configs:
        return {m: parse_configs(configs, base) for m in names}
    per_mode: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in configs.split(";"))):
        mode, sep, items = part.partition("=")
        if not sep or mode not in MODES:
            raise ValueError(f"--configs part {part!r}: expected MODE=CONFIGS with MODE in {MODES}")
        per_mode[mode] = items
    return {m: parse_configs(per_mode[m], base) for m in names if m in per_mode}
