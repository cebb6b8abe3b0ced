"""Both vLLM recorders on the CPU, with a stand-in torch: the state they share is set up once
(``instrument.Hooks``), and install / uninstall leave the runner's objects as they were."""

from __future__ import annotations

import sys
import types

import pytest

from gpu_check.vllm.instrument import Recorder
from gpu_check.vllm.instrument_v2 import RecorderV2


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
    hooked = [name for _obj, name in rec._saved]
    assert "execute_model" in hooked and all(name in vars(o) for o, name in rec._saved)
    rec.uninstall()
    assert rec._saved == [] and "execute_model" not in vars(runner)
    assert cls(runner, level="lite", gpu_delay_us=0, max_steps=16).sleep_cycles == 0
