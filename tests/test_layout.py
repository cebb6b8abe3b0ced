"""The folder tree is the data flow: each subpackage imports only those before it."""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parent.parent / "sim"
ORDER = ["model", "runs", "explore", "hardware", "resolve", "cli"]
# What each group may import from sim (besides sim.errors and itself).
ALLOWED = {
    "model": set(),
    "runs": {"model"},
    "explore": {"model", "runs"},
    "hardware": {"model", "runs"},
    "resolve": {"model", "runs", "explore"},
    "cli": {"model", "runs", "explore", "hardware", "resolve"},
}
FORBIDDEN_TOP = {"torch", "triton", "fla", "gpu_check"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_every_module_sits_in_a_group() -> None:
    shared = {"__init__.py", "__main__.py", "errors.py", "version.py"}
    loose = {p.name for p in SIM.glob("*.py")} - shared
    assert not loose, f"modules outside the groups: {sorted(loose)}"
    assert {p.name for p in SIM.iterdir() if p.is_dir() and p.name != "__pycache__"} >= set(ORDER)


def test_imports_follow_the_data_flow() -> None:
    for group in ORDER:
        for path in (SIM / group).rglob("*.py"):
            for mod in _imports(path):
                top = mod.split(".")[0]
                assert top not in FORBIDDEN_TOP, f"{path}: imports {mod}"
                parts = mod.split(".")
                if top != "sim" or len(parts) < 2 or parts[1] in ("errors", "version", group):
                    continue
                assert parts[1] in ALLOWED[group], f"{path.relative_to(SIM)} imports {mod}"


def test_gpu_check_uses_the_model_and_tables_only() -> None:
    root = SIM.parent / "gpu_check"
    for path in root.rglob("*.py"):
        for mod in _imports(path):
            parts = mod.split(".")
            if parts[0] == "sim" and len(parts) > 1:
                allowed = ("model", "runs", "errors", "hardware")
                if path.parent.name == "vllm":  # a real vLLM run: the policy its config resolves to
                    allowed += ("resolve",)
                assert parts[1] in allowed, f"{path}: {mod}"
