"""Tables to tables: rates with counts and 95 % Wilson intervals, from run and sweep outputs.

A rate is always a count over a number of reads (``gpu_wrong`` of ``reads``): the count and
the denominator travel with it, and its interval is Wilson's score interval, which stays
inside [0, 1] and is not empty at zero counts (0 of n reads gives [0, 3.8/n]).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.errors import SpecraceError
from sim.runs.stats import Z95, wilson  # noqa: F401  (re-exported: sweeps, plots, notebooks)

# Readable names of the timing parameters people sweep (TimingParams in sim.model.params).
PARAM_NAMES = {
    "gpu_forward_ns_base": "GPU forward time",
    "gpu_forward_ns_per_token": "GPU forward time per token",
    "gpu_sample_ns": "GPU sampler time",
    "gpu_drafter_ns": "MTP drafter time",
    "gpu_prep_ns": "GPU input prep time",
    "dma_land_delay_ns": "counts D2H landing delay",
    "engine_output_ipc_ns": "engine output IPC",
    "engine_input_ipc_ns": "engine input IPC",
    "engine_update_ns_per_req": "engine update_from_output per request",
    "engine_schedule_ns_base": "engine schedule() base cost",
    "engine_schedule_ns_per_req": "engine schedule() per request",
    "worker_add_ns": "worker add_request",
    "worker_remove_ns": "worker remove_request",
    "worker_swap_ns": "worker swap_states",
    "worker_condense_move_ns": "worker condense move",
    "worker_prepare_inputs_ns": "worker _prepare_inputs",
    "worker_launch_ns": "worker launch",
    "worker_sample_tokens_ns": "worker sample_tokens",
    "worker_stall_ns": "worker stall length",
    "worker_stall_prob": "worker stall probability",
    "jitter_frac": "timing jitter (fraction)",
}


def param_axis(column: str, values: pd.Series | np.ndarray) -> tuple[str, float]:
    """Axis label and scale for a swept column: ``set.timing.gpu_forward_ns_base`` in ns ->
    ("GPU forward time (ms)", 1e-6). Times take the unit that keeps the values readable."""
    key = column.split(".")[-1]
    name = PARAM_NAMES.get(key, key.replace("_", " "))
    if not key.endswith("_ns") and "_ns_" not in key:
        return name, 1.0
    top = float(np.nanmax(np.abs(np.asarray(values, dtype=float)))) if len(values) else 0.0
    if top >= 1e6:
        return f"{name} (ms)", 1e-6
    if top >= 1e3:
        return f"{name} (µs)", 1e-3
    return f"{name} (ns)", 1.0


def swept_columns(sweep: pd.DataFrame) -> list[str]:
    """The ``set.*`` columns that take more than one value."""
    return [c for c in sweep.columns if c.startswith("set.") and sweep[c].nunique() > 1]


def _check_no_pooling(sweep: pd.DataFrame, keys: list[str]) -> None:
    others = [c for c in swept_columns(sweep) if c not in keys and c != "set.swarm"]
    if others:
        listed = ", ".join(f"{c} ({sweep[c].nunique()} values)" for c in others)
        raise SpecraceError(
            f"the sweep also varies {listed}: a plot over {', '.join(keys)} would pool them; "
            "give the second one as --y (phase diagram) or plot a sub-sweep"
        )


def _rates(g: pd.DataFrame) -> pd.DataFrame:
    for what in ("cpu_wrong", "gpu_wrong"):
        g[f"{what}_rate"] = g[what] / g["reads"].where(g["reads"] > 0, 1)
        g[f"{what}_lo"], g[f"{what}_hi"] = wilson(g[what].to_numpy(), g["reads"].to_numpy())
        g[f"{what}_per_kstep"] = g[what] / g["steps"] * 1000.0
    return g


AGG = {
    "steps": ("steps", "sum"),
    "reads": ("reads", "sum"),
    "cpu_wrong": ("cpu_wrong", "sum"),
    "gpu_wrong": ("gpu_wrong", "sum"),
    "corrupted_requests": ("corrupted_requests", "sum"),
    "mean_step_ns": ("mean_step_ns", "mean"),
    "seeds": ("seed", "nunique"),
}


def hazard_rates(sweep: pd.DataFrame, x: str) -> pd.DataFrame:
    """Per (policy, x): wrong reads pooled over seeds, with rates per read, their Wilson
    intervals and per 1,000 steps. Refuses to pool a second swept parameter."""
    if x not in sweep.columns:
        raise SpecraceError(f"column {x!r} not in the sweep (have: {', '.join(sweep.columns)})")
    _check_no_pooling(sweep, [x])
    g = sweep.groupby(["policy", x], sort=True).agg(**AGG).reset_index()
    return _rates(g)


def point_rates(sweep: pd.DataFrame) -> pd.DataFrame:
    """One row per sweep row (a swarm point is one timing set): rates and intervals."""
    g = sweep.copy()
    g["seeds"] = 1
    return _rates(g)


def phase_rates(sweep: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Per (policy, x, y): pooled over seeds, with rates and Wilson intervals."""
    for c in (x, y):
        if c not in sweep.columns:
            raise SpecraceError(f"column {c!r} not in the sweep")
    if x == y:
        raise SpecraceError("a phase diagram needs two different columns")
    _check_no_pooling(sweep, [x, y])
    g = sweep.groupby(["policy", x, y], sort=True).agg(**AGG).reset_index()
    return _rates(g)


def sweep_title(sweep: pd.DataFrame) -> str:
    """ "qwen35-mtp3, 500 steps x 2 seeds per point": what each point of a sweep pooled."""
    scen = ", ".join(sorted(map(str, sweep["scenario"].unique()))) if "scenario" in sweep else ""
    steps = sorted(int(s) for s in sweep["steps"].unique())
    seeds = int(sweep["seed"].nunique()) if "seed" in sweep else 1
    step_txt = f"{steps[0]:,}" if len(steps) == 1 else f"{steps[0]:,}-{steps[-1]:,}"
    head = f"{scen}, " if scen else ""
    return f"{head}{step_txt} steps x {seeds} seed{'s' if seeds > 1 else ''} per point"


def summary_rates(summaries: list[dict]) -> pd.DataFrame:
    """Run summaries (``RunResult.summary``, several seeds of one policy allowed) -> per
    policy: reads, wrong counts, and the consumed-wrong rate with its 95 % Wilson interval."""
    if not summaries:
        raise SpecraceError("no run summaries")
    df = pd.DataFrame(
        [
            {k: s[k] for k in ("policy", "steps", "reads", "cpu_wrong", "gpu_wrong")}
            for s in summaries
        ]
    )
    g = df.groupby("policy", sort=False).sum().reset_index()
    g["runs"] = df.groupby("policy", sort=False).size().to_numpy()
    g["gpu_wrong_rate"] = g["gpu_wrong"] / g["reads"].where(g["reads"] > 0, 1)
    g["gpu_wrong_lo"], g["gpu_wrong_hi"] = wilson(g["gpu_wrong"].to_numpy(), g["reads"].to_numpy())
    return g
