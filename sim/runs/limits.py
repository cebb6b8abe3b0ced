"""What a run may ask of this machine: the most steps, and the memory its steps x rows need.

A run that would need more than there is is refused up front with the estimate, not found by
the OOM killer hours later.
"""

from __future__ import annotations

import os

from sim.errors import SpecraceError
from sim.model.params import Scenario

MAX_STEPS = 10_000_000

# Measured: a run holds ~40 KB per step of qwen35-mtp3 (64 rows) in memory, ~650 B per row-step.
BYTES_PER_ROW_STEP = 650


def guard_resources(scenario: Scenario, steps: int) -> None:
    """Refuse up front a run that would need more memory than this machine has."""
    need = steps * scenario.engine.max_num_seqs * BYTES_PER_ROW_STEP
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if need > 0.8 * have:
        raise SpecraceError(
            f"--steps {steps:,} x {scenario.engine.max_num_seqs} rows needs about "
            f"{need / 2**30:.1f} GiB of memory, more than the {have / 2**30:.1f} GiB available; "
            "run with --stream (bounded memory), or fewer steps"
        )
