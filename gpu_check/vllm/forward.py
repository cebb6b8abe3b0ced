"""sim run *forward* on the real-vLLM configurations: the predicted wrong-read rate against the
observed one.

Unlike :mod:`gpu_check.vllm.agreement` (which replays vLLM's own schedule with the measured
landing of every step), nothing per step is taken from the measurement: the schedule is sim's,
the timing one calibrated set per group (:mod:`gpu_check.vllm.calibrate`), and the landing of
every copy whatever the SimPy model makes of them. Each configuration is judged by the strict
criterion of the pre-registered runs, :func:`gpu_check.vllm.outcome.judge` (rate inside the
observed 95 % interval and within 25 % where >= 20 wrong reads were seen; median step within
10 %; landing mix within total-variation 0.10): ``meets_all``. ``agrees`` (the two rates'
Wilson 95 % intervals overlap) is the older, looser test, kept beside it.
docs/forward-prediction.md has the details.
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from gpu_check.vllm.agreement import policy_for
from gpu_check.vllm.calibrate import (
    Measured,
    calibrate,
    find_configs,
    group_name,
    group_timing,
    timing_toml,
)
from gpu_check.vllm.config import RunConfig, workload
from gpu_check.vllm.export import load_raw
from gpu_check.vllm.forecast import GIVEN_GAUGE_COLUMNS, POPULATION_COLUMNS
from sim.errors import SpecraceError
from sim.model.params import (
    EngineParams,
    Scenario,
    ScriptedRequest,
    TimingParams,
    WorkloadParams,
    with_values,
)
from sim.model.schedule import Schedule
from sim.model.scheduling import build_schedule
from sim.model.simulate import simulate
from sim.model.trace import UPDATE_STATES
from sim.resolve.rates import wilson
from sim.runs.io import atomic_write_text, read_json, write_json

SEEDS = 5
MAX_STEPS = 2000

TABLE_COLUMNS = [
    "vllm", "run", "mode", "max_num_seqs", "gpu_delay_ms", "policy",
    "reads_observed", "wrong_observed", "rate_observed", "rate_observed_lo", "rate_observed_hi",
    "seeds", "reads_predicted", "wrong_predicted", "rate_predicted", "rate_predicted_lo",
    "rate_predicted_hi", "wrong_per_seed_min", "wrong_per_seed_max", "agrees",
    "entry_observed", "between_observed", "after_observed", "waited_observed",
    "entry_predicted", "between_predicted", "after_predicted", "waited_predicted",
    "step_ms_observed", "step_ms_predicted",
    "rate_ok", "rate_rel_error", "step_ok", "step_rel_error", "landing_ok", "landing_tv",
    "meets_all", "rep",
]  # fmt: skip
LANDING = ("entry", "between", "after", "waited")


def scenario_for(c: Measured, cal: dict[str, Any], raw: dict[str, Any] | None = None) -> Scenario:
    """The configuration as a sim scenario: engine, the measured requests, the group's timing
    with the configuration's GPU delay."""
    name = group_name(c.group)
    k = int(raw["num_speculative_tokens"]) if raw is not None else c.k
    if k != c.k:  # find_configs read k from the run's summary.json: the two must agree
        raise SpecraceError(f"{c.raw_path}: k {k} in the raw record, {c.k} in summary.json")
    # the generator's settings of the run (every committed run: RunConfig's defaults, seed 0)
    known = {f.name for f in fields(RunConfig)} - {"max_num_seqs", "gpu_delay_us", "label"}
    given = {n: v for n, v in (raw or {}).get("config", {}).items() if n in known}
    if "prompt_lens" in given:
        given["prompt_lens"] = tuple(given["prompt_lens"])
    cfg = RunConfig(max_num_seqs=c.max_num_seqs, **given)
    reqs = workload(cfg)
    if raw is not None:
        measured = [(r["prompt_len"], r["output_len"]) for r in raw["requests"]]
        ours = [(len(r["prompt_token_ids"]), r["max_tokens"]) for r in reqs]
        if measured != ours:
            raise SpecraceError(f"{c.raw_path}: requests differ from config.workload()")
    scripted = tuple(
        ScriptedRequest(
            req_id=f"req-{r['req_index']:03d}", arrival_step=int(r["arrival_step"]),
            prompt_len=len(r["prompt_token_ids"]), output_len=int(r["max_tokens"]),
            accepted=(k + 1,) * int(r["max_tokens"]),
        )
        for r in reqs
    )  # fmt: skip
    timing = group_timing(cal, c.vllm, c.mode, c.max_num_seqs, k)
    timing["gpu_forward_ns_base"] = int(
        round(timing["gpu_forward_ns_base"] + cal["gpu"]["slope"] * c.gpu_delay_us * 1e3)
    )
    base = Scenario(
        name=f"vllm-forward-{c.run}-{c.folder.name}",
        description=f"vLLM {c.vllm} {c.mode} {c.folder.name}, timing calibrated ({name})",
        default_steps=MAX_STEPS,
        engine=EngineParams(
            max_num_seqs=c.max_num_seqs, max_num_batched_tokens=2048, num_speculative_tokens=k,
            async_scheduling=True, mamba_cache_mode=_mode(c.mode),
            mamba_block_size=align_block_size(c) if c.mode == "align" else 0,
        ),
        workload=WorkloadParams(
            arrival="scripted", initial_requests=0, max_requests=len(scripted),
            requests=scripted, acceptance_probs=(1.0,) * k,
        ),
        timing=TimingParams(),
    )  # fmt: skip
    return with_values(base, {f"timing.{k_}": v for k_, v in timing.items()})


