"""The rules a release applies to a configuration, each resting on one fact of its source.

A :class:`Rule` names the fact (``release_facts.FACTS``) it rests on and says, in words, what
it decides; :func:`fire` turns it into a :class:`Fired` line of a resolution's trace with
the release's file and line. Rules for vllm-ascend rest on ``release_facts.ASCEND`` and
rules for unmerged PRs on the PR itself (no release line exists).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.resolve.release_facts import ASCEND, FACTS


@dataclass(frozen=True)
class Rule:
    id: str
    fact: str  # key of FACTS, of ASCEND (ascend.*) or a PR (pr:*)
    says: str  # what the rule decides; {value} is the fact's value in the release


@dataclass(frozen=True)
class Fired:
    rule: str
    says: str
    cite: str

    def line(self) -> str:
        return f"[{self.rule}] {self.says} ({self.cite})"


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule("sched-extra-step", "avoid_extra_step",
             "async scheduling: a running request whose in-flight step is sure to reach "
             "max_tokens is not scheduled again (sim.model.scheduler_rules.sure_to_finish)"),
        Rule("sched-mamba-split", "mamba_split_rule",
             "align mode cuts prefill chunks by the {value!r} rule (engine.mamba_split_rule)"),
        Rule("sched-pad-decode", "pad_new_decode",
             "a waiting request with one token left gets k placeholder drafts: {value!r} "
             "(engine.pad_new_decode)"),
        Rule("spec-event", "spec_event",
             "num_accepted_tokens_event exists only with speculative tokens ({value})"),
        Rule("pc-default", "prefix_caching_default_hybrid",
             "enable_prefix_caching unset: the default for a generative hybrid model is {value}"),
        Rule("pc-on-align", "prefix_caching_none_becomes",
             "prefix caching on with mamba_cache_mode 'none': becomes {value}; Qwen3.5/Qwen3-Next "
             "lack SupportsMambaPrefixCaching, so 'align'"),
        Rule("all-to-align", "all_falls_back_to_align",
             "mamba_cache_mode 'all' without SupportsMambaPrefixCaching falls back to {value!r}"),
        Rule("all-removed", "mamba_cache_modes",
             "mamba_cache_mode must be one of {value}: 'all' was removed"),
        Rule("pc-off-none", "prefix_caching_off_forces_none",
             "prefix caching off: mamba_cache_mode is set to 'none'"),
        Rule("async-default", "async_default_on_with_mtp",
             "async_scheduling unset: on, MTP/EAGLE being an EAGLE-type method"),
        Rule("env-v2", "mrv2_env_override",
             "VLLM_USE_V2_MODEL_RUNNER is set: it decides the model runner before any default"),
        Rule("mrv2-arch", "mrv2_default_for_qwen",
             "MRv2 is the default only for DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, which names no "
             "Qwen3.5/Qwen3-Next architecture: MRv1"),
        Rule("mrv2-default", "mrv2_default_for_qwen",
             "MRv2 is the default for every model unless a feature is unsupported"),
        Rule("mrv2-unsupported", "mrv2_unsupported_features",
             "MRv2 does not yet support {feature}: the default falls back to MRv1"),
        Rule("mrv2-refuses", "mrv2_validation_raises",
             "MRv2 forced on but does not yet support {feature}: vLLM raises ValueError at "
             "startup"),
        Rule("mrv2-mtp", "mrv2_supports_mtp", "MRv2 supports the speculative method"),
        Rule("mrv2-counts", "mrv2_counts_on_gpu",
             "MRv2 keeps num_accepted_tokens_gpu on the GPU by request slot, no D2H copy: "
             "policy mrv2"),
        Rule("mrv2-snapshot", "mrv2_align_snapshot",
             "align: run_fused_postprocess_align copies the counts into a device snapshot "
             "before the fused kernel reads them (#50432); stream-ordered on the GPU, no host "
             "copy"),
        Rule("v1-removed", "v1_env_raises",
             "the V1 model runner is removed (no gpu_model_runner.py, gpu_input_batch.py, "
             "preprocess_mamba or postprocess_mamba_align_gpu): VLLM_USE_V2_MODEL_RUNNER other "
             "than 1 raises 'Model Runner V1 has been removed'; MRv2 is the only runner"),
        Rule("v1-removed-env1", "v1_env_raises",
             "VLLM_USE_V2_MODEL_RUNNER=1 is redundant (vLLM logs a warning): Model Runner V1 "
             "has been removed, MRv2 is the only runner"),
        Rule("runner-refuses", "model_runner_validation_raises",
             "the model runner does not support {feature}: vLLM raises ValueError at startup "
             "(_validate_model_runner), with no V1 runner to fall back to"),
        Rule("sync-path", "nonalign_d2h_into_input_batch",
             "async scheduling off: sample_tokens blocks, the D2H has landed before "
             "_update_states: policy async-off"),
        Rule("pre-45100", "unguarded_sync",
             "no #45100 guard: every step waits on the event and gathers from the moved "
             "InputBatch buffer"),
        Rule("guard-45100", "guard_45100",
             "#45100 guard: the CPU counts are read only with async off or mamba_cache_mode "
             "align; async + non-align fills 1 and the device kernel repairs drafted rows"),
        Rule("d2h-nonalign", "nonalign_d2h_into_input_batch",
             "the non-align D2H lands non-blocking in the row-indexed InputBatch buffer"),
        Rule("d2h-align", "align_d2h_into_input_batch",
             "the align D2H (postprocess_mamba_align_gpu) lands non-blocking in the row-indexed "
             "InputBatch buffer"),
        Rule("patch-51599", "pr:51599",
             "patched with PR #51599: the D2H targets a runner-private buffer no row move "
             "touches: policy private-buffer"),
        Rule("patch-53919", "pr:53919",
             "patched with PR #53919: wait on the event before the first row move: policy "
             "sync-before-moves"),
        Rule("ascend-main", "ascend.main_gather",
             "vllm-ascend main: event wait + gather from the moved InputBatch buffer, no #45100 "
             "guard"),
        Rule("ascend-kernel", "ascend.main_correction_kernel",
             "vllm-ascend: the device correction kernel repairs rows that had drafts"),
        Rule("ascend-align", "ascend.main_align_resync",
             "vllm-ascend align: preprocess_mamba consumes the CPU counts and re-syncs them to "
             "the device: policy align"),
        Rule("ascend-13865", "ascend.pr13865",
             "vllm-ascend #13865: the async D2H goes to the runner's own buffer and is remapped: "
             "policy ascend-13865"),
        Rule("ascend-release-vllm", "ascend.post1_vllm",
             "vllm-ascend 0.23.0.post1 is built against vLLM {value}"),
        Rule("ascend-post1-buffer", "ascend.post1_private_buffer",
             "vllm-ascend 0.23.0.post1 ships #13865: with async scheduling the align D2H lands "
             "in the runner's own num_accepted_tokens.cpu, not the InputBatch's"),
        Rule("ascend-post1-remap", "ascend.post1_remap",
             "vllm-ascend 0.23.0.post1: after the event wait the private counts are remapped "
             "through prev_positions, no gather from the moved InputBatch buffer: policy "
             "ascend-13865"),
    )
}  # fmt: skip


def fact_value(rule: Rule, version: str) -> object:
    if rule.fact.startswith("ascend."):
        return ASCEND[rule.fact.removeprefix("ascend.")].value
    if rule.fact.startswith("pr:"):
        return True
    return FACTS[rule.fact][version].value


def fire(rule_id: str, version: str, **fmt: object) -> Fired:
    """The trace line of ``rule_id`` in ``version``, citing where the release says so."""
    rule = RULES[rule_id]
    value = fact_value(rule, version)
    if isinstance(value, tuple):
        value = list(value)
    says = rule.says.format(value=value, **fmt)
    if rule.fact.startswith("ascend."):
        cite = ASCEND[rule.fact.removeprefix("ascend.")].cite()
    elif rule.fact.startswith("pr:"):
        cite = f"vllm-project/vllm PR #{rule.fact.removeprefix('pr:')}, not in any release"
    else:
        cite = FACTS[rule.fact][version].cite(version)
    return Fired(rule_id, says, cite)
