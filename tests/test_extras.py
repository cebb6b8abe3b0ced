"""Each extra of pyproject.toml installs what it promises.

The fast test reads pyproject.toml; the slow one (``make test-slow``; needs PyPI) installs each
extra into a fresh venv and runs one command that needs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

# extra -> what the README promises it brings, and one command (run with the venv's bin first
# on PATH) that fails without it.
PROMISES: dict[str, tuple[set[str], list[str]]] = {
    "notebooks": (
        {"jupyterlab", "nbconvert", "nbclient", "ipywidgets", "ipykernel"},
        ["sh", "-c", "jupyter lab --version && jupyter nbconvert --version && python -c "
         "'import ipywidgets, ipykernel, nbclient; print(ipywidgets.__version__)'"],
    ),
    "dask": ({"dask"}, ["python", "-c", "from dask.distributed import Client; print(Client)"]),
    "gpu": (
        {"torch", "triton", "fla-core"},
        ["python", "-c", "import torch, triton, fla; print(torch.__version__)"],
    ),
    "test": (
        {"pytest", "hypothesis", "ruff", "mypy", "torch"},
        ["sh", "-c", "pytest --version && ruff --version && mypy --version && "
         "jupyter lab --version"],
    ),
}  # fmt: skip


def _name(req: str) -> str:
    for sep in ("[", "=", ">", "<", "~", "!", ";", " "):
        req = req.split(sep)[0]
    return req.strip().lower()


@pytest.mark.parametrize("extra", sorted(PROMISES))
def test_extra_lists_what_it_promises(extra: str) -> None:
    promised, _cmd = PROMISES[extra]
    assert promised <= {_name(r) for r in EXTRAS[extra]}, extra


def test_notebook_extra_is_pinned() -> None:
    assert all("==" in r for r in EXTRAS["notebooks"]), EXTRAS["notebooks"]


@pytest.mark.slow
@pytest.mark.parametrize("extra", sorted(PROMISES))
def test_extra_installs_into_a_fresh_venv(extra: str, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    if extra in ("gpu", "test"):  # the CPU builds: CUDA wheels are gigabytes
        pip += ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    r = subprocess.run([*pip, f"{ROOT}[{extra}]"], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    r = subprocess.run(PROMISES[extra][1], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["specrace", "--version"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stdout.startswith("specrace "), r.stderr
