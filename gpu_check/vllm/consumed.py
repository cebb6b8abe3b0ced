"""What a V1 runner's read consumes, by ``mamba_cache_mode``: one rule for the export and the
watch's check.

- **align**: the GDN kernel restores its state from the CPU value the runner built from the
  pinned buffer (``num_accepted_tokens.np`` after the gather), drafted row or not: that value
  is the one to judge (``cpu_value``).
- **none** (0.24.0 on, #45100): the kernel reads the device's own counts, the value the forward
  read for a speculative row (``gpu_value``); a row without drafts in the previous step does
  not consume it, so only a drafted row's read can be wrong.
"""

from __future__ import annotations

import numpy as np


def consumed_column(mode: str) -> str:
    """The observed reads' column whose value the GDN kernel consumed in ``mode``."""
    return "cpu_value" if mode == "align" else "gpu_value"


def wrong_reads(mode: str, cpu: np.ndarray, gpu: np.ndarray, true: np.ndarray,
                drafted: np.ndarray) -> np.ndarray:  # fmt: skip
    """Which reads consumed a wrong count: the consumed value differs from the true count,
    and, outside align, only where the row was drafted."""
    value = cpu if consumed_column(mode) == "cpu_value" else gpu
    wrong = value != true
    return wrong if mode == "align" else (drafted & wrong)
