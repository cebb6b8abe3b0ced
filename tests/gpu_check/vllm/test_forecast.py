"""The forward prediction as a distribution (issue #44): host spread, count noise, the
leave-one-group-out model error, determinism, the regimes and the criterion's arithmetic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from repo_root import ROOT

from gpu_check.vllm import forecast as fc

DATA = ROOT / "data" / "vllm"


@pytest.fixture(scope="module")
def boundary_config():
    """0.24.0 align, 16 seqs, 15 ms: a configuration at the CPU/GPU boundary, prepared."""
    from gpu_check.vllm.calibrate import calibrate, find_configs
    from gpu_check.vllm.forward import prepare

    configs = find_configs(DATA)
    cal = calibrate(configs)
    c = next(c for c in configs if c.run == "v0.24.0" and c.folder.name == "align_s16_d15ms")
    return prepare(c, cal)


def _width(band: dict, part: str) -> float:
    return band[part]["hi"] - band[part]["lo"]


def test_the_interval_widens_when_the_host_spread_widens(boundary_config) -> None:
    from gpu_check.vllm.forward import simulate_seed

    _raw, sc, sched, policy = boundary_config
    none = np.zeros((0, 3))
    narrow = fc.sim_samples(sched, sc, policy, [1.0, 1.0, 1.0], 2, simulate_seed)
    wide = fc.sim_samples(sched, sc, policy, [0.7, 1.0, 1.5], 2, simulate_seed)
    n = narrow[0]["reads"]
    bn, bw = fc.predictive(narrow, n, none, 1), fc.predictive(wide, n, none, 1)
    assert _width(bw, "step") > 2 * _width(bn, "step")
    assert _width(bw, "entry") > _width(bn, "entry")
    # a slower host is more CPU-bound: the copy lands at entry more often
    slow = fc.sim_samples(sched, sc, policy, [1.5], 2, simulate_seed)
    fast = fc.sim_samples(sched, sc, policy, [0.7], 2, simulate_seed)
    assert np.mean([s["entry"] for s in slow]) > np.mean([s["entry"] for s in fast])


def test_count_noise_alone_covers_a_binomial_truth_about_90_percent() -> None:
    n, p = 4000, 0.01
    samples = [{"reads": n, "wrong": int(p * n), "step_ms": 20.0, "entry": 1.0}] * 10
    truth = np.random.default_rng(123).binomial(n, p, size=300) / n
    inside = 0
    for t, x in enumerate(truth):
        band = fc.predictive(samples, n, np.zeros((0, 3)), seed=t)
        inside += band["rate"]["lo"] <= x <= band["rate"]["hi"]
    assert 0.85 <= inside / len(truth) <= 0.97
    # no count noise and no other spread: a point, not an interval
    assert band["step"]["lo"] == band["step"]["hi"] == 20.0


def test_a_residual_carries_the_count_noise_so_it_is_not_drawn_twice() -> None:
    """A zero residual on a rate the samples agree on is that rate, not a Binomial spread
    around it: the observed count behind a residual was a Binomial draw already."""
    n = 4000
    samples = [{"reads": n, "wrong": 40, "step_ms": 20.0, "entry": 1.0}] * 10
    band = fc.predictive(samples, n, np.zeros((5, 3)), seed=7)
    assert band["rate"]["lo"] == band["rate"]["hi"] == pytest.approx(0.01)
    # a zero rate stays zero through the smoothing and back
    zero = [{"reads": n, "wrong": 0, "step_ms": 20.0, "entry": 1.0}] * 10
    assert fc.predictive(zero, n, np.zeros((5, 3)), seed=7)["rate"]["hi"] == 0.0
    # a residual's rate ratio moves it: log 2 doubles the smoothed rate
    up = fc.predictive(samples, n, np.array([[0.0, 0.0, np.log(2.0)]]), seed=7)["rate"]["mid"]
    assert up == pytest.approx(fc.unsmoothed_rate(2 * fc.smoothed_rate(0.01, n), n), rel=1e-5)


def test_the_same_inputs_give_the_same_forecast() -> None:
    samples = [
        {"reads": 5000, "wrong": w, "step_ms": 18.0 + w / 10, "entry": min(1.0, w / 60)}
        for w in (0, 12, 40, 55)
    ]
    res = np.random.default_rng(5).normal(0.0, [0.05, 0.1, 0.4], size=(12, 3))
    seed = fc.config_seed("v0.24.0/align_s16_d15ms")
    assert seed == fc.config_seed("v0.24.0/align_s16_d15ms") != fc.config_seed("other")
    a = fc.predictive(samples, 4100, res, seed)
    assert a == fc.predictive(samples, 4100, res.copy(), seed)
    assert a != fc.predictive(samples, 4100, res, seed + 1)  # the draws do depend on it


def test_regime_thresholds() -> None:
    assert fc.regime(fc.CPU_BOUND_ENTRY) == "CPU-bound" == fc.regime(1.0)
    assert fc.regime(fc.CPU_BOUND_ENTRY - 1e-4) == "boundary"
    assert fc.regime(fc.GPU_BOUND_ENTRY) == "GPU-bound" == fc.regime(0.0)
    assert fc.regime(fc.GPU_BOUND_ENTRY + 1e-4) == "boundary"
    assert (fc.CPU_BOUND_ENTRY, fc.GPU_BOUND_ENTRY) == (0.9, 0.1)


def test_leave_one_out_excludes_the_configurations_own_group() -> None:
    def row(group: str, reg: str, x: float) -> dict:
        return {"group": group, "regime_predicted": reg, "log_step": x, "entry": x, "log_rate": x}

    table = [row("own", "boundary", 5.0)] * 20 + [row(f"g{i}", "boundary", 0.1) for i in range(9)]
    table += [row("g9", "CPU-bound", -0.2)] * 3
    res = fc.loo_residuals(table, "own", "boundary")
    assert len(res) == 9 and (res == 0.1).all()
    # too few in the regime: every other group's, still never its own
    res = fc.loo_residuals(table, "own", "CPU-bound")
    assert len(res) == 12 and 5.0 not in res
    # a forecast with the group left out does not see its huge residual
    samples = [{"reads": 4000, "wrong": 40, "step_ms": 20.0, "entry": 0.5}] * 5
    band = fc.predictive(samples, 4000, fc.loo_residuals(table, "own", "boundary"), 7)
    assert band["step"]["hi"] < 20.0 * np.exp(0.2)


def test_host_factors_are_quantile_points_of_the_ratios() -> None:
    rows = [
        {"vllm": "0.24.0", "mode": "align", "max_num_seqs": 16, "k": 3, "host_gauge_pure": True,
         "host_gauge_ms": g, "step_ms": 20.0}
        for g in (8.0, 10.0, 12.0)
    ] + [
        {"vllm": "0.24.0", "mode": "none", "max_num_seqs": 16, "k": 3, "host_gauge_pure": False,
         "host_gauge_ms": 30.0, "step_ms": 20.0},  # not pure: left out
        {"vllm": "0.33.0", "mode": "align", "max_num_seqs": 16, "k": 3, "host_gauge_pure": True,
         "host_gauge_ms": 5.0, "step_ms": 20.0},  # alone in its group: left out
    ]  # fmt: skip
    ratios = fc.host_ratios(rows)
    assert list(ratios) == [0.8, 1.0, 1.2]
    f = fc.host_factors(ratios, 3)
    assert f == [round(float(np.quantile(ratios, q)), 4) for q in (1 / 6, 0.5, 5 / 6)]
    with pytest.raises(ValueError):
        fc.host_factors(np.array([]))


def _table() -> pd.DataFrame:
    """Ten synthetic passes: 4 CPU-bound (one configuration of 4 passes), 4 boundary (one
    configuration of 4), 2 GPU-bound."""
    rows = []
    for i, (reg, entry) in enumerate([("CPU-bound", 1.0)] * 4 + [("boundary", 0.5)] * 4
                                     + [("GPU-bound", 0.0)] * 2):  # fmt: skip
        rows.append({
            "regime": reg, "pass_group": reg, "entry_observed": entry,
            "rate_observed": 0.01 + 0.001 * (i % 4), "step_ms_observed": 20.0 + (i % 4),
            "rate_pi_lo": 0.009, "rate_pi_hi": 0.0125, "step_central": 20.0,
            "step_pi_lo": 19.0, "step_pi_hi": 22.5, "entry_pi_lo": 0.4, "entry_pi_hi": 1.0,
            "cond_meets_all": i % 2 == 0,
        })  # fmt: skip
    return pd.DataFrame(rows)


def test_the_criterions_arithmetic_on_a_small_table() -> None:
    df = _table()
    per = fc.criterion(df)
    cpu, bnd, gpu, allp = (per[r] for r in ("CPU-bound", "boundary", "GPU-bound", "overall"))
    # rate 0.010..0.013: the pass at 0.013 is above 0.0125 (index 3 and 7)
    assert cpu["coverage"]["rate"]["covered"] == 3 and cpu["coverage"]["rate"]["passes"] == 4
    assert cpu["coverage"]["rate"]["met"] is False  # 0.75 < 0.80
    assert bnd["safety"] == {"above_upper": 1, "passes": 4, "fraction": 0.25,
                             "wilson95": bnd["safety"]["wilson95"], "met": False}  # fmt: skip
    lo, hi = bnd["safety"]["wilson95"]
    assert lo < 0.25 < hi
    # beside (iii): every regime's passes above the rate's top (index 3, CPU-bound; 7, boundary)
    above = allp["rate_above_upper"]
    assert above["above_upper"] == 2 and above["passes"] == 10 and above["fraction"] == 0.2
    assert above["by_regime"] == {"CPU-bound": 1, "boundary": 1, "GPU-bound": 0}
    # step 20..23 against [19, 22.5]: 23 is out (index 3, 7); GPU-bound indices 8, 9 -> 20, 21
    assert allp["coverage"]["step"]["covered"] == 8
    assert allp["coverage"]["step"]["met"] is False  # 0.80 outside [0.84, 0.96]
    # entry: GPU-bound passes at 0 lie below 0.4
    assert gpu["coverage"]["entry"]["covered"] == 0 and allp["coverage"]["entry"]["covered"] == 8
    # (iv) every other pass meets all
    assert allp["conditional_meets_all"]["meets"] == 5 and not allp["conditional_meets_all"]["met"]
    # (ii) the CPU-bound configuration's passes at rate 0.010..0.013: each against the median
    # of the other three; the width holding 90 % of them is twice the 90th percentile
    v = np.array([0.010, 0.011, 0.012, 0.013])
    dev = [abs(v[i] - np.median(np.delete(v, i))) for i in range(4)]
    own = 2 * np.quantile(dev, 0.9)
    s = cpu["sharpness"]["rate"]
    assert s["vllm_spread_width"] == pytest.approx(own, abs=1e-6)
    assert s["ratio"] == pytest.approx(0.0035 / own, abs=1e-3)
    assert s["met"] == (s["ratio"] <= fc.TARGETS["width_ratio_max"])
    # the GPU-bound pair is no configuration of >= 3 passes: no spread to compare with
    assert gpu["sharpness"]["rate"]["ratio"] is None and gpu["vllm_spread_passes"] == 0
    # the step spread is relative to the median
    st = [20.0, 21.0, 22.0, 23.0]
    dev = [abs(st[i] / np.median(np.delete(st, i)) - 1) for i in range(4)]
    assert cpu["sharpness"]["step"]["vllm_spread_width"] == pytest.approx(
        2 * np.quantile(dev, 0.9), abs=1e-6
    )


def test_a_full_coverage_table_meets_coverage() -> None:
    df = _table()
    df["rate_pi_hi"] = 1.0
    df["step_pi_hi"] = 100.0
    df["entry_pi_lo"] = 0.0
    per = fc.criterion(df)
    assert all(per[r]["coverage"][p]["met"] for r in fc.REGIMES for p in fc.PARTS)
    # 100 % overall is over-covered: outside [0.84, 0.96]
    assert not per["overall"]["coverage"]["rate"]["met"]
    assert per["boundary"]["safety"]["above_upper"] == 0 and per["boundary"]["safety"]["met"]


def test_plan_carries_the_intervals_and_outcome_reads_either(tmp_path) -> None:
    import copy
    import json

    from gpu_check.__main__ import main
    from gpu_check.vllm.outcome import check_predictions

    out = tmp_path / "pre"
    argv = ["vllm-plan", "--vllm", "0.24.0", "--modes", "align", "--configs", "16:15",
            "--seeds", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((out / "predictions.json").read_text())
    (c,) = doc["configs"]
    f = c["forecast"]
    for p in fc.PARTS:
        lo, hi = f[f"{p}_pi90"]
        assert lo <= f[f"{p}_central"] <= hi
    assert f["rate_pi90"][0] < f["rate_pi90"][1]  # a boundary configuration: not a point
    assert len(f["host_factors"]) == fc.HOST_POINTS and f["residuals"] > 0
    assert check_predictions(doc, "new") == doc["configs"]
    old = copy.deepcopy(doc)
    del old["configs"][0]["forecast"]  # a predictions.json from before the intervals
    assert check_predictions(old, "old") == old["configs"]


def test_the_window_evidence_in_forward_prediction_md_is_the_committed_gauge_tables() -> None:
    """docs/forward-prediction.md's table of spread within and between windows is
    gauge_evidence.window_spread over the committed gauge/gauge.csv, and its claim holds: another
    window at least doubles the median distance, and the CPU-bound step's between-window width
    exceeds 1.25 x forward's own_spread."""
    import json

    import pandas as pd

    from gpu_check.vllm.gauge_evidence import window_spread

    root = ROOT
    g = pd.read_csv(root / "data/vllm/gauge/gauge.csv")
    pure = g[g["host_gauge_pure"] & g["host_gauge_ms"].notna()]
    host = pure[
        (pure["gpu_delay_ms"] == 0) & (pure["entry_share"] >= 0.95) & pure["step_ms"].notna()
    ]
    doc = (root / "docs/forward-prediction.md").read_text()
    for label, s in (("gauge, pure passes", window_spread(pure, "host_gauge_ms")),
                     ("host-only passes", window_spread(host, "step_ms"))):  # fmt: skip
        a, b = s["same_run"], s["other_runs"]
        cells = (f"| {a['passes']}, {a['median']:.3f}, {a['width90']:.3f} | {b['passes']}, "
                 f"{b['median']:.3f}, {b['width90']:.3f} |")  # fmt: skip
        line = next(x for x in doc.splitlines() if label in x and x.startswith("|"))
        assert line.endswith(cells), (line, cells)
        assert b["median"] >= 2 * a["median"] * 0.95
    cpu = json.loads((root / "data/vllm/forward/summary.json").read_text())["forecast"][
        "per_regime"]["CPU-bound"]["sharpness"]["step"]  # fmt: skip
    between = window_spread(host, "step_ms")["other_runs"]["width90"]
    assert between / cpu["vllm_spread_width"] > 1.25
    assert f"{between:.3f} = {between / cpu['vllm_spread_width']:.2f} x" in doc
    assert f"{cpu['ratio']:.2f} x vLLM's own spread ({cpu['median_width']:.3f} against" in doc
    assert f"interval is {cpu['median_width'] / between:.2f} x." in doc


