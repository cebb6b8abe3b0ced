"""The conformance suite runs only in its own environment (.cache/vllm-env, setup.sh).

In any other interpreter (the project's .venv running the main suite) this folder is not
collected. In the conformance environment vLLM's unpacked tree (.cache/vllm-<V>, V from
VLLM_VERSION or SPECRACE_VLLM_VERSION) goes first on sys.path; a missing tree, or a
vLLM found elsewhere, stops the run with what to do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VLLM_VERSION = os.environ.get("SPECRACE_VLLM_VERSION") or (HERE / "VLLM_VERSION").read_text()
VLLM_VERSION = VLLM_VERSION.strip()
VLLM_TREE = REPO / ".cache" / f"vllm-{VLLM_VERSION}"
CONFORMANCE_ENV = REPO / ".cache" / "vllm-env"

IN_ENV = Path(sys.prefix).resolve() == CONFORMANCE_ENV.resolve()
if not IN_ENV:
    collect_ignore_glob = ["test_*.py"]
else:
    if not (VLLM_TREE / "vllm" / "v1" / "worker" / "gpu_input_batch.py").is_file():
        pytest.exit(
            f"vLLM {VLLM_VERSION} not unpacked at {VLLM_TREE}: run tests/conformance/setup.sh",
            returncode=4,
        )
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    for p in (HERE, REPO, VLLM_TREE):
        sys.path.insert(0, str(p))
    import vllm

    if Path(vllm.__file__).resolve().parents[1] != VLLM_TREE.resolve():
        pytest.exit(f"imported vllm from {vllm.__file__}, expected {VLLM_TREE}", returncode=4)
    if vllm.__version__ != VLLM_VERSION:
        pytest.exit(f"vllm reports {vllm.__version__}, expected {VLLM_VERSION}", returncode=4)


def pytest_report_header(config: pytest.Config) -> str | None:
    if not IN_ENV:
        return None
    return f"conformance: vLLM {VLLM_VERSION} from {VLLM_TREE}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.conformance)
