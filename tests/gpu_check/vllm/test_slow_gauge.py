"""The slow gauge: a pass's share of slow host steps, and the line that turns a process's
gauge-pass share into the share sim runs its other configurations at."""

from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
from repo_root import ROOT

from gpu_check.vllm import slow_gauge as sg
from gpu_check.vllm.calibrate import step_spans
from gpu_check.vllm.export import load_raw

DATA = ROOT / "data" / "vllm"
QUIET = DATA / "forward-29" / "v0.24.0" / "raw" / "raw_align_s16_d0ms_r1.json.gz"


@pytest.fixture(scope="module")
def quiet_raw() -> dict:
    return load_raw(QUIET)


def test_a_window_of_long_host_spans_is_flagged_step_for_step(quiet_raw) -> None:
    before = sg.slow_flags(quiet_raw)
    raw = copy.deepcopy(quiet_raw)
    steps = [s for s in raw["steps"] if "req_ids" in s]
    # steps 60-69 (flags 58-67: the flags start at step 2): their span made 1.6x as long
    for s in steps[60:70]:
        span = s["t_d2h_issued"] - s["t_read_end"]
        s["t_d2h_issued"] = s["t_read_end"] + int(1.6 * span)
    after = sg.slow_flags(raw)
    assert len(after) == len(before) == len(step_spans(raw))
    assert after[58:68].all()
    changed = np.flatnonzero(after != before)
    assert set(changed) <= set(range(58, 68))
    assert sg.slow_share(raw) == round(float(after.mean()), 4) > sg.slow_share(quiet_raw)


def test_a_record_without_row_ops_has_no_slow_share(quiet_raw) -> None:
    raw = copy.deepcopy(quiet_raw)
    for s in raw["steps"]:
        s.pop("ops", None)
    assert not sg.has_spans(raw) and sg.slow_share(raw) is None
    assert sg.slow_share({"steps": []}) is None


def test_the_median_line_ignores_the_long_phases_a_mean_would_follow() -> None:
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 0.3, 200)
    y = 0.002 + 0.35 * x
    phase = rng.random(200) < 0.3  # about a third of the passes caught a long phase
    y[phase] += rng.uniform(0.1, 0.3, int(phase.sum()))
    a, b = sg.median_line(x, y)
    assert abs(a - 0.002) < 0.003 and abs(b - 0.35) < 0.03
    ls_b, ls_a = np.polyfit(x, y, 1)
    assert ls_a > a + 0.03  # least squares is pulled up by the phases
    assert sg.median_line(x, y) == (a, b)  # deterministic


def _passes() -> pd.DataFrame:
    rows = [  # run, rep, mode, delay, pure, share, pass
        ("r1", 0, "align", 0, True, 0.0, "r1/align_d0"),
        ("r1", 0, "align", 15000, True, 0.2, "r1/align_d15"),
        ("r1", 0, "none", 13000, False, 0.1, "r1/none_d13"),
        ("r1", 1, "align", 0, True, 0.3, "r1/align_d0_r1"),
        ("r1", 1, "none", 0, True, 0.05, "r1/none_d0_r1"),
        ("r2", 0, "none", 13000, False, 0.4, "r2/none_d13"),  # no pure pass: no pair
    ]
    cols = ["run", "rep", "mode", "gpu_delay_us", "pure", "share", "pass"]
    return pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])


def test_each_other_pass_is_paired_with_its_processs_gauge_pass() -> None:
    pairs = sg.process_pairs(_passes())
    got = {(r.gauge_pass, r.pass_, r.gauge_share, r.share)
           for r in pairs.rename(columns={"pass": "pass_"}).itertuples()}  # fmt: skip
    assert got == {
        ("r1/align_d0", "r1/align_d15", 0.0, 0.2),
        ("r1/align_d0", "r1/none_d13", 0.0, 0.1),
        # a tie at 0 ms: the first in path order (align before none), never itself
        ("r1/align_d0_r1", "r1/none_d0_r1", 0.3, 0.05),
    }


