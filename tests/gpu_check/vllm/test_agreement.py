"""sim's policies against vLLM's own schedule: the committed runs and a hand-made race."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from repo_root import ROOT

from gpu_check.vllm.agreement import compare_dir, policy_for, predict_step
from gpu_check.vllm.tables import results, run_folders
from sim.model.input_batch import RowOp
from sim.model.policies import get_policy
from sim.model.schedule import StepRecord

DATA = ROOT / "data" / "vllm"


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

    from gpu_check.vllm.tables import configs_markdown, mrv2_markdown, results, summary_markdown

    r = pd.read_csv(DATA / "results.csv")
    text = (DATA / "README.md").read_text()
    assert f"{r['scored'].sum():,} scored reads in {len(r)}" in text
    assert (r["agree"] == r["scored"]).all()
    assert f"0 disagreements, {r['ambiguous'].sum()} ambiguous (unscored)" in text
    align_wrong = r.loc[r["mode"] == "align", "wrong_observed"].sum()
    assert f"Align went wrong in {align_wrong} reads" in text
    scored = r["close_call_reads"].sum() - r["close_call_ambiguous"].sum()
    close = (
        f"Close calls: {r['close_call_steps'].sum()} steps, {r['close_call_reads'].sum():,} "
        f"reads, {scored:,} scored, all {r['close_call_agree'].sum():,} agree"
    )
    assert close in text
    rows, timing = results(DATA)
    assert summary_markdown(rows) in text and configs_markdown(rows) in text
    assert mrv2_markdown(rows, timing) in text  # MRv2 of 0.33.0 and 0.34.0 side by side


def test_each_run_gets_the_policy_sims_resolution_assigns() -> None:
    assert policy_for("none", "0.23.0").name == "synced-gather"
    assert policy_for("none", "0.24.0").name == "device-authoritative"
    assert policy_for("align", "0.33.0").name == "align"
    assert policy_for("align", "0.33.0", "v2").name == "mrv2"


def _copy_export(src: Path, dest: Path) -> Path:
    """An export's inputs to compare_dir in a folder marked as an export, as vllm-export
    leaves one: compare_dir's own files are listed there, so it may write them again."""
    from sim.runs.outputs import write_marker

    write_marker(dest, "vllm-export")
    for name in ("schedule.json", "steps_vllm.parquet", "observed_vllm.parquet", "export.json"):
        shutil.copy(src / name, dest / name)
    return dest


def test_0230_none_scores_the_gather_and_the_consumed_count(tmp_path: Path) -> None:
    """0.23.0's synced gather goes wrong on the CPU, the correction kernel repairs drafted rows:
    both values are scored, so a consumed count that differed would be a disagreement."""
    import pandas as pd

    folder = _copy_export(DATA / "v0.23.0" / "none_s16_d0ms", tmp_path)
    rep = compare_dir(folder)
    pred = pd.read_parquet(folder / "agreement.parquet")
    assert (pred["predicted_cpu"] != pred["true_count"]).sum() > 50  # the double permute
    assert rep["wrong_predicted"] == rep["wrong_observed"] == 0 and rep["agree"] == rep["scored"]
    reads = pd.read_parquet(folder / "observed_vllm.parquet")
    bad = reads.index[reads["cpu_value"] != reads["true_count"]][0]
    reads.loc[bad, "gpu_value"] = reads.loc[bad, "cpu_value"]  # as if GDN had consumed it
    reads.to_parquet(folder / "observed_vllm.parquet", index=False)
    assert compare_dir(folder)["agree"] == rep["agree"] - 1


