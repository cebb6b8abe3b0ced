"""``python -m sim upstream-test``'s file run against the release's real sources, three ways.

The generated test (for vLLM's tree; it imports nothing of specrace) runs in a pytest
subprocess: on the unpacked wheel as it is, where it must fail exactly at the landings the
model says unpatched align reads wrong (and pass at the others), and once per patch of
gpu_check.vllm.patches, where it must pass everywhere. A patch is applied the way a merged fix
would be: to the runner's source file. The subprocess sees a tree of links to the unpacked
wheel in which only ``vllm/v1/worker/gpu_model_runner.py`` is the patched copy (the patch's
``Edit``\\ s on its methods, spliced back in place). ``private-d2h`` also needs the
runner-owned buffer that ``Installed.install`` allocates outside any method; a conftest.py
beside the test gives the test's runner stand-in that buffer the same way.

A release whose InputBatch this environment cannot import (0.33.0 needs more packages than
requirements.txt holds) is skipped with the import error; put them on PYTHONPATH (pip install
--target) to run it: the subprocess inherits PYTHONPATH after the tree.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import VLLM_TREE, VLLM_VERSION

from gpu_check.vllm.patches import NONE, PATCHES, Patch, patched_source_text
from sim.explore.upstream_test import (
    SUPPORTED,
    minimal_race,
    predicted_failures,
    read_landings,
    render,
)

RUNNER = Path("vllm/v1/worker/gpu_model_runner.py")
TEST_NAME = "test_accepted_counts_follow_requests_across_row_moves"
ARMS = [NONE, *PATCHES]
OUTCOME = {"failure": "failed", "error": "error", "skipped": "skipped"}  # junit tag -> outcome

PRIVATE_BUFFER_CONFTEST = '''\
"""specrace private-d2h: the runner-owned pinned counts buffer, as Installed.install adds it."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _runner_owned_counts_buffer(request, monkeypatch):
    make = request.module.make_runner

    def make_runner():
        runner = make()
        t = torch.ones(int(runner.max_num_reqs), dtype=torch.int32)
        runner._private_num_accepted_cpu_tensor = t
        runner._private_num_accepted_cpu = t.numpy()
        return runner

    monkeypatch.setattr(request.module, "make_runner", make_runner)
