"""The folder tree is the data flow: each subpackage imports only those before it."""

from __future__ import annotations

import ast
from pathlib import Path

from repo_root import ROOT

SIM = ROOT / "sim"
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


def _program_for_another_tree(path: Path) -> bool:
    """sim/explore/upstream_program.py: the test file upstream-test writes for vLLM's tree,
    a module only so that ruff and mypy read it; never imported (its imports are vLLM's)."""
    return path.read_text().startswith("# specrace-template:")


def test_imports_follow_the_data_flow() -> None:
    for group in ORDER:
        for path in (SIM / group).rglob("*.py"):
            if _program_for_another_tree(path):
                continue
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


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SIM.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return ast.unparse(test).split(".")[-1] == "TYPE_CHECKING"


def _run_time_imports(path: Path, package: str, known: set[str]) -> set[str]:
    """The project modules ``path`` imports when it runs: at its top and inside functions alike
    (a lazy import still makes the pair one unit), not under ``if TYPE_CHECKING:``."""
    out: set[str] = set()
    todo: list[ast.AST] = [ast.parse(path.read_text())]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of this module
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return out & known


def test_no_two_modules_import_each_other() -> None:
    """A pair that imports each other, even lazily, is one module in two files: the one that
    needs both (as sim.model.schedule_io needs schedule and schedule_parquet) sits above them."""
    paths = [p for top in ("sim", "gpu_check") for p in (SIM.parent / top).rglob("*.py")]
    names = {_module_name(p): p for p in paths}
    graph = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = _run_time_imports(path, package, set(names)) - {name}
    pairs = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph[b]})
    assert not pairs, f"modules that import each other: {pairs}"


def test_no_module_is_over_700_lines() -> None:
    """A module owns one thing; past 700 lines it owns several (issue #21). Data lives in data
    files (sim/resolve/release_facts.json), not in Python literals."""
    long = {
        str(p.relative_to(ROOT)): n
        for pkg in ("sim", "gpu_check")
        for p in (ROOT / pkg).rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 700
    }
    assert not long, f"modules over 700 lines: {long}"


def test_the_program_for_another_tree_is_never_imported() -> None:
    programs = {_module_name(p) for p in SIM.rglob("*.py") if _program_for_another_tree(p)}
    assert programs == {"sim.explore.upstream_program"}
    for path in [*SIM.rglob("*.py"), *(SIM.parent / "gpu_check").rglob("*.py")]:
        assert not _imports(path) & programs, f"{path} imports {programs}"
