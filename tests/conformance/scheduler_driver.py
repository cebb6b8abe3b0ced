"""vLLM's real scheduler driven with a specrace request stream, in sim's schedule schema.

:func:`run_vllm` plays the engine core around vLLM's own ``Scheduler`` / ``AsyncScheduler``
(vllm/v1/core/sched/, the wheel's Python, CPU only, no model) with a real ``KVCacheManager``
over a small block pool: per step it adds the requests that arrive, calls ``schedule()``, and
feeds ``update_from_output`` a ``ModelRunnerOutput`` built from the stream's acceptance draws
(the same draws sim's scheduler uses: a request's j-th drafted step accepts
``min(accepted[j], 1 + drafts)``, 1 past the end; a partial prefill chunk samples nothing).
Outputs are processed with sim's lag (docs/mechanism.md §1.1): under async scheduling
``update_from_output(N-1)`` runs before ``schedule(N+1)`` (EngineCore.step_with_batch_queue,
batch queue of two), without it ``update_from_output(N)`` before ``schedule(N+1)``
(EngineCore.step). Each scheduler output then goes through vllm_driver.RealBatch (vLLM's
InputBatch under the worker's ``_update_states``), and the step is written as a
:class:`sim.model.schedule.StepRecord`, as the recorded real runs under data/vllm are.

Every request runs to ``max_tokens`` (``ignore_eos``): a finish is a length stop, which is
what sim's ``output_len`` is. Prefix-cache hits are real: a request's prompt shares
``prefix_hit_tokens`` leading token ids with an earlier request's, and the hit vLLM's KV cache
manager finds (whole blocks, the last one dropped under EAGLE/MTP) is handed to sim's stream
as that request's ``prefix_hit_tokens`` (:func:`observed_hits`).

What is not vLLM's own code here: the config objects (stand-ins with the fields the scheduler
reads; a ModelConfig would need a model from the hub), and the import stand-ins under
standins/ for packages the import chain names but the scheduler never calls:

| stand-in | replaces |
|---|---|
| standins/prometheus_client | ``prometheus_client`` metric classes (vllm/v1/metrics) |
| standins/llguidance | guidance backend classes named in annotations (backend_guidance.py) |
| standins/xgrammar | xgrammar classes named in dataclass fields (backend_xgrammar.py) |
| standins/outlines_core | ``Guide`` (backend_outlines.py) |
| standins/lmformatenforcer | ``TokenEnforcer`` (backend_lm_format_enforcer.py) |
"""

from __future__ import annotations

import inspect
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.append(str(Path(__file__).resolve().parent / "standins"))
import absent  # noqa: E402  (standins/absent.py)

absent.install()

import torch  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    ObservabilityConfig,
    ParallelConfig,
    VllmConfig,
)
from vllm.config.scheduler import SchedulerConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
)
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm_driver import RealBatch, StepInput  # noqa: E402

from sim.model.schedule import StepRecord  # noqa: E402

TOKEN = 7  # every sampled token (never an EOS: requests ignore EOS anyway)


@dataclass(frozen=True)
class EngineSetup:
    """The engine configuration of one stream, in sim's terms plus the KV pool."""

    max_num_seqs: int
    max_num_batched_tokens: int
    num_speculative_tokens: int
    async_scheduling: bool = True
    reorder_threshold_is_one: bool = False
    mamba_cache_mode: str = "none"  # "align": a hybrid (attention + mamba) KV config
    block_size: int = 16  # KV block; in align mode also sim's engine.mamba_block_size
    num_gpu_blocks: int = 4096
    kv_limited: bool = False  # give sim the pool's capacity (else it is never exhausted)
    enable_prefix_caching: bool = True
    max_model_len: int = 8192

    def engine_params(self) -> dict[str, Any]:
        """sim's ``[engine]`` table for the same engine."""
        return {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "num_speculative_tokens": self.num_speculative_tokens,
            "async_scheduling": self.async_scheduling,
            "reorder_threshold_is_one": self.reorder_threshold_is_one,
            "mamba_cache_mode": self.mamba_cache_mode,
            "mamba_block_size": self.block_size if self.mamba_cache_mode == "align" else 0,
            # vLLM's pool less its null block (block_pool.py), in whole blocks
            "kv_cache_capacity_tokens": (self.num_gpu_blocks - 1) * self.block_size
            if self.kv_limited
            else 0,
            "kv_block_size": self.block_size if self.kv_limited else 1,
        }


