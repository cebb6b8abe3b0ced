"""Every command in the README's ``sh`` blocks runs as written, in a fresh copy of the repo.

A line whose comment is exactly ``# GPU`` needs a CUDA device: only its ``--help`` is run.
Commands run in order, in one copy of the tracked files (later ones read what earlier ones
wrote, as a reader following the README would), with ``python`` the test's interpreter.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


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


def test_the_readme_has_commands() -> None:
    assert len(COMMANDS) >= 10
    assert any(c.startswith("make demo") for c in COMMANDS)


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


def test_every_readme_command_runs(fresh_copy: Path) -> None:
    failures = []
    for command in COMMANDS:
        cmd, _, comment = command.partition("  #")
        argv = shlex.split(cmd)
        if argv[0] == "make":  # the two make targets are what CI itself runs
            continue
        if argv[:2] == ["pip", "install"]:  # tests/test_package.py installs the package itself
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
