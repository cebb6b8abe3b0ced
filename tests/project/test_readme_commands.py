"""Every command in the ``sh`` blocks of the README and docs/reference.md runs as written, in a
fresh copy of the repo.

A line whose comment is exactly ``# GPU`` needs a CUDA device: only its ``--help`` is run.
Commands run with ``python`` the test's interpreter, in a copy of the tracked files, in chains:
the commands that name one folder or file under ``out/`` (the one that writes it, then those
that read it) run in the README's order in one test, as a reader following the README would;
chains are tests of their own, so the suite's workers share them out.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_root import ROOT

README = (ROOT / "README.md").read_text() + "\n" + (ROOT / "docs" / "reference.md").read_text()


def readme_commands() -> list[str]:
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", README, re.M | re.S):
        text = re.sub(r"\\\n\s*", " ", block)  # join continuation lines
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


COMMANDS = readme_commands()


def chains(commands: list[str]) -> dict[str, list[str]]:
    """The commands grouped by the first ``out/<name>`` they name (in the README's order
    within a group); a command that names none is a group of its own."""
    out: dict[str, list[str]] = {}
    for i, command in enumerate(commands):
        m = re.search(r"(?<![\w/])out/([^/\s]+)", command.partition("  #")[0])
        key = m.group(1) if m else f"{i:02d}-{shlex.split(command)[:4][-1]}"
        out.setdefault(key, []).append(command)
    return out


CHAINS = chains([c for c in COMMANDS if not c.startswith(("make ", "pip install"))])


def test_the_readme_has_commands() -> None:
    assert len(COMMANDS) >= 10
    assert any(c.startswith("make demo") for c in COMMANDS)
    assert len(CHAINS["mr"]) >= 4  # a run, then what reads it
    for key, chain in CHAINS.items():  # a chain of an out/ folder begins with what writes it
        if not key[:2].isdigit():
            assert f"--out out/{key}" in chain[0], (key, chain[0])


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("clone") / "specrace"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    return dst


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_every_readme_command_runs(fresh_copy: Path, chain: str) -> None:
    failures = []
    for command in CHAINS[chain]:
        cmd, _, comment = command.partition("  #")
        argv = shlex.split(cmd)
        if argv[0] == "make":  # the two make targets are what CI itself runs
            continue
        if argv[:2] == ["pip", "install"]:  # tests/project/test_package.py installs the package
            continue
        if argv[0] == "python":
            argv[0] = sys.executable
        elif argv[0] == "specrace":
            argv = [sys.executable, "-m", "specrace", *argv[1:]]
        else:
            failures.append(f"{command}: not a python/specrace/make command")
            continue
        if comment.strip() == "GPU":
            argv = [*argv[:4], "--help"]  # the subcommand exists and parses its help
        r = subprocess.run(argv, cwd=fresh_copy, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            failures.append(f"{command}\n  -> exit {r.returncode}: {r.stderr.strip()[-300:]}")
    assert not failures, "\n".join(failures)
