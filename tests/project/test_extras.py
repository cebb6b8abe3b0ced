"""Each extra of pyproject.toml installs what it promises.

The fast tests read pyproject.toml; the slow one (``make test-slow``) installs each extra into a
fresh venv and runs one command that needs it. It installs offline, from the wheels ``make wheels``
downloads into .cache/wheels (the local wheel cache the conformance suite's vLLM wheels share),
with no index and no pip configuration: what an extra promises must come from the project's own
list of requirements, not from whatever this machine's pip happens to reach.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from repo_root import ROOT

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
    "gpu": (  # what imports without a GPU: gpu_check's CPU paths run on these
        {"torch", "triton", "fla-core", "einops", "packaging"},
        ["python", "-c", "import torch, triton, fla, einops, packaging; "
         "print(torch.__version__, triton.__version__)"],
    ),
    "test": (
        {"pytest", "hypothesis", "ruff", "mypy", "torch"},
        ["sh", "-c", "pytest --version && python -c 'import hypothesis' && ruff --version && "
         "mypy --version && jupyter lab --version"],
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


WHEELS = ROOT / ".cache" / "wheels"


def test_make_wheels_downloads_every_requirement() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from extras_requirements import requirements
    finally:
        sys.path.pop(0)
    listed = {_name(r) for r in requirements()}
    for extra in EXTRAS.values():
        assert {_name(r) for r in extra} - {"specrace"} <= listed


@pytest.mark.slow
@pytest.mark.parametrize("extra", sorted(PROMISES))
def test_extra_installs_into_a_fresh_venv(extra: str, tmp_path: Path) -> None:
    if not (WHEELS / ".extras-stamp").is_file():
        pytest.skip(f"no wheel cache at {WHEELS}: make wheels")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    for key in [k for k in env if k.startswith("PIP_") and k != "PIP_CONFIG_FILE"]:
        del env[key]  # PIP_FIND_LINKS, PIP_INDEX_URL ...: the cache alone
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
           "--find-links", str(WHEELS), "--disable-pip-version-check"]  # fmt: skip
    r = subprocess.run([*pip, f"{ROOT}[{extra}]"], env=env, capture_output=True, text=True,
                       timeout=1800)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    env.pop("PYTHONPATH", None)
    r = subprocess.run(PROMISES[extra][1], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["specrace", "--version"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stdout.startswith("specrace "), r.stderr
