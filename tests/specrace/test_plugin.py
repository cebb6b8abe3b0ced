"""The vLLM plugin (specrace/plugin, issue 46) with a fake ``vllm`` module: inert unless
enabled, gated on the release, idempotent, the guard refusing where its lines moved, the
watch's judgement and report. The real InputBatch and runner source: tests/conformance/."""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import fake_vllm as fake_vllm_module
import pytest
from repo_root import ROOT

import specrace.plugin as plugin
from sim.model.policies import get_policy


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A ``vllm`` of a given version whose V1 runner module is a real file (the guard reads
    its methods' source)."""
    vllm, runner_mod = fake_vllm_module.install(tmp_path, monkeypatch, "fakevllm_runner")
    for k in ("SPECRACE_WATCH", "SPECRACE_GUARD", "VLLM_USE_V2_MODEL_RUNNER"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(plugin, "_loaded", {})
    return vllm, runner_mod.GPUModelRunner


def test_importing_the_entry_point_imports_neither_torch_nor_vllm():
    code = "import sys, specrace.plugin; print(sorted({'torch','vllm'} & set(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


def test_inert_unless_enabled(fake_vllm):
    _vllm, cls = fake_vllm
    before = dict(cls.__dict__)
    plugin.register()
    assert plugin._loaded == {"state": "inert"} and dict(cls.__dict__) == before


@pytest.mark.parametrize(("version", "env", "state"), [
    ("0.23.0", {}, "v1"), ("0.33.0", {}, "v1"), ("0.33.1.dev4+g1234", {}, "unknown"),
    ("0.34.0", {}, "gpu"), ("0.35.2", {}, "gpu"), ("0.29.0", {"VLLM_USE_V2_MODEL_RUNNER": "1"},
    "gpu"), ("0.22.0", {}, "unknown"), ("dev", {}, "unknown"),
])  # fmt: skip
def test_release_gate(version, env, state):
    assert plugin.release_state(version, env) == state


def test_mrv2_release_logs_once_and_does_nothing(fake_vllm, monkeypatch, caplog):
    vllm, cls = fake_vllm
    vllm.__version__ = "0.34.0"
    monkeypatch.setenv("SPECRACE_WATCH", "1")
    before = dict(cls.__dict__)
    with caplog.at_level(logging.INFO, logger="vllm.specrace"):
        plugin.register()
        plugin.register()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "stay on the GPU" in lines[0] and "0.34.0" in lines[0]
    assert dict(cls.__dict__) == before


def test_guard_installs_once_and_logs_its_release(fake_vllm, monkeypatch, caplog):
    _vllm, cls = fake_vllm
    monkeypatch.setenv("SPECRACE_GUARD", "private-d2h")
    with caplog.at_level(logging.INFO, logger="vllm.specrace"):
        plugin.register()
        patched = cls._prepare_inputs
        plugin._loaded.clear()  # a second load in the same process, module state lost
        plugin.register()
    assert plugin._loaded["state"] == "already" and cls._prepare_inputs is patched
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "private-d2h" in lines[0] and "0.33.0" in lines[0]
    r = cls()
    assert r.inits == 1 and list(r._private_num_accepted_cpu) == [1, 1, 1, 1]


def test_guard_refuses_moved_lines_and_changes_nothing(fake_vllm, monkeypatch, caplog):
    _vllm, cls = fake_vllm
    monkeypatch.setenv("SPECRACE_GUARD", "sync-before-moves")
    src = textwrap.dedent(fake_vllm_module.RUNNER_SRC)
    src = src.replace("# Remove finished", "# Drop finished")
    path = Path(sys.modules["fakevllm_runner"].__file__)
    path.write_text(src)
    importlib.reload(sys.modules["fakevllm_runner"])
    cls = sys.modules["fakevllm_runner"].GPUModelRunner
    sys.modules["vllm.v1.worker"].gpu_model_runner = sys.modules["fakevllm_runner"]
    before = dict(cls.__dict__)
    with caplog.at_level(logging.INFO, logger="vllm.specrace"):
        plugin.register()
    assert plugin._loaded["state"] == "refused" and dict(cls.__dict__) == before
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "refused" in lines[0] and "_update_states" in lines[0]


def test_a_bad_setting_is_one_warning(fake_vllm, monkeypatch, caplog):
    monkeypatch.setenv("SPECRACE_GUARD", "sync")
    with caplog.at_level(logging.INFO, logger="vllm.specrace"):
        plugin.register()
    assert plugin._loaded["state"] == "refused" and len(caplog.records) == 1


def _step(step, prev_positions, cpu, ops=(), landed_read=True, pnd=(2, 2, 2)):
    return {"step": step, "prev_positions": list(prev_positions), "cpu_value": list(cpu),
            "req_ids": [f"r{i}" for i in range(len(cpu))], "ops": [list(o) for o in ops],
            "landed_at_update_states": False, "landed_at_read": landed_read,
            "prev_num_draft_tokens": list(pnd), "t_us_start": 0, "t_read": 5000}  # fmt: skip


def test_wrong_reads_are_judged_by_the_verdict():
    from specrace.plugin.judge import wrong_reads

    align = get_policy("align")
    prev = {"truth": [3, 1, 2]}
    ok = _step(1, [0, 1, 2], [3, 1, 2])
    assert wrong_reads(align, prev, ok) == []
    # row 2 moved into row 0, then the copy landed (before the add): ownership
    ops = [("move", 2, 0, "r2", 0, 10, False, False, 0), ("add", 2, -1, "r9", 20, 30,
           True, True, -1)]  # fmt: skip
    bad = _step(1, [2, 1, -1], [3, 1, 1], ops=ops)
    (w,) = wrong_reads(align, prev, bad)
    assert (w["row"], w["consumed"], w["true_count"], w["kind"]) == (0, 3, 2, "ownership")
    late = _step(1, [0, 1, 2], [1, 1, 2], landed_read=False)
    assert [w["kind"] for w in wrong_reads(align, prev, late)] == ["unlanded"]


def test_report_summarises_a_watch_folder(tmp_path):
    from specrace.plugin.judge import timeline
    from specrace.plugin.report import report, summary_line

    t = {"vllm": "0.33.0", "policy": "align", "steps": 1000, "reads": 20000, "wrong": 3,
         "skipped_steps": 0}  # fmt: skip
    line = summary_line(t)
    assert "1.50 per 10,000" in line and "95 % CI" in line and "1,000 steps" in line
    (tmp_path / "summary-1.json").write_text(json.dumps(t))
    cur = _step(7, [0], [2], ops=[("add", 1, -1, "r9", 1000, 2000, False, True, -1)])
    w = {"step": 7, "req_id": "r0", "row": 0, "consumed": 2, "true_count": 3, "kind": "ownership",
         "landed": "during row op 0 (add)", "timeline": timeline(cur)}  # fmt: skip
    (tmp_path / "wrong-reads-1.jsonl").write_text(json.dumps(w) + "\n")
    page = tmp_path / "w.html"
    argv = ["report", str(tmp_path), "--html", str(page)]
    r = subprocess.run([sys.executable, "-m", "specrace.plugin", *argv],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "worst step 7" in r.stdout and "add 1->-1 r9" in r.stdout
    assert "consumed 2, true 3" in r.stdout
    assert report(tmp_path).splitlines()[0] == line
    text = page.read_text()
    assert "<svg" in text and "The worst step: 7" in text and "ownership" in text


def test_a_runner_that_does_not_import_is_one_warning_not_a_crash(fake_vllm, monkeypatch, caplog):
    monkeypatch.setenv("SPECRACE_WATCH", "1")
    monkeypatch.setitem(sys.modules, "vllm.v1.worker", types.ModuleType("vllm.v1.worker"))
    monkeypatch.setitem(sys.modules, "vllm.v1.worker.gpu_model_runner", None)  # ImportError
    with caplog.at_level(logging.INFO, logger="vllm.specrace"):
        plugin.register()
    assert plugin._loaded["state"] == "refused"
    assert [r.levelname for r in caplog.records] == ["WARNING"]


def test_a_watch_that_cannot_arm_leaves_the_runner_running(fake_vllm, monkeypatch, caplog):
    _vllm, cls = fake_vllm
    monkeypatch.setenv("SPECRACE_WATCH", "1")
    with caplog.at_level(logging.INFO, logger="vllm.specrace"):
        plugin.register()
        runner = cls()  # no input batch, no CUDA: the watch cannot arm
        assert runner.execute_model(None) == "ran" and runner.execute_model(None) == "ran"
    msgs = [r.getMessage() for r in caplog.records]
    assert "watch armed" in msgs[0] and sum("not armed" in m for m in msgs) == 1


class _Event:
    def __init__(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done


def test_drain_judges_landed_steps_only_and_never_waits(tmp_path):
    torch = pytest.importorskip("torch")
    from specrace.plugin.watch import RING, LiveWatch

    w = LiveWatch.__new__(LiveWatch)  # the drain's state without a GPU
    w.policy, w.version = get_policy("align"), "0.33.0"
    w.cfg = plugin.Settings(watch=True, guard=None, out=str(tmp_path), every=2)
    w.truth_ring = torch.zeros((RING, 4), dtype=torch.int32)
    w.events = [_Event() for _ in range(RING)]
    w.slot_step = [-1] * RING
    w.judged = w.reads = w.wrong = w.skipped = w.count = w.host_ns = 0
    w.jsonl, w.summary = tmp_path / "wrong-reads-1.jsonl", tmp_path / "summary-1.json"
    s0 = _step(0, [-1, -1], [1, 1]) | {"truth_n": 2, "t_read_end": 1}
    # step 1 read before step 0's copy landed: both counts wrong
    s1 = _step(1, [1, 0], [2, 3], landed_read=False) | {"truth_n": 2, "t_read_end": 1}
    w.truth_ring[0, :2] = torch.tensor([2, 3])
    w.slot_step[0], w.slot_step[1] = 0, 1
    w.steps = [s0, s1]
    w.drain()
    assert w.judged == 0 and len(w.steps) == 2  # step 0's truth still in flight: no wait
    w.events[0].done = True
    w.drain()
    assert (w.judged, w.reads, w.wrong) == (1, 2, 2) and w.steps == [s1]
    lines = [json.loads(x) for x in w.jsonl.read_text().splitlines()]
    got = [(x["row"], x["consumed"], x["true_count"], x["kind"]) for x in lines]
    assert got == [(0, 2, 3, "unlanded"), (1, 3, 2, "unlanded")]
    w.slot_step[1] = 1 + RING  # step 1's slot reused before it was judged: skipped
    w.steps.append(_step(2, [0], [1]) | {"truth_n": 1, "t_read_end": 1})
    w.drain()
    assert w.skipped == 1 and w.judged == 1
    assert json.loads(json.dumps(w.totals()))["wrong"] == 2


class _Stack:
    """What :class:`gpu_check.vllm.instrument.Hooks` keeps, without torch."""

    def __init__(self, tag: str, calls: list[str]) -> None:
        from gpu_check.vllm.instrument import Hooks

        self.h = Hooks.__new__(Hooks)
        self.h._saved = []
        self.tag, self.calls = tag, calls

    def on(self, obj, name: str):
        def factory(orig):
            def hook(*a, **k):
                self.calls.append(self.tag)
                return orig(*a, **k)

            return hook

        self.h._hook(obj, name, factory)
        return self.h


def test_stacked_hooks_come_off_in_reverse_leaving_the_object_as_it_was():
    class Obj:
        def f(self):
            return "orig"

    o, calls = Obj(), []
    lower = _Stack("recorder", calls).on(o, "f")
    upper = _Stack("watch", calls).on(o, "f")
    assert o.f() == "orig" and calls == ["watch", "recorder"]
    upper.uninstall()
    calls.clear()
    assert o.f() == "orig" and calls == ["recorder"]  # the lower hook is back, not deleted
    lower.uninstall()
    assert "f" not in vars(o) and o.f() == "orig"


def test_a_watch_arming_under_another_recorder_sees_each_step_once(fake_vllm, monkeypatch):
    """vllm-run --watch: the recorder's instance hook over the armed class; at the first step
    the watch installs over it. No hook may run twice for one step (the first included)."""
    from specrace.plugin import watch as watch_mod

    _vllm, cls = fake_vllm
    calls: list[str] = []

    class FakeWatch:
        def __init__(self, runner, cfg, version):
            self.runner, self.stack = runner, _Stack("watch", calls)

        def _execute_model(self, orig):
            def hook(*a, **k):
                calls.append("watch")
                return orig(*a, **k)

            return hook

        def install(self):
            self.stack.h._hook(self.runner, "execute_model", self._execute_model)
            return self

    monkeypatch.setattr(watch_mod, "LiveWatch", FakeWatch)
    monkeypatch.setenv("SPECRACE_WATCH", "1")
    plugin.register()
    runner = cls()
    recorder = _Stack("recorder", calls).on(runner, "execute_model")
    for step in range(3):
        calls.clear()
        assert runner.execute_model(None) == "ran"
        assert sorted(calls) == ["recorder", "watch"], (step, calls)
    runner._specrace_watch.stack.h.uninstall()
    recorder.uninstall()
    assert "execute_model" not in vars(runner)


def test_report_html_refuses_a_users_file_and_replaces_its_own(tmp_path):
    """--html wrote over whatever was at the path; now a file specrace did not write is
    refused in one line before any work, and the page it wrote itself is replaced."""
    t = {"vllm": "0.33.0", "policy": "align", "steps": 10, "reads": 100, "wrong": 0,
         "skipped_steps": 0}  # fmt: skip
    (tmp_path / "summary-1.json").write_text(json.dumps(t))

    def html(page):
        argv = ["-m", "specrace.plugin", "report", str(tmp_path), "--html", str(page)]
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                              timeout=60)  # fmt: skip

    mine = tmp_path / "mine.html"
    mine.write_text("<p>my notes</p>")
    r = html(mine)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--html" in r.stderr
    assert mine.read_text() == "<p>my notes</p>" and r.stdout == ""
    page = tmp_path / "w.html"
    assert html(page).returncode == 0 and html(page).returncode == 0  # its own: replaced


def test_the_watch_writes_only_files_it_made(tmp_path, monkeypatch):
    """A user's file (or another process's, the pid recycled) at the watch's names is left
    byte for byte; the watch takes the next free name, and its summary is never empty."""
    from specrace.plugin import watch as watch_mod

    pid = os.getpid()
    theirs = {tmp_path / f"wrong-reads-{pid}.jsonl": "user line\n",
              tmp_path / f"summary-{pid}.json": "{\"mine\": 1}"}  # fmt: skip
    for path, text in theirs.items():
        path.write_text(text)
    jsonl = watch_mod.created(tmp_path, f"wrong-reads-{pid}", ".jsonl")
    assert jsonl.name == f"wrong-reads-{pid}-1.jsonl" and jsonl.read_text() == ""
    w = watch_mod.LiveWatch.__new__(watch_mod.LiveWatch)
    w.policy, w.version = get_policy("align"), "0.33.0"
    w.judged = w.reads = w.wrong = w.skipped = w.count = w.host_ns = 0
    w.summary = watch_mod.created(tmp_path, f"summary-{pid}", ".json")
    w.write_totals()
    assert json.loads(w.summary.read_text())["wrong"] == 0 and w.summary.name.endswith("-1.json")
    assert all(path.read_text() == text for path, text in theirs.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*(p.name for p in theirs), jsonl.name, w.summary.name]
    )  # no temporary left


def test_the_watch_times_its_own_hooks_not_vllms_methods(monkeypatch):
    """host_ns is the hooks' own time: a hook's span less the span of the method it wraps, so
    a hooked method called inside another hook's method is not counted twice."""
    from specrace.plugin import watch as watch_mod

    now = [0]
    monkeypatch.setattr(watch_mod.time, "perf_counter_ns", lambda: now[0])

    def tick(ns):
        now[0] += ns

    class Batch:
        def swap_states(self):
            tick(1_000)  # vLLM's own work

    class Runner:
        def __init__(self):
            self.batch = Batch()

        def execute_model(self):
            tick(50_000)
            self.batch.swap_states()
            return "ran"

    def factory(cost):  # a hook that spends `cost` before and after vLLM's method
        def make(orig):
            def hook(*args, **kwargs):
                tick(cost)
                out = orig(*args, **kwargs)
                tick(cost)
                return out

            return hook

        return make

    w = watch_mod.LiveWatch.__new__(watch_mod.LiveWatch)
    w.host_ns, w._saved = 0, []
    runner = Runner()
    w._hook(runner, "execute_model", factory(300))
    w._hook(runner.batch, "swap_states", factory(20))
    assert runner.execute_model() == "ran" and now[0] == 51_000 + 600 + 40
    assert w.host_ns == 640  # 2 x 300 + 2 x 20: none of vLLM's 51,000 ns
    w.uninstall()
    assert runner.execute_model() == "ran" and w.host_ns == 640  # off: nothing more counted


def test_the_summary_line_gives_the_watchs_host_time_per_step():
    from specrace.plugin.report import summary_line

    t = {"vllm": "0.33.0", "policy": "align", "steps": 1000, "reads": 20000, "wrong": 3,
         "skipped_steps": 0, "runner_steps": 1002, "host_ns": 1002 * 85_000}  # fmt: skip
    assert summary_line(t).endswith("; the watch's own host time 85 µs per step")
    doc = (ROOT / "docs" / "deployment.md").read_text()
    assert summary_line(t | {"runner_steps": 1000, "host_ns": 85_000_000}) in doc
    assert "host time" not in summary_line(t | {"runner_steps": 0})
