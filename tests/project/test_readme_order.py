"""The README in the order a new user needs it, short, and the facts it names that drift: what
it is, the two set-up commands, the first run, the answers, the evidence; the long form in
docs/reference.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from repo_root import ROOT

from sim.model.policies import POLICIES

README = (ROOT / "README.md").read_text(encoding="utf-8")
REFERENCE = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
MAX_LINES = 250  # a door, not a lab notebook: history and campaigns live in docs/ and data/


def test_the_first_two_commands_are_make_demo_and_make_test() -> None:
    block = re.search(r"^```sh\n(.*?)^```", README, re.M | re.S)
    assert block
    first = [line.split()[:2] for line in block.group(1).splitlines() if line.strip()]
    assert first == [["make", "demo"], ["make", "test"]]


def test_sections_come_in_order() -> None:
    heads = re.findall(r"^(#{1,2} .*)$", README, re.M)
    want = [
        "## Set up",
        "## First run",
        "## Is my vLLM exposed?",
        "## In your deployment",
        "## Evidence",
        "## Read more",
    ]
    assert [h for h in heads if h in want] == want, heads
    what_it_is = README[: README.index("## Set up")]
    assert "wrong\naccepted-token count" in what_it_is or "wrong accepted-token count" in (
        what_it_is.replace("\n", " ")
    )


def test_the_readme_is_short_and_cites_no_project_issue_numbers() -> None:
    assert README.count("\n") <= MAX_LINES, README.count("\n")
    # every #N in the README is vLLM's or vllm-ascend's (five digits); the project's own issues
    # (two digits) are not cited there
    assert all(int(n) >= 10_000 for n in re.findall(r"#(\d+)", README)), re.findall(r"#\d+", README)


def test_every_relative_link_of_the_readme_resolves() -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_the_install_lines_name_what_each_extra_brings() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    line = next(x for x in README.splitlines() if x.startswith("pip install '.[notebooks,dask]'"))
    assert "JupyterLab" in line and "nbconvert" in line and "Dask" in line
    assert any(r.startswith("jupyterlab==") for r in extras["optional-dependencies"]["notebooks"])


def test_the_perfetto_path_is_where_perfetto_writes(tmp_path: Path) -> None:
    line = next(x for x in REFERENCE.splitlines() if x.startswith("python -m sim perfetto out/mr "))
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
