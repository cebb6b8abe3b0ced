"""The risk answer: rates with intervals, mitigations ranked, the check, the command line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from load import limit_s
from repo_root import ROOT

from sim.errors import SpecraceError
from sim.model.params import load_scenario
from sim.resolve.check import check_policy, check_scenario_policy
from sim.resolve.presets import PRESETS, get_preset
from sim.resolve.rates import simulate_rates, wilson
from sim.resolve.resolution import VllmSetup, resolve
from sim.resolve.risk import assess, build_scenario

# qwen35-mtp3's own GPU timing: the balanced regime, where the race happens.
BALANCED = {
    "timing.gpu_forward_ns_base": 6_000_000,
    "timing.gpu_forward_ns_per_token": 2_000,
    "timing.gpu_drafter_ns": 800_000,
}


def test_wilson_matches_hand_values() -> None:
    # 0 of n: upper bound z^2 / (n + z^2); 5 of 10 is symmetric about 1/2.
    z2 = 1.959963984540054**2
    assert wilson(0, 10) == (0.0, pytest.approx(z2 / (10 + z2)))
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(1 - hi) and lo == pytest.approx(0.2366, abs=1e-4)
    assert wilson(0, 0) == (0.0, 0.0)


def test_roofline_of_the_dense_preset_by_hand() -> None:
    t = get_preset("qwen3.5-27b").timing(64, 3)
    assert t["gpu_forward_ns_base"] == int(27e9 * 2 / 4.3e12 * 1e9)  # 54 GB at 4.3 TB/s
    assert t["gpu_forward_ns_per_token"] == int(2 * 27e9 / 788e12 * 1e9)
    # An MoE batch of 256 tokens, top-10 of 512 experts, touches 1 - (1 - 10/512)^256 of them.
    moe = get_preset("qwen3-next-80b-a3b")
    share = 1 - (1 - 10 / 512) ** 256
    assert moe.weight_bytes_per_step(256) == pytest.approx((3e9 + 77e9 * share) * 1.0)
    with pytest.raises(SpecraceError, match="unknown model preset"):
        get_preset("gpt-2")
    assert set(PRESETS) >= {"qwen3.5-27b", "qwen3-next-80b-a3b", "qwen3.6-35b-a3b"}


def test_scenario_follows_the_resolution_and_the_overrides() -> None:
    res = resolve(VllmSetup(vllm="0.28.0", max_num_seqs=4, num_speculative_tokens=5))
    sc = build_scenario(res, {"timing.gpu_drafter_ns": 123})
    assert sc.engine.max_num_seqs == 4 and sc.engine.num_speculative_tokens == 5
    assert sc.engine.mamba_cache_mode == "align" and sc.engine.async_scheduling
    assert sc.workload.initial_requests == 4 and len(sc.workload.acceptance_probs) == 5
    assert sc.timing.gpu_drafter_ns == 123
    assert (
        sc.timing.gpu_forward_ns_base
        == get_preset("qwen3.5-27b").timing(4, 5)["gpu_forward_ns_base"]
    )
    h200 = load_scenario("qwen35-mtp3", timing_files=("h200",))
    assert sc.timing.dma_land_delay_ns == h200.timing.dma_land_delay_ns


@pytest.fixture(scope="module")
def align_report():
    return assess(VllmSetup(vllm="0.28.0"), BALANCED, seeds=2, steps=600)


def test_align_in_the_balanced_regime_corrupts_and_every_fix_ranks_above(align_report) -> None:
    rep = align_report
    e = rep.estimate
    assert rep.resolution.policy == "align" and e.corrupted > 0
    assert e.per_10k_lo < e.per_10k < e.per_10k_hi
    assert e.generations > 0 and e.runs == 2 and e.steps == 1200
    assert sum(e.by_kind.values()) == e.gpu_wrong
    names = [m.name for m in rep.mitigations]
    assert {"async scheduling off", "prefix caching off", "model runner V2"} <= set(names)
    available = [m for m in rep.mitigations if m.available]
    safe = [m.estimate.safe for m in available]
    assert safe == sorted(safe, reverse=True)  # safe ones first
    # Among the safe ones: those whose every cost the model has first, cheapest first; a cost
    # the model lacks (MRv2's own CPU costs, lost prefix-cache hits) is unknown, not zero.
    known = [m.cost_unknown == "" for m in available if m.estimate.safe]
    assert known == sorted(known, reverse=True)
    tok = [m.estimate.tokens_per_s for m in available if m.estimate.safe and not m.cost_unknown]
    assert tok == sorted(tok, reverse=True)  # cheapest safe first
    by = {m.name: m for m in rep.mitigations}
    assert by["model runner V2"].estimate.policy == "mrv2"
    assert "MRv2's own CPU costs" in by["model runner V2"].cost_unknown
    assert "prefix-cache hits" in by["prefix caching off"].cost_unknown
    assert not by["async scheduling off"].cost_unknown
    assert by["async scheduling off"].tokens_per_s_pct < 0  # sync costs throughput


def test_same_inputs_same_report(align_report) -> None:
    again = assess(VllmSetup(vllm="0.28.0"), BALANCED, seeds=2, steps=600)
    assert json.dumps(again.to_dict(), sort_keys=True) == json.dumps(
        align_report.to_dict(), sort_keys=True
    )


def test_check_policy_says_one_line() -> None:
    align = resolve(VllmSetup(vllm="0.28.0"))
    msg = check_policy(align, "synced-gather")
    assert msg and "\n" not in msg and "policy align" in msg
    assert check_policy(align, "align") is None and check_policy(align, "all") is None
    assert "--patch 51599" in check_policy(align, "private-buffer")
    off = resolve(VllmSetup(vllm="0.28.0", async_scheduling="off"))
    assert "one row, not one per policy" in check_policy(off, "all")
    sc = load_scenario("qwen35-mtp3")
    assert check_scenario_policy(sc.engine, "device-authoritative") is None
    assert "contradicts" in check_scenario_policy(sc.engine, "align")


def _risk(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sim", "risk", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=limit_s(120),
    )


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (("--vllm", "0.26.1"), "unknown release"),
        (("--vllm", "0.20.0"), "too old"),
        (("--model", "qwen9-1t"), "unknown model preset"),
        (("--runner", "v1", "--vllm-use-v2-model-runner", "1"), "contradicts"),
        (("--vllm", "0.24.0", "--runner", "v2", "--prefix-caching", "on"), "does not yet support"),
        (("--vllm", "0.28.0", "--policy", "synced-gather"), "contradicts vLLM 0.28.0"),
        (("--async", "off", "--policy", "align"), "async scheduling is off"),
        (("--vllm", "0.33.0", "--prefix-caching", "on", "--mamba-cache-mode", "all"), "removed"),
        (("--spec", "mtp"), "expected METHOD:K"),
        (("--set", "timing.nope=1"), "--set timing.nope: unknown key"),
        (("--gpu-timing", "fast"), "expected roofline or balanced"),
        (("--vllm", "0.34.0", "--runner", "v1"), "0.33.0 is the last release with the V1"),
        (("--vllm", "0.34.0", "--vllm-use-v2-model-runner", "0"), "Model Runner V1 has been"),
        (("--vllm", "0.34.0", "--platform", "ascend"), "which 0.34.0 removed"),
        (
            ("--vllm", "0.27.1", "--platform", "ascend", "--ascend-branch", "0.23.0.post1"),
            "runs on vLLM 0.23.0",
        ),
    ],
)
def test_cli_bad_input_one_line_exit_2(argv: tuple[str, ...], match: str) -> None:
    r = _risk(*argv, "--seeds", "1", "--steps", "50")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_cli_answers_with_the_path_the_rules_and_json() -> None:
    r = _risk("--vllm", "0.27.1", "--seeds", "1", "--steps", "200", "--json")
    assert r.returncode == 0, r.stderr
    assert "policy device-authoritative" in r.stdout
    assert "vllm 0.27.1 vllm/engine/arg_utils.py:2604" in r.stdout
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["policy"] == "device-authoritative" and out["estimate"]["runs"] == 1
    assert math.isclose(out["estimate"]["per_10k"], 0.0)


def test_the_answer_line(align_report) -> None:
    first = next(m for m in align_report.mitigations if m.available and m.estimate.safe)
    assert align_report.answer.startswith(first.name)
    assert not align_report.safe_by_construction
    da = assess(VllmSetup(vllm="0.27.1"), seeds=1, steps=100, mitigations=False)
    assert da.safe_by_construction and "safe by construction" in da.answer
    nospec = assess(VllmSetup(spec_method="none", num_speculative_tokens=0), seeds=1, steps=50)
    assert nospec.estimate is None and "no speculative decoding" in nospec.answer


def test_balanced_gpu_timing_is_the_scenarios_own() -> None:
    a = assess(VllmSetup(vllm="0.28.0"), gpu_timing="balanced", seeds=1, steps=200,
               mitigations=False)  # fmt: skip
    b = assess(VllmSetup(vllm="0.28.0"), BALANCED, seeds=1, steps=200, mitigations=False)
    assert a.estimate == b.estimate and a.scenario.timing == b.scenario.timing
    assert a.scenario.timing.gpu_forward_ns_base == 6_000_000


def test_the_vector_and_simpy_tiers_give_the_same_estimate(align_report) -> None:
    """The default tier (vector) against the reference, on a configuration with wrong reads
    of more than one kind, and with async off (the synchronous path)."""
    ref = assess(VllmSetup(vllm="0.28.0"), BALANCED, seeds=2, steps=600, engine="simpy")
    assert align_report.estimate.gpu_wrong > 0 and len(align_report.estimate.by_kind) >= 1
    assert align_report.to_dict() == ref.to_dict()
    for setup in (VllmSetup(vllm="0.23.0"), VllmSetup(vllm="0.28.0", async_scheduling="off")):
        vec = assess(setup, BALANCED, seeds=1, steps=300, mitigations=False)
        ref = assess(setup, BALANCED, seeds=1, steps=300, mitigations=False, engine="simpy")
        assert vec.to_dict() == ref.to_dict()


def test_estimates_share_the_schedules_they_have_in_common(monkeypatch) -> None:
    """A schedule is timing-free: the base and the mitigations that keep the engine and the
    workload (model runner V2 here) run on the same schedules, built once per seed; the same
    estimates as each one simulated on its own."""
    import sim.resolve.rates as rates
    import sim.resolve.risk as risk

    built: list[tuple] = []
    real = rates.build_schedule

    def counting(sc, seed, steps):
        built.append((sc.engine, sc.workload, seed, steps))
        return real(sc, seed, steps)

    monkeypatch.setattr(rates, "build_schedule", counting)
    shared = assess(VllmSetup(vllm="0.28.0"), seeds=2, steps=60)
    assert len(built) == len(set(built))  # nothing built twice
    estimates = 1 + sum(m.estimate is not None for m in shared.mitigations)
    assert len(built) < 2 * estimates  # some estimate ran on schedules it did not build
    base = risk.resolve(VllmSetup(vllm="0.28.0"))
    alone = simulate_rates(risk.build_scenario(base), risk.policy_object(base.policy), 2, 60)
    assert alone == shared.estimate  # without a cache: on schedules of its own


def test_the_report_is_the_same_on_worker_processes() -> None:
    """The runs spread over processes (units of a seed and the estimates that share its
    schedule) pool in seed order: the report does not depend on the number of workers."""
    one = assess(VllmSetup(vllm="0.28.0"), BALANCED, seeds=3, steps=120, workers=1)
    assert one.estimate is not None and one.estimate.corrupted > 0  # a rate worth comparing
    three = assess(VllmSetup(vllm="0.28.0"), BALANCED, seeds=3, steps=120, workers=3)
    assert json.dumps(three.to_dict()) == json.dumps(one.to_dict())


def test_cli_answers_0_34_0_with_mrv2_and_its_wheel_lines() -> None:
    r = _risk("--vllm", "0.34.0", "--model", "qwen3.5-27b", "--spec", "mtp:3", "--seeds", "1",
              "--steps", "100", "--no-mitigations", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "code path: MRV2, async, prefix caching on, mamba_cache_mode=align -> policy mrv2" in out
    for cite in ("vllm 0.34.0 vllm/platforms/interface.py:1481",
                 "vllm 0.34.0 vllm/v1/worker/gpu/model_states/mamba_hybrid.py:90",
                 "vllm 0.34.0 vllm/v1/worker/mamba_utils.py:1194"):  # fmt: skip
        assert cite in out
    assert "warning:" not in out and "safe by construction" in out
    rep = json.loads(out.strip().splitlines()[-1])
    assert rep["policy"] == "mrv2" and rep["runner"] == "v2"


def test_risk_on_0_33_0_warns_that_v1_is_racy() -> None:
    rep = assess(VllmSetup(vllm="0.33.0"), seeds=1, steps=60, mitigations=False)
    assert rep.resolution.policy == "mrv2" and rep.safe_by_construction
    assert rep.resolution.notes[0].startswith("warning: VLLM_USE_V2_MODEL_RUNNER=0")
    assert rep.to_dict()["notes"] == list(rep.resolution.notes)


def test_risk_on_ascend_names_the_release_and_offers_it() -> None:
    """vllm-ascend main (racy) on vLLM 0.23.0: the PyPI release 0.23.0.post1 (#13865) is the
    change that removes the race; resolved, it is ascend-13865."""
    setup = VllmSetup(vllm="0.23.0", platform="ascend", prefix_caching="on", max_num_seqs=8)
    rep = assess(setup, BALANCED, seeds=1, steps=120)
    assert rep.resolution.policy == "align" and "vllm-ascend main" in rep.resolution.notes[0]
    by = {m.name: m for m in rep.mitigations}
    fix = by["vllm-ascend 0.23.0.post1 (#13865)"]
    assert fix.change == "pip install vllm-ascend==0.23.0.post1"
    assert fix.available and fix.estimate.policy == "ascend-13865" and fix.estimate.safe
    assert "vllm-ascend 0.23.0.post1 (PyPI sdist" in fix.reason


def test_a_safe_path_gets_its_verdict_first_and_no_mitigations() -> None:
    """0.27.1's default reads no CPU-side count: the timing-free verdict says so, and no
    mitigation (async off, -10 %) is offered for a path that needs none."""
    rep = assess(VllmSetup(vllm="0.27.1"), seeds=1, steps=100)
    assert rep.verdict.startswith("verdict: not racy") and rep.safe_by_construction
    assert rep.mitigations == () and rep.band is None


def test_the_band_over_host_speeds_flags_the_boundary_and_the_users_gauge() -> None:
    """0.28.0 align under roofline timing: GPU-bound at the scenario's host speed, exposed at the
    slow end of the plausible range, so the band reaches the CPU-bound rate; a user's gauge is
    a host factor over the scenario's own sample_tokens span."""
    from sim.resolve.host_band import PLAUSIBLE, factor_of_gauge

    rep = assess(VllmSetup(vllm="0.28.0"), seeds=2, steps=600, mitigations=False,
                 host_gauge_ms=2.0)  # fmt: skip
    b = rep.band
    assert rep.verdict.startswith("verdict: RACY path (policy align)")
    assert b is not None and b.cpu_bound.corrupted > 0
    slowest = b.estimates[b.factors.index(PLAUSIBLE[1])]
    assert b.estimates[b.factors.index(1.0)].per_10k <= slowest.per_10k
    lo, hi = b.range_per_10k()
    if b.boundary:
        assert hi >= b.cpu_bound.per_10k  # up to the CPU-bound rate
    assert b.exposed == any(e.corrupted > 0 for _f, e in b.plausible()) or b.user.corrupted > 0
    assert b.user_factor == pytest.approx(factor_of_gauge(2.0, rep.scenario.timing))
    assert b.user_factor == pytest.approx(2.0e6 / rep.scenario.timing.worker_sample_tokens_ns)
    with pytest.raises(SpecraceError, match="--host-gauge"):
        assess(VllmSetup(vllm="0.28.0"), seeds=1, steps=100, host_gauge_ms=-1.0)
