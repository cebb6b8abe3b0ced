"""Configuration -> code path, for every release, against an oracle written from the sources.

The oracle below is a second, hand-written statement of what was read in the release wheels
(docs/versions.md): prefix caching is on by default for hybrid models from 0.28.0; prefix
caching on makes Qwen3.5/Qwen3-Next use mamba_cache_mode align; MRv2 is the default for
them from 0.29.0; 0.23.0 and 0.24.0's MRv2 refuses align; async is on by default with MTP;
0.23.0 has no #45100 guard; 0.34.0 has no V1 runner and refuses VLLM_USE_V2_MODEL_RUNNER=0.
It shares no code with sim.resolve.
"""

from __future__ import annotations

import itertools

import pytest

from sim.errors import SpecraceError
from sim.model.policies import NO_SPEC
from sim.resolve.release_facts import ASCEND, FACTS, LAST_V1_RELEASE, RELEASES
from sim.resolve.resolution import VllmSetup, resolve
from sim.resolve.rules import RULES


def _v(s: str) -> tuple[int, ...]:
    return tuple(int(p) for p in s.split("."))


def oracle(v: str, runner: str, pc: str, async_: str) -> str:
    if _v(v) >= (0, 34, 0):  # the V1 runner is gone: MRv2 or nothing
        return "error-v1" if runner == "v1" else "mrv2"
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
    if want == "error-v1":
        with pytest.raises(SpecraceError, match="Model Runner V1 has been removed"):
            resolve(setup)
        return
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
            if runner == "v1" and v not in RELEASES[: RELEASES.index(LAST_V1_RELEASE) + 1]:
                continue  # refused (test_0_34_0_refuses_the_v1_runner)
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


# -- 0.34.0: the V1 runner is removed ---------------------------------------------------------
def test_the_v1_runner_is_in_every_release_but_0_34_0() -> None:
    """Checked facts (tests/conformance/release_rules.py, data/conformance/releases.json): the
    V1 files and functions exist through 0.33.0 and are absent in 0.34.0, where
    VLLM_USE_V2_MODEL_RUNNER other than 1 raises and an unsupported feature raises too."""
    assert RELEASES[-1] == "0.34.0" and LAST_V1_RELEASE == "0.33.0" and len(RELEASES) == 14
    for fact in ("v1_runner_present", "v1_input_batch_present", "v1_preprocess_mamba_present",
                 "v1_postprocess_align_present"):  # fmt: skip
        for v in RELEASES:
            f = FACTS[fact][v]
            assert (f.value, f.line > 0) == ((True, True) if v != "0.34.0" else (False, False))
    for fact in ("v1_env_raises", "model_runner_validation_raises"):
        assert [v for v in RELEASES if FACTS[fact][v].value] == ["0.34.0"]
    env = FACTS["v1_env_raises"]["0.34.0"]
    assert "Model Runner V1 has been removed" in env.value
    assert (env.file, env.line) == ("vllm/platforms/interface.py", 1481)
    validate = FACTS["model_runner_validation_raises"]["0.34.0"]
    assert (validate.file, validate.line) == ("vllm/config/vllm.py", 3459)
    # the V1 facts read absent in 0.34.0 (line 0), never a line of another file
    for fact in ("guard_45100", "align_d2h_into_input_batch", "nonalign_d2h_into_input_batch",
                 "spec_event", "mrv2_default_for_qwen", "mrv2_env_override"):  # fmt: skip
        assert FACTS[fact]["0.34.0"].line == 0 and not FACTS[fact]["0.34.0"].value


def test_0_34_0_takes_mrv2_with_its_rules_cited() -> None:
    r = resolve(VllmSetup(vllm="0.34.0", model="qwen3.5-27b", spec_method="mtp",
                          num_speculative_tokens=3))  # fmt: skip
    assert (r.policy, r.runner, r.mamba_cache_mode, r.async_scheduling) == (
        "mrv2", "v2", "align", True)  # fmt: skip
    assert [f.rule for f in r.fired] == [
        "pc-default",
        "pc-on-align",
        "v1-removed",
        "mrv2-mtp",
        "async-default",
        "mrv2-counts",
        "mrv2-snapshot",
    ]
    cites = {f.rule: f.cite for f in r.fired}
    assert cites["v1-removed"] == "vllm 0.34.0 vllm/platforms/interface.py:1481"
    assert cites["mrv2-counts"] == "vllm 0.34.0 vllm/v1/worker/gpu/model_states/mamba_hybrid.py:90"
    assert cites["mrv2-snapshot"] == "vllm 0.34.0 vllm/v1/worker/mamba_utils.py:1194"
    assert not r.notes  # nothing to fall back to: no warning
    # The same policy as 0.33.0's MRv2, which has #50432's snapshot too (mamba_utils.py:1272).
    mrv2_033 = resolve(VllmSetup(vllm="0.33.0", runner="v2"))
    assert mrv2_033.policy == r.policy and "mrv2-snapshot" in [f.rule for f in mrv2_033.fired]
    # Whatever the flags, one path; VLLM_USE_V2_MODEL_RUNNER=1 is redundant there.
    for kw in ({"prefix_caching": "off"}, {"async_scheduling": "off"}, {"runner": "v2"}):
        assert resolve(VllmSetup(vllm="0.34.0", **kw)).policy == "mrv2"
    assert "v1-removed-env1" in [
        f.rule for f in resolve(VllmSetup(vllm="0.34.0", env_v2="1")).fired
    ]
    nospec = resolve(VllmSetup(vllm="0.34.0", spec_method="none", num_speculative_tokens=0))
    assert nospec.policy == NO_SPEC and nospec.runner == "v2"