def test_mrv2_run_is_clean_and_its_resets_are_the_block_crossings(tmp_path: Path) -> None:
    import gzip

    from gpu_check.vllm.export_v2 import export_run_v2

    folder = DATA / "v0.33.0-mrv2"
    raw = json.loads(gzip.decompress((folder / "raw" / "raw_align_s16_d0ms.json.gz").read_bytes()))
    summary = json.loads((folder / "summary.json").read_text())
    rep = export_run_v2(raw, tmp_path / "a", summary)
    exp = json.loads((tmp_path / "a" / "export.json").read_text())
    assert rep["policy"] == "mrv2" and rep["agree"] == rep["reads"] > 4000
    assert exp["wrong"] == 0 and exp["boundary_resets"] > 100 and exp["new_rows_not_one"] == 0
    assert rep == json.loads((folder / "align_s16_d0ms" / "agreement.json").read_text())
    # a request reading another slot's count is seen, and the policy does not predict it
    step = next(s for s in raw["steps"][5:] if 4 in s.get("consumed", []))
    step["consumed"][step["consumed"].index(4)] = 2
    rep2 = export_run_v2(raw, tmp_path / "b", summary)
    assert rep2["wrong_observed"] == 1 and rep2["agree"] == rep["agree"] - 1
    assert not (tmp_path / "b" / "watch.json").exists()  # no --watch, no watch.json
    # under vllm-run --watch the plugin stood aside; the export's wrong read is named
    raw["watch"] = {"state": "not-applicable", "armed": False, "v1_class_changed": []}
    export_run_v2(raw, tmp_path / "c", summary)
    watch = json.loads((tmp_path / "c" / "watch.json").read_text())
    assert watch["stood_aside"] and watch["wrong_observed"] == 1 and not watch["equal"]


def test_0340_mrv2_record_is_what_issue_45_asks(tmp_path: Path) -> None:
    """vLLM 0.34.0 on the GPU: align and none, at and past the CPU/GPU boundary, at least 20,000
    reads, every read predicted by the policy sim.resolve assigns, the record re-exported from
    its raw files to the committed agreement."""
    import gzip

    from gpu_check.vllm.export_v2 import export_run_v2
    from gpu_check.vllm.tables import results

    rows = [r for r in results(DATA)[0] if r["vllm"] == "0.34.0"]
    assert {r["mode"] for r in rows} == {"align", "none"} and {r["runner"] for r in rows} == {"v2"}
    assert {r["policy"] for r in rows} == {policy_for("align", "0.34.0", "v2").name} == {"mrv2"}
    assert sum(int(r["reads"]) for r in rows) >= 20_000
    # the prose of data/vllm/README.md and docs/versions.md quotes these totals
    v2 = [r for r in results(DATA)[0] if r["runner"] == "v2"]
    n33 = sum(int(r["reads"]) for r in v2 if r["vllm"] == "0.33.0")
    n34 = sum(int(r["reads"]) for r in rows)
    prose = " ".join((DATA / "README.md").read_text().split())
    assert f"0 wrong in {n33:,} reads of 0.33.0 and {n34:,} of 0.34.0" in prose
    versions = " ".join((DATA.parent.parent / "docs" / "versions.md").read_text().split())
    assert f"0 wrong in {n34:,} reads" in versions
    assert all(r["agree"] == r["scored"] == r["reads"] for r in rows)
    assert len({r["gpu_delay_ms"] for r in rows if r["mode"] == "align"}) >= 2
    folder = DATA / "v0.34.0-mrv2"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["vllm_version"] == "0.34.0"
    assert summary["environment"]["device"].startswith("NVIDIA")
    for raw_path in sorted((folder / "raw").glob("raw_*.json.gz")):
        raw = json.loads(gzip.decompress(raw_path.read_bytes()))
        name = raw_path.name.removeprefix("raw_").removesuffix(".json.gz")
        rep = export_run_v2(raw, tmp_path / name, summary)
        assert rep == json.loads((folder / name / "agreement.json").read_text())