@dataclass(frozen=True)
class StreamRequest:
    req_id: str
    arrival_step: int
    prompt_len: int
    output_len: int
    accepted: tuple[int, ...]
    # leading prompt tokens shared with warm-up prompt ``share_with`` (-1: none)
    prefix_tokens: int = 0
    share_with: int = -1


@dataclass
class VllmRun:
    steps: list[StepRecord]
    hits: dict[str, int]  # req_id -> num_computed_tokens when first scheduled (prefix hit)
    preempted: list[set[str]] = field(default_factory=list)  # per step


def warm_prompt(w: int, length: int) -> list[int]:
    """Warm-up prompt ``w``: computed before step 0, so its blocks are in the prefix cache."""
    return [500_000 + 1009 * w + i for i in range(length)]


def _prompt(req: StreamRequest, index: int, warm: list[int]) -> list[int]:
    """Token ids: unique per request, the first ``prefix_tokens`` warm-up prompt
    ``share_with``'s."""
    own = [1000 + 97 * index + (i % 89) * 100_003 for i in range(req.prompt_len)]
    if req.share_with >= 0 and req.prefix_tokens:
        n = min(req.prefix_tokens, req.prompt_len, warm[req.share_with])
        own[:n] = warm_prompt(req.share_with, warm[req.share_with])[:n]
    return own


def _warm_up(sched: Scheduler, hasher: Any, warm: list[int]) -> None:
    """Compute the warm-up prompts to completion (one token each), so that a stream's prefix
    hits are whole cached blocks whatever the step it is admitted at; then flush their
    finished ids with an empty step."""
    for w, length in enumerate(warm):
        sp = SamplingParams(max_tokens=1, ignore_eos=True)
        sched.add_request(Request(f"warm-{w}", warm_prompt(w, length), sp, None,
                                  arrival_time=0.0, block_hasher=hasher))  # fmt: skip
    for _ in range(10_000):
        if not sched.requests:
            break
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        n_sample = [0 if sched.requests[r].is_prefill_chunk else 1 for r in ids]
        sched.update_from_output(
            out,
            ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={r: i for i, r in enumerate(ids)},
                sampled_token_ids=[[TOKEN] * n for n in n_sample],
                logprobs=None,
                prompt_logprobs_dict={},
                pooler_output=[],
            ),
        )
    assert not sched.requests, "warm-up prompts do not fit the KV pool"
    sched.schedule()


class _StandIn(SimpleNamespace):
    """A config object with only the fields given: reading any other names it, so a release
    that reads a new field fails loudly instead of seeing a made-up default."""

    def __init__(self, kind: str, **fields: Any) -> None:
        super().__init__(**fields)
        self.__dict__["_kind"] = kind

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"stand-in {self.__dict__.get('_kind')} has no field {name!r}")


# VllmConfig's derived values the scheduler reads, computed by the release's own properties
# from the stand-in's fields (each release's definition, e.g. num_lookahead_tokens).
_DERIVED = (
    "max_concurrent_batches",
    "num_speculative_tokens",
    "num_lookahead_tokens",
    "num_prefill_lookahead_tokens",
    "num_hash_lookahead_tokens",
    "max_in_flight_tokens",
    "is_mm_encoder_only",
    "is_encoder_only",
    "is_ec_producer_only",
)


