"""The forward prediction as a distribution (issue #44): a 90 % predictive interval per
configuration for the wrong-read rate, the median step and the copy-at-entry share, and the
criterion per regime. :mod:`gpu_check.vllm.forward` runs it; docs/forward-prediction.md,
"Forecast as a distribution", gives every rule.

A configuration's samples come from four sources of spread, in this order:

1. **host speed**, a random effect: a factor ``f`` on every host duration of the calibrated
   timing (:func:`sim.resolve.host_band.scale_host`), at :data:`HOST_POINTS` equally weighted
   quantile points of the records' pass-to-pass spread (each pure pass's gauge over its
   (release, mode, seqs, k) group's median, pooled, groups of >= 2:
   :func:`gpu_check.vllm.gauge_evidence.pure_ratios`);
2. **seeds**: :data:`FACTOR_SEEDS` sim seeds at each factor (jitter, slow phases);
3. **model error**: each sim sample is drawn :data:`NOISE_DRAWS` times, each time with one
   residual (log step ratio, entry-share difference, log rate ratio with +0.5 on the wrong
   count and +1 on the reads, both rates over the observed pass's reads) of the
   gauge-conditioned central forecast of a configuration of *another* calibration group
   (leave-one-group-out), drawn from those whose unconditional forecast has the same regime
   (all of them where fewer than :data:`MIN_RESIDUALS`);
4. **count noise**: carried by the residual (an observed count is a Binomial draw already), so
   the rate is the sample's rate (smoothed over the observed pass's reads) times the
   residual's rate ratio, unsmoothed; drawing Binomial(reads, p) on top, as the first version
   did, counted that noise twice. Without residuals, the count is drawn Binomial.

Every draw comes from ``np.random.default_rng`` seeded by the configuration's key
(:func:`config_seed`): the same inputs give the same bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from sim.resolve.host_band import factor_of_gauge, scale_host
from sim.resolve.rates import wilson

# A pass's regime by its copy-at-entry share (the share of steps whose copy had landed when
# _update_states began): CPU-bound at >= 0.9, GPU-bound at <= 0.1, the boundary between.
CPU_BOUND_ENTRY = 0.9
GPU_BOUND_ENTRY = 0.1
REGIMES = ("CPU-bound", "boundary", "GPU-bound")
#: each part's observed column in a table of passes
OBSERVED = {"rate": "rate_observed", "step": "step_ms_observed", "entry": "entry_observed"}
PARTS = ("rate", "step", "entry")

HOST_POINTS = 9  # K quantile points of the host spread, at (i + 0.5) / K
FACTOR_SEEDS = 5  # sim seeds at each host factor
NOISE_DRAWS = 20  # model-error and count draws per sim sample
MIN_RESIDUALS = 8  # fewer residuals in the regime: take every other group's
PI = (0.05, 0.95)  # the 90 % predictive interval
POPULATIONS = ("decode", "prefill")  # steps without and with a prefill chunk
MIN_POPULATION_STEPS = 10  # an observed population judged per population: at least this many
POPULATION_COLUMNS = (
    "obs_step_decode_ms", "obs_step_prefill_ms", "obs_step_decode_steps", "obs_step_prefill_steps",
    "cond_step_decode_ms", "cond_step_prefill_ms", "cond_pop_step_ok", "cond_meets_all_pop",
)  # fmt: skip
COND_SEEDS = 5  # seeds of the gauge-conditioned central forecast
SPREAD_MIN_PASSES = 3  # a configuration's passes for vLLM's own pass-to-pass spread

TARGETS: dict[str, Any] = {
    "coverage_min_per_regime": 0.80,
    "coverage_overall": [0.84, 0.96],
    "width_ratio_max": 1.25,
    "boundary_above_max": 0.05,
    "conditional_meets_all_min": 0.80,
}


def regime(entry: float) -> str:
    """CPU-bound, boundary or GPU-bound by the copy-at-entry share."""
    if entry >= CPU_BOUND_ENTRY:
        return "CPU-bound"
    if entry <= GPU_BOUND_ENTRY:
        return "GPU-bound"
    return "boundary"


def config_seed(key: str) -> int:
    """A seed from the configuration's key (stable across processes, unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")


