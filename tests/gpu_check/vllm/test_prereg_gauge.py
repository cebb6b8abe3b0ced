"""The gauge a pre-registered round's (iv) conditions on: the process's pure pass, of the
configuration's own mode where the round's frozen calibration says so (``gauge_by_mode``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_root import ROOT

PREREG = ROOT / "data" / "vllm" / "preregistered" / "forward-29"
RUNS = ROOT / "data" / "vllm" / "forward-29"
PICK = ("align/s16_d0ms", "none/s16_d0ms", "none/s16_d13.5ms")  # v0.24.0, first process


def _round(tmp_path: Path, by_mode: bool) -> list[dict]:
    from gpu_check.vllm.prereg_forecast import outcome_with_forecast

    preds = json.loads((PREREG / "predictions.json").read_text())
    preds["configs"] = [c for c in preds["configs"] if c["run"] == "v0.24.0"
                        and f"{c['mode']}/{c['config']}" in PICK]  # fmt: skip
    assert len(preds["configs"]) == 3
    cal = json.loads((PREREG / "calibration.json").read_text())
    cal["forecast"]["gauge_by_mode"] = by_mode
    dest = tmp_path / ("by-mode" if by_mode else "any-mode")
    dest.mkdir()
    (dest / "predictions.json").write_text(json.dumps(preds))
    (dest / "calibration.json").write_text(json.dumps(cal))
    return outcome_with_forecast(dest, [RUNS])["forecast"]["passes_table"]


@pytest.fixture(scope="module")
def rounds(tmp_path_factory) -> dict[bool, dict[str, dict]]:
    tmp = tmp_path_factory.mktemp("gauge")
    return {m: {f"{r['pass_group'].split('/')[1]}/{r['config']}": r for r in _round(tmp, m)}
            for m in (False, True)}  # fmt: skip


def test_none_is_gauged_by_its_own_pure_pass_where_the_round_says_so(rounds) -> None:
    from gpu_check.vllm.config import run_config_of
    from gpu_check.vllm.plan import prepared
    from sim.resolve.host_band import factor_of_gauge

    anymode, bymode = rounds[False], rounds[True]
    # before the rule: one factor per process, align's d0 pass's
    assert len({r["cond_factor"] for r in anymode.values()}) == 1
    assert {r["gauge_from"] for r in anymode.values()} == {"the process's pure pass"}
    # with it: align keeps its factor, none takes none d0's gauge on none's own timing
    assert bymode["align/s16_d0ms"]["cond_factor"] == anymode["align/s16_d0ms"]["cond_factor"]
    cal = json.loads((PREREG / "calibration.json").read_text())["calibration"]
    preds = json.loads((PREREG / "predictions.json").read_text())["configs"]
    p = next(c for c in preds if c["run"] == "v0.24.0" and c["mode"] == "none"
             and c["config"] == "s16_d0ms")  # fmt: skip
    _sched, sc, _policy = prepared("0.24.0", "none", run_config_of(p["run_config"]), cal, 3)
    gauge = json.loads((RUNS / "v0.24.0" / "none_s16_d0ms" / "export.json").read_text())
    want = round(factor_of_gauge(gauge["host_gauge_ms"], sc.timing), 4)
    for name in ("none/s16_d0ms", "none/s16_d13.5ms"):
        assert bymode[name]["cond_factor"] == want
        assert bymode[name]["gauge_from"] == "the process's pure pass of its mode"
    # the two calibrations' windows differ: align's gauge put none's host about 10 % fast
    assert want > 1.08 * anymode["none/s16_d0ms"]["cond_factor"]
    assert bymode["none/s16_d0ms"]["cond_step_ms"] > anymode["none/s16_d0ms"]["cond_step_ms"]


def test_the_step_gauge_lists_each_process_mode_s_own_factors() -> None:
    """Gauged by mode, one process's align and none passes carry different factors; the
    outcome lists both, not the first pass's for the whole process."""
    import pandas as pd

    from gpu_check.vllm.prereg_forecast import step_gauge_score

    rows = [
        {"run": "v0.24.0", "rep": 0, "pass_group": f"0.24.0/{mode}/s16_d{d}us/x/k3/none",
         "regime": "CPU-bound", "cond_factor": f, "sg_factor": f + 0.01, "sg_meets_all": True,
         "cond_meets_all": True}
        for mode, f in (("align", 1.10), ("none", 1.30)) for d in (0, 14000)
    ]  # fmt: skip
    out = step_gauge_score(pd.DataFrame(rows))
    assert out["factors"] == [
        {"run": "v0.24.0", "rep": 0, "mode": "align", "gauge": 1.10, "step_gauge": 1.11},
        {"run": "v0.24.0", "rep": 0, "mode": "none", "gauge": 1.30, "step_gauge": 1.31},
    ]
    assert out["overall"]["passes"] == 4
