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
    """Each method's source, as ``ast.get_source_segment(padded=True)`` gives it, dedented.

    The segment is cut from the file's lines here: ``get_source_segment`` splits the whole
    text again for every call, 6 s for the runner's 116 methods against 0.1 s."""
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GPUModelRunner")
    methods = {}
    for f in cls.body:
        if isinstance(f, ast.FunctionDef):
            assert f.end_lineno is not None and f.end_col_offset is not None
            seg = [line.encode() for line in lines[f.lineno - 1 : f.end_lineno]]
            seg[-1] = seg[-1][: f.end_col_offset]  # offsets count UTF-8 bytes
            seg[0] = b" " * f.col_offset + seg[0][f.col_offset :]
            methods[f.name] = textwrap.dedent(b"".join(seg).decode())
    return methods


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