# -- host speed -------------------------------------------------------------------------------
def host_ratios(rows: list[dict[str, Any]]) -> np.ndarray:
    """Every pure pass's gauge over its group's median (``gauge_evidence``'s ``spread``)."""
    from gpu_check.vllm.gauge_evidence import pure_ratios

    df = pd.DataFrame(rows)
    df = df[df["host_gauge_ms"].notna() & df["step_ms"].notna()]
    return np.sort(pure_ratios(df)["ratio"].to_numpy(float))


def host_factors(ratios: np.ndarray, k: int = HOST_POINTS) -> list[float]:
    """``k`` equally weighted quantile points of the ratios, at (i + 0.5) / k."""
    if len(ratios) == 0:
        raise ValueError("no pure pass of a group of >= 2: no host spread")
    qs = [(i + 0.5) / k for i in range(k)]
    return [round(float(x), 4) for x in np.quantile(np.asarray(ratios, float), qs)]


# -- sim samples ------------------------------------------------------------------------------
def _sample(p: dict[str, Any]) -> dict[str, Any]:
    steps = max(p["steps"], 1)
    return {"reads": p["reads"], "wrong": p["wrong"], "step_ms": p["step_ns_median"] / 1e6,
            "entry": p["entry"] / steps}  # fmt: skip


def sim_samples(
    sched, sc, policy, factors: list[float], seeds: int, simulate_seed
) -> list[dict[str, Any]]:
    """One sample per (host factor, seed): reads, wrong reads, median step (ms), entry share."""
    out = []
    for f in factors:
        scaled = replace(sc, timing=scale_host(sc.timing, f))
        out += [_sample(simulate_seed(sched, scaled, policy, s)) for s in range(seeds)]
    return out


def conditional(sched, sc, policy, gauge_ms: float | None, simulate_seed, seeds: int = COND_SEEDS,
                factor: float | None = None, slow_prob: float | None = None):  # fmt: skip
    """The central forecast at the host factor of a measured gauge (1 without one), or at
    ``factor`` where given (a gauge measured on another configuration, turned into a factor on
    that configuration's own timing): pooled rate, median step, landing mix, as
    ``vllm-forward``'s point forecast. ``slow_prob``: the share of slow host steps in place of
    the calibrated one (the slow gauge's, :mod:`gpu_check.vllm.slow_gauge`)."""
    from gpu_check.vllm.outcome import LANDING

    f = factor if factor is not None else (
        factor_of_gauge(gauge_ms, sc.timing) if gauge_ms is not None else 1.0)  # fmt: skip
    timing = scale_host(sc.timing, f)
    if slow_prob is not None:
        timing = replace(timing, worker_slow_prob=slow_prob)
    scaled = replace(sc, timing=timing)
    per = [simulate_seed(sched, scaled, policy, s) for s in range(seeds)]
    steps = sum(p["steps"] for p in per)
    reads, wrong = sum(p["reads"] for p in per), sum(p["wrong"] for p in per)
    return {
        "factor": f, "slow_prob": timing.worker_slow_prob, "reads": reads, "wrong": wrong,
        "rate": wrong / reads if reads else 0.0,
        "step_ms": round(float(np.median([p["step_ns_median"] for p in per])) / 1e6, 3),
        **{f"step_{pop}_ms": _median_ms([p.get(f"step_ns_median_{pop}") for p in per])
           for pop in POPULATIONS},
        "landing": {k: round(sum(p[k] for p in per) / steps, 4) for k in LANDING},
        "samples": [_sample(p) for p in per],  # one per seed: given_gauge_band's sim part
    }  # fmt: skip


def _median_ms(ns: list[float | None]) -> float | None:
    xs = [x for x in ns if x is not None]
    return round(float(np.median(xs)) / 1e6, 3) if xs else None


def population_step_ok(cond: dict[str, Any], pops: dict[str, Any]) -> bool:
    """The step part judged per population (proposed in docs/forward-prediction.md, not the
    criterion): sim's median decode-only step and its median step with a prefill chunk each
    within #23's 10 % of vLLM's (``gauge.step_populations``). A population with fewer than
    :data:`MIN_POPULATION_STEPS` observed steps is not judged; one sim never ran fails."""
    from gpu_check.vllm.outcome import STEP_REL

    for pop in POPULATIONS:
        obs, n = pops[f"{pop}_ms"], pops[f"{pop}_steps"]
        if obs is None or not np.isfinite(obs) or n < MIN_POPULATION_STEPS:
            continue
        pred = cond.get(f"step_{pop}_ms")
        if pred is None or not np.isfinite(pred) or abs(pred - obs) / obs > STEP_REL:
            return False
    return True