# -- the step part per population (a proposal measured beside (iv)) ----------------------------
def _pops(decode=20.0, prefill=30.0, n_decode=50, n_prefill=50) -> dict:
    return {"decode_ms": decode, "decode_steps": n_decode, "prefill_ms": prefill,
            "prefill_steps": n_prefill}  # fmt: skip


def test_each_population_must_be_within_ten_percent() -> None:
    ok = {"step_decode_ms": 21.9, "step_prefill_ms": 27.1}  # 9.5 % and 9.7 %
    assert fc.population_step_ok(ok, _pops())
    assert not fc.population_step_ok({**ok, "step_prefill_ms": 26.9}, _pops())  # 10.3 % short
    assert not fc.population_step_ok({**ok, "step_decode_ms": 22.1}, _pops())
    # a population vLLM barely ran is not judged; one sim never ran, where vLLM did, fails
    assert fc.population_step_ok({**ok, "step_prefill_ms": 10.0}, _pops(n_prefill=9))
    assert not fc.population_step_ok({**ok, "step_prefill_ms": None}, _pops())
    assert not fc.population_step_ok({**ok, "step_prefill_ms": float("nan")}, _pops())  # a CSV's
    assert fc.population_step_ok({**ok, "step_prefill_ms": None}, _pops(prefill=None, n_prefill=0))


