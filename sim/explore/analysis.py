"""Tables to tables: rates and agreement computed from run and sweep outputs."""

from __future__ import annotations

import pandas as pd


def hazard_rates(sweep: pd.DataFrame, x: str) -> pd.DataFrame:
    """Per (policy, x): wrong reads per 1,000 simulated steps, pooled over seeds."""
    if x not in sweep.columns:
        raise KeyError(f"column {x!r} not in the sweep (have: {', '.join(sweep.columns)})")
    g = (
        sweep.groupby(["policy", x], sort=True)
        .agg(
            steps=("steps", "sum"),
            cpu_wrong=("cpu_wrong", "sum"),
            gpu_wrong=("gpu_wrong", "sum"),
            corrupted_requests=("corrupted_requests", "sum"),
            mean_step_ns=("mean_step_ns", "mean"),
        )
        .reset_index()
    )
    g["cpu_wrong_per_kstep"] = g["cpu_wrong"] / g["steps"] * 1000.0
    g["gpu_wrong_per_kstep"] = g["gpu_wrong"] / g["steps"] * 1000.0
    return g