# -- model error ------------------------------------------------------------------------------
def smoothed_rate(rate: Any, reads: Any) -> Any:
    """A rate as counts over ``reads`` reads with 0.5 added to the wrong ones and 1 to the
    reads: a zero stays comparable (the ratio of two zeros over the same reads is 1)."""
    return (rate * reads + 0.5) / (reads + 1.0)


def unsmoothed_rate(p: Any, reads: Any) -> Any:
    """The inverse of :func:`smoothed_rate`: the rate whose smoothed value over ``reads`` is
    ``p`` (below 0 where ``p`` is under the 0.5-read floor)."""
    return (p * (reads + 1.0) - 0.5) / reads


def residual(pred: dict[str, Any], obs: dict[str, Any]) -> dict[str, float]:
    """Observed against a central forecast: log step ratio, entry-share difference, log rate
    ratio (both rates smoothed over the observed pass's reads: :func:`smoothed_rate`)."""
    n = obs["reads"]
    return {
        "log_step": float(np.log(obs["step_ms"] / pred["step_ms"])),
        "entry": float(obs["landing"]["entry"] - pred["landing"]["entry"]),
        "log_rate": float(
            np.log(smoothed_rate(obs["wrong"] / n, n)) - np.log(smoothed_rate(pred["rate"], n))
        ),
    }


def loo_residuals(table: list[dict[str, Any]], group: str, predicted_regime: str,
                  by: str = "regime_predicted") -> np.ndarray:  # fmt: skip
    """Residual rows (log_step, entry, log_rate) of every configuration outside ``group``,
    those whose ``by`` regime is ``predicted_regime`` (all of them where fewer than
    MIN_RESIDUALS): ``regime_predicted`` is the unconditional forecast's regime,
    ``regime_given_gauge`` the gauge-conditioned one's (a table made before that column
    existed falls back to the first)."""
    others = [r for r in table if r["group"] != group]
    same = [r for r in others if r.get(by, r["regime_predicted"]) == predicted_regime]
    use = same if len(same) >= MIN_RESIDUALS else others
    return np.array([[r["log_step"], r["entry"], r["log_rate"]] for r in use], dtype=float)


# -- the predictive distribution --------------------------------------------------------------
def predictive(
    samples: list[dict[str, Any]], n_reads: int, residuals: np.ndarray, seed: int,
    draws: int = NOISE_DRAWS,
) -> dict[str, Any]:  # fmt: skip
    """Central value (median) and 90 % interval of rate, step (ms) and entry share: every sim
    sample ``draws`` times with one residual row each. A residual already holds the observed
    pass's count noise (Binomial over its reads), so it is not drawn a second time; without
    residuals the count is drawn Binomial(``n_reads``, the sample's rate)."""
    rng = np.random.default_rng(seed)
    m = len(samples) * draws
    wrong = np.repeat([s["wrong"] for s in samples], draws).astype(float)
    reads = np.repeat([s["reads"] for s in samples], draws).astype(float)
    step = np.repeat([s["step_ms"] for s in samples], draws).astype(float)
    entry = np.repeat([s["entry"] for s in samples], draws).astype(float)
    e = residuals[rng.integers(0, len(residuals), size=m)] if len(residuals) else np.zeros((m, 3))
    step = step * np.exp(e[:, 0])
    entry = np.clip(entry + e[:, 1], 0.0, 1.0)
    own = wrong / np.maximum(reads, 1.0)
    if len(residuals):
        # A residual is an observed pass's count against a central forecast: it carries that
        # pass's count noise already, so the rate is the residual applied, not drawn again.
        p = np.clip(smoothed_rate(own, n_reads) * np.exp(e[:, 2]), 0.0, 1.0)
        rate = np.clip(unsmoothed_rate(p, n_reads), 0.0, 1.0)
    else:  # no model error: count noise alone, around the sample's own rate
        rate = rng.binomial(n_reads, own) / n_reads

    def band(x: np.ndarray) -> dict[str, float]:
        lo, mid, hi = np.quantile(x, [PI[0], 0.5, PI[1]])
        return {"lo": float(f"{lo:.6g}"), "mid": float(f"{mid:.6g}"), "hi": float(f"{hi:.6g}")}

    return {"rate": band(rate), "step": band(step), "entry": band(entry), "samples": m}


