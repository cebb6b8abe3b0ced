"""Shared set-up for gpu_check tests.

Without CUDA, Triton kernels (ours and fla's) run in Triton's CPU interpreter: TRITON_INTERPRET
must be set before any kernel module is imported, because `triton.jit` reads it when it
decorates. Tests marked `gpu` are skipped without CUDA.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` (not `python -m pytest`) does not put the root there
    sys.path.insert(0, str(ROOT))

HAS_CUDA = torch.cuda.is_available()
os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and HERE in Path(item.fspath).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device() -> str:
    """Where kernel tests run: CUDA if present, else the CPU through the interpreter."""
    return "cuda" if HAS_CUDA else "cpu"
