"""The pre-registered rounds pooled (issue 44, the proposed restatement of (i)): each pass is
judged on its round's frozen interval, per regime and overall, and the committed summary and
docs quote what the committed rounds give."""

from __future__ import annotations

import json
from pathlib import Path

from repo_root import ROOT

from gpu_check.vllm import rounds_pooled as rp

DATA = ROOT / "data" / "vllm"


def _pass(regime: str, rate: float, step: float, entry: float) -> dict:
    """A pass whose interval is rate [0.01, 0.02], step [10, 20] ms, entry [0.2, 0.8]."""
    return {"regime": regime, "rate_observed": rate, "step_ms_observed": step,
            "entry_observed": entry, "rate_pi_lo": 0.01, "rate_pi_hi": 0.02,
            "step_pi_lo": 10.0, "step_pi_hi": 20.0, "entry_pi_lo": 0.2, "entry_pi_hi": 0.8,
            "pass_group": "0.24.0/align/s16_d12000us/all-at-start/k3/none"}  # fmt: skip


def _round(folder: Path, name: str, passes: list[dict], forecast: bool = True) -> None:
    d = folder / name
    d.mkdir(parents=True)
    doc = {"forecast": {"passes_table": passes}} if forecast else {"results": []}
    (d / "outcome.json").write_text(json.dumps(doc))


def test_each_pass_is_judged_on_its_own_rounds_interval(tmp_path: Path) -> None:
    _round(tmp_path, "r1", [
        _pass("boundary", 0.015, 15.0, 0.5),   # inside in every part
        _pass("boundary", 0.030, 15.0, 0.5),   # rate above the top: (iii) counts it
        _pass("CPU-bound", 0.020, 25.0, 0.9),  # rate on the top edge: inside; step, entry out
    ])  # fmt: skip
    _round(tmp_path, "r2", [_pass("GPU-bound", 0.005, 12.0, 0.1)])  # rate and entry below
    _round(tmp_path, "r0", [], forecast=False)  # no forecast: skipped
    pool = rp.pooled(tmp_path)
    assert list(pool["rounds"]) == ["r1", "r2"]
    assert pool["rounds"]["r1"]["covered"] == {"rate": 2, "step": 2, "entry": 2}
    assert pool["rounds"]["r2"]["covered"] == {"rate": 0, "step": 1, "entry": 0}
    per = pool["per_regime"]
    assert per["overall"]["passes"] == 4
    assert {p: per["overall"]["coverage"][p]["covered"] for p in ("rate", "step", "entry")} == {
        "rate": 2, "step": 3, "entry": 2}  # fmt: skip
    assert per["boundary"]["safety"]["above_upper"] == 1
    assert per["boundary"]["safety"]["met"] is False  # 1 of 2 > 0.05
    assert per["overall"]["rate_above_upper"]["above_upper"] == 1
    # outside on the unsafe side: r1's rate, step and entry above; r2's rate and entry below
    assert per["overall"]["above_top"] == {"rate": 1, "step": 1, "entry": 1}
    assert per["GPU-bound"]["above_top"] == {"rate": 0, "step": 0, "entry": 0}
    # (i)'s band applies overall: 2 of 4 is under 0.84
    assert per["overall"]["coverage"]["rate"]["met"] is False
    assert per["CPU-bound"]["coverage"]["rate"]["met"] is True  # 1 of 1 >= 0.80 per regime
    text = rp.markdown(pool)
    assert "| overall | 2 / 3 / 2 of 4 (0.50 / 0.75 / 0.50) |" in text
    assert "| r2 | 1 | 0 / 1 / 0 |" in text


def _given(row: dict, lo: float, hi: float, delay_us: int = 12000) -> dict:
    """A pass with the interval given the gauge: rate [lo, hi], step and entry the frozen
    interval's."""
    return row | {
        "gc_rate_pi_lo": lo, "gc_rate_pi_hi": hi, "gc_step_pi_lo": 10.0, "gc_step_pi_hi": 20.0,
        "gc_entry_pi_lo": 0.2, "gc_entry_pi_hi": 0.8,
        "pass_group": f"0.24.0/align/s16_d{delay_us}us/all-at-start/k3/none",
    }  # fmt: skip


def test_given_the_gauge_each_pass_is_judged_on_its_gc_interval(tmp_path: Path) -> None:
    _round(tmp_path, "r1", [
        _given(_pass("boundary", 0.030, 15.0, 0.5), 0.025, 0.035),  # outside frozen, inside gc
        _given(_pass("boundary", 0.015, 15.0, 0.5), 0.020, 0.030),  # inside frozen, below gc
        _given(_pass("CPU-bound", 0.040, 15.0, 0.5), 0.010, 0.030, delay_us=0),  # above gc
    ])  # fmt: skip
    _round(tmp_path, "r2", [_pass("GPU-bound", 0.015, 12.0, 0.5)])  # judged before gc existed
    pool = rp.pooled(tmp_path)
    assert pool["per_regime"]["boundary"]["safety"]["above_upper"] == 1  # the frozen interval
    given = pool["given_gauge"]
    assert given["rounds_without"] == ["r2"] and list(given["rounds"]) == ["r1"]
    assert given["rounds"]["r1"]["covered"] == {"rate": 1, "step": 3, "entry": 3}
    per = given["per_regime"]
    assert per["overall"]["passes"] == 3
    assert per["boundary"]["coverage"]["rate"]["covered"] == 1
    assert per["boundary"]["safety"]["above_upper"] == 0  # below the band is not above it
    assert per["overall"]["rate_above_upper"]["above_upper"] == 1  # the CPU-bound pass
    assert given["passes_at_0ms"] == 1
    without = given["without_gauge_passes"]
    assert without["overall"]["passes"] == 2 and without["CPU-bound"]["passes"] == 0
    assert without["overall"]["rate_above_upper"]["above_upper"] == 0
    text = rp.markdown(pool)
    assert "| boundary | 1 / 2 / 2 of 2 (0.50 / 1.00 / 1.00) | 0 / 0 / 0 | 1 / 2 / 2 of 2" in text
    assert "| CPU-bound | 0 / 1 / 1 of 1 (0.00 / 1.00 / 1.00) | 1 / 0 / 0 | - | - |" in text
    assert "Rounds without it: r2." in text