def given_gauge_band(cond: dict[str, Any], n_reads: int, residuals: np.ndarray, key: str
                     ) -> dict[str, Any]:  # fmt: skip
    """The 90 % interval *given the measured gauge* (docs/forward-prediction.md, "The interval
    given the gauge"; proposal (ii''), beside the criterion, never instead of it): the
    conditional forecast's seeds at the gauge's host factor (:func:`conditional`'s
    ``samples``), each drawn by :func:`predictive` with leave-one-group-out ``residuals``
    (``vllm-forward`` and ``vllm-outcome`` pass those of the conditional forecasts in its
    regime: ``loo_residuals(..., by="regime_given_gauge")``). The host spread is gone; what
    is left is seeds, count noise and the model's error given a gauge, which the residuals
    measure."""
    return predictive(cond["samples"], n_reads, residuals, config_seed(key + "/given-gauge"))


GIVEN_GAUGE_COLUMNS = [f"gc_{p}_{x}" for p in PARTS for x in ("central", "pi_lo", "pi_hi")]


def given_gauge_columns(band: dict[str, Any]) -> dict[str, float]:
    """A :func:`given_gauge_band` as ``gc_<part>_<central|pi_lo|pi_hi>`` columns."""
    names = {"central": "mid", "pi_lo": "lo", "pi_hi": "hi"}
    return {f"gc_{p}_{x}": band[p][y] for p in PARTS for x, y in names.items()}


def criterion_given_gauge(df: pd.DataFrame) -> dict[str, Any]:
    """(i) coverage, (ii) sharpness against vLLM's spread within a window and (iii) boundary
    safety of the interval given the gauge (the ``gc_`` columns): :func:`criterion` on them.
    (iv) is the same forecast's central value and is reported once, by :func:`criterion`."""
    view = df.copy()
    for p in PARTS:
        for x in ("central", "pi_lo", "pi_hi"):
            view[f"{p}_{x}"] = df[f"gc_{p}_{x}"]
    per = criterion(view)
    for e in per.values():
        e.pop("conditional_meets_all")
    return per


# -- the criterion ----------------------------------------------------------------------------
def _wilson(k: int, n: int) -> list[float]:
    lo, hi = wilson(k, n)
    return [round(lo, 4), round(hi, 4)]


def _frac(k: int, n: int) -> float | None:
    return round(k / n, 4) if n else None


def own_spread(df: pd.DataFrame, between_runs: bool = False) -> dict[str, dict[str, float | None]]:
    """vLLM against itself, per regime and part: in configurations of >= SPREAD_MIN_PASSES
    passes, each pass predicted by the median of its other passes; the width of the interval
    around that median that holds 90 % of the passes (twice the 90th percentile of the
    distance). Rate and entry share in absolute units, step relative to the median.
    ``between_runs``: the other passes are only those of other runs (``df["run"]``: another
    process, another window of the machine), in configurations of any size."""
    dev: dict[str, dict[str, list[float]]] = {r: {p: [] for p in PARTS} for r in REGIMES}
    for _key, g in df.groupby("pass_group"):
        if not between_runs and len(g) < SPREAD_MIN_PASSES:
            continue
        vals = {"rate": g["rate_observed"].to_numpy(float),
                "step": g["step_ms_observed"].to_numpy(float),
                "entry": g["entry_observed"].to_numpy(float)}  # fmt: skip
        runs = g["run"].to_numpy() if between_runs else None
        for i, reg in enumerate(g["regime"]):
            others = runs != runs[i] if runs is not None else np.arange(len(g)) != i
            if not others.any():
                continue
            for p, v in vals.items():
                med = float(np.median(v[others]))
                d = abs(v[i] / med - 1) if p == "step" else abs(v[i] - med)
                dev[reg][p].append(d)
    return {
        r: {p: (round(2 * float(np.quantile(d, 0.9)), 6) if d else None) for p, d in ps.items()}
        | {"passes": len(ps["rate"])}
        for r, ps in dev.items()
    }


