"""Rates with their 95 % interval: one home for the Wilson score interval of sweeps, plots and
the replay's verdict tables."""

from __future__ import annotations

import numpy as np

Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def wilson(k: np.ndarray | int, n: np.ndarray | int, z: float = Z95) -> tuple:
    """Wilson score interval of ``k`` successes in ``n`` trials (element-wise); n = 0 -> [0, 1]."""
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    safe = np.where(n > 0, n, 1.0)
    p = k / safe
    den = 1.0 + z * z / safe
    mid = (p + z * z / (2 * safe)) / den
    half = z * np.sqrt(p * (1 - p) / safe + z * z / (4 * safe * safe)) / den
    lo = np.where(n > 0, np.clip(mid - half, 0.0, 1.0), 0.0)
    hi = np.where(n > 0, np.clip(mid + half, 0.0, 1.0), 1.0)
    # k = 0 has lower bound exactly 0 (rounding would give ~1e-17).
    lo = np.where(k == 0, 0.0, lo)
    return lo, hi
