"""The answer to "am I exposed, how often, and what is the cheapest safe change?".

:func:`assess` resolves a :class:`VllmSetup` to its code path, builds the scenario it
describes (the ``qwen35-mtp3`` workload scaled to ``max_num_seqs``, the model preset's
roofline GPU timing, the measured H200 and vLLM row-op timing files, then the user's
``--set``), simulates it over several seeds and returns a :class:`RiskReport`: corrupted
generations per 10,000 with a Wilson 95 % interval, wrong consumed counts by hazard kind,
and every mitigation the release offers with its own rate and its cost in step time and
tokens/s, cheapest safe first.

A *generation* is a request that consumed at least one accepted count; it is *corrupted*
when the GDN kernel consumed at least one wrong count for it. The interval treats
generations as independent trials (they share a schedule within a run, so it is a little
optimistic). :func:`simulate_rates` is the one call into the timing model: ``engine``
``vector`` (the default, :func:`sim.model.vector.simulate_points`, no per-read table) or
``simpy`` (the reference); both give the same estimate (tests/sim/resolve/test_risk.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sim.errors import SpecraceError
from sim.model.params import (
    Scenario,
    load_scenario,
    timing_file_values,
    with_values,
)
from sim.model.policies import ALL, NO_SPEC, POLICIES, Policy, named
from sim.resolve.check import check_policy
from sim.resolve.host_band import PLAUSIBLE, HostBand, host_band
from sim.resolve.presets import get_preset
from sim.resolve.rates import (
    ENGINES,
    RateEstimate,
    estimate_all,
)
from sim.resolve.release_facts import ASCEND, ASCEND_RELEASE, FACTS
from sim.resolve.resolution import Resolution, VllmSetup, resolve

ROOT = Path(__file__).resolve().parents[2]
BASE_SCENARIO = "qwen35-mtp3"
# Measured timing applied under the preset: H200 D2H landing / event sync / H2D issue, and
# vLLM 0.24.0's real InputBatch row-op costs (data/params/README.md).
TIMING_FILES = ("h200", "vllm-0.24.0-row-ops")  # built-in timing files (sim/model/timing/)
# qwen35-mtp3 keeps 64 sequences busy with 0.33 arrivals per step; scaled linearly.
BASE_SEQS, BASE_ARRIVALS = 64, 0.33
# Conditional per-position acceptance: qwen35-mtp3's three, then falling by 0.1 (>= 0.3).
BASE_ACCEPTANCE = (0.9, 0.75, 0.6)
# qwen35-mtp3's own GPU timing: the "balanced" regime (GPU step close to the CPU's), where
# docs/mechanism.md §8 puts the race; ``gpu_timing="balanced"`` uses it instead of the preset.
BALANCED_GPU = {
    "timing.gpu_forward_ns_base": 6_000_000,
    "timing.gpu_forward_ns_per_token": 2_000,
    "timing.gpu_drafter_ns": 800_000,
}
GPU_TIMINGS = ("roofline", "balanced")


def build_scenario(res: Resolution, overrides: dict[str, Any] | None = None) -> Scenario:
    """The scenario ``res`` describes: engine from the resolution, workload scaled to
    ``max_num_seqs``, timing = preset roofline, measured files, then ``overrides``."""
    s = res.setup
    k = s.num_speculative_tokens
    acc = list(BASE_ACCEPTANCE[:k]) + [
        max(0.3, BASE_ACCEPTANCE[-1] - 0.1 * (i + 1)) for i in range(max(0, k - 3))
    ]
    # Values as they are, in the order load_scenario applies them: the timing files, what
    # the resolution derives, then the caller's --set values.
    values: dict[str, Any] = dict(timing_file_values(TIMING_FILES))
    values |= {
        "engine.max_num_seqs": s.max_num_seqs,
        "engine.max_num_batched_tokens": s.max_num_batched_tokens,
        "engine.num_speculative_tokens": k,
        "engine.async_scheduling": bool(res.async_scheduling),
        "engine.mamba_cache_mode": res.mamba_cache_mode,
        "workload.initial_requests": s.max_num_seqs,
        "workload.arrival_rate_per_step": BASE_ARRIVALS * s.max_num_seqs / BASE_SEQS,
        "workload.acceptance_probs": acc,
    }
    for key, value in get_preset(s.model).timing(s.max_num_seqs, k).items():
        values[f"timing.{key}"] = value
    values |= overrides or {}
    if not res.prefix_caching:  # no prefix cache, no hits: what turning it off costs
        values["workload.prefix_hit_prob"] = 0.0
    return with_values(load_scenario(BASE_SCENARIO), values)


def policy_object(name: str) -> Policy:
    return named(name)


@dataclass(frozen=True)
class Mitigation:
    name: str
    change: str  # what to set
    available: bool
    reason: str = ""  # why not available, or what the release does instead
    path: str = ""
    estimate: RateEstimate | None = None
    # + slower than the current configuration. MRv2's own CPU costs are not modelled: it runs
    # MRv1's timing without the event wait.
    step_time_pct: float = 0.0
    tokens_per_s_pct: float = 0.0  # - fewer tokens/s than the current configuration
    # What the cost columns lack ("" where the model has every cost of the change): such a
    # cost is unknown, not zero, and the change ranks after those whose cost is known.
    cost_unknown: str = ""


@dataclass(frozen=True)
class RiskReport:
    setup: VllmSetup
    resolution: Resolution
    scenario: Scenario
    estimate: RateEstimate | None  # None: no speculative decoding, nothing to race
    mitigations: tuple[Mitigation, ...] = field(default_factory=tuple)
    timing_source: str = ""
    band: HostBand | None = None  # exposure over host speeds (sim.resolve.host_band)

    @property
    def verdict(self) -> str:
        """The timing-free verdict: whether the code path can hand the GDN kernel a wrong
        count at all, and why (no simulation behind it)."""
        r = self.resolution
        if self.estimate is None:
            return "verdict: not racy: no speculative decoding, so no accepted count to race"
        if self.safe_by_construction:
            return (f"verdict: not racy: policy {r.policy} builds every consumed count without "
                    "reading the pinned buffer the D2H writes (safe by construction)")  # fmt: skip
        d2h = next((f for f in r.fired if f.rule.startswith("d2h")), None)
        why = f": {d2h.says} ({d2h.cite})" if d2h else ""
        return (f"verdict: RACY path (policy {r.policy}): it reads accepted counts from the "
                f"pinned CPU buffer the D2H writes non-blocking while the CPU moves rows{why}; "
                "how often a wrong count is consumed depends on the host's speed against the "
                "GPU's (the band below)")  # fmt: skip

    @property
    def safe_by_construction(self) -> bool:
        """The path builds no count from a buffer the DMA writes (#45100's fill of 1, MRv2):
        nothing the CPU does can make a consumed count wrong."""
        return self.estimate is not None and not policy_object(self.resolution.policy).reads_buffer

    @property
    def answer(self) -> str:
        """The cheapest safe change, in one line."""
        if self.estimate is None:
            return "none needed: no speculative decoding"
        if self.safe_by_construction:
            return "none needed: this path reads no CPU-side count (safe by construction)"
        first = next(
            (m for m in self.mitigations if m.available and m.estimate and m.estimate.safe), None
        )
        cost = (
            f"cost unknown: {first.cost_unknown}" if first and first.cost_unknown
            else f"{first.tokens_per_s_pct:+.2f}% tokens/s" if first else ""
        )  # fmt: skip
        fix = (
            f"{first.name} ({first.change}): {cost}"
            if first
            else "no simulated mitigation was safe"
        )
        e = self.estimate
        if self.band is not None and self.band.exposed:
            return fix
        if e.safe:
            return (
                f"none corrupted in {e.generations:,} simulated generations (at most "
                f"{e.per_10k_hi:.1f} per 10,000), but this path can corrupt; cheapest removal: "
                f"{fix}"
            )
        return fix

    def to_dict(self) -> dict:
        r = self.resolution
        return {
            "setup": asdict(self.setup),
            "path": r.path,
            "policy": r.policy,
            "runner": r.runner,
            "prefix_caching": r.prefix_caching,
            "mamba_cache_mode": r.mamba_cache_mode,
            "async_scheduling": r.async_scheduling,
            "rules": [asdict(f) for f in r.fired],
            "notes": list(r.notes),
            "timing": {
                k: getattr(self.scenario.timing, k)
                for k in ("gpu_forward_ns_base", "gpu_forward_ns_per_token", "gpu_drafter_ns")
            },
            "timing_source": self.timing_source,
            "estimate": asdict(self.estimate) if self.estimate else None,
            "safe_by_construction": self.safe_by_construction,
            "verdict": self.verdict,
            "host_band": _band_dict(self.band),
            "cheapest_safe_change": self.answer,
            "mitigations": [
                {**asdict(m), "estimate": asdict(m.estimate) if m.estimate else None}
                for m in self.mitigations
            ],
        }


def _band_dict(b: HostBand | None) -> dict | None:
    if b is None:
        return None
    lo, hi = b.range_per_10k()
    return {
        "plausible_factors": list(PLAUSIBLE), "per_10k_range": [lo, hi],
        "exposed": b.exposed, "boundary": b.boundary,
        "cpu_bound": asdict(b.cpu_bound), "gauge_ref_ms": b.gauge_ref_ms,
        "points": [{"factor": f, "regime": b.regime(e), **asdict(e)}
                   for f, e in zip(b.factors, b.estimates, strict=True)],
        "user_gauge_ms": b.user_gauge_ms, "user_factor": b.user_factor,
        "user": asdict(b.user) if b.user is not None else None,
    }  # fmt: skip


def _candidates(s: VllmSetup, res: Resolution) -> list[tuple[str, str, VllmSetup]]:
    """Every change the release offers that can move the path, as (name, change, setup)."""
    out: list[tuple[str, str, VllmSetup]] = []
    if res.async_scheduling:
        out.append(("async scheduling off", "--no-async-scheduling",
                    replace(s, async_scheduling="off")))  # fmt: skip
    if res.prefix_caching:
        out.append(("prefix caching off", "--no-enable-prefix-caching",
                    replace(s, prefix_caching="off", mamba_cache_mode="default")))  # fmt: skip
    if s.platform == "cuda" and res.runner == "v1":
        out.append(("model runner V2", "VLLM_USE_V2_MODEL_RUNNER=1",
                    replace(s, runner="v2", env_v2="", mrv2_unsupported=())))  # fmt: skip
    if s.platform == "cuda" and res.runner == "v1" and not s.patches:
        for pr in ("51599", "53919"):
            out.append((f"PR #{pr} (open)", f"apply vllm-project/vllm#{pr} to {s.vllm}",
                        replace(s, patches=(pr,))))  # fmt: skip
    if s.platform == "cuda" and s.vllm == "0.23.0":
        out.append(("upgrade to 0.24.0 (#45100)", "pip install vllm==0.24.0",
                    replace(s, vllm="0.24.0")))  # fmt: skip
    if (
        s.platform == "ascend"
        and s.ascend_branch == "main"
        and s.vllm == ASCEND["post1_vllm"].value
    ):
        out.append((f"vllm-ascend {ASCEND_RELEASE} (#13865)",
                    f"pip install vllm-ascend=={ASCEND_RELEASE}",
                    replace(s, ascend_branch=ASCEND_RELEASE)))  # fmt: skip
    return out


def assess(
    setup: VllmSetup,
    overrides: dict[str, Any] | None = None,
    seeds: int = 8,
    steps: int = 2000,
    policy: str = "",
    mitigations: bool = True,
    gpu_timing: str = "roofline",
    engine: str = ENGINES[0],
    workers: int = 1,
    host_gauge_ms: float | None = None,
) -> RiskReport:
    """Resolve, simulate, give the exposure over host speeds (``host_gauge_ms``: the user's
    measured gauge, sim.resolve.host_band) and rank the mitigations (see the module
    docstring); the runs on ``workers`` processes (the same report whatever the number)."""
    if host_gauge_ms is not None and not 0 < host_gauge_ms <= 10_000:
        raise SpecraceError(f"--host-gauge {host_gauge_ms!r}: expected milliseconds in (0, 10000]")
    if seeds < 1 or steps < 2:
        raise SpecraceError("--seeds must be >= 1 and --steps >= 2")
    if gpu_timing not in GPU_TIMINGS:
        raise SpecraceError(f"--gpu-timing {gpu_timing!r}: expected roofline or balanced")
    user = dict(overrides or {})
    overrides = {**(BALANCED_GPU if gpu_timing == "balanced" else {}), **user}
    res = resolve(setup)
    if policy:
        if policy != ALL and policy not in POLICIES:
            raise SpecraceError(f"--policy {policy!r}: unknown (known: {', '.join(POLICIES)})")
        msg = check_policy(res, policy)
        if msg:
            raise SpecraceError(msg)
    preset = get_preset(setup.model)
    gpu = (
        f"roofline of {preset.name} ({preset.dtype}) on one H200 (4.3 TB/s, 788 TFLOP/s measured)"
        if gpu_timing == "roofline"
        else "balanced (qwen35-mtp3's 6 ms forward, not the preset)"
    )
    source = (
        f"GPU timing: {gpu}; CPU timing: qwen35-mtp3 defaults + the built-in timing files h200 + "
        "vllm-0.24.0-row-ops"
    )
    if user:
        source += "; overridden by --set " + ", ".join(sorted(user))
    scenario = build_scenario(res, overrides)
    if res.policy == NO_SPEC:
        return RiskReport(setup, res, scenario, None, (), source)
    # First the paths to estimate (the configuration's, then each mitigation's that moves
    # it), then every estimate at once: their runs share schedules and spread over workers.
    keys: dict[tuple[str, bool, bool], Resolution] = {}

    def key(r: Resolution) -> tuple[str, bool, bool]:
        k = (r.policy, r.async_scheduling, r.prefix_caching)
        keys.setdefault(k, r)
        return k

    base_key = key(res)
    racy = policy_object(res.policy).reads_buffer
    plans: list[tuple[str, str, VllmSetup, Resolution | str, tuple | None]] = []
    # A path safe by construction needs no mitigation: none is simulated or listed.
    for name, change, alt in _candidates(setup, res) if mitigations and racy else []:
        try:
            r = resolve(alt)
        except SpecraceError as e:
            plans.append((name, change, alt, str(e), None))
            continue
        same = r.policy == res.policy and r.async_scheduling == res.async_scheduling
        plans.append((name, change, alt, r, None if same else key(r)))
    specs = [(build_scenario(r, overrides), r.policy) for r in keys.values()]
    found = dict(zip(keys, estimate_all(specs, seeds, steps, engine, workers), strict=True))
    base = found[base_key]
    out: list[Mitigation] = []
    for name, change, alt, r_or_why, k in plans:
        if isinstance(r_or_why, str):
            out.append(Mitigation(name, change, False, r_or_why))
            continue
        r = r_or_why
        if k is None:
            out.append(Mitigation(name, change, False, f"no effect, same path: {r.path}",
                                  r.path))  # fmt: skip
            continue
        est = found[k]
        caveats = [*r.notes, *_caveats(alt, r, res, overrides)]
        out.append(
            Mitigation(
                name, change, True, "; ".join(caveats), r.path, est,
                step_time_pct=_pct(est.mean_step_ns, base.mean_step_ns),
                tokens_per_s_pct=_pct(est.tokens_per_s, base.tokens_per_s),
                cost_unknown="; ".join(_unknown_costs(alt, r, res, overrides)),
            )
        )  # fmt: skip
    out.sort(key=_rank)
    band = (
        host_band(scenario, policy_object(res.policy), seeds, steps, workers, host_gauge_ms)
        if racy else None
    )  # fmt: skip
    return RiskReport(setup, res, scenario, base, tuple(out), source, band)


def _unknown_costs(alt: VllmSetup, r: Resolution, base: Resolution, overrides: dict) -> list[str]:
    """The costs of a change the model does not have (its cost columns count them as 0)."""
    out = []
    if r.runner == "v2" and base.runner == "v1":
        out.append("MRv2's own CPU costs")
    if base.prefix_caching and not r.prefix_caching and "workload.prefix_hit_prob" not in overrides:
        out.append("the lost prefix-cache hits")
    return out


def _caveats(alt: VllmSetup, r: Resolution, base: Resolution, overrides: dict) -> list[str]:
    """What the cost column does not show, said next to it."""
    out = []
    if r.runner == "v2" and base.runner == "v1":
        out.append("MRv2's own CPU costs are not modelled (MRv1 timing without the wait)")
        if not FACTS["mrv2_default_for_qwen"][alt.vllm].value:
            out.append(f"opt-in in {alt.vllm}: MRv2 is the default for Qwen hybrids from 0.29.0")
    if base.prefix_caching and not r.prefix_caching and "workload.prefix_hit_prob" not in overrides:
        out.append("lost prefix-cache hits cost nothing here: set workload.prefix_hit_prob")
    return out


def _pct(new: float, old: float) -> float:
    return round(100.0 * (new - old) / old, 2) if old else 0.0


def _rank(m: Mitigation) -> tuple:
    """Available before not; safe (nothing corrupted) first; among those, the ones whose every
    cost the model has before the ones with a cost it lacks (unknown, not zero); then the
    highest tokens/s."""
    if not m.available or m.estimate is None:
        return (2, 0, 0.0, m.name)
    return (0 if m.estimate.safe else 1, 1 if m.cost_unknown else 0, -m.estimate.tokens_per_s,
            m.name)  # fmt: skip