def test_the_per_population_score_counts_by_regime() -> None:
    df = pd.DataFrame({
        "regime": ["CPU-bound"] * 3 + ["boundary"] * 2,
        "cond_meets_all": [True, False, False, False, True],
        "cond_meets_all_pop": [True, True, False, False, True],
    })  # fmt: skip
    got = fc.per_population_score(df)
    assert got["CPU-bound"]["meets_all_per_population"] == 2 and got["CPU-bound"]["meets_all"] == 1
    assert got["boundary"]["meets_all_per_population"] == 1 and got["GPU-bound"]["passes"] == 0
    assert got["overall"] | {"wilson95": None} == {
        "passes": 5, "meets_all_per_population": 3, "meets_all": 2, "fraction": 0.6,
        "wilson95": None}  # fmt: skip


def test_sims_step_populations_split_every_step_it_ran(boundary_config) -> None:
    """forward.step_populations_ns splits sim's forward-to-forward intervals by the step's
    prefill chunk; together they are the intervals the step median is taken over."""
    from gpu_check.vllm.forward import step_populations_ns
    from sim.model.simulate import simulate

    _raw, sc, sched, policy = boundary_config
    m = simulate(sched, sc.timing, policy, 0, trace=True)
    got = step_populations_ns(sched, m)
    fwd = [t.forward_start_ns for t in m.timing]
    dec = [b - a for n, (a, b) in enumerate(zip(fwd[1:-1], fwd[2:], strict=True), 1)
           if a >= 0 and b >= 0 and not sched.steps[n].has_prefill]  # fmt: skip
    assert got["step_ns_median_decode"] == float(np.median(dec)) and len(dec) > 20
    assert got["step_ns_median_prefill"] is not None
    assert got["step_ns_median_decode"] < got["step_ns_median_prefill"]


