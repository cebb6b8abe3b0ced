"""sim.resolve's rules against the release they cite: every fact read again from its source.

Runs in the conformance environment on the release of VLLM_VERSION (or
SPECRACE_VLLM_VERSION): ``make conformance``; for every release, ``all_releases.sh``
(``make conformance-all``) runs the same comparison and writes data/conformance/releases.json.
A fact fails when the release's code no longer says what sim.resolve relies on: the #45100
guard's truth table, the D2H targets of the align and non-align branches, the prefix-caching
default for hybrid models, what prefix caching makes of mamba_cache_mode, the MRv2 default,
``all`` in the MambaCacheMode Literal, ... (release_rules.FINDERS), or when it moved line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import VLLM_TREE, VLLM_VERSION
from release_rules import FINDERS, compare

from sim.resolve.release_facts import FACTS, RELEASES


@pytest.fixture(scope="module")
def comparison() -> dict:
    return compare(VLLM_TREE)


def test_release_is_modelled() -> None:
    assert VLLM_VERSION in RELEASES, (
        f"vLLM {VLLM_VERSION} has no facts in sim/resolve/release_facts.json: read it with "
        f"tests/conformance/release_rules.py {VLLM_TREE} and add them"
    )


@pytest.mark.parametrize("fact", sorted(FINDERS))
def test_fact_holds_in_the_release_source(comparison: dict, fact: str) -> None:
    row = comparison["facts"][fact]
    assert row["held"], (
        f"vLLM {VLLM_VERSION}: {fact} (rules {', '.join(row['rules']) or '-'}) is "
        f"{row['source']} in the source, sim.resolve has {row['expected']}"
    )


def test_every_rule_fact_has_a_finder() -> None:
    assert set(FACTS) == set(FINDERS)


def _mutated(tmp_path, rel: str, old: str, new: str):
    from release_rules import Tree

    text = (VLLM_TREE / rel).read_text()
    assert old in text, f"{rel}: {old!r} not found to mutate"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text(text.replace(old, new, 1))
    return Tree(tmp_path)


def test_a_guard_that_also_skips_align_is_caught(tmp_path) -> None:
    """The check can fail: a #45100 guard that let async + align skip the CPU counts too
    (what #51599/#53919 aim at by other means) changes the guard's truth table."""
    from release_rules import guard, unguarded_sync

    if FACTS["guard_45100"][VLLM_VERSION].value is None:  # 0.23.0: the unguarded sync
        t = _mutated(tmp_path, "vllm/v1/worker/gpu_model_runner.py",
                     "self.num_accepted_tokens_event.synchronize()", "pass")  # fmt: skip
        assert unguarded_sync(t).value is False
        return
    t = _mutated(tmp_path, "vllm/v1/worker/gpu_model_runner.py",
                 'mamba_cache_mode != "align"', 'mamba_cache_mode != "never"')  # fmt: skip
    assert "async=True,mode=align" not in guard(t).value
    assert "async=True,mode=align" in FACTS["guard_45100"][VLLM_VERSION].value


def test_a_changed_prefix_caching_default_is_caught(tmp_path) -> None:
    from release_rules import ARG_UTILS, MODEL_CFG, prefix_caching_default_hybrid

    t = _mutated(
        tmp_path, ARG_UTILS, "default_prefix_caching = ", "default_prefix_caching = False and "
    )
    (tmp_path / MODEL_CFG).parent.mkdir(parents=True)
    (tmp_path / MODEL_CFG).write_text((VLLM_TREE / MODEL_CFG).read_text())
    assert prefix_caching_default_hybrid(t).value is False


ASCEND_GIT = os.environ.get("SPECRACE_ASCEND_GIT", "")


@pytest.mark.skipif(not ASCEND_GIT, reason="SPECRACE_ASCEND_GIT (a vllm-ascend clone) not set")
def test_ascend_facts_hold_in_vllm_ascend() -> None:
    from ascend_rules import compare as compare_ascend

    result = compare_ascend(Path(ASCEND_GIT))
    bad = {k: v for k, v in result["facts"].items() if not v["held"]}
    assert not bad, f"vllm-ascend facts no longer hold: {bad}"