def align_block_size(c: Measured) -> int:
    """The block align mode cut prefills at in this run: vLLM's ``cache_config.block_size`` as
    the run recorded it (``summary.json``: modes.align.resolved.block_size; 80 on every
    committed run)."""
    path = c.folder.parent / "summary.json"
    try:
        block = read_json(path, "vllm-run summary")["modes"]["align"]["resolved"]["block_size"]
    except (KeyError, TypeError) as e:
        raise SpecraceError(f"{path}: no align block_size recorded ({e})") from None
    if not isinstance(block, int) or block <= 0:
        raise SpecraceError(f"{path}: align block_size {block!r} is not a positive integer")
    return block


def _mode(mode: str) -> Literal["none", "all", "align"]:
    if mode not in ("none", "all", "align"):
        raise SpecraceError(f"unknown mamba_cache_mode {mode!r}")
    return mode  # type: ignore[return-value]


def forward_schedule(sc: Scenario) -> Schedule:
    """sim's schedule of the whole workload: steps until the last request finished."""
    sched = build_schedule(sc, 0, MAX_STEPS)
    busy = [i for i, s in enumerate(sched.steps) if s.num_reqs]
    if not busy or busy[-1] >= MAX_STEPS - 1:
        raise SpecraceError(f"{sc.name}: the workload does not finish in {MAX_STEPS} steps")
    sched.steps = sched.steps[: busy[-1] + 1]
    return sched


def landing_regime(sched: Schedule, m) -> dict[str, int]:
    """Steps by where step N-1's copy landed for them, as outcome.observed_regime counts a
    measured run: at ``_update_states`` (entry), among its ops (between), after its last
    writing op (after), or not landed when the read began (waited)."""
    starts = {r[2]: r[0] for r in m.trace_rows or [] if r[4] == UPDATE_STATES}
    regime = {"entry": 0, "between": 0, "after": 0, "waited": 0}
    for n in range(1, len(sched.steps)):
        land, tim = m.timing[n - 1].land_ns, m.timing[n]
        if land < 0 or land > tim.read_ns - tim.wait_ns:  # not landed when the read began
            regime["waited"] += 1
        elif land <= starts[n]:
            regime["entry"] += 1
        elif tim.op_write_ns and land < tim.op_write_ns[-1]:
            regime["between"] += 1
        else:
            regime["after"] += 1
    return regime


