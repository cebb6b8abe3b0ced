"""Both vLLM recorders on the CPU, with a stand-in torch: the state they share is set up once
(``instrument.Hooks``), and install / uninstall leave the runner's objects as they were; and
the MRv2 recorder's hook points against the source of each release it records (0.33.0, 0.34.0)."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

import pytest
from repo_root import ROOT

from gpu_check.vllm.instrument import Recorder
from gpu_check.vllm.instrument_v2 import HOOK_POINTS, RecorderV2, is_v2_runner


@pytest.fixture
def fake_torch(monkeypatch):
    made = []

    def zeros(shape, dtype=None, pin_memory=False):
        made.append((shape, dtype, pin_memory))
        return object()

    torch = types.SimpleNamespace(zeros=zeros, int32="int32", int64="int64")
    monkeypatch.setitem(sys.modules, "torch", torch)
    return made


class Live:  # a live object whose methods the recorders shadow
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: name


def _runner(v2: bool):
    r = Live()
    r.max_num_reqs = 8
    r.cache_config = types.SimpleNamespace(mamba_cache_mode="align")
    r.input_batch = Live()
    if v2:
        r.model_state = Live()
    return r


@pytest.mark.parametrize("cls,v2,rings", [(Recorder, False, 2), (RecorderV2, True, 3)])
def test_recorders_share_their_setup_and_undo_their_hooks(fake_torch, cls, v2, rings) -> None:
    runner = _runner(v2)
    rec = cls(runner, level="full", gpu_delay_us=50, max_steps=16, ns_per_cycle=0.5)
    assert (rec.max_reqs, rec.max_steps, rec.steps, rec.cur) == (8, 16, [], None)
    assert rec.sleep_cycles == 100_000  # 50 µs at 0.5 ns per cycle
    assert [m for m in fake_torch if m[0] == (16, 8)] and len(fake_torch) == rings
    assert all(pin for _s, _d, pin in fake_torch)  # the rings are pinned host memory
    rec.install()
    hooked = [name for _obj, name, _below in rec._saved]
    assert "execute_model" in hooked and all(name in vars(o) for o, name, _b in rec._saved)
    rec.uninstall()
    assert rec._saved == [] and "execute_model" not in vars(runner)
    assert cls(runner, level="lite", gpu_delay_us=0, max_steps=16).sleep_cycles == 0


# --- RecorderV2 against a release's own MRv2 source (CPU, no vLLM import) -------------------
# The unpacked .py tree of a release: tests/conformance/fetch_release.sh V (absent: skipped).
GPU = "vllm/v1/worker/gpu"


def _tree(version: str) -> Path:
    tree = ROOT / ".cache" / f"vllm-{version}"
    if not (tree / GPU / "model_states" / "mamba_hybrid.py").is_file():
        pytest.skip(f"vLLM {version} not unpacked: tests/conformance/fetch_release.sh {version}")
    return tree


def _class(path: Path, name: str) -> ast.ClassDef:
    found = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]
    return next(c for c in found if c.name == name)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == name)


def _calls(node: ast.AST, owner: str, name: str) -> list[ast.Call]:
    """Calls ``self.<owner>.<name>(...)`` (``owner`` empty: ``self.<name>``) under ``node``."""
    want = f"self.{owner}.{name}" if owner else f"self.{name}"
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and ast.unparse(n.func) == want]


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_recorder_v2_hook_points_in_the_release_source(version: str) -> None:
    tree = _tree(version)
    state = _class(tree / GPU / "model_states" / "mamba_hybrid.py", "MambaHybridModelState")
    runner_src = tree / GPU / "model_runner.py"
    runner = _class(runner_src, "GPUModelRunner")
    classes = {"runner": runner, "model_state": state}
    for owner, methods in HOOK_POINTS.items():
        for name, params in methods.items():
            args = [a.arg for a in _method(classes[owner], name).args.args][1:]  # after self
            assert [p for p in params if p in args] == list(params), (version, name, args)
            positional = [p for p in params if p != "for_capture"]
            assert args[: len(positional)] == positional, (version, name, args)
    # the counts: one slot per request, gathered through idx_mapping where the hook copies them
    init_src = ast.unparse(_method(state, "__init__"))
    assert "self.num_accepted_tokens_gpu = torch.ones(" in init_src
    gather = ast.unparse(_method(state, "prepare_attn"))
    assert "self.num_accepted_tokens_gpu[input_batch.idx_mapping]" in gather
    post = ast.unparse(_method(state, "postprocess_state"))
    assert "_scatter_num_accepted_kernel[num_reqs,](idx_mapping, num_sampled, " in post
    # how model_runner.py calls them: the hooks read input_batch / idx_mapping, num_sampled by
    # position and for_capture by keyword; align's reset (preprocess_state) before the gather
    execute = _method(runner, "execute_model")
    prepares = _calls(execute, "model_state", "prepare_attn")
    pre = _calls(execute, "model_state", "preprocess_state")
    assert len(prepares) == 1 and len(pre) == 1 and pre[0].lineno < prepares[0].lineno
    assert ast.unparse(prepares[0].args[0]) == "input_batch"
    assert "for_capture" in {k.arg for k in prepares[0].keywords}
    posts = _calls(runner, "model_state", "postprocess_state")
    assert len(posts) >= 2 and all(len(c.args) >= 2 for c in posts)
    batch = _class(tree / GPU / "input_batch.py", "InputBatch")
    fields = {n.target.id for n in batch.body if isinstance(n, ast.AnnAssign)}
    assert {"req_ids", "num_reqs", "idx_mapping"} <= fields
    # the recorder treats exactly these runners as MRv2
    module = ".".join(runner_src.relative_to(tree).with_suffix("").parts)
    assert is_v2_runner(type("R", (), {"__module__": module})())