'''

pytestmark = pytest.mark.skipif(
    VLLM_VERSION not in SUPPORTED,
    reason=f"upstream-test supports vLLM {', '.join(SUPPORTED)}, not {VLLM_VERSION}",
)


def patched_runner_source(source: str, patch: Patch) -> str:
    """The runner module's text with ``patch``'s edited methods spliced in place."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GPUModelRunner")
    nodes = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    lines = source.splitlines(keepends=True)
    names = {e.method for e in patch.edits}

    def span(name: str) -> list[str]:
        return lines[nodes[name].lineno - 1 : nodes[name].end_lineno]

    edited = patched_source_text({n: textwrap.dedent("".join(span(n))) for n in names}, patch)
    for name in sorted(names, key=lambda n: nodes[n].lineno, reverse=True):
        first = lines[nodes[name].lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        lines[nodes[name].lineno - 1 : nodes[name].end_lineno] = [
            textwrap.indent(edited[name], indent)
        ]
    return "".join(lines)


def patched_tree(tree: Path, runner_text: str, dest: Path) -> Path:
    """Links to every entry of ``tree`` except the folders down to the runner module, which
    are real folders of links, and the module itself, which is ``runner_text``."""
    src, dst = tree, dest
    dst.mkdir()
    for part in (*RUNNER.parts[:-1], None):
        for child in src.iterdir():
            if child.name not in (part, RUNNER.name, "__pycache__"):
                (dst / child.name).symlink_to(child)
        if part is None:
            break
        src, dst = src / part, dst / part
        dst.mkdir()
    (dest / RUNNER).write_text(runner_text)
    return dest


def _probe() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from vllm.v1.worker.gpu_input_batch import InputBatch"],
        env=_env(VLLM_TREE),
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def arm_runs(tmp_path_factory) -> Iterator[dict[str, Future[RunResult]]]:
    """The import probe and every arm's pytest subprocess, started together.

    Each subprocess spends most of its 10 s importing torch and vLLM on one core; the suite
    runs serially, so started together they use the machine's other cores (on 2 cores:
    46 s one after another against 28 s for the file). Each test waits for its own arm."""
    work = tmp_path_factory.mktemp("arms")
    source = (VLLM_TREE / RUNNER).read_text()
    texts = {arm: patched_runner_source(source, PATCHES[arm]) for arm in ARMS if arm != NONE}
    with ThreadPoolExecutor(max_workers=len(ARMS) + 1) as pool:
        probe = pool.submit(_probe)
        runs = {arm: pool.submit(run_generated, work / arm, arm, texts.get(arm, ""))
                for arm in ARMS}  # fmt: skip
        proc = probe.result()
        if proc.returncode:  # (the arms, all started, are waited for as the pool closes)
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            pytest.skip(f"vLLM {VLLM_VERSION}'s InputBatch does not import here: {last}")
        yield runs


def _env(tree: Path) -> dict[str, str]:
    extra = os.environ.get("PYTHONPATH", "")
    path = os.pathsep.join(p for p in (str(tree), extra) if p)
    return {**os.environ, "PYTHONPATH": path, "VLLM_LOGGING_LEVEL": "WARNING"}


RunResult = tuple[dict[str, str], dict[str, str], str]


def run_generated(work: Path, arm: str, runner_text: str = "") -> RunResult:
    """The generated test's outcome per landing id (passed, failed, error, skipped), the
    failure message per failed id, and the tail of pytest's output. ``runner_text``: the
    arm's patched runner module (made beforehand in the main thread: CPython 3.11's
    ``ast.parse`` is not thread-safe, and two at once once raised "SystemError: AST
    constructor recursion depth mismatch" in CI)."""
    work.mkdir()
    (work / "pytest.ini").write_text("[pytest]\n")
    test = work / "test_align_accepted_counts.py"
    test.write_text(render(VLLM_VERSION))
    tree = VLLM_TREE
    if arm != NONE:
        patch = PATCHES[arm]
        tree = patched_tree(VLLM_TREE, runner_text, work / "vllm-tree")
        if patch.private_buffer:
            (work / "conftest.py").write_text(PRIVATE_BUFFER_CONFTEST)
    junit = work / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--confcutdir={work}", f"--junitxml={junit}", str(test)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=work, env=_env(tree), capture_output=True, text=True)
    log = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode in (0, 1), f"pytest exited {proc.returncode}:\n{log}"
    outcomes, messages = {}, {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        assert name.startswith(TEST_NAME + "["), name
        landing = name[len(TEST_NAME) + 1 : -1]
        tags = [c for c in case if c.tag in OUTCOME]
        outcomes[landing] = OUTCOME[tags[0].tag] if tags else "passed"
        if tags:
            messages[landing] = tags[0].get("message", "")
    return outcomes, messages, log


@pytest.mark.parametrize("arm", ARMS)
def test_generated_test_fails_unpatched_and_passes_with_each_fix(arm_runs, arm):
    outcomes, messages, log = arm_runs[arm].result()
    policy = "align" if arm == NONE else PATCHES[arm].sim_policy
    want_failed = predicted_failures(policy)
    race = minimal_race()
    ids = [name for _land, name in read_landings(race)]
    assert sorted(outcomes) == sorted(ids), log
    failed = {i for i, o in outcomes.items() if o != "passed"}
    assert failed == want_failed, f"{arm}: failed {sorted(failed)}, model {sorted(want_failed)}"
    if arm == NONE:
        assert failed and failed != set(ids), "unpatched: some landings fail, not all"
        assert all(outcomes[i] == "failed" for i in failed), log  # assertion failures only
        for landing in failed:  # the model's wrong read, word for word
            for req_id, cpu, true in race.wrong:
                said = f"request {req_id} "
                assert said in messages[landing], messages[landing]
                assert f"reads {cpu} accepted tokens" in messages[landing], messages[landing]
                assert f"expected {true}" in messages[landing], messages[landing]


def test_patched_tree_changes_only_the_runner(tmp_path):
    patch = PATCHES["sync-before-moves"]
    text = patched_runner_source((VLLM_TREE / RUNNER).read_text(), patch)
    tree = patched_tree(VLLM_TREE, text, tmp_path / "t")
    assert (tree / "vllm" / "__init__.py").resolve() == (VLLM_TREE / "vllm/__init__.py").resolve()
    assert (tree / "vllm/v1/worker/gpu_input_batch.py").is_symlink()
    runner = tree / RUNNER
    assert not runner.is_symlink()
    text, orig = runner.read_text(), (VLLM_TREE / RUNNER).read_text()
    assert "specrace sync-before-moves" in text and "specrace" not in orig
    compile(text, str(runner), "exec")
    # only the edited lines changed
    added = len(text.splitlines()) - len(orig.splitlines())
    assert added == sum(len(e.new.splitlines()) - len(e.old.splitlines()) for e in patch.edits)
