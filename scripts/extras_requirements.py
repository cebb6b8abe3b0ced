"""Every requirement of pyproject.toml, dependencies and each extra, one a line (what
``make wheels`` downloads into .cache/wheels, so that tests/project/test_extras.py installs
offline).

    python scripts/extras_requirements.py > requirements.txt
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def requirements() -> list[str]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project, build = doc["project"], doc["build-system"]
    reqs = [*build["requires"], *project["dependencies"]]  # building specrace itself, too
    for extra in project["optional-dependencies"].values():
        reqs += [r for r in extra if not r.startswith(project["name"])]  # its own extras: above
    return list(dict.fromkeys(reqs))


if __name__ == "__main__":
    print("\n".join(requirements()))