def test_mrv2_side_by_side_puts_each_release_in_its_own_columns() -> None:
    from gpu_check.vllm.tables import mrv2_markdown

    def row(v: str, run: str, wrong: int) -> dict:
        return {"vllm": v, "runner": "v2", "run": run, "mode": "align", "gpu_delay_ms": 22.0,
                "reads": 100, "wrong_observed": wrong, "agree": 100 - wrong,
                "scored": 100}  # fmt: skip

    def step(v: str, run: str, ms: float) -> dict:
        return {"vllm": v, "run": run, "mode": "align", "gpu_delay_ms": 22.0,
                "pass": "instrumented", "step_ms_median": ms}  # fmt: skip

    rows = [row("0.33.0", "a", 0), row("0.34.0", "b", 2), row("0.34.0", "c", 0)]
    timing = [step("0.33.0", "a", 25.0), step("0.34.0", "b", 23.0), step("0.34.0", "c", 24.5)]
    body = mrv2_markdown(rows, timing).splitlines()[2]
    want = "| align | 22 | 1 | 25.0 | 0 / 100 | 100/100 | 2 | 23.0–24.5 | 2 / 200 | 198/200 |"
    assert body == want
    assert mrv2_markdown(rows[:1], timing) == ""  # one release: nothing to set beside it


