"""A pre-registered forecast against its runs: issue 44's criterion on the intervals that
``vllm-plan`` committed before the run (``predictions.json``, each configuration's
``forecast``), not on intervals recomputed afterwards.

Per pass (one prediction, one exported run):

- its **regime** by the observed copy-at-entry share (:func:`gpu_check.vllm.forecast.regime`);
- whether the observed rate, median step and entry share lie inside the committed 90 %
  intervals (i), and, at the boundary, whether the rate lies above the upper end (iii);
- the **gauge-conditioned** forecast (iv): sim at the host factor of a measured gauge, judged
  by #23's strict three parts (:func:`gpu_check.vllm.outcome.judge`). The gauge is that of the
  process's own pure pass (align at 0 ms, the same run and repeat), turned into a factor on
  that pass's own timing; a process without one uses the pass's own gauge, as ``vllm-forward``
  does. ``gauge_from`` says which. Two rules are read from the round's frozen calibration,
  so a round frozen before them is scored as it was:

  - ``forecast.gauge_by_mode``: a configuration is gauged by its process's pure pass *of its
    own mode* where one ran (none at 0 ms for none), on that mode's timing. Each mode's timing
    is calibrated from its own passes, recorded in other windows of the machine; a factor
    measured on align's timing and applied to none's carries the ratio of those windows'
    speeds. In 0.24.0 the calibrated none/align ``sample_tokens`` spans are 6.30 / 7.46 ms
    (0.84), where every process of forward-28 and forward-29 measured 0.95 (same pass pairs:
    0.92 on the H200), so none given align's gauge ran about 10 % fast in sim.
  - ``forecast.slow_given_gauge`` (:mod:`gpu_check.vllm.slow_gauge`): sim runs at the share of
    slow host steps the line gives for the pure pass's own share (``cond_slow_prob``), instead
    of the calibrated share. Measured and not adopted: ``vllm-forward`` does not write it
    (docs/forward-prediction.md, "Gauged by mode").
- beside it, the forecast conditioned on the **step gauge** (``sg_*`` columns): the host
  factor at which sim's median step of the process's pure pass equals the step vLLM took
  there (:func:`step_matched_factor`). The ``sample_tokens`` gauge reads one host span; on
  forward-25's first processes the whole step at 0 ms ran slower than it said
  (docs/forward-prediction.md), and a CPU-bound pass's step is every host span at once.
  Defined after those processes and before the second ones ran, so those are its held-out
  test.

Sharpness (ii) is reported two ways: against vLLM's spread around the median of a
configuration's other passes (``own_spread``, as ``vllm-forward`` reports it), and, since a
forecast made before a run cannot know the run's window, against the spread of each pass
around the median of the same configuration's passes *in other processes*
(``own_spread(..., between_runs=True)``; docs/forward-prediction.md, "Sharpness (ii) as
stated is out of reach before a run", proposal (ii')).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from gpu_check.vllm import forecast as fc

Judged = tuple[dict[str, Any], dict[str, Any], Path]  # prediction, observed, export folder


def config_key(p: dict[str, Any]) -> str:
    """A configuration across its passes and processes: release, mode, workload, k, patch."""
    c = p["run_config"]
    return (f"{p['vllm']}/{p['mode']}/s{c['max_num_seqs']}_d{c['gpu_delay_us']}us/"
            f"{c['arrivals']}/k{p['k']}/{p['patch']}")  # fmt: skip


# the pure pass's prediction, gauge ms, step ms, export folder
Gauge = tuple[dict[str, Any], float, float, Path]


def process_of(p: dict[str, Any], by_mode: bool = False) -> tuple:
    """A prediction's process (run, repeat), with its mode where gauges go by mode."""
    proc = (p.get("run", ""), p["run_config"]["rep"])
    return (*proc, p["mode"]) if by_mode else proc


