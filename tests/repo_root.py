"""The repository's root, wherever a test sits under tests/: the folder that holds pyproject.toml.

Tests mirror the code (tests/README.md) at different depths; each takes the root from here
rather than counting ``parents`` by hand.
"""

from __future__ import annotations

from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
