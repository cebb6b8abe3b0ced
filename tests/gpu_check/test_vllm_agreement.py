"""sim's policies against vLLM's own schedule: the committed runs and a hand-made race."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpu_check.vllm.agreement import compare_dir, policy_for, predict_step
from gpu_check.vllm.tables import results, run_folders
from sim.model.input_batch import RowOp
from sim.model.policies import get_policy
from sim.model.schedule import StepRecord

DATA = Path(__file__).resolve().parents[2] / "data" / "vllm"


def test_every_committed_run_agrees_with_its_policy() -> None:
    folders = run_folders(DATA)
    assert len(folders) >= 15
    for folder in folders:
        rep = json.loads((folder / "agreement.json").read_text())
        assert rep["agree"] == rep["scored"], folder
        assert rep["wrong_observed"] == rep["wrong_predicted"], folder
        assert rep["ambiguous"] <= 10, folder


def test_compare_reproduces_a_committed_report(tmp_path: Path) -> None:
    src = DATA / "v0.24.0" / "align_s16_d15ms"
    for name in ("schedule.json", "steps_vllm.parquet", "observed_vllm.parquet", "export.json"):
        shutil.copy(src / name, tmp_path / name)
    rep = compare_dir(tmp_path)
    assert rep == json.loads((src / "agreement.json").read_text())
    assert rep["close_call_steps"] > 0 and rep["confusion"]["observed_wrong_predicted_right"] == 0


def test_results_table_covers_both_modes_and_versions() -> None:
    rows, timing = results(DATA)
    assert {(r["vllm"], r["mode"]) for r in rows} >= {
        ("0.24.0", "align"), ("0.24.0", "none"), ("0.33.0", "align"), ("0.33.0", "none")
    }  # fmt: skip
    assert all(r["wrong_observed"] == 0 for r in rows if r["mode"] == "none")
    assert {t["pass"] for t in timing} == {"baseline", "instrumented", "baseline_after"}


def test_policy_for() -> None:
    assert policy_for("align", "0.24.0").name == "align"
    assert policy_for("none", "0.33.0").name == "device-authoritative"
    assert policy_for("none", "0.23.0").name == "synced-gather"


def _rec(step, ids, ops, sched, drafts, accepted, pp, pnd) -> StepRecord:
    n = len(ids)
    a = np.asarray
    return StepRecord(step, [], [], [], [], ops, ids, a(sched), a([10] * n), a([10] * n),
                      a(drafts), a(accepted), np.zeros(n, bool), a(pp), a(pnd))  # fmt: skip


# Step N: F decodes in row 0 (accepted 4), R finishes its prefill in row 1 (count 1).
# Step N+1: F is gone, new Q takes row 0, reorder swaps R (now a decode) to row 0.
PREV = _rec(0, ["F", "R"], [], [4, 10], [3, 0], [4, 1], [-1, -1], [])
CUR = _rec(
    1,
    ["R", "Q"],
    [RowOp("remove", 0, -1, "F"), RowOp("add", 0, -1, "Q"), RowOp("swap", 1, 0, "R")],
    [4, 10],
    [3, 0],
    [1, 1],
    [1, -1],
    [0, 0],
)


@pytest.mark.parametrize(("land_pos", "r_reads"), [(0, 1), (1, 1), (2, 4), (3, 1), (-1, 1)])
def test_align_gives_R_the_finished_request_count_only_between_fill_and_swap(
    land_pos: int, r_reads: int
) -> None:
    cpu, gpu = predict_step(get_policy("align"), PREV, CUR, np.ones(4, np.int64), land_pos)
    assert cpu[0] == r_reads and gpu[0] == r_reads  # align consumes the CPU value
    assert cpu[1] == 1  # Q is new


@pytest.mark.parametrize("land_pos", [0, 1, 2, 3, -1])
def test_device_authoritative_never_reads_the_buffer(land_pos: int) -> None:
    cpu, gpu = predict_step(get_policy("device-authoritative"), PREV, CUR, np.ones(4), land_pos)
    assert (cpu == 1).all() and gpu[0] == 1  # R had no drafts: not repaired, and 1 is right


def test_readme_totals_match_the_committed_results() -> None:
    import pandas as pd

    r = pd.read_csv(DATA / "results.csv")
    text = (DATA / "README.md").read_text()
    assert f"{r['scored'].sum():,} scored reads, 0 disagreements" in text
    assert (r["agree"] == r["scored"]).all()
    assert f"{r['ambiguous'].sum()} ambiguous (unscored)" in text
    assert (
        f"Align went wrong in {r.loc[r['mode'] == 'align', 'wrong_observed'].sum()} reads" in text
    )
    for row in r.itertuples():
        line = (f"| {row.vllm} | {row.run} | {row.mode} | {row.max_num_seqs} | "
                f"{int(row.gpu_delay_ms)} | {row.steps} | {row.reads} | {row.wrong_observed} | "
                f"{row.wrong_predicted} | {row.agree}/{row.scored} | {row.ambiguous} | "
                f"{row.close_call_steps} |")  # fmt: skip
        assert line in text, line
