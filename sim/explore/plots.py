"""Hazard plots: functions from tables to matplotlib figures (no file I/O here)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sim.explore.analysis import hazard_rates  # noqa: E402


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


def landing_outcome_plot(by_landing: pd.DataFrame, title: str) -> plt.Figure:
    """Replays per landing position, split by the count consumed (from ``compare.by_landing``)."""
    policies = sorted(by_landing["policy"].unique())
    counts = sorted(by_landing["gpu_consumed"].unique())
    positions = sorted(by_landing["land_pos"].unique())
    fig, axes = plt.subplots(1, len(policies), figsize=(2.4 * len(policies), 3), sharey=True)
    for ax, policy in zip(np.atleast_1d(axes), policies, strict=True):
        g = by_landing[by_landing["policy"] == policy]
        bottom = np.zeros(len(positions))
        for c in counts:
            h = [g[(g.land_pos == p) & (g.gpu_consumed == c)]["replays"].sum() for p in positions]
            ax.bar([str(p) for p in positions], h, bottom=bottom, label=f"consumed {c}")
            bottom += h
        ax.set_title(policy, fontsize=9)
        ax.set_xlabel("landing before op")
    np.atleast_1d(axes)[0].set_ylabel("replays")
    np.atleast_1d(axes)[-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