@pytest.mark.parametrize(
    ("kwargs", "given"),
    [({"runner": "v1"}, "--runner v1"), ({"env_v2": "0"}, "VLLM_USE_V2_MODEL_RUNNER=0"),
     ({"env_v2": "0", "spec_method": "none", "num_speculative_tokens": 0},
      "VLLM_USE_V2_MODEL_RUNNER=0")],
)  # fmt: skip
def test_0_34_0_refuses_the_v1_runner(kwargs: dict, given: str) -> None:
    """As vLLM 0.34.0 does (platforms/interface.py validate_environ), in one line naming the
    last release that still has the V1 runner."""
    with pytest.raises(SpecraceError) as err:
        resolve(VllmSetup(vllm="0.34.0", **kwargs))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{given}: vLLM 0.34.0 refuses to start")
    assert (
        "VLLM_USE_V2_MODEL_RUNNER=0 is no longer supported: Model Runner V1 has been removed" in msg
    )
    assert "vllm/platforms/interface.py:1481" in msg
    assert msg.endswith("0.33.0 is the last release with the V1 model runner")


def test_0_34_0_refuses_what_0_33_0_falls_back_from() -> None:
    feature = "dual batch overlap with hybrid models"
    assert resolve(VllmSetup(vllm="0.33.0", mrv2_unsupported=(feature,))).runner == "v1"
    with pytest.raises(SpecraceError, match=r"_validate_model_runner.*vllm/config/vllm.py:3459"):
        resolve(VllmSetup(vllm="0.34.0", mrv2_unsupported=(feature,)))
    with pytest.raises(SpecraceError, match="patch the V1 runner, which vLLM 0.34.0 removed"):
        resolve(VllmSetup(vllm="0.34.0", patches=("51599",)))
    with pytest.raises(SpecraceError, match="NPUModelRunner subclasses vLLM's V1 GPUModelRunner"):
        resolve(VllmSetup(vllm="0.34.0", platform="ascend"))


@pytest.mark.parametrize("v", ["0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_mrv2_by_default_warns_that_v1_is_racy(v: str) -> None:
    r = resolve(VllmSetup(vllm=v))
    assert r.policy == "mrv2" and r.runner == "v2"
    (warning,) = r.notes
    assert warning.startswith("warning: VLLM_USE_V2_MODEL_RUNNER=0 (or --runner v1)")
    assert f"puts vLLM {v} back on the V1 runner's align path, which is racy" in warning
    assert FACTS["align_d2h_into_input_batch"][v].cite(v) in warning
    # ... and it is true: V1 takes align there.
    assert resolve(VllmSetup(vllm=v, runner="v1")).policy == "align"
    # No warning where V1 would be safe, or on V1 itself.
    assert not resolve(VllmSetup(vllm=v, prefix_caching="off")).notes
    assert not resolve(VllmSetup(vllm=v, async_scheduling="off")).notes
    assert not resolve(VllmSetup(vllm=v, runner="v1")).notes


def test_mrv2_align_before_50432_says_what_is_not_modelled() -> None:
    r = resolve(VllmSetup(vllm="0.27.1", runner="v2", prefix_caching="on"))
    assert r.policy == "mrv2" and "mrv2-snapshot" not in [f.rule for f in r.fired]
    assert any("predates #50432" in n for n in r.notes)
    assert not any("#50432" in n for n in resolve(VllmSetup(vllm="0.28.0", runner="v2")).notes)


# -- vllm-ascend by release -------------------------------------------------------------------
def test_ascend_by_release() -> None:
    """0.23.0.post1 (PyPI sdist) ships #13865; main (as last seen 2026-08-22) is racy."""
    post1 = resolve(VllmSetup(vllm="0.23.0", platform="ascend", prefix_caching="on",
                              ascend_branch="0.23.0.post1"))  # fmt: skip
    assert post1.policy == "ascend-13865"
    cites = {f.rule: f.cite for f in post1.fired}
    assert cites["ascend-post1-buffer"] == (
        "vllm-ascend 0.23.0.post1 (PyPI sdist) vllm_ascend/worker/model_runner_v1.py:746-787"
    )
    assert cites["ascend-release-vllm"].endswith("Dockerfile:42")
    assert post1.notes[0].startswith("vllm-ascend 0.23.0.post1 (PyPI sdist")
    main = resolve(VllmSetup(vllm="0.23.0", platform="ascend", prefix_caching="on"))
    assert main.policy == "align"
    assert "main@182b75ea84 (as last seen 2026-08-22)" in {f.rule: f.cite for f in main.fired}[
        "ascend-main"]  # fmt: skip
    assert main.notes[0].startswith("vllm-ascend main (main@182b75ea84, as last seen 2026-08-22")
    assert "--ascend-branch 0.23.0.post1" in main.notes[0]
    assert resolve(VllmSetup(vllm="0.23.0", platform="ascend")).policy == "ascend-main"
    branch = resolve(VllmSetup(vllm="0.23.0", platform="ascend", ascend_branch="v0.23.0"))
    assert branch.policy == "ascend-13865"
    with pytest.raises(SpecraceError, match="runs on vLLM 0.23.0, not --vllm 0.27.1"):
        resolve(VllmSetup(vllm="0.27.1", platform="ascend", ascend_branch="0.23.0.post1"))
    assert ASCEND["main_gather"].source == "reference"
    assert {f.source for k, f in ASCEND.items() if k.startswith("post1_")} == {"sdist"}
