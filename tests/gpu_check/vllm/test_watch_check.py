"""vllm-run --watch's check (gpu_check.vllm.watch_check): the plugin's wrong reads against the
reads vllm-export observed, keyed by engine step, request and both counts."""

from __future__ import annotations

import pandas as pd

from gpu_check.vllm.watch_check import (
    compare,
    compare_stood_aside,
    markdown,
    rows,
    stood_aside,
    text,
)


def _reads(rows):
    cols = ["step", "req_id", "cpu_value", "gpu_value", "true_count", "wrong"]
    return pd.DataFrame(rows, columns=cols)


def _raw(mode, wrong_reads, reads=3, skipped=0, armed=True):
    return {
        "mode": mode, "config": {"name": "s16_d0ms"}, "vllm_version": "0.33.0",
        "watch": {"armed": armed, "watch_reads": reads, "watch_steps": 2,
                  "watch_skipped_steps": skipped, "wrong_reads": wrong_reads},
    }  # fmt: skip


# export steps 0, 1, 2 are engine steps 0, 2, 3 (engine step 1 built no inputs)
STEP_IDS = [0, 2, 3]
READS = _reads([(1, "a", 4, 4, 1, True), (1, "b", 2, 2, 2, False), (2, "a", 1, 1, 1, False)])


def _w(step, req, consumed, true):
    return {"step": step, "req_id": req, "consumed": consumed, "true_count": true}


def test_the_same_wrong_reads_on_the_engines_steps_are_equal():
    rep = compare(_raw("align", [_w(2, "a", 4, 1)]), READS, STEP_IDS)
    assert rep["equal"] and (rep["wrong_both"], rep["reads_observed"]) == (1, 3)
    assert text(rep).startswith("watch: equal: wrong 1 watched, 1 observed, 1 both")


def test_a_wrong_read_on_the_export_index_instead_of_the_engine_step_is_not_equal():
    rep = compare(_raw("align", [_w(1, "a", 4, 1)]), READS, STEP_IDS)
    assert not rep["equal"]
    assert rep["only_watch"] == [[1, "a", 4, 1]] and rep["only_observed"] == [[2, "a", 4, 1]]


def test_a_missed_read_a_skipped_step_or_a_watch_that_did_not_arm_is_not_equal():
    assert not compare(_raw("align", []), READS, STEP_IDS)["equal"]
    assert not compare(_raw("align", [_w(2, "a", 4, 1)], skipped=1), READS, STEP_IDS)["equal"]
    assert not compare(_raw("align", [_w(2, "a", 4, 1)], reads=2), READS, STEP_IDS)["equal"]
    assert not compare(_raw("align", [_w(2, "a", 4, 1)], armed=False), READS, STEP_IDS)["equal"]


def test_none_mode_compares_the_value_the_gpu_consumed():
    reads = _reads([(1, "a", 1, 4, 1, True)])
    assert compare(_raw("none", [_w(2, "a", 4, 1)], reads=1), reads, STEP_IDS)["equal"]
    assert not compare(_raw("none", [_w(2, "a", 1, 1)], reads=1), reads, STEP_IDS)["equal"]


def test_rows_collect_every_pass_of_every_run(tmp_path):
    import json

    from gpu_check.vllm.watch_check import rows

    passes = (("align_s16_d0ms", None), ("align_s16_d0ms_private-d2h", "private-d2h"))
    for name, patch in passes:
        run = "v0.33.0-watch"
        d = tmp_path / run / name
        d.mkdir(parents=True)
        raw = _raw("align", [_w(2, "a", 4, 1)] if patch is None else [])
        if patch:
            raw["patch"] = patch
        rep = compare(raw, READS if patch is None else READS.assign(wrong=False), STEP_IDS)
        (d / "watch.json").write_text(json.dumps(rep))
    got = rows(tmp_path)
    assert [(r["run"], r["patch"], r["wrong_watched"], r["equal"]) for r in got] == [
        ("v0.33.0-watch", "none", 1, True),
        ("v0.33.0-watch", "private-d2h", 0, True),
    ]


