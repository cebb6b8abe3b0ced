"""``vllm-plugin-bench`` (issue 46's overhead rounds): what runs without CUDA here — the
arguments, the arm schedule, the summary's arithmetic, toggling the plugin on a runner class and
putting it back, the output folder's checks; the real thing on the GPU machine (``gpu``)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import fake_vllm
import pytest
from repo_root import ROOT

import specrace.plugin as plugin
from gpu_check.__main__ import main
from gpu_check.vllm import plugin_bench as pb

CARRY = Path(os.environ.get("SPECRACE_VLLM_CARRY", ROOT / ".vllmcarry"))


# -- arguments ----------------------------------------------------------------------------------
def _run(argv: list[str], capsys) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(("extra", "says"), [
    (["--arms", "watch,private-d2h"], "off must be one of them"),
    (["--arms", "off,off"], "distinct names"),
    (["--arms", "off,guard"], "distinct names"),
    (["--configs", "16:x"], "expected MAX_NUM_SEQS"),
    (["--configs", "16:0,16:0"], "named twice"),
    (["--output-range", "9:3"], "--output-range"),
    (["--weights", "random"], "--weights"),
    (["--vllm-version", "0.34.0"], "no V1 model runner"),
    (["--rounds", "0"], "--rounds"),
    (["--time-limit", "-5"], "--time-limit"),
])  # fmt: skip
def test_bad_arguments_are_one_line_and_write_nothing(extra, says, tmp_path, capsys):
    out = tmp_path / "o"
    code, err = _run(["vllm-plugin-bench", "--out", str(out), *extra], capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("gpu_check: error: "), err
    assert says in err[0], err
    assert not out.exists()


def test_without_cuda_it_stops_before_writing(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "o"
    code, err = _run(["vllm-plugin-bench", "--out", str(out)], capsys)
    assert code == 2 and len(err) == 1 and "needs a CUDA device" in err[0], err
    assert "vllm-plugin-bench" in err[0] and "vllm-run" not in err[0]
    assert not out.exists()


def test_a_users_folder_is_refused_untouched(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")
    code, err = _run(["vllm-plugin-bench", "--out", str(out)], capsys)
    assert code == 2 and len(err) == 1 and "holds files specrace did not write" in err[0], err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "my notes\n"


def test_another_kind_of_specrace_output_is_refused(tmp_path, capsys):
    from sim.runs.outputs import write_marker

    out = tmp_path / "run"
    out.mkdir()
    write_marker(out, "vllm-run")
    code, err = _run(["vllm-plugin-bench", "--out", str(out)], capsys)
    assert code == 2 and "vllm-run output, not a vllm-plugin-bench" in err[0], err


def test_the_default_arms_parse_and_the_help_lists_every_arm():
    assert pb.parse_arms(pb.DEFAULT_ARMS)[0] == "off"
    from gpu_check.__main__ import build_parser

    sub = next(a for a in build_parser()._actions if hasattr(a, "add_parser"))
    text = sub.choices["vllm-plugin-bench"].format_help()
    flat = " ".join(text.split())
    assert all(a in flat for a in pb.ARMS), flat


# -- the schedule ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_the_arms_alternate_and_take_every_position(n):
    arms = list(pb.ARMS)[:n]
    rounds = pb.schedule(arms, 2 * n)
    assert all(sorted(r) == sorted(arms) for r in rounds)  # every arm once a round
    flat = [a for r in rounds for a in r]
    pairs = list(zip(flat, flat[1:], strict=False))
    if n >= 3:
        assert all(a != b for a, b in pairs)  # never twice in a row
    else:  # AB BA AB BA: balanced against a linear drift
        assert flat[:4] == [arms[0], arms[1], arms[1], arms[0]]
    for arm in arms:  # each position equally often over n rounds
        assert sorted(r.index(arm) for r in rounds[:n]) == list(range(n))
    assert rounds[0] == arms and rounds[1] == arms[1:] + arms[:1]


# -- the summary ----------------------------------------------------------------------------------
def _row(rnd, arm, tps, cfg="s16_d0ms", **kw):
    watch, guard = pb.ARMS[arm]
    row = {
        "round": rnd,
        "config": cfg,
        "arm": arm,
        "tokens_per_s": tps,
        "plugin_state": pb.expected_state(arm),
        "watch": int(watch),
        "guard": guard or "",
    }
    if watch:
        row |= {"watch_runner_steps": 290, "watch_steps": 288, "watch_reads": 4100,
                "watch_wrong": kw.get("wrong", 0), "watch_skipped_steps": 0,
                "watch_jsonl_lines": kw.get("lines", kw.get("wrong", 0))}  # fmt: skip
    return row


def _table():
    arms = ["off", "watch", "private-d2h", "watch+private-d2h"]
    off = [2000.0, 3000.0, 1500.0, 2500.0]  # the host drifts 2x between rounds
    rows = []
    for rnd, base in enumerate(off):
        rows += [_row(rnd, "off", base), _row(rnd, "watch", base * 0.9, wrong=80 + rnd),
                 _row(rnd, "private-d2h", base * (1.0 + 0.01 * rnd)),
                 _row(rnd, "watch+private-d2h", base * 0.95)]  # fmt: skip
    return arms, rows


def test_the_ratios_are_paired_by_round_and_the_drift_cancels():
    arms, rows = _table()
    doc = pb.summarize(rows, arms, ["s16_d0ms"])
    res = doc["results"]["s16_d0ms"]
    assert res["off"]["median_tokens_per_s"] == 2250.0 and res["off"]["passes"] == 4
    assert res["off"]["min_tokens_per_s"] == 1500.0 and res["off"]["max_tokens_per_s"] == 3000.0
    w = res["watch"]["ratio_to_off"]
    # unpaired, the medians' ratio is the same here; per round every ratio is exactly 0.9
    assert w["per_round"] == [0.9] * 4 and w["median"] == 0.9 and w["rounds"] == 4
    assert w["bootstrap95_median"] == [0.9, 0.9]
    g = res["private-d2h"]["ratio_to_off"]
    assert g["per_round"] == [1.0, 1.01, 1.02, 1.03] and g["median"] == 1.015
    assert g["min"] == 1.0 and g["max"] == 1.03
    lo, hi = g["bootstrap95_median"]
    assert 1.0 <= lo <= 1.015 <= hi <= 1.03
    assert res["watch"]["watch"]["wrong"] == 80 + 81 + 82 + 83
    assert res["watch"]["watch"]["wrong_per_round"] == [80, 81, 82, 83]
    assert doc["checks"]["ok"] is True
    assert doc["checks"]["watch_with_guard_shows_0"] == {"watch+private-d2h": True}
    assert doc["checks"]["watch_alone_wrong_reads"] == 326


def test_a_round_without_off_is_left_out_of_the_ratios():
    arms, rows = _table()
    rows = [r for r in rows if not (r["round"] == 2 and r["arm"] == "off")]
    g = pb.summarize(rows, arms, ["s16_d0ms"])["results"]["s16_d0ms"]["private-d2h"]
    assert g["ratio_to_off"]["rounds"] == 3 and g["ratio_to_off"]["per_round"] == [1.0, 1.01, 1.03]
    assert g["passes"] == 4


@pytest.mark.parametrize("spoil", ["guarded-wrong", "jsonl-short", "state", "unarmed"])
def test_each_check_can_fail(spoil):
    arms, rows = _table()
    if spoil == "guarded-wrong":
        rows[3] |= {"watch_wrong": 1, "watch_jsonl_lines": 1}
    elif spoil == "jsonl-short":
        rows[1]["watch_jsonl_lines"] = 79
    elif spoil == "unarmed":  # the watch could not arm: its pass has no totals
        for k in [k for k in rows[1] if k.startswith("watch_")]:
            del rows[1][k]
    else:
        rows[2]["plugin_state"] = "refused"
    checks = pb.summarize(rows, arms, ["s16_d0ms"])["checks"]
    assert checks["ok"] is False
    key = {
        "guarded-wrong": "watch_with_guard_shows_0",
        "jsonl-short": "jsonl_lines_equal_wrong_reads",
        "state": "plugin_states_as_expected",
        "unarmed": "watch_armed_and_judging_every_pass",
    }[spoil]
    assert checks[key] in (False, {"watch+private-d2h": False})


def test_the_watchs_host_time_is_a_share_of_its_passes_steps():
    rows = [{"watch_host_ms": 29.0, "watch_runner_steps": 290, "wall_s": 5.8, "engine_steps": 290},
            {"watch_host_ms": 87.0, "watch_runner_steps": 290, "wall_s": 8.7, "engine_steps": 290},
            {"watch_runner_steps": 290, "wall_s": 1.0, "engine_steps": 290}]  # fmt: skip
    # 116 ms over 580 steps = 0.2 ms per step; steps of 20 and 30 ms = 25 ms on average
    assert pb.host_share(rows) == {"host_ms_per_step": 0.2, "host_share_of_step": 0.008}
    assert pb.host_share(rows[2:]) == {}  # a bench from before the watch timed itself
    arms, table = _table()
    for r in table:
        if r["arm"] == "watch":
            r |= {"watch_host_ms": 29.0, "wall_s": 5.8, "engine_steps": 290}
    doc = pb.summarize(table, arms, ["s16_d0ms"])
    assert doc["results"]["s16_d0ms"]["watch"]["watch"]["host_share_of_step"] == 0.005
    line = next(x for x in pb.cost_markdown(doc).splitlines() if "| watch |" in x)
    assert line.endswith("| 0.100 ms (0.5 %) |")


def test_too_few_rounds_give_no_interval():
    assert pb.bootstrap_median([1.0, 1.1]) is None
    assert pb.bootstrap_median([1.0, 1.1, 0.9]) is not None


def test_rounds_csv_has_every_column_and_a_row_per_pass():
    _arms, rows = _table()
    got = list(csv.DictReader(io.StringIO(pb.rounds_csv(rows))))
    assert len(got) == len(rows) and tuple(got[0]) == pb.COLUMNS
    assert got[1]["arm"] == "watch" and got[1]["watch_wrong"] == "80"
    assert got[0]["watch_wrong"] == ""  # not a watch arm: empty, not 0


# -- toggling the plugin on a runner class --------------------------------------------------------
@pytest.fixture
def runner(tmp_path, monkeypatch):
    """A live runner of a fake vLLM 0.33.0 whose V1 runner module is a real file."""
    _vllm, mod = fake_vllm.install(tmp_path, monkeypatch, "fakevllm_bench_runner")
    for k in (*pb.PLUGIN_ENV, "VLLM_USE_V2_MODEL_RUNNER"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(plugin, "_loaded", {})
    return mod.GPUModelRunner()


@pytest.mark.parametrize("arm", list(pb.ARMS))
def test_an_arm_installs_for_its_pass_and_leaves_nothing(arm, runner, tmp_path):
    cls = type(runner)
    before = dict(cls.__dict__)
    watch, guard = pb.ARMS[arm]
    with pb.plugin_arm(arm, runner, tmp_path / "w") as state:
        assert state == pb.expected_state(arm)
        changed = pb.class_changes(cls, before)
        want = set()
        if guard:
            want |= {"_prepare_inputs", plugin.MARK}
            want |= (
                {"_update_states"}
                if guard == "sync-before-moves"
                else {"_update_states_after_model_execute", "__init__"}
            )
            if guard == "private-d2h":
                assert list(runner._private_num_accepted_cpu) == [1, 1, 1, 1]
        if watch:
            want |= {"execute_model", plugin.MARK}
            assert os.environ["SPECRACE_WATCH_OUT"] == str(tmp_path / "w")
        assert set(changed) == want
    assert pb.class_changes(cls, before) == [] and plugin._loaded == {}
    assert not any(k.startswith("_private") for k in vars(runner))
    assert not any(k in os.environ for k in pb.PLUGIN_ENV)


def test_arms_in_turn_each_find_a_clean_class(runner, tmp_path):
    """Without the restore, the second guard would see the first's mark ("already")."""
    for arm in ("sync-before-moves", "private-d2h", "off", "sync-before-moves"):
        with pb.plugin_arm(arm, runner, tmp_path) as state:
            assert state == pb.expected_state(arm), arm