def gauges(judged: list[Judged], by_mode: bool = False) -> dict[tuple, Gauge]:
    """Each process's (run, repeat) pure pass with the least GPU delay (align at 0 ms where it
    ran): its prediction, measured gauge, median step (ms) and export folder; with
    ``by_mode``, also each (run, repeat, mode)'s, from the same reading."""
    from gpu_check.vllm.outcome import _json

    out: dict[tuple, Gauge] = {}
    for p, obs, folder in judged:
        meta = _json(folder / "export.json", "vllm-export summary")
        if not meta.get("host_gauge_pure") or meta.get("host_gauge_ms") is None:
            continue
        for proc in {process_of(p), process_of(p, by_mode)}:
            if proc not in out or (p["run_config"]["gpu_delay_us"]
                                   < out[proc][0]["run_config"]["gpu_delay_us"]):  # fmt: skip
                out[proc] = (p, float(meta["host_gauge_ms"]), float(obs["step_ms"]), folder)
    return out


def pure_slow_prob(folder: Path, slow_line: dict[str, Any] | None) -> float | None:
    """The share of slow host steps the slow gauge's line gives a process whose pure pass is
    exported at ``folder`` (None without a line or without the pass's host spans: sim keeps
    the calibrated share)."""
    from gpu_check.vllm.export import load_raw, raw_record_of
    from gpu_check.vllm.slow_gauge import slow_prob, slow_share

    raw = raw_record_of(folder)
    if slow_line is None or not raw.is_file():
        return None
    share = slow_share(load_raw(raw))
    return None if share is None else slow_prob(slow_line, share)


def step_matched_factor(sched, sc, policy, step_ms: float, start: float, simulate_seed) -> float:
    """The host factor at which sim's median step of ``sc`` (the pure pass's configuration)
    equals ``step_ms``, vLLM's there: secant steps from 1 and ``start`` (the ``sample_tokens``
    gauge's factor), at most three. A CPU-bound step is close to linear in the factor; a step
    that does not move with it (GPU-bound) keeps the last factor."""

    def step_at(f: float) -> float:
        return float(fc.conditional(sched, sc, policy, None, simulate_seed, factor=f)["step_ms"])

    f0, f1 = 1.0, start if abs(start - 1.0) > 0.02 else 1.1
    s0, s1 = step_at(f0), step_at(f1)
    for _ in range(3):
        if abs(s1 - step_ms) <= 0.005 * step_ms or s1 == s0:
            break
        f0, f1 = f1, max(0.2, f1 + (step_ms - s1) * (f1 - f0) / (s1 - s0))
        s0, s1 = s1, step_at(f1)
    return f1


class ProcessGauge(NamedTuple):
    """What a process's pure pass gives each of its configurations: the ``sample_tokens``
    gauge's host factor, the step gauge's (:func:`step_matched_factor`) and the slow gauge's
    share of slow steps (None: sim keeps the calibrated share)."""

    factor: float
    step_factor: float
    slow_prob: float | None


def process_gauge(pure: Gauge, cal: dict[str, Any], simulate_seed,
                  slow_line: dict[str, Any] | None) -> ProcessGauge:  # fmt: skip
    """The pure pass's gauges, each on its own configuration's timing."""
    from gpu_check.vllm.config import run_config_of
    from gpu_check.vllm.plan import prepared
    from sim.resolve.host_band import factor_of_gauge

    gp, gauge_ms, step_ms, g_folder = pure
    g_sched, g_sc, g_policy = prepared(gp["vllm"], gp["mode"], run_config_of(gp["run_config"]),
                                       cal, gp["k"])  # fmt: skip
    factor = factor_of_gauge(gauge_ms, g_sc.timing)
    return ProcessGauge(
        factor=factor,
        step_factor=step_matched_factor(g_sched, g_sc, g_policy, step_ms, factor, simulate_seed),
        slow_prob=pure_slow_prob(g_folder, slow_line),
    )


