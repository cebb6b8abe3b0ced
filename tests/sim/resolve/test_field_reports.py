"""Field reports: the verdict rule, the committed table against its raw data, one tiny arm."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from repo_root import ROOT

from sim.resolve.field_reports import (
    ARMS,
    Arm,
    reported_interval,
    run_all,
    summary_markdown,
    summary_rows,
    verdict,
)
from sim.resolve.rates import RateEstimate
from sim.resolve.resolution import VllmSetup, resolve

DATA = ROOT / "data" / "field_reports"


def _estimate(corrupted: int, generations: int, lo: float, hi: float) -> RateEstimate:
    return RateEstimate("x", 1, 10, generations, corrupted, 1e4 * corrupted / generations, lo,
                        hi, 0, 0.0, 0.0, 0.0, 0, 0, {}, 1.0, 1.0)  # fmt: skip


def test_verdict_compares_the_two_intervals() -> None:
    arm = Arm("r", "a", 16, 20_480, VllmSetup(), ())
    rate, lo, hi = reported_interval(arm)
    assert rate == pytest.approx(7.8125) and lo < rate < hi
    assert verdict(arm, _estimate(0, 1000, 0.0, lo - 0.1)) == "disagree: predicted lower"
    assert verdict(arm, _estimate(50, 1000, hi + 0.1, 600.0)) == "disagree: predicted higher"
    assert verdict(arm, _estimate(1, 1000, 0.2, lo + 0.1)) == "agree"
    qualitative = Arm("r", "a", -1, 0, VllmSetup(), ())
    assert reported_interval(qualitative) is None
    assert verdict(qualitative, _estimate(0, 100, 0.0, 300.0)) == "disagree: none predicted"


def test_every_arm_resolves_and_states_its_assumptions() -> None:
    for arm in ARMS:
        assert arm.assumed, f"{arm.report} {arm.arm}: say what was assumed"
        resolve(arm.setup)  # no arm is a configuration its release would refuse


def test_a_tiny_arm_runs_and_renders() -> None:
    arm = replace(ARMS[2], seeds=1, steps=150)  # #53919 align, async
    rows = run_all((arm,))
    assert [r["timing"] for r in rows] == ["roofline", "balanced"]
    assert all(r["policy"] == "align" for r in rows)
    text = summary_markdown(rows)
    assert "vllm#53919/#53912" in text and "Assumed where the report is silent" in text


@pytest.mark.skipif(not (DATA / "raw.json").is_file(), reason="no committed field reports")
def test_committed_summary_is_the_raw_data_rendered() -> None:
    raw = json.loads((DATA / "raw.json").read_text())
    assert (DATA / "summary.md").read_text() == summary_markdown(raw)
    assert json.loads((DATA / "summary.json").read_text()) == json.loads(
        json.dumps(summary_rows(raw))
    )
    assert {(r["report"], r["arm"]) for r in raw} == {(a.report, a.arm) for a in ARMS}
