"""sim's scheduler against vLLM's recorded schedules (sim.hardware.schedule_match)."""

from __future__ import annotations

import json

from repo_root import ROOT

from sim.hardware.schedule_match import match, step_differences
from sim.model.schedule_io import read_schedule

RUN = ROOT / "data/vllm/v0.24.0/align_s16_d0ms"


def test_a_recorded_align_run_is_reproduced_step_for_step() -> None:
    """vLLM 0.24.0, align, 16 seqs: every step identical, 177 swaps and 49 moves as vLLM."""
    out = match(read_schedule(RUN / "schedule.json"), {"max_num_seqs": 16})
    assert out["identical_steps_fraction"] == 1.0, out
    assert out["row_ops_sim"] == out["row_ops_vllm"]
    assert (out["row_ops_sim"]["swap"], out["row_ops_sim"]["move"]) == (177, 49)


def test_without_the_extra_step_rule_the_run_drifts(monkeypatch) -> None:
    import sim.model.scheduler_rules as scheduler_rules

    monkeypatch.setattr(scheduler_rules, "sure_to_finish", lambda st, r, out_arr, limits=None: None)
    out = match(read_schedule(RUN / "schedule.json"), {"max_num_seqs": 16})
    assert out["identical_steps_fraction"] < 0.5 and "unscheduled" in out["first_differences"]


def test_step_differences_names_what_differs() -> None:
    steps = read_schedule(RUN / "schedule.json").steps
    assert step_differences(steps[5], steps[5]) == []
    assert "layout" in step_differences(steps[5], steps[6])


def test_committed_match_is_identical_everywhere() -> None:
    d = json.loads((ROOT / "data/vllm/schedule_match.json").read_text())
    assert d["identical_everywhere"] and len(d["configs"]) == 49
    assert all(c["identical_steps_fraction"] == 1.0 for c in d["configs"].values())