def simulate_seed(sched: Schedule, sc: Scenario, policy, seed: int) -> dict[str, Any]:
    """One seed: reads, wrong reads (also at the prefill -> first-spec transition), the regime
    of every step's landing, mean and median step."""
    from sim.model.reads import build_reads

    m = simulate(sched, sc.timing, policy, seed, trace=True)
    reads = build_reads(sched, m)
    wrong = reads["cpu_wrong"] if policy.consumes_cpu_value else reads["gpu_wrong"]
    first = reads["prev_drafts"] == 0
    fwd = np.array([t.forward_start_ns for t in m.timing if t.forward_start_ns >= 0])
    return {
        **step_populations_ns(sched, m),
        "reads": int(len(reads)),
        "wrong": int(wrong.sum()),
        "transitions": int(first.sum()),
        "wrong_transitions": int((wrong & first).sum()),
        "steps": len(sched.steps) - 1,
        "step_ns": (fwd[-1] - fwd[0]) / (len(fwd) - 1),
        "step_ns_median": float(np.median(np.diff(fwd))),
        **landing_regime(sched, m),
    }


def step_populations_ns(sched: Schedule, m) -> dict[str, float | None]:
    """Sim's step durations split as vLLM's (``gauge.step_populations``): from one forward's
    start to the next, steps 1 on, by whether the step carries a prefill chunk; each
    population's median (ns), None where it has no step."""
    pops: dict[bool, list[int]] = {False: [], True: []}
    for n in range(1, len(sched.steps) - 1):
        a, b = m.timing[n].forward_start_ns, m.timing[n + 1].forward_start_ns
        if a >= 0 and b >= 0:
            pops[sched.steps[n].has_prefill].append(b - a)
    return {
        f"step_ns_median_{name}": float(np.median(pops[p])) if pops[p] else None
        for name, p in (("decode", False), ("prefill", True))
    }


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def prepare(c: Measured, cal: dict[str, Any]) -> tuple[dict[str, Any], Scenario, Schedule, Any]:
    """The configuration's raw record, scenario, sim schedule and policy."""
    raw = load_raw(c.raw_path)
    sc = scenario_for(c, cal, raw)
    return raw, sc, forward_schedule(sc), policy_for(c.mode, c.vllm)


def forward_row(c: Measured, cal: dict[str, Any], seeds: int, prepared: tuple | None = None
                ) -> dict[str, Any]:  # fmt: skip
    from gpu_check.vllm.outcome import judge, observed

    raw, sc, sched, policy = prepared if prepared is not None else prepare(c, cal)
    per = [simulate_seed(sched, sc, policy, s) for s in range(seeds)]
    obs = observed(c.folder)
    n_obs, w_obs = obs["reads"], obs["wrong"]
    n_pred, w_pred = sum(p["reads"] for p in per), sum(p["wrong"] for p in per)
    olo, ohi = obs["rate_ci95"]
    plo, phi = wilson(w_pred, n_pred)
    steps = sum(p["steps"] for p in per)
    pred = {
        "rate": w_pred / n_pred,
        "step_ms": round(float(np.median([p["step_ns_median"] for p in per])) / 1e6, 3),
        "landing": {k: round(sum(p[k] for p in per) / steps, 4) for k in LANDING},
    }
    verdict = judge(pred, obs)
    row = {
        "vllm": c.vllm, "run": c.run, "mode": c.mode, "max_num_seqs": c.max_num_seqs,
        "gpu_delay_ms": c.gpu_delay_us / 1000, "policy": policy.name,
        "reads_observed": n_obs, "wrong_observed": w_obs, "rate_observed": _r(w_obs / n_obs),
        "rate_observed_lo": _r(olo), "rate_observed_hi": _r(ohi),
        "seeds": seeds, "reads_predicted": n_pred, "wrong_predicted": w_pred,
        "rate_predicted": _r(pred["rate"]), "rate_predicted_lo": _r(plo),
        "rate_predicted_hi": _r(phi),
        "wrong_per_seed_min": min(p["wrong"] for p in per),
        "wrong_per_seed_max": max(p["wrong"] for p in per),
        "agrees": bool(olo <= phi and plo <= ohi),
        **{f"{k}_observed": obs["landing"][k] for k in LANDING},
        **{f"{k}_predicted": pred["landing"][k] for k in LANDING},
        "step_ms_observed": obs["step_ms"],
        "step_ms_predicted": pred["step_ms"],
        **{k: verdict[k] for k in ("rate_ok", "rate_rel_error", "step_ok", "step_rel_error",
                                   "landing_ok", "landing_tv", "meets_all")},
        "rep": int(raw["config"].get("rep", 0)),  # the pass of vllm-run --repeats
    }  # fmt: skip
    return row