def _vllm_config_standin(fields: dict[str, Any]) -> Any:
    props = {
        name: prop
        for name in _DERIVED
        if isinstance(prop := getattr(VllmConfig, name, None), property)
    }
    cls = type("VllmConfigStandIn", (_StandIn,), props)
    return cls("VllmConfig", **{n: v for n, v in fields.items() if n not in props})


def _configs(setup: EngineSetup) -> tuple[Any, KVCacheConfig]:
    k = setup.num_speculative_tokens
    sched_params = inspect.signature(SchedulerConfig).parameters
    wanted = dict(
        max_model_len=setup.max_model_len,
        is_encoder_decoder=False,
        max_num_batched_tokens=setup.max_num_batched_tokens,
        max_num_seqs=setup.max_num_seqs,
        enable_chunked_prefill=True,
        async_scheduling=setup.async_scheduling,
    )
    scheduler_config = SchedulerConfig(**{a: v for a, v in wanted.items() if a in sched_params})
    cache_config = CacheConfig(
        block_size=setup.block_size,
        enable_prefix_caching=setup.enable_prefix_caching,
        mamba_cache_mode=setup.mamba_cache_mode,
    )
    cache_config.num_gpu_blocks = setup.num_gpu_blocks
    speculative_config = (
        _StandIn(
            "SpeculativeConfig",
            num_speculative_tokens=k,
            num_speculative_tokens_per_batch_size=None,
            max_num_new_slots_for_drafting=0,  # MTP: no parallel drafting slots
            method="mtp",
            disable_lookahead_block_hashes=False,
            disable_eagle_block_drop=False,
            needs_eagle_block_drop=lambda: True,  # EAGLE/MTP drafters (0.33.0)
            use_eagle=lambda: True,
            uses_draft_model=lambda: False,
            use_dflash=lambda: False,
            use_dspark=lambda: False,
            use_multi_module_mtp=lambda: False,  # Qwen3.5: one MTP layer, applied k times
            use_eagle_block_drop=lambda: True,
        )
        if k
        else None
    )
    model_config = _StandIn(
        "ModelConfig",
        is_encoder_decoder=False,
        max_model_len=setup.max_model_len,
        is_diffusion=False,
        enable_return_routed_experts=False,
        is_multimodal_model=False,
        multimodal_config=None,
        runner_type="generate",
        return_sampling_mask=False,
        supports_multimodal_inputs=False,
        uses_mrope=False,
    )
    fields = dict(
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        lora_config=None,
        kv_events_config=None,
        parallel_config=ParallelConfig(),
        observability_config=ObservabilityConfig(),
        model_config=model_config,
        kv_transfer_config=None,
        ec_transfer_config=None,
        speculative_config=speculative_config,
        diffusion_config=None,
        num_speculative_tokens=k,
        max_concurrent_batches=2 if setup.async_scheduling else 1,
        use_v2_model_runner=False,
        is_encoder_only=False,
    )
    for name in ("aux_output_config", "ec_manager_config"):  # later releases' sub-configs
        if name in getattr(VllmConfig, "__dataclass_fields__", {}):
            fields[name] = typing.get_type_hints(VllmConfig)[name]()  # its defaults
    vllm_config = _vllm_config_standin(fields)
    attn = FullAttentionSpec(
        block_size=setup.block_size, num_kv_heads=1, head_size=8, dtype=torch.float16
    )
    groups = [KVCacheGroupSpec(["model.layers.0.attn"], attn)]
    if setup.mamba_cache_mode == "align":
        mamba = MambaSpec(
            block_size=setup.block_size,
            shapes=((2, 8),),
            dtypes=(torch.float16,),
            page_size_padded=attn.page_size_bytes,
            mamba_cache_mode="align",
            num_speculative_blocks=k,
        )
        groups.append(KVCacheGroupSpec(["model.layers.1.linear_attn"], mamba))
    kv_cache_config = KVCacheConfig(
        num_blocks=setup.num_gpu_blocks, kv_cache_tensors=[], kv_cache_groups=groups
    )
    return vllm_config, kv_cache_config