def test_a_hook_left_on_the_runner_stops_the_bench(runner, tmp_path):
    left = pytest.raises(pb.BenchError, match="instance hooks left: condense")
    with left, pb.plugin_arm("off", runner, tmp_path):
        runner.input_batch.condense = lambda: None


def test_restore_puts_back_what_was_replaced_and_removes_what_was_added(runner):
    cls = type(runner)
    saved = dict(cls.__dict__)
    orig = cls.execute_model
    cls.extra = 1
    cls.execute_model = lambda self, so: "patched"
    assert pb.class_changes(cls, saved) == ["execute_model", "extra"]
    pb.restore_class(cls, saved)
    assert "extra" not in cls.__dict__ and cls.__dict__["execute_model"] is orig
    assert runner.execute_model(None) == "ran"


# -- the real thing -------------------------------------------------------------------------------
@pytest.mark.gpu
def test_one_short_round_on_the_gpu(tmp_path: Path) -> None:
    if not CARRY.is_dir():
        pytest.skip(f"no carried vLLM at {CARRY} (scripts/vllm_inputs.sh builds it)")
    out = tmp_path / "bench"
    run = [sys.executable, "-m", "gpu_check", "vllm-plugin-bench", "--carry", str(CARRY),
           "--rounds", "1", "--arms", "off,watch,watch+private-d2h", "--num-requests", "48",
           "--out", str(out)]  # fmt: skip
    res = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads((out / "summary.json").read_text())
    assert doc["rounds_done"] == 1 and doc["checks"]["ok"]
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    assert [r["arm"] for r in rows] == ["off", "watch", "watch+private-d2h"]
    assert int(rows[1]["watch_steps"]) > 0 and int(rows[1]["watch_reads"]) > 0


