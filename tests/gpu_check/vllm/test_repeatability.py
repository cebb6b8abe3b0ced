"""``vllm-repeatability``: the forward criterion between passes of one vLLM configuration."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from repo_root import ROOT

from gpu_check.__main__ import main
from gpu_check.vllm.outcome import judge, observed
from gpu_check.vllm.repeatability import find_passes, repeatability

REPO = ROOT
D12 = [("v0.24.0", "align_s16_d12ms"), ("v0.24.0-repeat", "align_s16_d12ms")]


def _copy(dest: Path, run: str, cfg: str, as_run: str | None = None) -> Path:
    src = REPO / "data/vllm" / run
    tgt = dest / (as_run or run)
    (tgt / "raw").mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "raw" / f"raw_{cfg}.json.gz", tgt / "raw")
    shutil.copytree(src / cfg, tgt / cfg, ignore=shutil.ignore_patterns("schedule.json"))
    return tgt / cfg


def test_two_runs_of_one_configuration_judge_each_other(tmp_path):
    a, b = (_copy(tmp_path, r, c) for r, c in D12)
    _copy(tmp_path, "v0.24.0", "align_s16_d15ms")  # a configuration run once: no group
    doc, table = repeatability([tmp_path])
    assert doc["groups"] == 1 and doc["passes"] == 2
    assert doc["pairs"]["judged"] == 2 and doc["leave_one_out"]["judged"] == 0
    oa, ob = observed(a), observed(b)
    want = judge({"rate": oa["rate"], "step_ms": oa["step_ms"], "landing": oa["landing"]}, ob)
    row = table[table["observed"] == "v0.24.0-repeat/align_s16_d12ms"].iloc[0]
    assert row["predictor"] == "v0.24.0/align_s16_d12ms"
    assert bool(row["meets_all"]) == want["meets_all"]
    assert row["landing_tv"] == want["landing_tv"] and row["step_ms_observed"] == ob["step_ms"]
    # the committed passes differ by 52 % in step time: vLLM misses the criterion against itself
    assert doc["pairs"]["meets_all"]["count"] == 0
    assert doc["per_group"][0]["step_ms_max_over_min"] > 1.4


def test_a_third_pass_gives_leave_one_out_and_identical_passes_meet_all(tmp_path):
    _copy(tmp_path, *D12[0])
    _copy(tmp_path, *D12[0], as_run="again")  # the same pass twice: agrees with itself
    _copy(tmp_path, *D12[1])
    doc, table = repeatability([tmp_path])
    assert doc["passes"] == 3 and doc["pairs"]["judged"] == 6
    assert doc["leave_one_out"]["judged"] == 3
    same = table[(table["predictor"] == "again/align_s16_d12ms")
                 & (table["observed"] == "v0.24.0/align_s16_d12ms")].iloc[0]  # fmt: skip
    assert same["meets_all"] and same["landing_tv"] == 0 and same["step_rel_error"] == 0
    lo, hi = doc["pairs"]["meets_all"]["ci95"]
    assert lo <= doc["pairs"]["meets_all"]["fraction"] <= hi


def test_repeat_number_and_label_do_not_split_a_group(tmp_path):
    import gzip

    a = _copy(tmp_path, *D12[0])
    _copy(tmp_path, *D12[0], as_run="rep")
    raw = tmp_path / "rep/raw/raw_align_s16_d12ms.json.gz"
    doc = json.loads(gzip.decompress(raw.read_bytes()))
    doc["config"].update(rep=2, label="x", baseline=False)
    raw.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert len(find_passes([tmp_path])) == 1
    doc["config"]["gpu_delay_us"] = 12500  # another configuration
    raw.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert sorted(len(v) for v in find_passes([tmp_path]).values()) == [1, 1]
    assert a.is_dir()


def test_a_watched_pass_is_a_configuration_of_its_own(tmp_path):
    import gzip

    _copy(tmp_path, *D12[0])
    _copy(tmp_path, *D12[1])
    _copy(tmp_path, *D12[0], as_run="watched")
    raw = tmp_path / "watched/raw/raw_align_s16_d12ms.json.gz"
    doc = json.loads(gzip.decompress(raw.read_bytes()))
    doc["watch"] = {"state": "installed", "armed": True}  # what vllm-run --watch records
    raw.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert sorted(len(v) for v in find_passes([tmp_path]).values()) == [1, 2]
    _copy(tmp_path, *D12[1], as_run="watched-too")
    raw2 = tmp_path / "watched-too/raw/raw_align_s16_d12ms.json.gz"
    doc2 = json.loads(gzip.decompress(raw2.read_bytes()))
    raw2.write_bytes(gzip.compress(json.dumps({**doc2, "watch": doc["watch"]}).encode()))
    rep, _table = repeatability([tmp_path])
    assert sorted(g["group"] for g in rep["per_group"]) == [
        "0.24.0/align_k3_s16_d12ms_n192", "0.24.0/align_k3_s16_d12ms_n192_watch"]  # fmt: skip


def test_per_regime_splits_every_judged_pair_by_the_observed_pass(tmp_path):
    from gpu_check.vllm.forecast import REGIMES, regime

    for r, c in [*D12, ("v0.24.0", "align_s16_d15ms"), ("v0.24.0-closecalls", "align_s16_d15ms")]:
        _copy(tmp_path, r, c)
    doc, table = repeatability([tmp_path])
    for what in ("pairs", "leave_one_out"):
        parts = [doc["per_regime"][name][what] for name in REGIMES]
        assert sum(p["judged"] for p in parts) == doc[what]["judged"]
        assert sum(p["meets_all"]["count"] for p in parts) == doc[what]["meets_all"]["count"]
    for _, row in table.iterrows():
        folder = tmp_path / row["observed"]
        assert row["regime"] == regime(observed(folder)["landing"]["entry"])
    pairs = table[table["predictor"] != "median of the others"]
    close = pairs[(pairs["gauge_ratio"] - 1).abs() <= doc["gauge_match"]]
    assert doc["pairs_gauge_matched"]["judged"] == len(close) < len(pairs)
    assert doc["pairs_gauge_matched"]["meets_all"]["count"] == int(close["meets_all"].sum())
    assert table[table["predictor"] == "median of the others"]["gauge_ratio"].isna().all()
    # the 15 ms passes land at entry in 22 % and 44 % of steps: the boundary
    assert set(table[table["group"].str.contains("_d15ms_")]["regime"]) == {"boundary"}
    assert doc["per_regime"]["boundary"]["pairs"]["judged"] >= 2


def test_cli_writes_summary_and_pairs_and_refuses_unrepeated_input(tmp_path, capsys):
    for r, c in D12:
        _copy(tmp_path / "runs", r, c)
    out = tmp_path / "rep"
    assert main(["vllm-repeatability", str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert "2 passes of 1 repeated configurations" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["pairs"]["judged"] == 2
    assert (out / "pairs.csv").read_text().count("\n") == 3
    (tmp_path / "one").mkdir()
    _copy(tmp_path / "one", *D12[0])
    assert main(["vllm-repeatability", str(tmp_path / "one"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no configuration with two or more" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("bad", ["missing-dir"])
def test_cli_names_a_missing_folder(tmp_path, capsys, bad):
    assert main(["vllm-repeatability", str(tmp_path / bad), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and bad in err
