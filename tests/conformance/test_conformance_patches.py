"""``vllm-run --patch``'s edits against the real ``GPUModelRunner`` source of every unpacked
release (.cache/vllm-<V>/; the suite's release always): each edit finds its lines exactly once
and the edited method compiles. The source is read, not imported (the runner needs CUDA)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from gpu_check.vllm.patches import PATCHES, patched_source_text

REPO = Path(__file__).resolve().parents[2]
RUNNERS = sorted((REPO / ".cache").glob("vllm-[0-9]*/vllm/v1/worker/gpu_model_runner.py"))


def _methods(path: Path) -> dict[str, str]:
    text = path.read_text()
    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GPUModelRunner")
    return {
        f.name: textwrap.dedent(ast.get_source_segment(text, f, padded=True) or "")
        for f in cls.body
        if isinstance(f, ast.FunctionDef)
    }


def test_the_suite_release_is_among_the_checked_sources():
    from conftest import VLLM_TREE

    assert VLLM_TREE / "vllm/v1/worker/gpu_model_runner.py" in RUNNERS


@pytest.mark.parametrize("runner", RUNNERS, ids=lambda p: p.parts[-5])
@pytest.mark.parametrize("name", list(PATCHES))
def test_each_patch_applies_once_and_compiles(runner, name):
    methods = _methods(runner)
    edited = patched_source_text(methods, PATCHES[name])
    assert set(edited) == {e.method for e in PATCHES[name].edits}
    for method, src in edited.items():
        assert src != methods[method]
        assert "specrace" in src
        compile(src, f"{runner}:{method}", "exec")
