"""Only to stamp the built package with the git commit it came from (sim/COMMIT); everything
else is in pyproject.toml."""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithCommit(build_py):
    def run(self) -> None:
        super().run()
        here = Path(__file__).resolve().parent
        try:
            commit = subprocess.run(
                ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=here, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = ""
        target = Path(self.build_lib) / "sim" / "COMMIT"
        target.parent.mkdir(parents=True, exist_ok=True)  # an editable build copies nothing there
        target.write_text((commit or "unknown") + "\n")


setup(cmdclass={"build_py": BuildWithCommit})
