"""Exposure as a band over host speeds (issue #44): ``risk``'s forecast does not take the host's
speed as a known constant.

**Host speed** is a factor ``f`` on every CPU-side duration of the scenario (the engine core's
and the worker's; not the measured copy and event costs of the ``h200`` timing file): vLLM's
records show every host span of a step slowing together (issue #44: correlation 0.90 between
the sample_tokens span and the drafter gap; ``data/vllm/gauge/summary.json``: r 0.93 between a
pass's gauge and its step time within a configuration, 0.84 across configurations).

**Plausible host speeds** (:data:`PLAUSIBLE`), from the records, not from a round: passes of one
configuration spread over 0.76-1.79 of their median gauge (``data/vllm/gauge/summary.json``,
``spread.pooled`` min-max, 362 passes on an H200 and H100s; the top is forward-30's slow
window, and before it the range was 0.76-1.60 and the top 3.0), and two releases' hosts on the
same H200 machine differed by 1.9 (0.23.0 against 0.24.0, data/vllm/README.md); the plausible
range is 0.75 to 1.79 x 1.9 = 3.4 times the scenario's CPU timing. It is a range for
the one machine recorded: another machine can lie outside it, which is why ``--host-gauge``
exists and the picture spans 0.5-16.

**The gauge** (``gpu_check.vllm.gauge``): the median over decode-only steps of the worker's
sample_tokens host span (``_prepare_inputs`` end to the counts' D2H issued). The scenario's own
value of that span is ``worker_sample_tokens_ns``, so a measured gauge of ``g`` ms is the host
factor ``g / (worker_sample_tokens_ns / 1e6)``.

**The CPU-bound rate**: the rate with every GPU duration zero, so each step's copy has landed
before the CPU reads it (the copy-at-entry regime of the records): the most this path corrupts
however slow the host. Where the band touches the boundary (some plausible host speed exposes
and some does not, or a rate between), the band's top is that rate. At the boundary the
records show the model missing the landing both ways: 17 of 18 boundary rows predicted low
before the host spread and the GPU's prefill step were modelled (issue #44), and, given the
pass's own gauge, 5 of 33 boundary passes still above the interval's top
(docs/forward-prediction.md, "The interval given the gauge"). So "up to the CPU-bound rate"
is the safe statement.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from sim.model.params import Scenario, TimingParams
from sim.model.policies import Policy
from sim.model.scheduling import build_schedule
from sim.model.vector import simulate_points

if TYPE_CHECKING:
    from sim.resolve.rates import RateEstimate

# Host factors of the plausible range and of the picture (the plausible ones among them).
PLAUSIBLE = (0.75, 3.4)
FACTORS = (0.5, 0.75, 1.0, 1.6, 3.4, 5.0, 8.0, 16.0)
# Measured hardware costs (the h200 timing file), not the host's speed.
NOT_HOST = {"worker_event_sync_ns", "worker_copy_to_gpu_ns"}
HOST_PREFIXES = ("worker_", "engine_")
# The GPU's step work (the sampler and the copy's landing delay stay: the vector tier needs the
# landing to be a GPU completion, and they are small against a host step).
GPU_FIELDS = (
    "gpu_prep_ns", "gpu_forward_ns_base", "gpu_forward_ns_per_token", "gpu_forward_ns_prefill",
    "gpu_drafter_ns",
)  # fmt: skip


def scale_host(t: TimingParams, f: float) -> TimingParams:
    """``t`` with every CPU-side duration (ns) times ``f``."""
    changes = {
        x.name: int(round(getattr(t, x.name) * f))
        for x in fields(t)
        # "_ns" anywhere: ..._ns_per_req, ..._ns_base, ..._ns_prefill are host durations too
        if x.name.startswith(HOST_PREFIXES) and "_ns" in x.name and x.name not in NOT_HOST
    }
    return replace(t, **changes)


def cpu_bound(t: TimingParams) -> TimingParams:
    """``t`` with the GPU's step work zero: the copy lands before the CPU reads."""
    return replace(t, **{k: 0 for k in GPU_FIELDS})


def factor_of_gauge(gauge_ms: float, t: TimingParams) -> float:
    """The host factor a measured gauge (ms) stands for: over the scenario's own span."""
    return gauge_ms * 1e6 / t.worker_sample_tokens_ns


def _band_unit(unit: tuple) -> list[Any]:
    from sim.resolve.rates import SeedTally, generations

    seed, steps, scenario, policy, timings = unit
    sched = build_schedule(scenario, seed, steps)
    res = simulate_points(sched, list(timings), policy, seed, keep_reads=False, keep_timing=False)
    gens = generations(sched)
    out = []
    for i, s in enumerate(res.summaries):
        out.append(SeedTally(
            generations=gens, corrupted=int(s["corrupted_requests"]),
            wrong_steps=int(res.gpu_wrong_steps[i]), gpu_wrong=int(s["gpu_wrong"]),
            prompt_state_lost=int(s["prompt_state_lost"]), steps=int(s["steps"]),
            by_kind=dict(res.gpu_wrong_by_kind[i]), mean_step_ns=s["mean_step_ns"],
            tokens_per_s=s["tokens_per_s"],
        ))  # fmt: skip
    return out


