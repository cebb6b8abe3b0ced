"""A mistyped name gets the one it was close to, in the error's one line."""

from __future__ import annotations

import pytest

from sim.errors import SpecraceError, did_you_mean
from sim.model.policies import select
from sim.resolve.presets import get_preset
from sim.resolve.resolution import VllmSetup


@pytest.mark.parametrize(("word", "names", "hint"), [
    ("alignn", ["align", "unsynced"], "; did you mean align?"),
    ("0.28", ["0.27.1", "0.28.0", "0.29.0"], "; did you mean 0.28.0?"),
    ("Qwen/Qwen3.5-27B", ["qwen3.5-27b", "qwen3.6-35b-a3b"], "; did you mean qwen3.5-27b?"),
    ("0.99.0", ["0.29.0", "0.34.0"], ""),  # a release that does not exist is not a typo
    ("zzz", ["align"], ""),
])  # fmt: skip
def test_did_you_mean(word: str, names: list[str], hint: str) -> None:
    assert did_you_mean(word, names) == hint


def test_the_commands_errors_carry_it() -> None:
    with pytest.raises(SpecraceError, match=r"did you mean sync-before-moves\?"):
        select("sync-before-move")
    with pytest.raises(SpecraceError, match=r"did you mean qwen3.5-27b\?"):
        get_preset("Qwen/Qwen3.5-27B")
    with pytest.raises(SpecraceError, match=r"--vllm 0.28: unknown release; did you mean 0.28.0\?"):
        VllmSetup(vllm="0.28").check()
