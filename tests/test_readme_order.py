"""The README in the order a new user needs it, and the facts it names that drift: what it is,
install and the two commands, the answers, then the reference."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from sim.model.policies import POLICIES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_first_two_commands_are_make_demo_and_make_test() -> None:
    block = re.search(r"^```sh\n(.*?)^```", README, re.M | re.S)
    assert block
    first = [line.split()[:2] for line in block.group(1).splitlines() if line.strip()]
    assert first == [["make", "demo"], ["make", "test"]]


def test_sections_come_in_order() -> None:
    heads = re.findall(r"^(#{1,2} .*)$", README, re.M)
    want = [
        "## Install and first run",
        "## What `make demo` shows",
        "## Is my vLLM exposed? (`specrace risk`)",
        "## Real vLLM on the H200 (`gpu_check vllm-run`)",
        "# Reference",
        "## Layout (data flows left to right)",
        "## Commands",
    ]
    assert [h for h in heads if h in want] == want, heads
    what_it_is = README[: README.index("## Install")]
    assert "wrong\naccepted-token count" in what_it_is or "wrong accepted-token count" in (
        what_it_is.replace("\n", " ")
    )


def test_the_install_lines_name_what_each_extra_brings() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    line = next(x for x in README.splitlines() if x.startswith("pip install '.[notebooks,dask]'"))
    assert "JupyterLab" in line and "nbconvert" in line and "Dask" in line
    assert any(r.startswith("jupyterlab==") for r in extras["optional-dependencies"]["notebooks"])


def test_the_perfetto_path_is_where_perfetto_writes(tmp_path: Path) -> None:
    line = next(x for x in README.splitlines() if x.startswith("python -m sim perfetto out/mr "))
    named = re.search(r"# (out/mr/\S+)", line)
    assert named, line
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def sim(*argv: str) -> None:
        r = subprocess.run([sys.executable, "-m", "sim", *argv], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr

    sim("run", "--scenario", "minimal-race", "--out", "out/mr")
    sim("perfetto", "out/mr")
    assert (tmp_path / named.group(1).rstrip(",")).is_file()


def test_policies_doc_lists_every_policy_and_nothing_as_to_come() -> None:
    doc = (ROOT / "docs" / "policies.md").read_text(encoding="utf-8")
    sec = doc[doc.index("\n## 2") : doc.index("\n## 3")]
    table = re.findall(r"^\| `([\w-]+)`", sec, re.M)
    assert table == [*POLICIES, "async-off"], table
    assert not re.search(r"being added|to be added|once they land", sec, re.I)