def test_deployment_doc_holds_the_plugins_committed_gpu_record() -> None:
    """docs/deployment.md's watch and cost tables are vllm-compare's output on data/vllm/plugin;
    the record is what issue 46 asks: the watch equal to the export on every unguarded align
    pass of two releases at two delays, and 0 under the guard."""
    from gpu_check.vllm.tables import markdown, results
    from gpu_check.vllm.watch_check import rows as watch_rows

    root = DATA / "plugin"
    doc = (DATA.parent.parent / "docs" / "deployment.md").read_text()
    out = markdown(root, results(root)[0])
    for block in out.split("\n\n")[2:]:  # the watch table, then the cost table
        assert block.strip() in doc
    watched = watch_rows(root)
    assert all(r["equal"] for r in watched)
    v1 = [r for r in watched if r["runner"] != "v2"]
    bare = [r for r in v1 if r["patch"] == "none"]
    racy = [r for r in bare if r["mode"] == "align"]  # the path that races: the watch sees it
    assert len(racy) >= 4 and {r["vllm_version"] for r in racy} == {"0.24.0", "0.33.0"}
    assert len({r["config"] for r in racy}) >= 2 and all(r["wrong_watched"] > 0 for r in racy)
    assert all(r["wrong_watched"] == 0 for r in v1 if r["patch"] != "none")  # the guard: 0
    none = [r for r in bare if r["mode"] == "none"]  # #45100's path: judged, and 0
    assert none and all(r["wrong_watched"] == r["wrong_observed"] == 0 for r in none)
    assert all(r["reads_watched"] == r["reads_observed"] > 0 for r in none)
    v2 = [r for r in watched if r["runner"] == "v2"]  # MRv2: the plugin stands aside
    assert v2 and all(r["state"] == "not-applicable" and not r["armed"] and r["equal"]
                      and r["reads_watched"] == 0 for r in v2)  # fmt: skip
    wrong = sum(r["wrong_watched"] for r in bare)
    flat = " ".join(doc.split())
    for v in ("0.24.0", "0.33.0"):  # sim's agreement on the same passes, as the doc quotes it
        mine = [r for r in results(root)[0] if r["vllm"] == v]
        agree, scored = sum(int(r["agree"]) for r in mine), sum(int(r["scored"]) for r in mine)
        assert agree == scored and f"{agree:,}/{scored:,} on {v}" in flat
    reads = sum(r["reads_watched"] for r in bare)
    assert f"{wrong} in {reads:,} reads" in doc
    import statistics

    bench = json.loads((root / "bench-0.33.0" / "summary.json").read_text())["results"]
    per_round = bench["s16_d0ms"]["watch"]["ratio_to_off"]["per_round"]
    sd = statistics.stdev(per_round)
    need = (1.96 * sd / 0.03) ** 2
    assert f"deviation of {sd:.3f} over these {len(per_round)} rounds" in doc.replace("\n  ", " ")
    assert f"about {round(need)} paired rounds" in doc.replace("\n  ", " ")
    readme = (DATA.parent.parent / "README.md").read_text()
    totals = next(b for b in out.split("\n\n") if b.startswith("Unguarded passes:"))
    assert f"> {totals.strip()}" in readme  # the command's own line, quoted
    # the off/watch call: its median, interval and spread, and the rounds that spread would need
    long = json.loads((root / "bench-0.33.0-off-watch" / "summary.json").read_text())["results"]
    ratio = long["s16_d0ms"]["watch"]["ratio_to_off"]
    sd = statistics.stdev(ratio["per_round"])
    lo, hi = ratio["bootstrap95_median"]
    assert (
        f"the median ratio was {ratio['median']:.3f}, its bootstrap 95 % interval {lo:.3f}-{hi:.3f}"
        in flat
    )
    assert f"deviation of {sd:.3f} over {ratio['rounds']} rounds" in flat
    assert f"needs about {round((1.96 * sd / 0.03) ** 2)} paired rounds" in flat
    # the third call (the watch timing itself): its ratio, interval, spread and host share
    quiet = json.loads((root / "bench-0.33.0-host-share" / "summary.json").read_text())
    watch = quiet["results"]["s16_d0ms"]["watch"]
    ratio, own = watch["ratio_to_off"], watch["watch"]
    lo, hi = ratio["bootstrap95_median"]
    sd = statistics.stdev(ratio["per_round"])
    share = f"{100 * own['host_share_of_step']:.1f} %"
    quoted = (
        f"the median ratio was {ratio['median']:.3f}, its bootstrap 95 % interval "
        f"{lo:.3f}-{hi:.3f}, and the watch's own host time {own['host_ms_per_step']:.3f} ms "
        f"a step, {share} of the step"
    )
    assert quoted in flat
    assert f"standard deviation was {sd:.3f} over {ratio['rounds']} rounds" in flat
    assert hi < 1.0 and lo > 0.97 and own["host_share_of_step"] < 0.03  # the claims the text makes
    readme_flat = " ".join(readme.split())
    assert (
        f"({ratio['rounds']} rounds): tokens/s {ratio['median']:.3f} of off (95 % interval "
        f"{lo:.3f}-{hi:.3f}), its own host time {share} of the step" in readme_flat
    )
    # the fourth call, the gdn-bit weights: what deployment.md and the README quote of it
    bit = json.loads((root / "bench-0.33.0-gdnbit" / "summary.json").read_text())
    assert bit["engine"]["weights"] == "gdn-bit"
    watch = bit["results"]["s16_d0ms"]["watch"]
    ratio, own = watch["ratio_to_off"], watch["watch"]
    lo, hi = ratio["bootstrap95_median"]
    sd = statistics.stdev(ratio["per_round"])
    share = f"{100 * own['host_share_of_step']:.1f} %"
    per_pass = set(own["wrong_per_round"])
    assert len(per_pass) == 1  # the same wrong reads in every pass, as the text says
    quoted = (
        f"the same {per_pass.pop()} wrong reads in each of {ratio['rounds']} passes). `off` and "
        f"`watch` for {bit['rounds_done']} rounds before the time limit: the median ratio was "
        f"{ratio['median']:.3f}, its bootstrap 95 % interval {lo:.3f}-{hi:.3f} (per-round "
        f"standard deviation {sd:.2f}), so the ratio is not resolved to 3 % in this window; the "
        f"watch's own host time was {own['host_ms_per_step']:.3f} ms a step, {share} of the step"
    )
    assert quoted in flat and lo < 0.97 and hi > 1.0  # the interval is wider than +-3 %
    assert f"{share} with the `gdn-bit` weights" in readme_flat