def sharpness(wid: pd.DataFrame, mask: pd.Series, spread: dict[str, Any]) -> dict[str, Any]:
    """(ii) per part: the median interval width of the passes in ``mask`` against vLLM's
    spread (a row of :func:`own_spread`; None where it has none)."""
    out = {}
    for p in PARTS:
        w = float(np.median(wid[p][mask])) if mask.any() else None
        own = spread[p] if spread else None
        ratio = round(w / own, 3) if (w is not None and own) else None
        out[p] = {
            "median_width": round(w, 6) if w is not None else None,
            "vllm_spread_width": own,
            "ratio": ratio,
            "met": bool(ratio is not None and ratio <= TARGETS["width_ratio_max"]),
        }
    return out


def widths(df: pd.DataFrame) -> pd.DataFrame:
    """The forecast's interval widths in the units of :func:`own_spread`."""
    return pd.DataFrame({
        "rate": df["rate_pi_hi"] - df["rate_pi_lo"],
        "step": (df["step_pi_hi"] - df["step_pi_lo"]) / df["step_central"],
        "entry": df["entry_pi_hi"] - df["entry_pi_lo"],
    })  # fmt: skip


def covered(df: pd.DataFrame) -> pd.DataFrame:
    """Whether each pass's observed value lies inside its 90 % interval, per part."""
    return pd.DataFrame(
        {p: (df[f"{p}_pi_lo"] <= df[o]) & (df[o] <= df[f"{p}_pi_hi"]) for p, o in OBSERVED.items()}
    )


def _coverage(cov: pd.DataFrame, overall: bool) -> dict[str, Any]:
    n = len(cov)
    out: dict[str, Any] = {}
    lo_t = TARGETS["coverage_min_per_regime"]
    for p in PARTS:
        k = int(cov[p].sum())
        frac = _frac(k, n)
        if overall:
            a, b = TARGETS["coverage_overall"]
            met = frac is not None and a <= frac <= b
        else:
            met = frac is not None and frac >= lo_t
        out[p] = {"covered": k, "passes": n, "fraction": frac, "wilson95": _wilson(k, n),
                  "met": bool(met)}  # fmt: skip
    return out


def regime_mask(df: pd.DataFrame, name: str) -> pd.Series:
    """The passes of one observed regime; ``"overall"``: every pass."""
    return df["regime"] == name if name != "overall" else pd.Series(True, index=df.index)


def regime_calibration(df: pd.DataFrame, cov: pd.DataFrame, name: str) -> dict[str, Any]:
    """One regime's (``"overall"``: every pass's) (i) coverage; at the boundary (iii) safety;
    overall, the passes of any regime above the rate's top (:func:`rate_above_upper`).
    ``cov``: :func:`covered` of ``df``."""
    mask = regime_mask(df, name)
    n = int(mask.sum())
    entry: dict[str, Any] = {
        "passes": n,
        "coverage": _coverage(cov[mask], overall=name == "overall"),
    }
    if name == "boundary":
        above = int((df["rate_observed"][mask] > df["rate_pi_hi"][mask]).sum())
        entry["safety"] = {
            "above_upper": above, "passes": n, "fraction": _frac(above, n),
            "wilson95": _wilson(above, n),
            "met": bool(n and above / n <= TARGETS["boundary_above_max"]),
        }  # fmt: skip
    if name == "overall":
        entry["rate_above_upper"] = rate_above_upper(df)
    return entry


def criterion(df: pd.DataFrame) -> dict[str, Any]:
    """(i) coverage, (ii) sharpness, (iii) boundary safety, (iv) the gauge-conditioned
    strict score, per regime (by the observed entry share) and overall."""
    cov, wid = covered(df), widths(df)
    spread = own_spread(df)
    per: dict[str, Any] = {}
    for name in (*REGIMES, "overall"):
        entry = regime_calibration(df, cov, name)
        mask = regime_mask(df, name)
        n, k4 = entry["passes"], int(df["cond_meets_all"][mask].sum())
        if name != "overall":
            entry["sharpness"] = sharpness(wid, mask, spread[name])
            entry["vllm_spread_passes"] = spread[name]["passes"]
        entry["conditional_meets_all"] = {
            "meets": k4, "passes": n, "fraction": _frac(k4, n), "wilson95": _wilson(k4, n),
            "met": bool(n and k4 / n >= TARGETS["conditional_meets_all_min"]),
        }  # fmt: skip
        per[name] = entry
    return per