def new_scheduler(setup: EngineSetup) -> Scheduler:
    vllm_config, kv_cache_config = _configs(setup)
    cls = AsyncScheduler if setup.async_scheduling else Scheduler
    mm_registry = SimpleNamespace(supports_multimodal_inputs=lambda model_config: False)
    params = inspect.signature(Scheduler.__init__).parameters
    kwargs: dict[str, Any] = dict(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        # no request uses structured output: the manager's answers for such a request
        structured_output_manager=SimpleNamespace(
            should_advance=lambda *a, **kw: False,
            accept_tokens=lambda *a, **kw: True,
            validate_tokens=lambda request, tokens, *a, **kw: tokens,
        ),
        block_size=setup.block_size,
        mm_registry=mm_registry,
        log_stats=False,
    )
    return cls(**{a: v for a, v in kwargs.items() if a in params})


@dataclass
class _Pending:
    """One scheduled step until its output is processed."""

    out: Any  # SchedulerOutput
    tokens: dict[str, int]  # req_id -> tokens sampled (accepted count; 0 for a partial chunk)


def run_vllm(
    setup: EngineSetup, stream: list[StreamRequest], num_steps: int, warm: list[int] | None = None
) -> VllmRun:
    """vLLM's schedule of ``stream`` for ``num_steps`` steps (sim's StepRecord per step);
    ``warm``: the warm-up prompts' lengths (prefixes a request may share)."""
    init_none_hash(sha256)
    sched = new_scheduler(setup)
    hasher = get_request_block_hasher(setup.block_size, sha256)
    warm = warm or []
    if setup.enable_prefix_caching and any(r.share_with >= 0 for r in stream):
        _warm_up(sched, hasher, warm)
    k = setup.num_speculative_tokens
    lag = 2 if setup.async_scheduling else 1
    by_id = {r.req_id: r for r in stream}
    spec_pos = {r.req_id: 0 for r in stream}
    longest = max((r.prompt_len + r.output_len for r in stream), default=1)
    threshold = 1 if setup.reorder_threshold_is_one else 1 + k
    batch = RealBatch(setup.max_num_seqs, longest + k + 1, k, threshold)
    order = sorted(range(len(stream)), key=lambda i: (stream[i].arrival_step, i))
    nxt = 0
    pending: dict[int, _Pending] = {}
    steps: list[StepRecord] = []
    hits: dict[str, int] = {}
    preempted: list[set[str]] = []
    for step in range(num_steps):
        done = pending.pop(step - lag, None)
        if done is not None:
            sched.update_from_output(done.out, _runner_output(done))
            ran = list(done.out.num_scheduled_tokens)
            if k and not setup.async_scheduling and ran:
                # EngineCore.post_step: the drafter's k proposals for every row that ran
                # (async scheduling keeps them on the worker: placeholders instead).
                sched.update_draft_token_ids(DraftTokenIds(ran, [[TOKEN] * k for _ in ran]))
        while nxt < len(order) and stream[order[nxt]].arrival_step <= step:
            i = order[nxt]
            r = stream[i]
            sp = SamplingParams(max_tokens=r.output_len, ignore_eos=True)
            req = Request(
                r.req_id,
                _prompt(r, i, warm),
                sp,
                None,
                arrival_time=float(step),
                block_hasher=hasher if setup.enable_prefix_caching else None,
            )
            sched.add_request(req)
            nxt += 1
        out = sched.schedule()
        tokens: dict[str, int] = {}
        drafts: dict[str, int] = {}
        accepted: dict[str, int] = {}
        for req_id in out.num_scheduled_tokens:
            request = sched.requests[req_id]
            d = len(out.scheduled_spec_decode_tokens.get(req_id, ()))
            a = 1
            if d:
                acc = by_id[req_id].accepted
                j = spec_pos[req_id]
                spec_pos[req_id] = j + 1
                a = min(acc[j], 1 + d) if j < len(acc) else 1
            drafts[req_id] = d
            accepted[req_id] = a
            tokens[req_id] = 0 if request.is_prefill_chunk else a
        pending[step] = _Pending(out, tokens)
        for nr in out.scheduled_new_reqs:
            hits.setdefault(nr.req_id, nr.num_computed_tokens)
        preempted.append(set(out.preempted_req_ids or ()))
        rec = _record(step, out, sched, batch, drafts, accepted, tokens)
        steps.append(rec)
    return VllmRun(steps, hits, preempted)