def forward_table(
    configs: list[Measured], cal: dict[str, Any], seeds: int = SEEDS,
    factors: list[float] | None = None,
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:  # fmt: skip
    """The point-forecast table; with host ``factors``, every configuration's forecast as a
    distribution too (:mod:`gpu_check.vllm.forecast`) and the model-error residuals it used."""
    rows, parts = [], []
    for c in configs:
        prepared = prepare(c, cal)
        rows.append(forward_row(c, cal, seeds, prepared))
        if factors is not None:
            parts.append(forecast_parts(c, prepared, factors))
    df = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    if factors is None:
        return df, []
    return with_forecast(df, parts)


def forecast_parts(c: Measured, prepared: tuple, factors: list[float]) -> dict[str, Any]:
    """One configuration's sim samples over host factors x seeds, its pass group, gauge and
    the central forecast given that gauge."""
    from gpu_check.vllm import forecast as fc
    from gpu_check.vllm.gauge import host_gauge, step_populations
    from gpu_check.vllm.outcome import observed
    from gpu_check.vllm.repeatability import pass_key

    raw, sc, sched, policy = prepared
    samples = fc.sim_samples(sched, sc, policy, factors, fc.FACTOR_SEEDS, simulate_seed)
    gauge = host_gauge(raw)
    # every pass's gauge, pure or not (none past delay 0 may include GPU time: its sampler
    # synchronises; on the records it still helps, 2 -> 12 of those 18 passes meet all)
    cond = fc.conditional(sched, sc, policy, gauge["host_gauge_ms"], simulate_seed)
    return {
        "group": group_name(c.group), "samples": samples, "obs": observed(c.folder),
        "pass_group": "p" + hashlib.sha256(pass_key(raw).encode()).hexdigest()[:12],
        "gauge": gauge, "cond": cond, "populations": step_populations(raw),
        "regime_predicted": fc.regime(float(np.median([s["entry"] for s in samples]))),
    }  # fmt: skip


FORECAST_COLUMNS = [
    "regime", "pass_group", "regime_predicted", "host_gauge_ms", "host_gauge_pure",
    "rate_central", "rate_pi_lo", "rate_pi_hi", "step_central", "step_pi_lo", "step_pi_hi",
    "entry_central", "entry_pi_lo", "entry_pi_hi", "rate_covered", "step_covered",
    "entry_covered", "residuals", "cond_factor", "cond_rate", "cond_step_ms", "cond_entry",
    "cond_between", "cond_after", "cond_waited", "cond_rate_ok", "cond_step_ok",
    "cond_landing_ok", "cond_meets_all",
    # the step part per population (proposed, not the criterion: forecast.population_step_ok)
    *POPULATION_COLUMNS,
    # the interval given the pass's gauge (proposed, beside the criterion: given_gauge_band)
    *GIVEN_GAUGE_COLUMNS,
]  # fmt: skip


def with_forecast(
    df: pd.DataFrame, parts: list[dict[str, Any]]
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The forecast columns: intervals (model error leave-one-group-out from the
    gauge-conditioned residuals), regime, coverage, the conditional forecast's verdicts."""
    from gpu_check.vllm import forecast as fc
    from gpu_check.vllm.outcome import judge

    table = [
        {"group": p["group"], "regime_predicted": p["regime_predicted"],
         "regime_given_gauge": fc.regime(p["cond"]["landing"]["entry"]),
         **{k: _r(v) for k, v in fc.residual(p["cond"], p["obs"]).items()}}
        for p in parts
    ]  # fmt: skip
    extra = []
    for r, p in zip(df.to_dict("records"), parts, strict=True):
        res = fc.loo_residuals(table, p["group"], p["regime_predicted"])
        band = fc.predictive(p["samples"], r["reads_observed"], res, fc.config_seed(_row_key(r)))
        cond = p["cond"]
        # the interval given the gauge draws the residuals of its own (conditional) regime
        given_res = fc.loo_residuals(table, p["group"], fc.regime(cond["landing"]["entry"]),
                                     by="regime_given_gauge")  # fmt: skip
        given = fc.given_gauge_band(cond, r["reads_observed"], given_res, _row_key(r))
        v = judge(cond, p["obs"])
        cov = {
            "rate": band["rate"]["lo"] <= r["rate_observed"] <= band["rate"]["hi"],
            "step": band["step"]["lo"] <= r["step_ms_observed"] <= band["step"]["hi"],
            "entry": band["entry"]["lo"] <= r["entry_observed"] <= band["entry"]["hi"],
        }
        extra.append({
            "regime": fc.regime(r["entry_observed"]), "pass_group": p["pass_group"],
            "regime_predicted": p["regime_predicted"],
            "host_gauge_ms": p["gauge"]["host_gauge_ms"],
            "host_gauge_pure": p["gauge"]["host_gauge_pure"],
            **{f"{k}_{x}": band[k][y] for k in fc.PARTS
               for x, y in (("central", "mid"), ("pi_lo", "lo"), ("pi_hi", "hi"))},
            **{f"{k}_covered": bool(cov[k]) for k in fc.PARTS},
            "residuals": len(res), "cond_factor": round(cond["factor"], 4),
            "cond_rate": _r(cond["rate"]), "cond_step_ms": cond["step_ms"],
            **{f"cond_{k}": cond["landing"][k] for k in LANDING},
            **{f"cond_{k}": v[k] for k in ("rate_ok", "step_ok", "landing_ok", "meets_all")},
            **fc.population_columns(cond, p["populations"], v),
            **fc.given_gauge_columns(given),
        })  # fmt: skip
    out = pd.concat([df, pd.DataFrame(extra, columns=FORECAST_COLUMNS)], axis=1)
    return out, table


def _row_key(r: dict[str, Any]) -> str:
    tail = f"_r{r['rep']}" if r["rep"] else ""
    return f"{r['run']}/{r['mode']}_s{r['max_num_seqs']}_d{r['gpu_delay_ms']:g}ms{tail}"


# -- output -----------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def table_markdown(df: pd.DataFrame) -> str:
    """Per configuration: observed and predicted rate with their 95 % intervals (%)."""
    head = (
        "| vLLM | run | mode | seqs | delay ms | observed wrong/reads | observed % [95 % CI] "
        "| predicted wrong/reads (seeds) | predicted % [95 % CI] | agrees | landed entry / "
        "between / after / waited, observed | predicted | step ms obs / pred | rate ok | step ok "
        "| landing TV | meets all |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in df.itertuples(index=False):
        run = f"{r.run} (pass {r.rep + 1})" if r.rep else r.run
        lines.append(
            f"| {r.vllm} | {run} | {r.mode} | {r.max_num_seqs} | {r.gpu_delay_ms:g} "
            f"| {r.wrong_observed}/{r.reads_observed} | {_pct(r.rate_observed)} "
            f"[{_pct(r.rate_observed_lo)}, {_pct(r.rate_observed_hi)}] "
            f"| {r.wrong_predicted}/{r.reads_predicted} ({r.seeds}; {r.wrong_per_seed_min}–"
            f"{r.wrong_per_seed_max} per seed) | {_pct(r.rate_predicted)} "
            f"[{_pct(r.rate_predicted_lo)}, {_pct(r.rate_predicted_hi)}] "
            f"| {'yes' if r.agrees else '**no**'} "
            f"| {r.entry_observed:.2f} / {r.between_observed:.2f} / {r.after_observed:.2f} / "
            f"{r.waited_observed:.2f} | {r.entry_predicted:.2f} / {r.between_predicted:.2f} / "
            f"{r.after_predicted:.2f} / {r.waited_predicted:.2f} "
            f"| {r.step_ms_observed:.1f} / {r.step_ms_predicted:.1f} "
            f"| {_yes(r.rate_ok)} | {_yes(r.step_ok)} ({100 * r.step_rel_error:.0f} %) "
            f"| {r.landing_tv:.2f}{'' if r.landing_ok else ' **miss**'} | {_yes(r.meets_all)} |"
        )
    return "\n".join(lines) + "\n"


def _key(r: Any) -> str:
    tail = f"_r{r.rep}" if r.rep else ""
    return f"{r.run}/{r.mode}_s{r.max_num_seqs}_d{r.gpu_delay_ms:g}ms{tail}"


def summary(df: pd.DataFrame, cal: dict[str, Any]) -> dict[str, Any]:
    from gpu_check.vllm.outcome import LANDING_TV, RATE_MIN_WRONG, RATE_REL, STEP_REL

    n = int(len(df))
    bad = df[~df["agrees"]]
    return {
        "configs": n,
        "meets_all": int(df["meets_all"].sum()),
        "meets_all_fraction": round(float(df["meets_all"].sum()) / n, 4) if n else 0.0,
        "rate_ok": int(df["rate_ok"].sum()),
        "step_ok": int(df["step_ok"].sum()),
        "landing_ok": int(df["landing_ok"].sum()),
        "misses": {
            _key(r): [p for p in ("rate", "step", "landing") if not getattr(r, f"{p}_ok")]
            for r in df[~df["meets_all"]].itertuples(index=False)
        },
        "criterion": {
            "rate_rel": RATE_REL,
            "rate_min_wrong": RATE_MIN_WRONG,
            "step_rel": STEP_REL,
            "landing_tv": LANDING_TV,
            "code": "gpu_check.vllm.outcome.judge",
        },  # fmt: skip
        "agree": int(df["agrees"].sum()),
        "disagree": [_key(r) for r in bad.itertuples(index=False)],
        "agree_criterion": "Wilson 95 % intervals of observed and predicted rate overlap",
        "seeds": int(df["seeds"].max()) if len(df) else 0,
        "calibration": cal,
    }


def run_forward(root: Path, out: Path, seeds: int = SEEDS) -> dict[str, Any]:
    """Calibrate, write the timing files, run forward, write the table and the summary."""
    if seeds < 1:
        raise SpecraceError("--seeds must be >= 1")
    from gpu_check.vllm import forecast as fc
    from gpu_check.vllm import rounds_pooled
    from gpu_check.vllm.gauge_evidence import gauge_rows

    configs = find_configs(root)
    cal = calibrate(configs)
    ratios = fc.host_ratios(gauge_rows([root]))
    factors = fc.host_factors(ratios)
    from sim.runs.outputs import claim_dir

    claim_dir(out, "vllm-forward")
    for name in cal["groups"]:
        atomic_write_text(out / f"timing-{name}.toml", timing_toml(cal, name))
    df, table = forward_table(configs, cal, seeds, factors)
    atomic_write_text(out / "forward.csv", df.to_csv(index=False, lineterminator="\n"))
    rep = summary(df, cal)
    rep["forecast"] = forecast_summary(df, table, factors, len(ratios))
    rep["forecast"]["preregistered_pooled"] = rounds_pooled.pooled(root / "preregistered")
    atomic_write_text(out / "forward.md", forward_markdown(df, rep))
    write_figure(df, rep, out / "forward.png")
    write_forecast_figure(df, rep, out / "forecast.png")
    write_json(out / "summary.json", rep)
    return rep


def forecast_summary(df: pd.DataFrame, table: list[dict[str, Any]], factors: list[float],
                     ratio_passes: int) -> dict[str, Any]:  # fmt: skip
    """summary.json's ``forecast``: what the distribution is made of, the criterion per
    regime, and the residual table ``vllm-plan`` draws its model error from."""
    from gpu_check.vllm import forecast as fc

    return {
        "code": "gpu_check.vllm.forecast",
        "regimes": {"by": "observed copy-at-entry share", "cpu_bound_min": fc.CPU_BOUND_ENTRY,
                    "gpu_bound_max": fc.GPU_BOUND_ENTRY},
        "host": {"factors": factors, "points": fc.HOST_POINTS, "ratio_passes": ratio_passes,
                 "what": "quantiles (i + 0.5) / K of each pure pass's gauge over its (release, "
                 "mode, seqs, k) group's median, groups of >= 2 (gauge_evidence.pure_ratios)"},
        "seeds_per_factor": fc.FACTOR_SEEDS,
        "noise_draws_per_sample": fc.NOISE_DRAWS,
        "interval": list(fc.PI),
        "conditional_seeds": fc.COND_SEEDS,
        "targets": fc.TARGETS,
        "per_regime": fc.criterion(df),
        "per_population_step": fc.per_population_score(df),
        "per_regime_given_gauge": fc.criterion_given_gauge(df),
        "model_error": table,
        # vllm-plan freezes it: vllm-outcome's (iv) gauges each configuration by its process's
        # pure pass of the same mode (gpu_check.vllm.prereg_forecast)
        "gauge_by_mode": True,
    }  # fmt: skip


def forward_markdown(df: pd.DataFrame, rep: dict[str, Any]) -> str:
    """forward.md: the table, the criterion per regime, then the pre-registered rounds pooled."""
    from gpu_check.vllm.rounds_pooled import markdown

    pooled = markdown(rep.get("forecast", {}).get("preregistered_pooled") or {})
    return table_markdown(df) + "\n" + regime_markdown(rep) + ("\n" + pooled if pooled else "")


def regime_markdown(rep: dict[str, Any]) -> str:
    """The criterion per regime: coverage of the 90 % interval (rate / step / entry), width
    over vLLM's own spread, boundary safety, the gauge-conditioned strict score; then the
    interval given the pass's gauge, the same way (proposed, beside the criterion)."""
    lines = regime_rows(rep["forecast"]["per_regime"])
    pop = rep["forecast"].get("per_population_step")
    if pop:  # the proposal, measured beside (iv): never instead of it
        got = "; ".join(f"{name} {pop[name]['meets_all_per_population']}/{pop[name]['passes']}"
                        for name in ("CPU-bound", "boundary", "GPU-bound", "overall"))  # fmt: skip
        lines += ["", f"Conditional meets all with the step judged per population (proposed, "
                  f"not the criterion: decode-only and prefill-chunk steps each within 10 %): "
                  f"{got}."]  # fmt: skip
    given = rep["forecast"].get("per_regime_given_gauge")
    if given:
        lines += ["", "The interval given the pass's gauge (sim's seeds at the gauge's host "
                  "factor, with leave-one-group-out residuals of the conditional forecasts in "
                  "its regime; proposed, beside the criterion):", "",
                  *regime_rows(given)]  # fmt: skip
    return "\n".join(lines) + "\n"


def regime_rows(per: dict[str, Any]) -> list[str]:
    """One table row per regime; the last column where ``per`` holds (iv)."""

    def cov(e: dict[str, Any], p: str) -> str:
        c = e["coverage"][p]
        if not c["passes"]:
            return "–"
        miss = "" if c["met"] else " **miss**"
        return f"{c['covered']}/{c['passes']} ({c['fraction']:.2f}){miss}"

    def sharp(e: dict[str, Any], p: str) -> str:
        s = e.get("sharpness", {}).get(p)
        if s is None:
            return "–"
        if s["ratio"] is None:
            return "n/a (vLLM spread 0 or unmeasured) **miss**"
        return f"{s['ratio']:.2f}{'' if s['met'] else ' **miss**'}"

    iv = "conditional_meets_all" in per["overall"]
    lines = [
        "| regime | passes | coverage rate | coverage step | coverage entry | width/vLLM rate "
        "| width/vLLM step | width/vLLM entry | boundary above upper |"
        + (" conditional meets all |" if iv else ""),
        "|---|---:|---|---|---|---|---|---|---|" + ("---|" if iv else ""),
    ]
    for name in ("CPU-bound", "boundary", "GPU-bound", "overall"):  # summary.json sorts keys
        e = per[name]
        safe = e.get("safety")
        safe_s = (f"{safe['above_upper']}/{safe['passes']}{'' if safe['met'] else ' **miss**'}"
                  if safe else "–")  # fmt: skip
        row = (f"| {name} | {e['passes']} | {cov(e, 'rate')} | {cov(e, 'step')} "
               f"| {cov(e, 'entry')} | {sharp(e, 'rate')} | {sharp(e, 'step')} "
               f"| {sharp(e, 'entry')} | {safe_s} |")  # fmt: skip
        if iv:
            c4 = e["conditional_meets_all"]
            miss = "" if c4["met"] else " **miss**"
            row += (f" {c4['meets']}/{c4['passes']} ({c4['fraction']:.2f}){miss} |"
                    if c4["passes"] else " – |")  # fmt: skip
        lines.append(row)
    return lines


def write_forecast_figure(df: pd.DataFrame, rep: dict[str, Any], path: Path) -> None:
    from gpu_check.vllm.figure import forecast_figure

    fig = forecast_figure(df, "vllm-forward: observed passes over the predicted 90 % bands")
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=100, metadata={"Software": None})
    finally:
        plt.close(fig)


def write_figure(df: pd.DataFrame, rep: dict[str, Any], path: Path) -> None:
    from gpu_check.vllm.figure import forward_figure

    n = rep["configs"]
    fig = forward_figure(
        df,
        f"vllm-forward: meets_all {rep['meets_all']}/{n}; rate {rep['rate_ok']}/{n}, "
        f"step time {rep['step_ok']}/{n}, landing {rep['landing_ok']}/{n}",
    )
    fig.savefig(path, dpi=110, metadata={"Software": None})


def summary_text(rep: dict[str, Any]) -> str:
    n = rep["configs"]
    lines = [
        f"meets_all {rep['meets_all']}/{n} ({rep['meets_all_fraction']:.2f}): rate "
        f"{rep['rate_ok']}/{n}, step time {rep['step_ok']}/{n}, landing {rep['landing_ok']}/{n}",
        f"{rep['agree']}/{n} configurations agree ({rep['agree_criterion']})",
    ]
    lines += [f"misses: {k} ({', '.join(v)})" for k, v in rep["misses"].items()]
    if "forecast" in rep:
        lines += ["forecast as a distribution, per regime (observed entry share):",
                  regime_markdown(rep).rstrip()]  # fmt: skip
        pooled = rep["forecast"].get("preregistered_pooled")
        if pooled:
            from gpu_check.vllm.rounds_pooled import markdown

            lines.append(markdown(pooled).rstrip())
    return "\n".join(lines)
