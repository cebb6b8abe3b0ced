"""sim.resolve's vllm-ascend facts read again from a vllm-ascend git repository (AST).

vllm-ascend ships no wheel to unpack, so its facts (sim.resolve.release_facts.ASCEND) name a
commit; this reads ``vllm_ascend/worker/model_runner_v1.py`` at that commit with ``git show``
and checks each fact's construct sits inside the lines it cites. Used by
test_release_rules.py when SPECRACE_ASCEND_GIT points at a clone (or a bare mirror), and by
``python ascend_rules.py GIT_DIR`` (JSON).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

RUNNER = "vllm_ascend/worker/model_runner_v1.py"


def source(git_dir: Path, commit: str, rel: str = RUNNER) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{rel}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _method(mod: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(mod):
        if isinstance(node, ast.ClassDef) and node.name == "NPUModelRunner":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    return None


def main_gather(mod: ast.Module) -> int:
    """The event wait, then a gather from ``input_batch.num_accepted_tokens_cpu`` through
    ``prev_positions`` with write-back, and no ``needs_cpu_accepted_counts`` guard."""
    fn = _method(mod, "_prepare_inputs")
    text = ast.unparse(fn)
    if "needs_cpu_accepted_counts" in text:
        return 0
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.If)
            and ast.unparse(node.test) == "self.num_accepted_tokens_event is not None"
            and ast.unparse(node.body[0]) == "self.num_accepted_tokens_event.synchronize()"
            and "self.input_batch.num_accepted_tokens_cpu[np.where(new_mask, 0, prev_idx)]"
            in ast.unparse(node)
        ):
            return node.lineno
    return 0


def main_correction_kernel(mod: ast.Module) -> int:
    fn = _method(mod, "_prepare_inputs")
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
            "update_num_computed_tokens_for_batch_change"
        ):
            return node.lineno
    return 0


def main_align_resync(mod: ast.Module) -> int:
    """After ``mamba_utils.preprocess_mamba(...)``, the CPU counts are copied to the device."""
    for fn in ast.walk(mod):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for block in ast.walk(fn):
            body = getattr(block, "body", None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                if "mamba_utils.preprocess_mamba(" in ast.unparse(stmt):
                    for later in body[i + 1 : i + 4]:
                        if ast.unparse(later).startswith(
                            "self.num_accepted_tokens.np[:num_reqs] = "
                            "self.input_batch.num_accepted_tokens_cpu[:num_reqs]"
                        ):
                            return later.lineno
    return 0


def pr13865(mod: ast.Module) -> int:
    fn = _method(mod, "_remap_num_accepted_tokens")
    return fn.lineno if fn else 0


FINDERS = {
    "main_gather": main_gather,
    "main_correction_kernel": main_correction_kernel,
    "main_align_resync": main_align_resync,
    "pr13865": pr13865,
}


def _within(line: int, lines: str) -> bool:
    first = lines.split(",")[0].strip()
    lo, _, hi = first.partition("-")
    return int(lo) <= line <= int(hi or lo)


def compare(git_dir: Path) -> dict[str, Any]:
    from sim.resolve.release_facts import ASCEND

    out: dict[str, Any] = {}
    for name, fact in ASCEND.items():
        commit = fact.ref.split("@")[1]
        line = FINDERS[name](ast.parse(source(git_dir, commit, fact.file)))
        out[name] = {"held": bool(line) and _within(line, fact.lines), "line": line,
                     "cited": fact.lines, "ref": fact.ref}  # fmt: skip
    # #13865 is on its release branch only: main still has the unguarded gather.
    main = ASCEND["main_gather"].ref.split("@")[1]
    on_main = pr13865(ast.parse(source(git_dir, main)))
    out["pr13865_not_on_main"] = {"held": on_main == 0, "line": on_main, "ref": f"main@{main}"}
    return {"all_held": all(v["held"] for v in out.values()), "facts": out}


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    print(json.dumps(compare(Path(sys.argv[1])), indent=1, sort_keys=True))
