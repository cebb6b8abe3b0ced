"""sim.runs.processes: units over worker processes, results in the units' order."""

from __future__ import annotations

import os

import pytest
from load import limit_s
from repo_root import ROOT

from sim.runs.processes import AUTO_MIN_S, auto_workers, map_units


def test_results_come_back_in_the_units_order() -> None:
    units = [7, -3, 0, 12, -40, 5]
    assert map_units(abs, units, workers=3) == [abs(u) for u in units]
    assert map_units(abs, units, workers=1) == [abs(u) for u in units]


def test_a_units_exception_is_raised_in_the_caller() -> None:
    with pytest.raises(ValueError, match="invalid literal"):
        map_units(int, ["1", "2", "x", "4"], workers=2)


def test_the_workers_run_in_other_processes() -> None:
    pids = map_units(_pid, [0, 1, 2, 3], workers=2)
    assert os.getpid() not in pids


def _pid(_unit: int) -> int:
    return os.getpid()


def test_a_script_read_from_stdin_runs_its_units_here() -> None:
    """``python - <<EOF`` has a ``__main__`` no worker can import (its path is ``<stdin>``):
    the pool broke with a BrokenProcessPool traceback. The units now run in that process."""
    import subprocess
    import sys

    script = ("from sim.runs.processes import map_units\n"
              "print(map_units(abs, [3, -4, 5, -6], workers=2))\n")  # fmt: skip
    root = ROOT
    r = subprocess.run([sys.executable, "-"], input=script, cwd=root, capture_output=True,
                       text=True, timeout=limit_s(30))  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "[3, 4, 5, 6]", r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("units", "serial_s", "cores", "expected"),
    [
        (16, 20.0, 2, 2),  # a core each
        (16, 20.0, 64, 16),  # no more than the units
        (16, 20.0, 1, 1),  # one core: this process
        (1, 20.0, 8, 1),  # one unit: this process
        (16, AUTO_MIN_S / 2, 8, 1),  # too little work to pay for a pool
    ],
)
def test_auto_workers(units: int, serial_s: float, cores: int, expected: int) -> None:
    assert auto_workers(units, serial_s, cores) == expected