def pass_rows(judged: list[Judged], cal: dict[str, Any], simulate_seed,
              model_error: list[dict[str, Any]] | None = None,
              slow_line: dict[str, Any] | None = None,
              by_mode: bool = False) -> pd.DataFrame:  # fmt: skip
    """One row per pass: observed values, the committed intervals, coverage, the
    gauge-conditioned forecast's verdicts and, given the frozen residuals (``model_error``),
    its interval (``forecast.given_gauge_band``: the rule of the round's commit, no input
    from the pass but its gauge). ``slow_line``: the frozen slow gauge's line, applied to each
    process's pure pass; ``by_mode``: each configuration gauged by its process's pure pass of
    its own mode where one ran (module docstring)."""
    from gpu_check.vllm.calibrate import group_name
    from gpu_check.vllm.config import run_config_of
    from gpu_check.vllm.outcome import _json, judge
    from gpu_check.vllm.plan import prepared

    pure = gauges(judged, by_mode)
    gauged: dict[tuple, ProcessGauge] = {}  # each process's, computed once
    rows = []
    for p, obs, folder in judged:
        f = p["forecast"]
        proc = process_of(p, by_mode)
        proc = proc if proc in pure else process_of(p)
        sched, sc, policy = prepared(p["vllm"], p["mode"], run_config_of(p["run_config"]), cal,
                                     p["k"])  # fmt: skip
        if proc in pure:
            if proc not in gauged:
                gauged[proc] = process_gauge(pure[proc], cal, simulate_seed, slow_line)
            g = gauged[proc]
            cond = fc.conditional(sched, sc, policy, None, simulate_seed,
                                  factor=g.factor, slow_prob=g.slow_prob)  # fmt: skip
            source = "the process's pure pass" + (" of its mode" if len(proc) == 3 else "")
        else:
            own = _json(folder / "export.json", "vllm-export summary").get("host_gauge_ms")
            cond = fc.conditional(sched, sc, policy, own, simulate_seed)
            source = "the pass's own" if own is not None else "none (factor 1)"
        v = judge(cond, obs)
        if proc in gauged:  # the step gauge's forecast
            sg = fc.conditional(sched, sc, policy, None, simulate_seed,
                                factor=gauged[proc].step_factor)  # fmt: skip
            sv = judge(sg, obs)
            step_gauge = {
                "sg_factor": round(sg["factor"], 4), "sg_meets_all": sv["meets_all"],
                "sg_rate": round(sg["rate"], 6), "sg_step_ms": sg["step_ms"],
                "sg_entry": sg["landing"]["entry"], "sg_rate_ok": sv["rate_ok"],
                "sg_step_ok": sv["step_ok"], "sg_landing_ok": sv["landing_ok"],
            }  # fmt: skip
        else:
            step_gauge = {"sg_factor": None, "sg_meets_all": None}
        observed = {"rate": obs["rate"], "step": obs["step_ms"], "entry": obs["landing"]["entry"]}
        given: dict[str, float] = {}
        if model_error is not None:
            group = group_name((p["vllm"], p["mode"], p["run_config"]["max_num_seqs"], p["k"]))
            res = fc.loo_residuals(model_error, group, fc.regime(cond["landing"]["entry"]),
                                   by="regime_given_gauge")  # fmt: skip
            key = f"{proc[0]}/{config_key(p)}/r{proc[1]}"
            given = fc.given_gauge_columns(fc.given_gauge_band(cond, obs["reads"], res, key))
        row: dict[str, Any] = {
            "run": p.get("run", ""), "config": p["config"], "rep": p["run_config"]["rep"],
            "pass_group": config_key(p), "regime": fc.regime(observed["entry"]),
            "regime_predicted": f["regime_predicted"], "gauge_from": source,
            "cond_factor": round(cond["factor"], 4), "cond_meets_all": v["meets_all"],
            "cond_slow_prob": cond["slow_prob"],
            "cond_rate": round(cond["rate"], 6), "cond_step_ms": cond["step_ms"],
            "cond_entry": cond["landing"]["entry"], "cond_rate_ok": v["rate_ok"],
            "cond_step_ok": v["step_ok"], "cond_landing_ok": v["landing_ok"],
            "rate_observed": observed["rate"], "step_ms_observed": observed["step"],
            "entry_observed": observed["entry"], **step_gauge, **given,
            **fc.population_columns(cond, observed_populations(folder), v),
        }  # fmt: skip
        for part in fc.PARTS:
            lo, hi = f[f"{part}_pi90"]
            row |= {f"{part}_central": f[f"{part}_central"], f"{part}_pi_lo": lo,
                    f"{part}_pi_hi": hi}  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def forecast_outcome(
    judged: list[Judged], cal: dict[str, Any], simulate_seed,
    model_error: list[dict[str, Any]] | None = None,
    slow_line: dict[str, Any] | None = None,
    by_mode: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Issue 44's (i)-(iv) per regime on the committed intervals, with the sharpness against
    the spread between processes beside the one ``vllm-forward`` reports; given the frozen
    residuals, (i)-(iii) of the interval given the gauge beside them."""
    df = pass_rows(judged, cal, simulate_seed, model_error, slow_line, by_mode)
    given = {} if model_error is None else {"per_regime_given_gauge": fc.criterion_given_gauge(df)}
    per = fc.criterion(df)
    between = fc.own_spread(df, between_runs=True)
    wid = fc.widths(df)
    for name in fc.REGIMES:
        sharp = fc.sharpness(wid, df["regime"] == name, between[name])
        per[name]["sharpness_between_windows"] = sharp | {"passes": between[name]["passes"]}
    return {
        "passes": len(df),
        "per_regime": per,
        "regime_predicted_vs_observed": {
            f"{a} -> {b}": int(n)
            for (a, b), n in df.groupby(["regime_predicted", "regime"]).size().items()
        },
        "gauge_from": {k: int(n) for k, n in df["gauge_from"].value_counts().items()},
        "step_gauge": step_gauge_score(df),
        "per_population_step": fc.per_population_score(df[df["cond_meets_all_pop"].notna()]),
        **given,
        "passes_table": df.round(6).to_dict("records"),
    }


def first_round_passes(prereg: Path, vllm: str, mode: str = "align") -> list[tuple]:
    """A scored round's passes of ``vllm`` and ``mode`` in its first round: per configuration,
    its prediction, its row of ``outcome.json``'s ``passes_table`` (``cond_factor`` is the
    gauge's host factor it was scored at) and sim prepared on the frozen calibration
    (``sched, sc, policy``). For scripts that look again at a round; nothing is written."""
    from gpu_check.vllm.config import run_config_of
    from gpu_check.vllm.plan import prepared

    preds = json.loads((prereg / "predictions.json").read_text())
    cal = json.loads((prereg / "calibration.json").read_text())["calibration"]
    passes = json.loads((prereg / "outcome.json").read_text())["forecast"]["passes_table"]
    out = []
    for c in preds["configs"]:
        if c["run_config"]["rep"] or c["mode"] != mode or c["vllm"] != vllm:
            continue
        row = next(r for r in passes if r["run"] == c["run"] and r["config"] == c["config"]
                   and r["pass_group"].split("/")[1] == mode)  # fmt: skip
        out.append((c, row, prepared(vllm, mode, run_config_of(c["run_config"]), cal, c["k"])))
    return out


def first_round_entries(prereg: Path, vllm: str, variants: dict[str, Callable[[Any], Any]]
                        ) -> list[dict[str, Any]]:  # fmt: skip
    """A what-if on a scored round's first-round align passes of ``vllm``: per configuration
    vLLM's copy-at-entry share (``vllm``) and, per named variant (a change of the frozen
    calibration's timing), sim's given the round's gauge (the factor ``vllm-outcome`` used).
    Nothing is written."""
    from dataclasses import replace

    from gpu_check.vllm.forward import simulate_seed

    rows = []
    for c, p, (sched, sc, policy) in first_round_passes(prereg, vllm):
        row: dict[str, Any] = {"config": c["config"], "vllm": p["entry_observed"]}
        for name, change in variants.items():
            cond = fc.conditional(sched, replace(sc, timing=change(sc.timing)), policy, None,
                                  simulate_seed, factor=p["cond_factor"])  # fmt: skip
            row[name] = cond["landing"]["entry"]
        rows.append(row)
    return rows


def observed_populations(folder: Path) -> dict[str, Any] | None:
    """vLLM's steps of the pass exported at ``folder`` split by prefill chunk
    (``gauge.step_populations``), from its raw record beside the exports; None without one."""
    from gpu_check.vllm.export import load_raw, raw_record_of
    from gpu_check.vllm.gauge import step_populations

    raw = raw_record_of(folder)
    return step_populations(load_raw(raw)) if raw.is_file() else None


def step_gauge_score(df: pd.DataFrame) -> dict[str, Any]:
    """(iv) with the step gauge beside the committed gauge's, per regime and overall, on the
    passes whose process had a pure pass; and each process's two factors, per mode."""
    has = df[df["sg_factor"].notna()]
    out: dict[str, Any] = {}
    for name in (*fc.REGIMES, "overall"):
        part = has if name == "overall" else has[has["regime"] == name]
        n, k, k0 = len(part), int(part["sg_meets_all"].sum()), int(part["cond_meets_all"].sum())
        out[name] = {"passes": n, "step_gauge_meets_all": k, "gauge_meets_all": k0,
                     "fraction": fc._frac(k, n), "wilson95": fc._wilson(k, n)}  # fmt: skip
    # one entry per process and mode: gauged by mode, a process's none passes carry none's
    # factors, not align's
    mode = has["pass_group"].str.split("/").str[1]
    per_run = has.assign(mode=mode).groupby(["run", "rep", "mode"])[["cond_factor", "sg_factor"]]
    out["factors"] = [
        {"run": r, "rep": int(rep), "mode": m, "gauge": float(g), "step_gauge": float(sg)}
        for (r, rep, m), (g, sg) in per_run.first().iterrows()
    ]  # fmt: skip
    return out


def outcome_with_forecast(prereg: Path, roots: list[Path], partial: bool = False) -> dict[str, Any]:
    """``vllm-outcome``: #23's criterion per configuration, and where the predictions carry
    the forecast, issue 44's on it (``outcome.json``'s ``forecast``)."""
    from gpu_check.vllm.outcome import outcome

    return outcome(prereg, roots, partial, score=lambda j, p: score_forecast(j, p, prereg))


def calibration_of(prereg: Path, preds: dict[str, Any]) -> Path:
    """The calibration a round was made on: the copy ``vllm-plan`` froze beside its
    ``predictions.json``, else (a round planned before it froze one) the file it names."""
    from gpu_check.vllm.plan import CALIBRATION, FROZEN_CALIBRATION

    frozen = prereg / FROZEN_CALIBRATION
    return frozen if frozen.is_file() else Path(preds.get("calibration") or CALIBRATION)


def score_forecast(judged: list[Judged], preds: dict[str, Any], prereg: Path
                   ) -> dict[str, Any] | None:  # fmt: skip
    """The forecast's judgement, on the passes whose prediction carries one; the conditional
    forecast runs on the calibration the predictions were made on (:func:`calibration_of`)."""
    from gpu_check.vllm.forward import simulate_seed
    from sim.errors import SpecraceError

    mine = [j for j in judged if "forecast" in j[0]]
    if not mine:
        return None
    path = calibration_of(prereg, preds)
    try:
        data = path.read_bytes()
        frozen = json.loads(data)
        cal = frozen["calibration"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SpecraceError(f"{path}: no calibration for the conditional forecast ({e})") from None
    # the file is named by its path; its hash says which version scored (iv)
    # a round frozen with the forecast's residuals gets the interval given the gauge too
    model_error = (frozen.get("forecast") or {}).get("model_error")
    # a round frozen with the slow gauge's line runs (iv) at the share it gives, and one
    # frozen with gauge_by_mode gauges each configuration by its own mode's pure pass
    rule = frozen.get("forecast") or {}
    slow_line, by_mode = rule.get("slow_given_gauge"), bool(rule.get("gauge_by_mode"))
    return forecast_outcome(mine, cal, simulate_seed, model_error, slow_line, by_mode) | {
        "calibration": str(path), "calibration_sha256": hashlib.sha256(data).hexdigest(),
    }  # fmt: skip