def test_the_export_and_the_watch_check_judge_reads_by_one_rule() -> None:
    """Which value a read consumes (align: the CPU value, drafted or not; none: the device's,
    on a drafted row only) lives in gpu_check.vllm.consumed, used by both."""
    import numpy as np

    from gpu_check.vllm.consumed import consumed_column, wrong_reads

    cpu, gpu = np.array([4, 1, 1]), np.array([1, 4, 1])
    true, drafted = np.array([1, 1, 4]), np.array([True, True, False])
    assert consumed_column("align") == "cpu_value" and consumed_column("none") == "gpu_value"
    assert wrong_reads("align", cpu, gpu, true, drafted).tolist() == [True, False, True]
    assert wrong_reads("none", cpu, gpu, true, drafted).tolist() == [False, True, False]


# -- MRv2: the plugin must stand aside ---------------------------------------------------------
def _v2_raw(state="not-applicable", changed=()):
    watch = {"state": state, "armed": False, "v1_class_changed": list(changed)}
    return {"mode": "align", "config": {"name": "s16_d0ms"}, "vllm_version": "0.33.0",
            "watch": watch}  # fmt: skip


def _v2_reads(wrong):
    return pd.DataFrame({"req_id": ["a", "b", "c"], "wrong": wrong})


def test_an_mrv2_pass_is_as_it_should_be_only_if_the_plugin_stood_aside_and_none_was_wrong():
    ok = compare_stood_aside(_v2_raw(), _v2_reads([False, False, False]))
    assert ok["equal"] and ok["stood_aside"] and ok["reads_observed"] == 3
    assert text(ok).startswith("watch: MRv2, the plugin stood aside (state not-applicable)")
    wrong = compare_stood_aside(_v2_raw(), _v2_reads([False, True, False]))
    assert wrong["stood_aside"] and not wrong["equal"] and wrong["wrong_observed"] == 1
    for raw in (_v2_raw(state="installed"), _v2_raw(changed=["execute_model"])):
        rep = compare_stood_aside(raw, _v2_reads([False] * 3))
        assert not rep["stood_aside"] and not rep["equal"]
        assert "did NOT stand aside" in text(rep)


def test_the_table_says_not_applicable_for_mrv2_and_counts_it_apart(tmp_path):
    import json

    v1 = compare(_raw("align", [_w(2, "a", 4, 1)]), READS, STEP_IDS)
    v2 = compare_stood_aside(_v2_raw(), _v2_reads([False] * 3))
    for run, rep in (("r1", v1), ("r2", v2)):
        (tmp_path / run / "p").mkdir(parents=True)
        (tmp_path / run / "p" / "watch.json").write_text(json.dumps(rep))
    table = markdown(rows(tmp_path))
    assert "| align (MRv2) |" in table and table.count("| not applicable |") == 1
    assert "guarded or not: equal to the export in 1 of 1." in table
    assert "MRv2 passes: the plugin stood aside with no wrong read in 1 of 1" in table


def test_on_mrv2_the_plugin_stands_aside_in_a_live_process(tmp_path, monkeypatch):
    """``stood_aside`` calls the real ``register()`` under ``SPECRACE_WATCH=1`` with MRv2 forced
    (a fake vLLM 0.33.0): nothing on the V1 class changes and the environment is restored."""
    import os

    import fake_vllm

    import specrace.plugin as plugin
    from gpu_check.vllm import plugin_bench as pb

    _vllm, mod = fake_vllm.install(tmp_path, monkeypatch, "fakevllm_watch_v2")
    for k in pb.PLUGIN_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(plugin, "_loaded", {})
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    runner = mod.GPUModelRunner()
    got = stood_aside(runner, tmp_path / "w")
    assert got == {"state": "not-applicable", "armed": False, "v1_class_changed": []}
    assert not any(k in os.environ for k in pb.PLUGIN_ENV) and plugin._loaded == {}
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")  # the V1 runner: it installs
    assert stood_aside(runner, tmp_path / "w")["v1_class_changed"] != []


def test_the_committed_watch_tables_are_what_the_export_writes(tmp_path) -> None:
    """Each committed plugin run's watch.csv is its watch.json files as ``vllm-export DIR``
    tabulates them now (a table left from an older export failed this: no runner column)."""
    from repo_root import ROOT

    from gpu_check.store import write_csv

    plugin = ROOT / "data" / "vllm" / "plugin"
    runs = sorted(p.parent for p in plugin.glob("*/watch.csv"))
    assert len(runs) >= 5
    runs.append(plugin)  # the tree's own table, over every run under it
    for run in runs:
        got = write_csv(rows(run), tmp_path / f"{run.name}.csv").read_bytes()
        assert got == (run / "watch.csv").read_bytes(), run.name
