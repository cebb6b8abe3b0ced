"""Configuration -> code path, for every release, against an oracle written from the sources.

The oracle below is a second, hand-written statement of what was read in the release wheels
(docs/versions.md): prefix caching is on by default for hybrid models from 0.28.0; prefix
caching on makes Qwen3.5/Qwen3-Next use mamba_cache_mode align; MRv2 is the default for
them from 0.29.0; 0.23.0 and 0.24.0's MRv2 refuses align; async is on by default with MTP;
0.23.0 has no #45100 guard. It shares no code with sim.resolve.
"""

from __future__ import annotations

import itertools

import pytest

from sim.errors import SpecraceError
from sim.resolve.release_facts import FACTS, RELEASES
from sim.resolve.resolution import VllmSetup, resolve
from sim.resolve.rules import RULES


def _v(s: str) -> tuple[int, ...]:
    return tuple(int(p) for p in s.split("."))


def oracle(v: str, runner: str, pc: str, async_: str) -> str:
    pc_on = pc == "on" or (pc == "default" and _v(v) >= (0, 28, 0))
    align = pc_on
    if runner == "v2" and align and v in ("0.23.0", "0.24.0"):
        return "error"
    v2 = runner == "v2" or (runner == "auto" and _v(v) >= (0, 29, 0))
    if v2:
        return "mrv2"
    if async_ == "off":
        return "async-off"
    if align:
        return "align"
    return "synced-gather" if v == "0.23.0" else "device-authoritative"


GRID = list(
    itertools.product(RELEASES, ("v1", "v2", "auto"), ("on", "off", "default"),
                      ("on", "off", "default"))
)  # fmt: skip


@pytest.mark.parametrize(("v", "runner", "pc", "async_"), GRID)
def test_every_release_runner_prefix_caching_async(v, runner, pc, async_) -> None:
    setup = VllmSetup(vllm=v, runner=runner, prefix_caching=pc, async_scheduling=async_)
    want = oracle(v, runner, pc, async_)
    if want == "error":
        with pytest.raises(SpecraceError, match="does not yet support hybrid/mamba models"):
            resolve(setup)
        return
    assert resolve(setup).policy == want


def test_the_engineers_question_and_its_neighbours() -> None:
    """Pinned by hand: 0.27.1 with defaults is not on the align path (prefix caching is
    opt-in for hybrids until 0.28.0); 0.28.0 is; 0.29.0 moves to MRv2."""
    assert resolve(VllmSetup(vllm="0.27.1")).policy == "device-authoritative"
    assert resolve(VllmSetup(vllm="0.27.1", prefix_caching="on")).policy == "align"
    assert resolve(VllmSetup(vllm="0.28.0")).policy == "align"
    assert resolve(VllmSetup(vllm="0.29.0")).policy == "mrv2"
    assert resolve(VllmSetup(vllm="0.29.0", runner="v1")).policy == "align"
    assert resolve(VllmSetup(vllm="0.23.0")).policy == "synced-gather"


def test_every_fired_rule_cites_a_release_line() -> None:
    for v in RELEASES:
        for pc, runner in itertools.product(("on", "off"), ("v1", "auto")):
            res = resolve(VllmSetup(vllm=v, prefix_caching=pc, runner=runner))
            assert res.fired
            for f in res.fired:
                rule = RULES[f.rule]
                if rule.fact in FACTS:
                    fact = FACTS[rule.fact][v]
                    assert f.cite == f"vllm {v} {fact.file}:{fact.line}" and fact.line > 0


def test_mamba_cache_mode_rules() -> None:
    # 'all' falls back to align for Qwen through 0.31.0 and is rejected from 0.32.0.
    r = resolve(VllmSetup(vllm="0.31.0", runner="v1", prefix_caching="on", mamba_cache_mode="all"))
    assert r.mamba_cache_mode == "align" and "all-to-align" in [f.rule for f in r.fired]
    with pytest.raises(SpecraceError, match="'all' was removed"):
        resolve(VllmSetup(vllm="0.32.0", prefix_caching="on", mamba_cache_mode="all"))
    # align without prefix caching is set back to none: the #45100 path.
    r = resolve(VllmSetup(vllm="0.28.0", prefix_caching="off", mamba_cache_mode="align"))
    assert r.mamba_cache_mode == "none" and r.policy == "device-authoritative"


def test_mrv2_fallbacks_and_refusals() -> None:
    feature = "dual batch overlap"
    r = resolve(VllmSetup(vllm="0.29.0", mrv2_unsupported=(feature,)))
    assert r.runner == "v1" and r.policy == "align"
    assert "mrv2-unsupported" in [f.rule for f in r.fired]
    with pytest.raises(SpecraceError, match="raises ValueError"):
        resolve(VllmSetup(vllm="0.29.0", runner="v2", mrv2_unsupported=(feature,)))
    with pytest.raises(SpecraceError, match="not in vLLM 0.33.0's list"):
        resolve(VllmSetup(vllm="0.33.0", mrv2_unsupported=("stock torch.compile",)))
    # 0.33.0 names DBO through _get_dbo_unsupported_features: still a fallback.
    assert resolve(VllmSetup(vllm="0.33.0", mrv2_unsupported=(feature,))).runner == "v1"
    assert resolve(VllmSetup(vllm="0.33.0", env_v2="0")).policy == "align"


def test_patches_and_ascend() -> None:
    assert resolve(VllmSetup(vllm="0.28.0", patches=("51599",))).policy == "private-buffer"
    assert resolve(VllmSetup(vllm="0.28.0", patches=("53919",))).policy == "sync-before-moves"
    r = resolve(VllmSetup(vllm="0.27.1", patches=("51599",)))
    assert r.policy == "device-authoritative" and "changes only a path" in r.notes[0]
    asc = VllmSetup(vllm="0.28.0", platform="ascend")
    assert resolve(asc).policy == "align"
    assert resolve(VllmSetup(vllm="0.27.1", platform="ascend")).policy == "ascend-main"
    fixed = VllmSetup(
        vllm="0.23.0", platform="ascend", prefix_caching="on", ascend_branch="v0.23.0"
    )
    assert resolve(fixed).policy == "ascend-13865"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"vllm": "0.26.1"}, "unknown release"),
        ({"vllm": "0.22.1"}, "too old"),
        ({"vllm": "latest"}, "not a version"),
        ({"model": "llama-3"}, "unknown model preset"),
        ({"runner": "v1", "env_v2": "1"}, "contradicts VLLM_USE_V2_MODEL_RUNNER=1"),
        ({"spec_method": "none", "num_speculative_tokens": 3}, "k must be 0"),
        ({"patches": ("12345",)}, "known patches"),
        ({"platform": "ascend", "runner": "v2"}, "not modelled"),
        ({"platform": "ascend", "ascend_branch": "v0.23.0"}, "runs on vLLM 0.23.0"),
        ({"max_num_seqs": 64, "max_num_batched_tokens": 100}, "must hold"),
    ],
)
def test_bad_setups_raise_one_clear_error(kwargs: dict, match: str) -> None:
    with pytest.raises(SpecraceError, match=match):
        resolve(VllmSetup(**kwargs))