def test_no_round_with_a_forecast_gives_nothing(tmp_path: Path) -> None:
    _round(tmp_path, "forward-23", [], forecast=False)
    assert rp.pooled(tmp_path) == {}
    assert rp.markdown({}) == ""


def test_the_committed_summary_holds_the_committed_rounds_pooled() -> None:
    """vllm-forward wrote forecast.preregistered_pooled from the rounds committed beside it:
    recomputing it from data/vllm/preregistered gives the same numbers."""
    summary = json.loads((DATA / "forward" / "summary.json").read_text())
    assert summary["forecast"]["preregistered_pooled"] == json.loads(
        json.dumps(rp.pooled(DATA / "preregistered"))
    )


def test_the_docs_quote_the_rounds_pooled() -> None:
    pool = rp.pooled(DATA / "preregistered")
    per = pool["per_regime"]
    text = (ROOT / "docs" / "forward-prediction.md").read_text()
    section = text[text.index("### The pre-registered rounds pooled") :]
    section = " ".join(section[: section.index("\n### ")].split())
    rows = [
        line
        for line in rp.markdown(pool).splitlines()
        if line.startswith("| ") and not line.startswith(("| observed", "| round |"))
    ]
    given = pool["given_gauge"]
    assert len(rows) == 4 + len(pool["rounds"]) + 4 + len(given["rounds"])
    for line in rows:  # the regime table's rows, then each round's
        assert line in section, line
    safety, above = per["boundary"]["safety"], per["overall"]["rate_above_upper"]
    assert f"{safety['above_upper']} of {safety['passes']} boundary passes" in section
    assert f"{above['above_upper']} of {above['passes']} passes" in section
    gper = given["per_regime"]
    safety, above = gper["boundary"]["safety"], gper["overall"]["rate_above_upper"]
    assert f"given the gauge, {safety['above_upper']} of {safety['passes']} boundary" in section
    assert f"{above['above_upper']} of {above['passes']} passes of every regime" in section
    assert f"{given['passes_at_0ms']} passes at 0 ms" in section

    # the misses' sides, as the bullets state them: above the top / outside
    def outside(p: dict, regime: str, part: str) -> int:
        return p[regime]["passes"] - p[regime]["coverage"][part]["covered"]

    over = per["overall"]
    assert (f"the step's {over['above_top']['step']} of {outside(per, 'overall', 'step')} "
            f"outside and the entry share's {over['above_top']['entry']} of "
            f"{outside(per, 'overall', 'entry')}") in section  # fmt: skip
    rate_out = outside(per, "overall", "rate")
    assert (
        f"the rate's {over['above_top']['rate']} of {rate_out} (the other "
        f"{rate_out - over['above_top']['rate']} below" in section
    )
    assert over["above_top"]["step"] == per["CPU-bound"]["above_top"]["step"]  # every one
    assert over["above_top"]["entry"] == per["CPU-bound"]["above_top"]["entry"]
    wper = given["without_gauge_passes"]
    g_over, g_bound, w_cpu = gper["overall"], gper["boundary"], wper["CPU-bound"]
    assert (f"{g_over['above_top']['entry']} of the {outside(gper, 'overall', 'entry')} entry "
            f"shares outside lie above the top ({g_bound['above_top']['entry']} of the "
            f"{outside(gper, 'boundary', 'entry')} at the boundary; "
            f"{w_cpu['above_top']['entry']} of the {outside(wper, 'CPU-bound', 'entry')} "
            f"CPU-bound ones without the passes at 0 ms), and {g_over['above_top']['rate']} of "
            f"the {outside(gper, 'overall', 'rate')} rates") in section  # fmt: skip


def test_the_readme_quotes_the_rounds_pooled() -> None:
    """README.md's Evidence line: the pooled rounds' passes, coverage per part and (iii)."""
    pool = rp.pooled(DATA / "preregistered")
    per = pool["per_regime"]
    over, safety = per["overall"]["coverage"], per["boundary"]["safety"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    n = per["overall"]["passes"]
    assert f"{words[len(pool['rounds'])]} pre-registered rounds on an H100, {n} passes" in readme
    for part, text in (("rate", "the rate inside in"), ("entry", "the entry share in"),
                       ("step", "the step in")):  # fmt: skip
        c = over[part]
        assert f"{text} {c['covered']} ({c['fraction']:.2f}" in readme, part
    assert f"{safety['above_upper']} of {safety['passes']} boundary passes above" in readme
    runs = [f for name in pool["rounds"] for f in (DATA / name).glob("*/summary.json")]
    devices = {json.loads(f.read_text())["environment"]["device"] for f in runs}
    assert len(devices) == 1 and "H100" in devices.pop()  # "on an H100"