@dataclass(frozen=True)
class HostBand:
    """The configuration's rate at each host factor, the CPU-bound rate, and the user's."""

    factors: tuple[float, ...]
    estimates: tuple[RateEstimate, ...]  # per factor
    cpu_bound: RateEstimate  # with the GPU out of the way
    gauge_ref_ms: float  # the gauge f = 1 stands for
    user_gauge_ms: float | None = None
    user_factor: float | None = None
    user: RateEstimate | None = None  # at the user's factor

    def plausible(self) -> list[tuple[float, RateEstimate]]:
        lo, hi = PLAUSIBLE
        return [(f, e) for f, e in zip(self.factors, self.estimates, strict=True) if lo <= f <= hi]

    def regime(self, e: RateEstimate) -> str:
        """CPU-bound (within 20 % of the CPU-bound rate), GPU-bound (nothing corrupted) or the
        boundary between."""
        if e.corrupted == 0:
            return "GPU-bound"
        if e.per_10k >= 0.8 * self.cpu_bound.per_10k:
            return "CPU-bound"
        return "boundary"

    @property
    def exposed(self) -> bool:
        """Some plausible host speed (or the user's) corrupts."""
        pts = [e for _f, e in self.plausible()] + ([self.user] if self.user is not None else [])
        return any(e.corrupted > 0 for e in pts)

    @property
    def boundary(self) -> bool:
        regimes = {self.regime(e) for _f, e in self.plausible()}
        return "boundary" in regimes or len(regimes) > 1

    def range_per_10k(self) -> tuple[float, float]:
        """The band over plausible host speeds (per 10,000 generations): the lowest point
        estimate, and the highest upper 95 % bound, raised to the CPU-bound rate at the
        boundary."""
        pts = [e for _f, e in self.plausible()]
        lo = min(e.per_10k for e in pts)
        hi = max(e.per_10k_hi for e in pts)
        if self.boundary:
            hi = max(hi, self.cpu_bound.per_10k)
        return lo, hi

    def first_exposing(self) -> float | None:
        return next((f for f, e in zip(self.factors, self.estimates, strict=True)
                     if e.corrupted > 0), None)  # fmt: skip


def band_seeds(seeds: int) -> int:
    return min(seeds, max(2, seeds // 2))


def host_band(scenario: Scenario, policy: Policy, seeds: int, steps: int, workers: int = 1,
              user_gauge_ms: float | None = None) -> HostBand:  # fmt: skip
    """Simulate the configuration at every factor of :data:`FACTORS`, with the GPU out of the
    way, and at the user's gauge, in one vector-tier call per seed (the runs on ``workers``
    processes; the same band whatever the number)."""
    from sim.resolve.rates import pool
    from sim.runs.processes import map_units

    t = scenario.timing
    user_f = factor_of_gauge(user_gauge_ms, t) if user_gauge_ms is not None else None
    timings = [scale_host(t, f) for f in FACTORS] + [cpu_bound(t)]
    if user_f is not None:
        timings.append(scale_host(t, user_f))
    # Half the configuration's seeds (at least 2): the band is read coarsely (which regime,
    # roughly what rate), and it keeps risk's wait near its old length.
    units = [(seed, steps, scenario, policy, tuple(timings)) for seed in range(band_seeds(seeds))]
    per_seed = list(map_units(_band_unit, units, workers, preload=(__name__,)))
    pooled = [pool(policy.name, [s[i] for s in per_seed]) for i in range(len(timings))]
    n = len(FACTORS)
    return HostBand(
        factors=FACTORS, estimates=tuple(pooled[:n]), cpu_bound=pooled[n],
        gauge_ref_ms=t.worker_sample_tokens_ns / 1e6, user_gauge_ms=user_gauge_ms,
        user_factor=user_f, user=pooled[n + 1] if user_f is not None else None,
    )  # fmt: skip


def band_figure(band: HostBand, title: str) -> Any:
    """Exposure against host speed: the rate at each host factor with its 95 % interval, the
    plausible range shaded, the CPU-bound rate dashed, the user's gauge marked (900 px wide)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5), dpi=100)
    f = list(band.factors)
    mid = [e.per_10k for e in band.estimates]
    lo = [e.per_10k_lo for e in band.estimates]
    hi = [e.per_10k_hi for e in band.estimates]
    ax.axvspan(*PLAUSIBLE, color="#ffd9a0", alpha=0.5,
               label=f"plausible host speeds (x{PLAUSIBLE[0]}-x{PLAUSIBLE[1]})")  # fmt: skip
    ax.fill_between(f, lo, hi, color="#1f77b4", alpha=0.25, label="95 % interval")
    ax.plot(f, mid, "o-", color="#1f77b4", label="corrupted generations per 10,000")
    ax.axhline(band.cpu_bound.per_10k, ls="--", color="#d62728",
               label=f"CPU-bound rate {band.cpu_bound.per_10k:.1f}")  # fmt: skip
    if band.user is not None and band.user_factor is not None:
        ax.plot([band.user_factor], [band.user.per_10k], marker="*", ms=18, color="#2ca02c",
                ls="none", label=f"your host: gauge {band.user_gauge_ms:g} ms = "
                f"x{band.user_factor:.2f} -> {band.user.per_10k:.1f}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xticks(f)
    ax.set_xticklabels([f"{x:g}" for x in f])
    ax.set_xlabel(f"host speed: factor on every CPU duration (1 = gauge {band.gauge_ref_ms:g} ms; "
                  "higher = slower host)", fontsize=11)  # fmt: skip
    ax.set_ylabel("corrupted generations per 10,000", fontsize=11)
    ax.set_ylim(bottom=0, top=max(max(hi), band.cpu_bound.per_10k, 1.0) * 1.15)
    ax.set_title(title, fontsize=12)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=10, loc="upper left")
    fig.tight_layout()
    return fig


def write_band_figure(band: HostBand, title: str, path: Any) -> None:
    """The figure as a signed PNG at ``path`` (``sim.runs.io.atomic_write``)."""
    import matplotlib.pyplot as plt

    from sim.runs.io import atomic_write

    fig = band_figure(band, title)
    try:
        atomic_write(
            path,
            lambda tmp: fig.savefig(tmp, format="png", metadata={"Software": None}),
            sign=".png",
        )
    finally:
        plt.close(fig)
