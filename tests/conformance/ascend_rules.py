"""sim.resolve's vllm-ascend facts read again from vllm-ascend's own source (AST).

vllm-ascend ships no pure-Python wheel; its facts (sim.resolve.release_facts.ASCEND) are read
from two kinds of source, each checked here by finding the fact's construct inside the lines
it cites:

- a PyPI **release**, from its sdist (``vllm_ascend-<V>.tar.gz``, fetched by
  fetch_ascend.sh): the facts whose ``source`` is ``sdist`` (0.23.0.post1, with #13865);
  ``python ascend_rules.py --sdist DIR_OR_TARBALL`` (JSON), test_release_rules.py when the
  sdist is in .cache, all_releases.sh -> data/conformance/ascend.json ``releases``;
- a **git** commit (main, not on PyPI; the releases/v0.23.0 branch), with ``git show``: the
  facts whose ``ref`` names a commit; ``python ascend_rules.py GIT_DIR`` (JSON),
  test_release_rules.py when SPECRACE_ASCEND_GIT points at a clone (or a bare mirror).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

RUNNER = "vllm_ascend/worker/model_runner_v1.py"
DOCKERFILE = "Dockerfile"


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


def subclasses_v1_runner(mod: ast.Module) -> list[int]:
    """``from vllm.v1.worker.gpu_model_runner import ... GPUModelRunner`` and
    ``class NPUModelRunner(GPUModelRunner)``: [import line, class line], or [] (vLLM 0.34.0
    removed that module, so such a runner cannot import there)."""
    imp = next((n.lineno for n in mod.body if isinstance(n, ast.ImportFrom)
                and n.module == "vllm.v1.worker.gpu_model_runner"
                and any(a.name == "GPUModelRunner" for a in n.names)), 0)  # fmt: skip
    cls = next((n.lineno for n in ast.walk(mod) if isinstance(n, ast.ClassDef)
                and n.name == "NPUModelRunner"
                and any(ast.unparse(b) == "GPUModelRunner" for b in n.bases)), 0)  # fmt: skip
    return [imp, cls] if imp and cls else []


def private_buffer(mod: ast.Module) -> int:
    """#13865 as released: with async scheduling, ``_update_states_after_model_execute`` hands
    ``postprocess_mamba_align_gpu`` the runner's own ``self.num_accepted_tokens.cpu`` (the line of
    that keyword), not the InputBatch's tensor; with async off it defers to the base class
    (InputBatch ownership kept)."""
    fn = _method(mod, "_update_states_after_model_execute")
    if fn is None or "if not self.use_async_scheduling:" not in ast.unparse(fn):
        return 0
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
            "postprocess_mamba_align_gpu"
        ):
            for k in node.keywords:
                if k.arg == "num_accepted_tokens_cpu_tensor":
                    return (
                        k.value.lineno
                        if ast.unparse(k.value) == ("self.num_accepted_tokens.cpu")
                        else 0
                    )
    return 0


def sync_then_remap(mod: ast.Module) -> int:
    """In ``_prepare_inputs``: ``if self.num_accepted_tokens_event is not None:`` whose body
    synchronises, then calls ``self._sync_num_accepted_tokens`` (the remap of the private
    counts), and no gather from the InputBatch buffer (main's racy read, :func:`main_gather`).
    The line of the ``if``."""
    if main_gather(mod):
        return 0
    fn = _method(mod, "_prepare_inputs")
    for node in ast.walk(fn) if fn else ():
        if (
            isinstance(node, ast.If)
            and ast.unparse(node.test) == "self.num_accepted_tokens_event is not None"
            and ast.unparse(node.body[0]) == "self.num_accepted_tokens_event.synchronize()"
            and ast.unparse(node.body[1]).startswith("self._sync_num_accepted_tokens(")
        ):
            return node.lineno
    return 0


# Finders over model_runner_v1.py's AST: the line (or lines) of each fact's construct, 0 / [].
FINDERS = {
    "main_gather": main_gather,
    "main_correction_kernel": main_correction_kernel,
    "main_align_resync": main_align_resync,
    "main_subclasses_v1_runner": subclasses_v1_runner,
    "pr13865": pr13865,
    "post1_private_buffer": private_buffer,
    "post1_remap": pr13865,
    "post1_no_input_batch_gather": sync_then_remap,
    "post1_subclasses_v1_runner": subclasses_v1_runner,
}


def vllm_tag(dockerfile: str) -> tuple[str | None, int]:
    """``ARG VLLM_TAG=vX.Y.Z`` in the Dockerfile: the vLLM release it builds against."""
    for i, line in enumerate(dockerfile.splitlines(), 1):
        if line.startswith("ARG VLLM_TAG="):
            return line.split("=", 1)[1].strip().removeprefix("v"), i
    return None, 0


def _ranges(lines: str) -> list[tuple[int, int]]:
    out = []
    for part in lines.split(","):
        lo, _, hi = part.strip().partition("-")
        out.append((int(lo), int(hi or lo)))
    return out


def _within(found: int | list[int], lines: str) -> bool:
    """Every line found lies in one of the cited ranges ("746-812, 1153")."""
    got = found if isinstance(found, list) else [found]
    return bool(got) and all(x and any(lo <= x <= hi for lo, hi in _ranges(lines)) for x in got)


def compare(git_dir: Path) -> dict[str, Any]:
    """The facts that name a commit (main, the release branch), read with ``git show``."""
    from sim.resolve.release_facts import ASCEND

    out: dict[str, Any] = {}
    for name, fact in ASCEND.items():
        if "@" not in fact.ref:
            continue
        commit = fact.ref.split("@")[1]
        line = FINDERS[name](ast.parse(source(git_dir, commit, fact.file)))
        out[name] = {"held": _within(line, fact.lines), "line": line,
                     "cited": fact.lines, "ref": fact.ref}  # fmt: skip
    # #13865 is on its release branch only: main still has the unguarded gather.
    main = ASCEND["main_gather"].ref.split("@")[1]
    on_main = pr13865(ast.parse(source(git_dir, main)))
    out["pr13865_not_on_main"] = {"held": on_main == 0, "line": on_main, "ref": f"main@{main}"}
    return {"all_held": all(v["held"] for v in out.values()), "facts": out}


def sdist_files(path: Path) -> dict[str, str]:
    """model_runner_v1.py, the Dockerfile and PKG-INFO of an sdist (a tarball or its unpacked
    top folder), by path inside the project."""
    want = (RUNNER, DOCKERFILE, "PKG-INFO")
    if path.is_dir():
        return {rel: (path / rel).read_text() for rel in want}
    out: dict[str, str] = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            rel = member.name.split("/", 1)[-1]
            if rel in want and member.isfile():
                f = tar.extractfile(member)
                assert f is not None
                out[rel] = f.read().decode()
    return out


def _pkg_version(pkg_info: str) -> str:
    for line in pkg_info.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return "?"


def compare_sdist(path: Path) -> dict[str, Any]:
    """The facts whose ``source`` is ``sdist`` for the release this sdist is (its PKG-INFO
    version): each construct inside the cited lines, the vLLM it builds against as cited."""
    from sim.resolve.release_facts import ASCEND

    files = sdist_files(Path(path))
    version = _pkg_version(files["PKG-INFO"])
    mod = ast.parse(files[RUNNER])
    out: dict[str, Any] = {}
    for name, fact in ASCEND.items():
        if fact.source != "sdist" or fact.ref != version:
            continue
        if fact.file == DOCKERFILE:
            value, line = vllm_tag(files[DOCKERFILE])
            held = value == fact.value and _within(line, fact.lines)
            out[name] = {"held": held, "line": line, "value": value, "cited": fact.lines}
            continue
        line = FINDERS[name](mod)
        out[name] = {"held": _within(line, fact.lines), "line": line, "cited": fact.lines}
    return {"version": version, "all_held": bool(out) and all(v["held"] for v in out.values()),
            "facts": out}  # fmt: skip


if __name__ == "__main__":
    # ascend_rules.py GIT_DIR                 the facts that name a commit, from a clone
    # ascend_rules.py --sdist TARBALL_OR_DIR  a PyPI release's facts, from its sdist
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    if sys.argv[1] == "--sdist":
        print(json.dumps(compare_sdist(Path(sys.argv[2])), indent=1, sort_keys=True))
    else:
        print(json.dumps(compare(Path(sys.argv[1])), indent=1, sort_keys=True))
