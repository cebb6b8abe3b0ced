"""Public reports of the bug beside specrace's prediction for a scenario built to match each.

Every :class:`Arm` is one number a report gives (k corrupted of n generations) with the
configuration the report states and, in ``assumed``, every value it does not state. Each arm
is predicted twice, neither tuned to any report: with the model preset's roofline GPU timing
(what ``sim risk`` uses) and with qwen35-mtp3's balanced GPU timing (6 ms forward, the
regime docs/mechanism.md §8 says the race needs). ``verdict`` compares the reported and the
predicted 95 % intervals (Wilson): ``agree`` when they overlap, else ``disagree``. A report
that gives no rate says only "corrupts" (``corrupted=-1``) or "does not corrupt" (0 of 0); an
arm that carries a report's configuration to a release nobody has reported on
(``corrupted=NOT_REPORTED``, e.g. the #51599 thread's V1 setup on 0.34.0, which has no V1) is a
prediction only, with no verdict.

``python -m sim field-reports --out data/field_reports`` regenerates ``raw.json`` (every
estimate) and ``summary.md`` / ``summary.json`` (the table).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim.model.policies import NO_SPEC, POLICIES
from sim.resolve.rates import RateEstimate, simulate_rates, wilson
from sim.resolve.resolution import VllmSetup, resolve
from sim.resolve.risk import BALANCED_GPU, assess, build_scenario

TIMINGS = {"roofline": {}, "balanced": BALANCED_GPU}
NOT_REPORTED = -2  # Arm.corrupted: no report on this release; the row is a prediction only


@dataclass(frozen=True)
class Arm:
    report: str  # issue / PR
    arm: str
    corrupted: int  # as reported
    generations: int
    setup: VllmSetup
    assumed: tuple[str, ...]
    overrides: dict[str, Any] = field(default_factory=dict)
    seeds: int = 8
    steps: int = 2000
    note: str = ""
    # A what-if outside the modelled releases: simulate this policy on the arm's scenario
    # instead of the one the release resolves to (said in the table).
    policy_override: str = ""


Q = "qwen3.5-27b"
# vllm-ascend #13863/#13865: long prompts on a full KV cache (preemptions).
ASCEND_LOAD: dict[str, Any] = {
    "workload.prompt_len": dict(dist="lognormal", mean=8200.0, sigma=0.2, min=16, max=16384),
    "workload.output_len": dict(dist="lognormal", mean=1024.0, sigma=0.6, min=8, max=4096),
    "engine.kv_cache_capacity_tokens": 250_000,
}
ARMS: tuple[Arm, ...] = (
    Arm("vllm#45100", "unpatched", 16, 20_480,
        VllmSetup(vllm="0.23.0", model=Q, async_scheduling="on"),
        ("vLLM 0.23.0 stands for 'before #45100' (the PR merged into 0.24.0)",
         "max_num_seqs 64 (not stated)", "prefix caching at its 0.23.0 default (off)",
         "workload: qwen35-mtp3's prompt/output lengths (verl rollouts not described)"),
        seeds=16, note="FULL_AND_PIECEWISE cudagraphs: step-time only, not modelled"),
    Arm("vllm#45100", "patched", 0, 20_480,
        VllmSetup(vllm="0.24.0", model=Q, async_scheduling="on"),
        ("vLLM 0.24.0 stands for 'with #45100'", "max_num_seqs 64 (not stated)",
         "prefix caching at its default (off)"), seeds=16),
    Arm("vllm#53919/#53912", "align, async", 16, 288,
        VllmSetup(vllm="0.27.1", model=Q, prefix_caching="on", async_scheduling="on",
                  runner="v1"),
        ("vLLM 0.27.1 (#53919 targets main after it)", "Qwen3.5-27B (model not stated)",
         "MTP k=3 (not stated)", "max_num_seqs 64 (not stated)"), seeds=4),
    Arm("vllm#53919/#53912", "align, sync", 0, 288,
        VllmSetup(vllm="0.27.1", model=Q, prefix_caching="on", async_scheduling="off",
                  runner="v1"),
        ("as the async arm",), seeds=4),
    Arm("vllm#53919/#53912", "align, no MTP", 0, 288,
        VllmSetup(vllm="0.27.1", model=Q, prefix_caching="on", spec_method="none",
                  num_speculative_tokens=0, runner="v1"),
        ("as the async arm, without speculative decoding",), seeds=1,
        note="no speculative decoding: no accepted count, nothing to simulate"),
    Arm("vllm#53912", "align, 0.27.1", 12, 5_000,
        VllmSetup(vllm="0.27.1", model=Q, prefix_caching="on", async_scheduling="on",
                  runner="v1"),
        ("prefix caching on (the report is about align)", "Qwen3.5-27B, MTP k=3, "
         "max_num_seqs 64 (not stated)"), seeds=8),
    Arm("vllm-ascend#13863", "before #13865 (main), 100% KV", 2, 512,
        VllmSetup(vllm="0.23.0", model="qwen3.6-35b-a3b", platform="ascend",
                  prefix_caching="on", async_scheduling="on", max_num_seqs=32),
        ("vllm-ascend main code path (no #13865) on vLLM 0.23.0",
         "Ascend timing not modelled: H200 roofline of Qwen3.6-35B-A3B stands in",
         "max_num_seqs 32, prompts about 8.2k tokens, outputs about 1k, KV capacity 250,000 "
         "tokens (about 85% of what 32 such requests need), so the scheduler preempts "
         "(report: 100% KV usage)", "MTP k=3"),
        overrides=ASCEND_LOAD, seeds=4),
    Arm("vllm-ascend#13865", "with #13865 (0.23.0.post1), 98.82% KV", 0, 512,
        VllmSetup(vllm="0.23.0", model="qwen3.6-35b-a3b", platform="ascend",
                  prefix_caching="on", async_scheduling="on", max_num_seqs=32,
                  ascend_branch="0.23.0.post1"),
        ("as the #13863 arm", "vllm-ascend 0.23.0.post1 (PyPI; its sdist has #13865 at the "
         "lines of releases/v0.23.0, where the report validated it)"),
        overrides=ASCEND_LOAD, seeds=4),
    Arm("vllm#35288", "max-num-seqs 4", -1, 0,
        VllmSetup(vllm="0.23.0", model=Q, max_num_seqs=4, async_scheduling="on"),
        ("vLLM 0.23.0 (the oldest modelled; the report predates #45100)", "Qwen3.5-27B, "
         "MTP k=3 (not stated)", "report gives no rate: 'corrupts at 4'"),
        seeds=8, steps=4000),
    Arm("vllm#35288", "max-num-seqs 2", 0, 0,
        VllmSetup(vllm="0.23.0", model=Q, max_num_seqs=2, async_scheduling="on"),
        ("as the max-num-seqs 4 arm", "report gives no rate: 'not at 2'"),
        seeds=8, steps=4000),
    # #35288 was filed before PR #36013 added the event wait: its vLLM read the counts
    # unsynchronised, which no modelled release does.
    Arm("vllm#35288", "max-num-seqs 4, before #36013", -1, 0,
        VllmSetup(vllm="0.23.0", model=Q, max_num_seqs=4, async_scheduling="on"),
        ("policy unsynced: the issue predates #36013 (the event wait), so not a modelled "
         "release", "Qwen3.5-27B, MTP k=3 (not stated)"),
        seeds=8, steps=4000, policy_override="unsynced"),
    Arm("vllm#35288", "max-num-seqs 2, before #36013", 0, 0,
        VllmSetup(vllm="0.23.0", model=Q, max_num_seqs=2, async_scheduling="on"),
        ("as the max-num-seqs 4 arm before #36013",),
        seeds=8, steps=4000, policy_override="unsynced"),
    # The #51599 thread (2026-09-15): a user on the V1 runner reports "these exact corrupted
    # outputs" and turning async scheduling off; then the same configuration on 0.34.0, which
    # has no V1 runner (nobody has reported on it: a prediction only).
    Arm("vllm#51599 (2026-09-15)", "V1 runner, align, async, 0.33.0", -1, 0,
        VllmSetup(vllm="0.33.0", model=Q, prefix_caching="on", async_scheduling="on",
                  runner="v1"),
        ("vLLM 0.33.0, the last release with the V1 runner (the thread: teams still on V1; "
         "release not stated)", "prefix caching on, so align (the path #51599 fixes)",
         "Qwen3.5-27B, MTP k=3, max_num_seqs 64 (not stated)",
         "report gives no rate: 'these exact corrupted outputs'"), seeds=4),
    Arm("vllm#51599 (2026-09-15)", "same configuration on 0.34.0 (MRv2 only)", NOT_REPORTED, 0,
        VllmSetup(vllm="0.34.0", model=Q, prefix_caching="on", async_scheduling="on"),
        ("vLLM 0.34.0 refuses VLLM_USE_V2_MODEL_RUNNER=0, so the V1 configuration runs on "
         "MRv2 (the counts stay on the GPU by request slot)", "no report on 0.34.0 known "
         "(2026-12-05): a prediction only", "as the 0.33.0 arm otherwise"), seeds=4),
)  # fmt: skip


def predict(arm: Arm, timing: str) -> tuple[str, RateEstimate]:
    overrides = {**TIMINGS[timing], **arm.overrides}
    if arm.policy_override:
        sc = build_scenario(resolve(arm.setup), overrides)
        policy = POLICIES[arm.policy_override]
        return f"{policy.name} (what-if)", simulate_rates(sc, policy, arm.seeds, arm.steps)
    rep = assess(arm.setup, overrides, seeds=arm.seeds, steps=arm.steps, mitigations=False)
    if rep.estimate is None:  # no speculative decoding: zero by construction, not simulated
        none = RateEstimate(NO_SPEC, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0, 0, {},
                            0.0, 0.0)  # fmt: skip
        return rep.resolution.policy, none
    return rep.resolution.policy, rep.estimate


def reported_interval(arm: Arm) -> tuple[float, float, float] | None:
    """Reported rate per 10,000 with its Wilson 95 % interval, None without a count."""
    if arm.generations <= 0:
        return None
    lo, hi = wilson(arm.corrupted, arm.generations)
    return 1e4 * arm.corrupted / arm.generations, 1e4 * lo, 1e4 * hi


def verdict(arm: Arm, e: RateEstimate) -> str:
    if arm.corrupted == NOT_REPORTED:
        return "no report: prediction only"
    rep = reported_interval(arm)
    if rep is None:  # qualitative report: corrupts (-1) or not (0)
        if arm.corrupted < 0:
            return "agree" if e.corrupted > 0 else "disagree: none predicted"
        return "agree" if e.corrupted == 0 else "disagree: some predicted"
    _, lo, hi = rep
    if e.per_10k_hi < lo:
        return "disagree: predicted lower"
    if e.per_10k_lo > hi:
        return "disagree: predicted higher"
    return "agree"


def run_all(arms: tuple[Arm, ...] = ARMS) -> list[dict]:
    """One raw row per arm and timing."""
    rows = []
    for arm in arms:
        for timing in TIMINGS:
            policy, e = predict(arm, timing)
            rows.append({
                "report": arm.report, "arm": arm.arm, "timing": timing, "policy": policy,
                "reported_corrupted": arm.corrupted, "reported_generations": arm.generations,
                "reported_per_10k": reported_interval(arm), "assumed": list(arm.assumed),
                "overrides": arm.overrides, "setup": asdict(arm.setup), "note": arm.note,
                "estimate": asdict(e), "verdict": verdict(arm, e),
            })  # fmt: skip
    return rows


def _fmt(rate: float, lo: float, hi: float) -> str:
    return f"{rate:.1f} [{lo:.1f}, {hi:.1f}]"


def summary_markdown(rows: list[dict]) -> str:
    out = [
        "| report | arm | reported | reported /10k [95% CI] | policy | timing | predicted "
        "/10k [95% CI] | predicted corrupted / generations | verdict |",
        "|---|---|---:|---:|---|---|---:|---:|---|",
    ]
    for r in rows:
        e = r["estimate"]
        rep = r["reported_per_10k"]
        if rep is None:
            reported = {-1: "corrupts", NOT_REPORTED: "not reported"}.get(
                r["reported_corrupted"], "does not corrupt"
            )
            rep_txt = "-"
        else:
            reported = f"{r['reported_corrupted']}/{r['reported_generations']:,}"
            rep_txt = _fmt(*rep)
        out.append(
            f"| {r['report']} | {r['arm']} | {reported} | {rep_txt} | {r['policy']} | "
            f"{r['timing']} | {_fmt(e['per_10k'], e['per_10k_lo'], e['per_10k_hi'])} | "
            f"{e['corrupted']:,}/{e['generations']:,} | {r['verdict']} |"
        )
    out.append("")
    out.append("Assumed where the report is silent:")
    seen = set()
    for r in rows:
        key = (r["report"], r["arm"])
        if key in seen:
            continue
        seen.add(key)
        out.append(f"- {r['report']} {r['arm']}: " + "; ".join(r["assumed"]))
    return "\n".join(out) + "\n"


def summary_rows(rows: list[dict]) -> list[dict]:
    return [
        {k: r[k] for k in ("report", "arm", "timing", "policy", "verdict")}
        | {
            "reported": [r["reported_corrupted"], r["reported_generations"]],
            "predicted": [r["estimate"]["corrupted"], r["estimate"]["generations"]],
            "predicted_per_10k": [
                r["estimate"]["per_10k"], r["estimate"]["per_10k_lo"], r["estimate"]["per_10k_hi"]
            ],
        }
        for r in rows
    ]  # fmt: skip