def test_the_fit_needs_pairs_and_spread_and_its_share_stays_a_probability() -> None:
    few = pd.DataFrame({"gauge_pass": ["a"] * 3, "gauge_share": [0.0, 0.1, 0.2],
                        "pass": ["b", "c", "d"], "share": [0.0, 0.1, 0.2]})  # fmt: skip
    assert sg.fit(few) is None
    flat = pd.DataFrame({"gauge_pass": list("abcdefghijkl"), "gauge_share": [0.1] * 12,
                         "pass": list("ABCDEFGHIJKL"), "share": [0.1] * 12})  # fmt: skip
    assert sg.fit(flat) is None
    line = {"intercept": -0.01, "slope": 2.0}
    assert sg.slow_prob(line, 0.0) == 0.0 and sg.slow_prob(line, 0.9) == 1.0
    assert sg.slow_prob(line, 0.1) == 0.19


def test_the_records_line_is_quiet_where_the_gauge_pass_was() -> None:
    """Over the records, a process whose gauge pass had no slow step mostly had none in its
    other passes either; the median line starts near zero and rises with the gauge's share."""
    line = sg.fit_records(DATA)
    assert line is not None and line["pairs"] >= 300
    assert line["mean_share_gauge_zero"] < line["mean_share"] / 3
    assert 0 <= line["intercept"] < 0.01 and line["slope"] > 0
    # as docs/forward-prediction.md quotes it ("Gauged by mode")
    doc = " ".join((ROOT / "docs" / "forward-prediction.md").read_text().split())
    assert (f"({line['pairs']} pairs of a process's gauge pass and another of its passes, "
            f"{line['processes']} processes)") in doc  # fmt: skip
    assert f"share = {line['intercept']:.4f} + {line['slope']:.3f} x" in doc
    zero = f"{line['mean_share_gauge_zero']:.3f} ({line['pairs_gauge_zero']} passes)"
    assert f"averaged {zero}" in doc
    # not adopted: vllm-forward does not write it
    committed = json.loads((DATA / "forward" / "summary.json").read_text())["forecast"]
    assert "slow_given_gauge" not in committed


def test_the_conditional_forecast_runs_at_the_slow_gauges_share() -> None:
    from gpu_check.vllm.calibrate import calibrate, find_configs
    from gpu_check.vllm.forecast import conditional
    from gpu_check.vllm.forward import prepare, simulate_seed

    configs = find_configs(DATA)
    c = next(c for c in configs if c.run == "v0.24.0" and c.folder.name == "align_s16_d18ms")
    _raw, sc, sched, policy = prepare(c, calibrate(configs))
    assert sc.timing.worker_slow_prob > 0.05
    calibrated = conditional(sched, sc, policy, None, simulate_seed, seeds=3, factor=0.92)
    quiet = conditional(sched, sc, policy, None, simulate_seed, seeds=3, factor=0.92,
                        slow_prob=0.0)  # fmt: skip
    assert calibrated["slow_prob"] == sc.timing.worker_slow_prob and quiet["slow_prob"] == 0.0
    # past the boundary, the copies that land at entry are the slow steps'
    assert quiet["landing"]["entry"] < calibrated["landing"]["entry"]


def test_a_pure_pass_gives_the_lines_share_and_none_without_a_line(tmp_path) -> None:
    from gpu_check.vllm.prereg_forecast import pure_slow_prob

    folder = QUIET.parent.parent / "align_s16_d0ms_r1"
    line = {"intercept": 0.002, "slope": 0.35}
    share = sg.slow_share(load_raw(QUIET))
    assert pure_slow_prob(folder, line) == sg.slow_prob(line, share)
    assert pure_slow_prob(folder, None) is None
    assert pure_slow_prob(tmp_path / "align_s16_d0ms", line) is None  # no raw record beside