def _runner_output(p: _Pending) -> ModelRunnerOutput:
    ids = list(p.out.num_scheduled_tokens)
    return ModelRunnerOutput(
        req_ids=ids,
        req_id_to_index={r: i for i, r in enumerate(ids)},
        sampled_token_ids=[[TOKEN] * p.tokens[r] for r in ids],
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )


def _record(
    step: int,
    out: Any,
    sched: Scheduler,
    batch: RealBatch,
    drafts: dict[str, int],
    accepted: dict[str, int],
    tokens: dict[str, int],
) -> StepRecord:
    """The scheduler output through the worker's ``_update_states`` on the real InputBatch."""
    num_computed: dict[str, int] = {}
    num_prompt: dict[str, int] = {}
    for nr in out.scheduled_new_reqs:
        num_computed[nr.req_id] = nr.num_computed_tokens
    cached = out.scheduled_cached_reqs
    for req_id, nc in zip(cached.req_ids, cached.num_computed_tokens, strict=True):
        num_computed[req_id] = nc
    for req_id in out.num_scheduled_tokens:
        num_prompt[req_id] = sched.requests[req_id].num_prompt_tokens
    resumed_set = set(getattr(cached, "resumed_req_ids", ()) or ())
    resumed = [r for r in cached.req_ids if r in resumed_set]
    step_in = StepInput(
        finished=sorted(out.finished_req_ids),
        num_scheduled=dict(out.num_scheduled_tokens),
        num_computed=num_computed,
        num_prompt=num_prompt,
        spec_tokens={r: list(t) for r, t in out.scheduled_spec_decode_tokens.items()},
        new=[nr.req_id for nr in out.scheduled_new_reqs],
        resumed=resumed,
        discard={r for r, t in tokens.items() if t == 0},
    )
    prev_ids = list(batch.ib.req_ids)
    batch.update_states(step_in)
    ib = batch.ib
    ids = list(ib.req_ids)
    n = len(ids)
    prev_pos = batch.prev_positions()
    finished_set = set(step_in.finished)
    unscheduled = [r for r in prev_ids if r not in finished_set and r not in step_in.num_scheduled]
    pnd = np.zeros(len(prev_ids), dtype=np.int64)
    if isinstance(sched, AsyncScheduler):  # the runner's array exists under async only
        pnd[:] = batch.prev_num_draft_tokens[: len(prev_ids)]
    # StepRecord.resumed is the worker's view: cached requests re-added to the batch (resumed
    # from preemption, or running but unscheduled last step), in scheduling order.
    readded = [r for r in cached.req_ids if r not in set(prev_ids)]
    rec = StepRecord(
        step=step,
        finished=step_in.finished,
        unscheduled=unscheduled,
        new=step_in.new,
        resumed=readded,
        ops=list(batch.recorder.ops),
        req_ids=ids,
        num_scheduled=np.array([step_in.num_scheduled[r] for r in ids], dtype=np.int64),
        num_computed=np.asarray(ib.num_computed_tokens_cpu[:n], dtype=np.int64).copy(),
        num_prompt=np.asarray(ib.num_prompt_tokens[:n], dtype=np.int64).copy(),
        drafts=np.array([drafts[r] for r in ids], dtype=np.int64),
        accepted=np.array([accepted[r] for r in ids], dtype=np.int64),
        discard=np.array([tokens[r] == 0 for r in ids], dtype=bool),
        prev_positions=prev_pos,
        prev_num_draft_tokens=pnd,
    )
    batch.finish_step(step_in)
    return rec