# -- the loop, on a fake engine -------------------------------------------------------------------
@pytest.fixture
def fake_engine(runner, tmp_path, monkeypatch):
    """``run_bench``'s engine calls answered without CUDA: every pass steps the runner once
    (the arm's classes in place) and reports 1,000 tokens."""
    import torch

    from gpu_check import environment
    from gpu_check.vllm import run

    seen: list[tuple[str, str]] = []

    def drive(llm, reqs, tag, tokens=None):
        seen.append((tag, runner.execute_model(None)))
        return {"engine_steps": 50, "out_tokens": 1000, "wall_s": 0.5}

    llm = types.SimpleNamespace(reset_prefix_cache=lambda: None)
    monkeypatch.setattr(run, "MODEL_DIR", tmp_path / "model")
    monkeypatch.setattr(run, "build_llm", lambda e, d: (llm, {"init_s": 1.0, "resolved": {}}))
    monkeypatch.setattr(run, "_runner", lambda llm: runner)
    monkeypatch.setattr(run, "drive", drive)
    monkeypatch.setattr(run, "set_concurrency", lambda llm, n: None)
    monkeypatch.setattr(run, "shutdown", lambda llm: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(environment, "environment", lambda: {"device": "fake"})
    return seen


def _plan(rounds, limit=0.0, arms=("off", "private-d2h", "sync-before-moves")):
    from gpu_check.vllm.config import RunConfig

    return pb.Plan(list(arms), [RunConfig(num_requests=4)], rounds, "align", 3, "zero", limit)


def test_the_loop_writes_a_row_per_pass_into_its_own_folder(fake_engine, tmp_path):
    from sim.runs.outputs import foreign_files, marker

    out = tmp_path / "o"
    doc = pb.run_bench(_plan(3), out, "0.33.0")
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    assert [r["arm"] for r in rows[:4]] == ["off", "private-d2h", "sync-before-moves",
                                            "private-d2h"]  # fmt: skip
    assert len(rows) == 9 and {r["tokens_per_s"] for r in rows} == {"2000.0"}
    assert [t for t, _ in fake_engine] == ["warm-", *[f"r{i // 3}p{i % 3}-" for i in range(9)]]
    assert doc["rounds_done"] == 3 and doc["checks"]["ok"] and not doc["errors"]
    assert json.loads((out / "summary.json").read_text())["rounds_done"] == 3
    assert marker(out)["kind"] == "vllm-plugin-bench" and foreign_files(out) == []


def test_the_time_limit_stops_between_rounds(fake_engine, tmp_path):
    doc = pb.run_bench(_plan(5, limit=1e-6), tmp_path / "o", "0.33.0")
    assert doc["rounds_done"] == 1 and doc["stopped"].startswith("time limit")


def test_a_failing_pass_is_recorded_and_the_class_is_put_back(fake_engine, runner, tmp_path,
                                                              monkeypatch):  # fmt: skip
    from gpu_check.vllm import run

    cls = type(runner)
    before = dict(cls.__dict__)

    def drive(llm, reqs, tag, tokens=None):
        if tag.startswith("r0p1"):
            raise RuntimeError("wedged")
        return {"engine_steps": 50, "out_tokens": 1000, "wall_s": 0.5}

    monkeypatch.setattr(run, "drive", drive)
    doc = pb.run_bench(_plan(2), tmp_path / "o", "0.33.0")
    assert doc["rounds_done"] == 0 and "wedged" in doc["errors"][0]
    assert pb.class_changes(cls, before) == []
