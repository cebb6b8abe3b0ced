"""sim.resolve's rules against the release they cite: every fact read again from its source.

Runs in the conformance environment on the release of VLLM_VERSION (or
SPECRACE_VLLM_VERSION): ``make conformance``; for every release, ``all_releases.sh``
(``make conformance-all``) runs the same comparison and writes data/conformance/releases.json.
A fact fails when the release's code no longer says what sim.resolve relies on: the #45100
guard's truth table, the D2H targets of the align and non-align branches, the prefix-caching
default for hybrid models, what prefix caching makes of mamba_cache_mode, the MRv2 default,
``all`` in the MambaCacheMode Literal, 0.34.0's removal of the V1 runner, ...
(release_rules.FINDERS), or when it moved line.

The other releases' wheels (about 240 MB each) are not downloaded here, to keep this suite
fast: the committed releases.json (every release's read by all_releases.sh) must agree with
release_facts.json fact by fact, and every release whose tree is already unpacked in .cache
(fetch_release.sh, all_releases.sh) is read again. vllm-ascend likewise: ascend.json, and the
0.23.0.post1 sdist when fetch_ascend.sh has cached it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import REPO, VLLM_TREE, VLLM_VERSION
from release_rules import FINDERS, compare

from sim.resolve.release_facts import ASCEND, ASCEND_RELEASE, FACTS, LAST_V1_RELEASE, RELEASES

CACHE = REPO / ".cache"
RELEASES_JSON = REPO / "data" / "conformance" / "releases.json"
ASCEND_JSON = REPO / "data" / "conformance" / "ascend.json"
ASCEND_SDIST = CACHE / "wheels" / f"vllm_ascend-{ASCEND_RELEASE}.tar.gz"


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


# -- every release: the committed read, and a fresh one where the tree is cached --------------
def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def test_committed_read_of_every_release_agrees_with_the_facts() -> None:
    """data/conformance/releases.json is all_releases.sh's read of every wheel: it holds every
    modelled release (14: 0.23.0 ... 0.34.0), every fact checked and held in each, with the
    value, file and line release_facts.json has now."""
    releases = json.loads(RELEASES_JSON.read_text())["releases"]
    assert list(releases) == list(RELEASES) and len(releases) == 14
    for v, rel in releases.items():
        assert rel["all_held"], f"{v}: a premise did not hold when last read"
        assert set(rel["facts"]) == set(FINDERS), f"{v}: not every fact was checked"
        for name, row in rel["facts"].items():
            want = FACTS[name][v]
            got = (row["value"], row["file"], row["line"], row["held"])
            assert got == (_plain(want.value), want.file, want.line, True), (
                f"{v} {name}: releases.json has {got[:3]}, release_facts.json "
                f"{(want.value, want.file, want.line)}: run make conformance-all"
            )


def test_0_34_0_premises_that_no_longer_hold_are_checked_facts() -> None:
    """0.34.0 as read from its wheel: no V1 runner, no InputBatch, no V1 align producer or
    consumer; VLLM_USE_V2_MODEL_RUNNER other than 1 raises; an unsupported feature raises."""
    facts = json.loads(RELEASES_JSON.read_text())["releases"]["0.34.0"]["facts"]
    gone = (
        ("v1_runner_present", "vllm/v1/worker/gpu_model_runner.py"),
        ("v1_input_batch_present", "vllm/v1/worker/gpu_input_batch.py"),
        ("v1_preprocess_mamba_present", "vllm/v1/worker/mamba_utils.py"),
        ("v1_postprocess_align_present", "vllm/v1/worker/mamba_utils.py"),
    )
    for name, rel in gone:
        assert (facts[name]["value"], facts[name]["file"], facts[name]["line"]) == (False, rel, 0)
    env = facts["v1_env_raises"]
    assert (env["file"], env["line"]) == ("vllm/platforms/interface.py", 1481)
    assert "Model Runner V1 has been removed" in env["value"]
    raises = facts["model_runner_validation_raises"]
    assert (raises["value"], raises["file"], raises["line"]) == (True, "vllm/config/vllm.py", 3459)
    assert facts["mrv2_counts_on_gpu"]["value"] and facts["mrv2_align_snapshot"]["value"]
    assert LAST_V1_RELEASE == "0.33.0"


@pytest.mark.parametrize("version", RELEASES)
def test_cached_release_read_again(version: str) -> None:
    """Each release whose tree fetch_release.sh has already unpacked, read again now."""
    tree = CACHE / f"vllm-{version}"
    if not (tree / f"vllm-{version}.dist-info" / "RECORD").is_file():
        pytest.skip(f"vLLM {version} not unpacked in .cache (tests/conformance/fetch_release.sh)")
    result = compare(tree)
    assert result["version"] == version
    bad = {k: (v["source"], v["expected"]) for k, v in result["facts"].items() if not v["held"]}
    assert not bad, f"vLLM {version}: facts no longer hold: {bad}"


def test_a_release_without_the_v1_runner_reads_as_0_34_0(tmp_path) -> None:
    """The absence facts can fail: the pinned release's tree with the V1 runner's files
    removed and the V1 functions renamed reads as 0.34.0 does."""
    from release_rules import GMR, INPUT_BATCH, MAMBA_UTILS, Tree

    t = Tree(VLLM_TREE)
    assert all(FINDERS[n](t).value for n in ("v1_runner_present", "v1_input_batch_present",
                                             "v1_preprocess_mamba_present",
                                             "v1_postprocess_align_present"))  # fmt: skip
    assert FINDERS["v1_env_raises"](t).value is None
    text = (VLLM_TREE / MAMBA_UTILS).read_text()
    (tmp_path / MAMBA_UTILS).parent.mkdir(parents=True)
    (tmp_path / MAMBA_UTILS).write_text(
        text.replace("def preprocess_mamba(", "def _gone_a(").replace(
            "def postprocess_mamba_align_gpu(", "def _gone_b("
        )
    )
    gone = Tree(tmp_path)
    for name in ("v1_runner_present", "v1_input_batch_present", "v1_preprocess_mamba_present",
                 "v1_postprocess_align_present"):  # fmt: skip
        found = FINDERS[name](gone)
        assert (found.value, found.line) == (False, 0), name
    assert FINDERS["guard_45100"](gone).value is None and not (tmp_path / GMR).exists()
    assert not (tmp_path / INPUT_BATCH).exists()


def test_the_v1_refusal_finder_can_fail(tmp_path) -> None:
    from release_rules import PLATFORM, Tree, v1_env_raises

    tree = CACHE / "vllm-0.34.0"
    if not (tree / PLATFORM).is_file():
        pytest.skip("vLLM 0.34.0 not unpacked in .cache (tests/conformance/fetch_release.sh)")
    assert v1_env_raises(Tree(tree)).line == FACTS["v1_env_raises"]["0.34.0"].line
    text = (tree / PLATFORM).read_text()
    assert 'if value != "1":' in text
    (tmp_path / PLATFORM).parent.mkdir(parents=True)
    (tmp_path / PLATFORM).write_text(text.replace('if value != "1":', 'if value == "never":'))
    assert v1_env_raises(Tree(tmp_path)).value is None


# -- vllm-ascend by release -------------------------------------------------------------------
def test_committed_ascend_reads_cover_every_ascend_fact() -> None:
    """ascend.json: the release's facts read from its PyPI sdist, the commit facts from a
    clone; what neither checked is stated as taken from the reference (main's runner class)."""
    data = json.loads(ASCEND_JSON.read_text())
    assert data["all_held"]
    release = data["releases"][ASCEND_RELEASE]
    assert release["all_held"]
    for name, fact in ASCEND.items():
        if fact.source == "sdist":
            assert release["facts"][name]["held"] and release["facts"][name]["cited"] == fact.lines
        elif name in data["facts"]:
            assert data["facts"][name]["held"] and data["facts"][name]["cited"] == fact.lines
        else:
            assert fact.source == "reference", f"{name}: checked nowhere"


def test_ascend_release_read_again_from_its_sdist(tmp_path) -> None:
    from ascend_rules import RUNNER, compare_sdist, private_buffer, sdist_files

    if not ASCEND_SDIST.is_file():
        pytest.skip(f"{ASCEND_SDIST.name} not in .cache (tests/conformance/fetch_ascend.sh)")
    result = compare_sdist(ASCEND_SDIST)
    assert result["version"] == ASCEND_RELEASE and result["all_held"], result
    # The check can fail: #13865 undone (the D2H back into the InputBatch's tensor).
    import ast

    text = sdist_files(ASCEND_SDIST)[RUNNER]
    mine, shared = "self.num_accepted_tokens.cpu", "self.input_batch.num_accepted_tokens_cpu_tensor"
    undone = text.replace(f"num_accepted_tokens_cpu_tensor={mine}",
                          f"num_accepted_tokens_cpu_tensor={shared}")  # fmt: skip
    assert undone != text and private_buffer(ast.parse(undone)) == 0