def rate_above_upper(df: pd.DataFrame) -> dict[str, Any]:
    """Beside (iii), not part of the criterion: the passes of *any* regime whose rate lies above
    the interval's upper end, by observed regime. (iii) judges the passes that ran at the
    boundary; a pass the forecast put past it that ran CPU-bound (forward-30 at 17.5 ms) is
    under-called as much, and a risk tool must count it."""
    above = df["rate_observed"] > df["rate_pi_hi"]
    k, n = int(above.sum()), len(df)
    return {
        "above_upper": k, "passes": n, "fraction": _frac(k, n), "wilson95": _wilson(k, n),
        "by_regime": {r: int(above[df["regime"] == r].sum()) for r in REGIMES},
    }  # fmt: skip


def population_columns(cond: dict[str, Any], pops: dict[str, Any] | None, v: dict[str, Any]
                       ) -> dict[str, Any]:  # fmt: skip
    """vLLM's and the conditional forecast's step per population, and #23's three parts with
    the step judged that way (``forecast.population_step_ok``)."""
    if pops is None:  # no raw record to split the observed steps by
        return dict.fromkeys(POPULATION_COLUMNS)
    ok = population_step_ok(cond, pops)
    return {
        **{f"obs_step_{p}_ms": _r3(pops[f"{p}_ms"]) for p in POPULATIONS},
        **{f"obs_step_{p}_steps": pops[f"{p}_steps"] for p in POPULATIONS},
        **{f"cond_step_{p}_ms": cond[f"step_{p}_ms"] for p in POPULATIONS},
        "cond_pop_step_ok": ok, "cond_meets_all_pop": bool(v["rate_ok"] and v["landing_ok"] and ok),
    }  # fmt: skip


def _r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def per_population_score(df: pd.DataFrame) -> dict[str, Any]:
    """(iv) with #23's step part judged per population (``cond_meets_all_pop``), beside the
    committed (iv), per regime and overall: a proposal measured, not the criterion."""
    out: dict[str, Any] = {"what": "rate and landing as #23; the step part: sim's median "
                           "decode-only step and its median step with a prefill chunk each "
                           "within 10 % of vLLM's (population_step_ok)"}  # fmt: skip
    for name in (*REGIMES, "overall"):
        part = df if name == "overall" else df[df["regime"] == name]
        n, k = len(part), int(part["cond_meets_all_pop"].sum())
        out[name] = {"passes": n, "meets_all_per_population": k,
                     "meets_all": int(part["cond_meets_all"].sum()),
                     "fraction": _frac(k, n), "wilson95": _wilson(k, n)}  # fmt: skip
    return out


def unconditional(sched, sc, policy, model: dict[str, Any], group: str, n_reads: int, key: str,
                  seeds: int, simulate_seed) -> dict[str, Any]:  # fmt: skip
    """``vllm-plan``'s interval for a configuration before it runs (no gauge yet): the host
    factors and the model-error residuals of a committed ``vllm-forward`` (its summary.json's
    ``forecast``: ``host.factors``, ``model_error``), the configuration's own group left out,
    the count drawn over ``n_reads`` (the reads sim predicts)."""
    samples = sim_samples(sched, sc, policy, model["host"]["factors"], seeds, simulate_seed)
    reg = regime(float(np.median([s["entry"] for s in samples])))
    res = loo_residuals(model["model_error"], group, reg)
    band = predictive(samples, n_reads, res, config_seed(key))
    return {
        "interval": list(PI), "regime_predicted": reg, "host_factors": model["host"]["factors"],
        "seeds_per_factor": seeds, "residuals": int(len(res)),
        **{f"{p}_central": band[p]["mid"] for p in PARTS},
        **{f"{p}_pi90": [band[p]["lo"], band[p]["hi"]] for p in PARTS},
    }  # fmt: skip