def test_the_interval_given_the_gauge_is_the_criterion_on_its_own_columns() -> None:
    df = _table()
    # the given-gauge columns: the rate interval covers every pass, the step interval none
    given_cols = {"rate_pi_lo": 0.0, "rate_pi_hi": 1.0, "step_central": 50.0,
                  "step_pi_lo": 40.0, "step_pi_hi": 60.0, "entry_pi_lo": 0.0,
                  "entry_pi_hi": 1.0, "rate_central": 0.01, "entry_central": 0.5}  # fmt: skip
    for x, v in given_cols.items():
        df["gc_" + x] = v
    given, plain = fc.criterion_given_gauge(df), fc.criterion(df)
    assert given["overall"]["coverage"]["rate"]["covered"] == 10
    assert given["overall"]["coverage"]["step"]["covered"] == 0
    assert plain["overall"]["coverage"]["step"]["covered"] == 8  # the unconditional columns
    # sharpness against the same vLLM spread, with the given-gauge width (1.0 wide)
    s = given["CPU-bound"]["sharpness"]["rate"]
    assert s["median_width"] == 1.0
    assert s["vllm_spread_width"] == plain["CPU-bound"]["sharpness"]["rate"]["vllm_spread_width"]
    assert given["boundary"]["safety"]["above_upper"] == 0
    # (iv) is the conditional forecast's central value: reported once, by the criterion
    assert all("conditional_meets_all" not in e for e in given.values())
    assert "conditional_meets_all" in plain["overall"]


def test_the_interval_given_the_gauge_is_the_seeds_at_the_gauges_factor(boundary_config) -> None:
    from gpu_check.vllm.forward import simulate_seed

    _raw, sc, sched, policy = boundary_config
    cond = fc.conditional(sched, sc, policy, None, simulate_seed, seeds=3, factor=1.2)
    assert len(cond["samples"]) == 3
    # the samples are the seeds the central forecast pooled
    assert sum(s["wrong"] for s in cond["samples"]) == cond["wrong"]
    n = cond["samples"][0]["reads"]
    none = np.zeros((0, 3))
    given = fc.given_gauge_band(cond, n, none, "k")
    assert given == fc.given_gauge_band(cond, n, none, "k")  # deterministic
    # the whole host spread around the same point is wider than its one factor
    spread = fc.predictive(
        fc.sim_samples(sched, sc, policy, [0.85, 1.2, 1.35], 3, simulate_seed), n, none, 1
    )
    assert _width(spread, "step") > 2 * _width(given, "step")
    assert fc.given_gauge_columns(given)["gc_step_pi_hi"] == given["step"]["hi"]
