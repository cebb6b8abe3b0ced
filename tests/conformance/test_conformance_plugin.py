"""The vLLM plugin (specrace/plugin, issue 46) against vLLM's real code, on CPU.

- the guard on a class made of the real ``GPUModelRunner`` methods of every unpacked release:
  a double load installs once; a release whose edited lines moved is refused, nothing changed;
- the watch's hooks (``gpu_check.vllm.instrument.Recorder``'s row-op hooks) on the real
  ``InputBatch`` replaying a schedule, the D2H landing at a different poll each step: the row
  ops recorded are vLLM's, and the reads the watch judges wrong are the reads that were wrong;
- the entry point of a wheel built by ``pip wheel .`` found by vLLM's own plugin loader
  (``vllm.plugins.load_general_plugins``), on the suite's release and on 0.34.0.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from cases import schedule_for
from compare import canonical_ops
from conftest import VLLM_TREE
from test_conformance_patches import RUNNERS, _methods
from test_conformance_rows import real_batch_for
from vllm_driver import StepInput

import specrace.plugin as plugin
from gpu_check.vllm.instrument import Recorder
from sim.model.input_batch import RowOp
from sim.model.policies import get_policy
from specrace.plugin.judge import wrong_reads

REPO = Path(__file__).resolve().parents[2]
_SERIAL = itertools.count()
PATCHED = {"private-d2h": "_prepare_inputs", "sync-before-moves": "_update_states"}


def runner_class(path: Path, tmp: Path, drop: str | None = None):
    """A module holding ``GPUModelRunner`` with the real methods of ``path`` (the runner module
    needs CUDA to import); ``drop``: a line removed from every method, as a release that moved
    it would."""
    body = []
    for src in _methods(path).values():
        lines = [ln for ln in src.splitlines() if drop is None or ln.strip() != drop]
        body += ["    " + ln if ln.strip() else "" for ln in lines] + [""]
    name = f"real_runner_{next(_SERIAL)}"  # a fresh module each time
    head = "from __future__ import annotations\n\n\nclass GPUModelRunner:\n"
    (tmp / f"{name}.py").write_text(head + "\n".join(body) + "\n")
    sys.path.insert(0, str(tmp))
    try:
        return importlib.import_module(name).GPUModelRunner
    finally:
        sys.path.remove(str(tmp))


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(plugin, "_loaded", {})


@pytest.mark.parametrize("runner", RUNNERS, ids=lambda p: p.parts[-5])
@pytest.mark.parametrize("guard", list(PATCHED))
def test_the_guard_installs_once_on_the_real_runner(runner, guard, tmp_path, caplog):
    cls = runner_class(runner, tmp_path)
    cfg = plugin.Settings(watch=False, guard=guard, out="", every=1)
    with caplog.at_level(logging.INFO, logger="vllm.specrace"):
        assert plugin.install(cls, cfg, "test") == "installed"
        method = cls.__dict__[PATCHED[guard]]
        assert plugin.install(cls, cfg, "test") == "already"
    assert cls.__dict__[PATCHED[guard]] is method
    assert "specrace" in method.__code__.co_filename
    assert len(caplog.records) == 1 and "in effect" in caplog.records[0].getMessage()


@pytest.mark.parametrize("guard", list(PATCHED))
def test_a_release_whose_lines_moved_is_refused(guard, tmp_path, caplog):
    runner = VLLM_TREE / "vllm/v1/worker/gpu_model_runner.py"
    drop = {
        "private-d2h": "self.input_batch.num_accepted_tokens_cpu_tensor",
        "sync-before-moves": "# Remove finished requests from the cached states.",
    }[guard]
    cls = runner_class(runner, tmp_path, drop=drop)
    before = dict(cls.__dict__)
    cfg = plugin.Settings(watch=False, guard=guard, out="", every=1)
    with caplog.at_level(logging.INFO, logger="vllm.specrace"):
        assert plugin.install(cls, cfg, "test") == "refused"
    assert dict(cls.__dict__) == before
    assert len(caplog.records) == 1 and "refused" in caplog.records[0].getMessage()


class LandingEvent:
    """``num_accepted_tokens_event``: the counts land (are written into the buffer) at the
    ``land_at``-th poll, as a D2H would between two polls."""

    def __init__(self, buf: np.ndarray, counts: np.ndarray, land_at: int) -> None:
        self.buf, self.counts, self.land_at, self.polls = buf, counts, land_at, 0

    def query(self) -> bool:
        self.polls += 1
        if self.polls == self.land_at:
            self.buf[: len(self.counts)] = self.counts
        return self.polls >= self.land_at


@pytest.mark.parametrize("case", ["qwen35-mtp3", 3])
def test_the_watch_on_the_real_input_batch_finds_the_wrong_reads(case):
    schedule = schedule_for(case)
    real = real_batch_for(schedule)
    policy = get_policy("align")
    runner = SimpleNamespace(max_num_reqs=schedule.max_num_reqs, input_batch=real.ib,
                             cache_config=SimpleNamespace(mamba_cache_mode="align"),
                             num_accepted_tokens_event=None)  # fmt: skip
    rec = Recorder(runner, level="timing")  # the row-op hooks; no pinned rings on CPU
    for name, f in (("remove_request", rec._remove), ("add_request", rec._add),
                    ("condense", rec._condense), ("swap_states", rec._swap)):  # fmt: skip
        rec._hook(real.ib, name, f)
    found = expected = 0
    kinds: set[str] = set()
    prev = None
    for n, sim_step in enumerate(schedule.steps):
        step = StepInput.from_record(sim_step)
        buf = np.asarray(real.ib.num_accepted_tokens_cpu)
        if prev is not None:
            ev = LandingEvent(buf, prev.accepted, land_at=1 + n % 9)
            runner.num_accepted_tokens_event = ev
        cur = {"step": n, "ops": [], "landed_at_update_states": rec._landed()}
        rec.cur, rec.in_update = cur, True
        real.update_states(step)
        rec.in_update = False
        ops = [RowOp(o[0], o[1], o[2], o[3]) for o in cur["ops"]]
        assert canonical_ops(ops) == canonical_ops(sim_step.ops), f"step {n}"
        n_reqs = real.ib.num_reqs
        pp = real.prev_positions()
        cur["landed_at_read"] = rec._landed()
        buf = np.asarray(real.ib.num_accepted_tokens_cpu)
        cpu = policy.cpu_read(buf, buf, pp, n_reqs)  # _prepare_inputs' gather, write-back
        if prev is not None:
            if not cur["landed_at_read"]:
                ev.query()  # lands right after the read
            cur |= {"prev_positions": pp.tolist(), "cpu_value": cpu.tolist(),
                    "req_ids": list(real.ib.req_ids),
                    "prev_num_draft_tokens": real.prev_num_draft_tokens.tolist()}  # fmt: skip
            wrong = wrong_reads(policy, {"truth": prev.accepted.tolist()}, cur)
            rows = np.flatnonzero(pp >= 0)
            truly = rows[cpu[rows] != prev.accepted[pp[rows]]]
            assert sorted(w["row"] for w in wrong) == truly.tolist(), f"step {n}"
            found, expected = found + len(wrong), expected + len(truly)
            kinds |= {w["kind"] for w in wrong}
        real.finish_step(step)
        prev = sim_step
    assert found == expected and found > 0 and kinds <= {"unlanded", "ownership",
                                                         "double-permute"}  # fmt: skip


LOAD = """
import logging
logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
import vllm
from vllm.plugins import load_general_plugins
import specrace.plugin as p
load_general_plugins()
load_general_plugins()
print("specrace-plugin", vllm.__version__, p._loaded.get("state"), p.__file__)
"""


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory):
    """specrace as ``pip wheel .`` builds it, installed (no dependencies) into a folder."""
    builder = REPO / ".venv" / "bin" / "python"  # has setuptools>=77 (the test extra)
    if not builder.is_file():
        pytest.skip("no .venv to build the wheel with")
    wheels, target = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("site")
    r = subprocess.run([str(builder), "-m", "pip", "wheel", str(REPO), "--no-deps",
                        "--no-build-isolation", "-q", "-w", str(wheels)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (wheel,) = wheels.glob("specrace-*.whl")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--target", str(target), str(wheel)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return target


def load_in_vllm(site: Path, tree: Path, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SPECRACE_", "VLLM_"))}
    e |= {"PYTHONPATH": f"{site}{os.pathsep}{tree}", "VLLM_PLUGINS": "specrace", **env}
    return subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True,
                          timeout=300, env=e, cwd=str(site))  # fmt: skip


def test_vllm_loads_the_wheel_entry_point(installed_wheel):
    r = load_in_vllm(installed_wheel, VLLM_TREE)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("specrace-plugin")]
    assert r.returncode == 0 and line, r.stderr[-2000:]
    _tag, version, state, path = line[0].split()
    assert (version, state) == (VLLM_TREE.name.removeprefix("vllm-"), "inert")
    assert Path(path).is_relative_to(installed_wheel)  # the wheel's, not the checkout's


def test_on_0_34_0_the_plugin_says_once_that_the_counts_stay_on_the_gpu(installed_wheel):
    tree = REPO / ".cache" / "vllm-0.34.0"
    if not (tree / "vllm" / "plugins" / "__init__.py").is_file():
        pytest.skip("vLLM 0.34.0 not unpacked (SPECRACE_VLLM_VERSION=0.34.0 setup.sh)")
    r = load_in_vllm(installed_wheel, tree, SPECRACE_WATCH="1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "specrace-plugin 0.34.0 not-applicable" in r.stdout
    assert (r.stdout + r.stderr).count("stay on the GPU") == 1
