"""specrace's version and the commit it was built from (``specrace --version``)."""

from __future__ import annotations

import subprocess
from importlib import metadata, resources
from pathlib import Path


def version() -> str:
    try:
        return metadata.version("specrace")
    except metadata.PackageNotFoundError:
        return "unknown"


def commit() -> str:
    """The git commit: written into the package at build time (setup.py), else asked of git
    for a source checkout, else ``unknown``."""
    stamp = resources.files("sim") / "COMMIT"
    if stamp.is_file():
        return stamp.read_text().strip() or "unknown"
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def version_line() -> str:
    return f"specrace {version()} (commit {commit()})"
