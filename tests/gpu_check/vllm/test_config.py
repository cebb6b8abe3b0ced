"""gpu_check.vllm.config: the run plan and the workload vllm-run feeds the engine."""

from __future__ import annotations

import pytest

from gpu_check.vllm.config import EngineConfig, RunConfig, parse_plan, workload


def test_plan_and_workload() -> None:
    plan = parse_plan("align,none", "align=16:0,16:8000;none=64")
    assert [c.name for c in plan["align"]] == ["s16_d0ms", "s16_d8ms"]
    assert [c.max_num_seqs for c in plan["none"]] == [64]
    assert list(parse_plan("none", "16")) == ["none"]
    with pytest.raises(ValueError):
        parse_plan("align", "fast=16")
    a, b = workload(RunConfig(num_requests=20)), workload(RunConfig(num_requests=20))
    assert a == b and all(4 <= len(r["prompt_token_ids"]) <= 703 for r in a)
    kw = EngineConfig(mamba_cache_mode="align").llm_kwargs("/m")
    assert kw["enable_prefix_caching"] and kw["async_scheduling"]
    assert not EngineConfig(mamba_cache_mode="none").llm_kwargs("/m")["enable_prefix_caching"]
