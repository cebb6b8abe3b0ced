"""Hazard plots: functions from tables to matplotlib figures (no file I/O here)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from sim.analysis import hazard_rates  # noqa: E402


def hazard_plot(sweep: pd.DataFrame, x: str) -> plt.Figure:
    """Wrong reads per 1,000 steps against one swept parameter, one line per policy."""
    rates = hazard_rates(sweep, x)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for policy, g in rates.groupby("policy", sort=True):
        axes[0].plot(g[x], g["cpu_wrong_per_kstep"], marker="o", label=policy)
        axes[1].plot(g[x], g["gpu_wrong_per_kstep"], marker="o", label=policy)
    axes[0].set_title("CPU read a wrong count")
    axes[1].set_title("GDN kernel consumed a wrong count")
    for ax in axes:
        ax.set_xlabel(x)
        ax.set_ylabel("per 1,000 steps")
        ax.set_yscale("symlog", linthresh=0.1)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def margin_histogram(reads: pd.DataFrame) -> plt.Figure:
    """How far from a flip each wrong read was: DMA landing to the nearest row op."""
    wrong = reads[reads["cpu_wrong"] | reads["gpu_wrong"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for kind, g in wrong.groupby("kind", sort=True):
        ax.hist(g["margin_ns"] / 1000.0, bins=40, alpha=0.6, label=str(kind))
    ax.set_xlabel("margin (µs)")
    ax.set_ylabel("wrong reads")
    ax.legend()
    fig.tight_layout()
    return fig
