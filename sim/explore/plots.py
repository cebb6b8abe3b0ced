"""Pictures of sweeps and runs: functions from tables to ``matplotlib.figure.Figure``.

No file I/O and no pyplot state here: a Figure made directly is not registered with any
backend, so importing this module never switches a notebook's inline backend off, and the
caller decides where the figure goes (``fig.savefig`` in the CLI, display in Jupyter).
Every rate is drawn with its 95 % Wilson interval and its count.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from sim.errors import SpecraceError
from sim.explore.analysis import (
    hazard_rates,
    param_axis,
    phase_rates,
    point_rates,
    sweep_title,
    swept_columns,
)
from sim.model.input_batch import RowOp

# Distinct marker + line style per policy, so policies with identical values stay visible.
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)), "-", "--"]
PER = 10_000  # rates are drawn per 10,000 reads
PANELS = (
    ("cpu_wrong", "CPU read a wrong count"),
    ("gpu_wrong", "GDN kernel consumed a wrong count"),
)


def _style(i: int) -> dict:
    return {"marker": MARKERS[i % len(MARKERS)], "linestyle": LINESTYLES[i % len(LINESTYLES)]}


def default_x(sweep: pd.DataFrame) -> str:
    """The swept column to draw against: the one grid parameter, or for a swarm the GPU
    forward time each point drew."""
    if "set.swarm" in sweep.columns:
        return "timing.gpu_forward_ns_base"
    cols = swept_columns(sweep) or [c for c in sweep.columns if c.startswith("set.")]
    if not cols:
        raise SpecraceError("the sweep has no swept column (set.*)")
    return cols[0]


def hazard_plot(sweep: pd.DataFrame, x: str | None = None, title: str = "") -> Figure:
    """Wrong reads per 10,000 reads against one swept parameter, one series per policy, with
    95 % intervals and counts. A swarm sweep is a scatter (every point is its own timing set);
    a grid with a second swept parameter is refused rather than pooled."""
    x = x or default_x(sweep)
    if x not in sweep.columns:
        raise SpecraceError(f"--x {x!r}: not a column of the sweep")
    swarm = "set.swarm" in sweep.columns and x != "set.swarm"
    rates = point_rates(sweep) if swarm else hazard_rates(sweep, x)
    label, scale = param_axis(x, rates[x])
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True, sharey=True)
    policies = sorted(rates["policy"].unique())
    xs = rates[x].to_numpy(dtype=float) * scale
    span = (xs.max() - xs.min()) or max(abs(xs.max()), 1.0)
    for ax, (what, panel_title) in zip(axes, PANELS, strict=True):
        for i, policy in enumerate(policies):
            g = rates[rates["policy"] == policy].sort_values(x)
            # Dodge each policy by 0.8 % of the range: equal series sit side by side.
            gx = g[x].to_numpy(dtype=float) * scale + (i - (len(policies) - 1) / 2) * 0.008 * span
            y = g[f"{what}_rate"].to_numpy() * PER
            err = np.vstack([y - g[f"{what}_lo"] * PER, g[f"{what}_hi"] * PER - y])
            st = _style(i)
            total = int(g[what].sum())
            ax.errorbar(
                gx,
                y,
                yerr=err,
                marker=st["marker"],
                linestyle="none" if swarm else st["linestyle"],
                capsize=3,
                markersize=5,
                alpha=0.85,
                label=f"{policy} ({total:,} wrong)",
            )
            if not swarm:
                for xi, yi, k in zip(gx, y, g[what], strict=True):
                    ax.annotate(
                        f"{int(k):,}",
                        (xi, yi),
                        textcoords="offset points",
                        xytext=(4, 4),
                        fontsize=7,
                        color=ax.lines[-1].get_color() if ax.lines else "k",
                    )
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel(label)
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    reads = int(rates["reads"].median())
    axes[0].set_ylabel(f"wrong reads per {PER:,} reads (95 % CI)")
    axes[1].legend(fontsize=8, loc="best")
    kind = "swarm: one point per timing set" if swarm else f"~{reads:,} reads per point"
    fig.suptitle(
        f"{title or 'Wrong accepted counts'} vs {label}\n{sweep_title(sweep)}; {kind}",
        fontsize=11,
    )
    return fig


def phase_diagram(
    sweep: pd.DataFrame, x: str, y: str, what: str = "gpu_wrong", title: str = ""
) -> Figure:
    """The rate of ``what`` (``gpu_wrong``: consumed wrong counts) over two swept parameters as a
    heat map, one panel per policy; each cell says its count of reads and its 95 % interval."""
    if what not in ("gpu_wrong", "cpu_wrong"):
        raise SpecraceError(f"what={what!r}: gpu_wrong or cpu_wrong")
    rates = phase_rates(sweep, x, y)
    policies = sorted(rates["policy"].unique())
    xv = sorted(rates[x].unique())
    yv = sorted(rates[y].unique())
    xlabel, xs = param_axis(x, np.asarray(xv))
    ylabel, ys = param_axis(y, np.asarray(yv))
    positive = rates.loc[rates[what] > 0, f"{what}_rate"] * PER
    norm = LogNorm(vmin=positive.min(), vmax=positive.max()) if len(positive) else None
    if norm is not None and norm.vmin == norm.vmax:
        norm = LogNorm(vmin=norm.vmin / 2, vmax=norm.vmax * 2)
    cell_w = max(1.35, 0.9 + 0.15 * len(policies))
    fig = Figure(
        figsize=(min(2.2 + cell_w * len(xv) * len(policies), 30), 1.6 + 0.75 * len(yv) + 1.2),
        layout="constrained",
    )
    axes = np.atleast_1d(fig.subplots(1, len(policies), sharey=True))
    image = None
    for ax, policy in zip(axes, policies, strict=True):
        g = rates[rates["policy"] == policy]
        grid = np.full((len(yv), len(xv)), np.nan)
        for r in g.itertuples(index=False):
            i, j = yv.index(getattr(r, _attr(g, y))), xv.index(getattr(r, _attr(g, x)))
            k, n = getattr(r, what), r.reads
            rate = k / n * PER if n else np.nan
            grid[i, j] = rate if k > 0 else np.nan
            lo, hi = getattr(r, f"{what}_lo") * PER, getattr(r, f"{what}_hi") * PER
            ax.text(
                j,
                i,
                f"{k:,}/{n:,}\n[{_num(lo)}, {_num(hi)}]",
                ha="center",
                va="center",
                fontsize=6.5,
                color="black",
            )
        ax.imshow(np.zeros_like(grid), cmap="Greys", vmin=0, vmax=10, origin="lower", aspect="auto")
        if norm is not None:
            image = ax.imshow(grid, cmap="YlOrRd", norm=norm, origin="lower", aspect="auto")
        ax.set_xticks(range(len(xv)), [_num(v * xs) for v in xv])
        ax.set_yticks(range(len(yv)), [_num(v * ys) for v in yv])
        ax.set_xlabel(xlabel)
        total = int(g[what].sum())
        ax.set_title(f"{policy}\n{total:,} of {int(g['reads'].sum()):,} reads", fontsize=9)
    axes[0].set_ylabel(ylabel)
    if image is not None:
        fig.colorbar(image, ax=list(axes), label=f"per {PER:,} reads", shrink=0.9)
    name = dict(PANELS)[what]
    fig.suptitle(
        f"{title or name}: rate per cell, count/reads and 95 % CI (per {PER:,} reads)\n"
        f"{sweep_title(sweep)}; grey: none in that cell",
        fontsize=10,
    )
    return fig


def _attr(df: pd.DataFrame, col: str) -> str:
    """itertuples renames columns that are not identifiers (set.timing.x -> _N)."""
    cols = list(df.columns)
    return col if col.isidentifier() else f"_{cols.index(col)}"


def _num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.2g}"


def margin_histogram(reads: pd.DataFrame | dict[str, pd.DataFrame], title: str = "") -> Figure:
    """How far from a flip each wrong read was: DMA landing to the nearest row op, on a log
    axis in µs, consumed-wrong reads stacked apart from those the correction kernel repaired.
    A dict (policy -> reads) draws one panel per policy that read a wrong count."""
    tables = reads if isinstance(reads, dict) else {"": reads}
    wrong = {p: r[r["cpu_wrong"] | r["gpu_wrong"]] for p, r in tables.items()}
    shown = {p: w for p, w in wrong.items() if len(w)} or dict(list(wrong.items())[:1])
    clean = [p for p, w in wrong.items() if not len(w) and p]
    fig = Figure(figsize=(8, 1.2 + 2.9 * len(shown)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(shown), 1, sharex=True))
    floor_us = 0.1
    landed_all = pd.concat([w[w["margin_ns"] >= 0] for w in shown.values()])
    top = (
        max(float(landed_all["margin_ns"].max()) / 1000.0 * 1.3, floor_us * 10)
        if len(landed_all)
        else 10.0
    )
    bins = np.logspace(np.log10(floor_us), np.log10(top), 36)
    for ax, (policy, w) in zip(axes, shown.items(), strict=True):
        _margin_axes(ax, w, bins, floor_us, policy)
    axes[-1].set_xlabel(
        "margin (µs, log): DMA landing to the nearest row op; unlanded: read to landing"
        f" (≤ {floor_us} µs drawn at {floor_us})"
    )
    sub = f"\nno wrong read: {', '.join(clean)}" if clean else ""
    fig.suptitle((title or "How close each wrong read was to a flip") + sub, fontsize=11)
    return fig


def _margin_axes(ax, wrong: pd.DataFrame, bins: np.ndarray, floor_us: float, policy: str) -> None:
    landed = wrong[wrong["margin_ns"] >= 0]
    never = len(wrong) - len(landed)
    if landed.empty:
        ax.text(0.5, 0.5, "no wrong read with a landing", ha="center", transform=ax.transAxes)
    us = np.maximum(landed["margin_ns"].to_numpy() / 1000.0, floor_us)
    consumed = landed["gpu_wrong"].to_numpy()
    groups = [
        ("GDN consumed the wrong count", consumed, "tab:red"),
        ("CPU wrong, repaired on the GPU", ~consumed, "tab:blue"),
    ]
    data, labels, colors = [], [], []
    for name, mask, color in groups:
        kinds = landed[mask]["kind"].value_counts().sort_index()
        detail = ", ".join(f"{k} {v:,}" for k, v in kinds.items())
        data.append(us[mask])
        labels.append(f"{name}: {int(mask.sum()):,}" + (f" ({detail})" if detail else ""))
        colors.append(color)
    # Overlaid, not stacked: a few consumed-wrong reads stay visible beside thousands repaired.
    for d, label, color in zip(data, labels, colors, strict=True):
        ax.hist(d, bins=bins, label=label, color=color, alpha=0.6, histtype="stepfilled")
        ax.hist(d, bins=bins, color=color, histtype="step", linewidth=1.0)
    ax.set_xscale("log")
    peak = max((np.histogram(d, bins=bins)[0].max() for d in data if len(d)), default=0)
    if peak > 30:
        ax.set_yscale("log")
        ax.set_ylim(0.7, peak * 40)  # headroom for the legend
        ax.set_ylabel("wrong reads (log)")
    else:
        ax.set_ylim(0, max(peak, 1) * 1.7)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("wrong reads")
    ax.grid(alpha=0.3, which="both")
    extra = f"; {never:,} whose counts never landed" if never else ""
    head = f"{policy}: " if policy else ""
    ax.legend(fontsize=8, title=f"{head}{len(wrong):,} wrong reads{extra}", title_fontsize=8)


def landing_labels(ops: Sequence[RowOp]) -> dict[int, str]:
    """``land_pos`` -> what it means for one step's ops: 0 -> "before remove F", ..."""

    def name(op: RowOp) -> str:
        if op.kind == "swap":
            return f"swap {op.a}↔{op.b}"
        if op.kind == "move":
            return f"move {op.a}→{op.b}"
        return f"{op.kind} {op.req_id}"

    out = {i: f"before\n{name(op)}" for i, op in enumerate(ops)}
    out[len(ops)] = f"after\n{name(ops[-1])}" if ops else "after the ops"
    out[-1] = "not landed\nat the read"
    return out


def landing_outcome_plot(
    by_landing: pd.DataFrame, title: str, labels: dict[int, str] | None = None
) -> Figure:
    """Replays per landing position, split by the count consumed (from ``compare.by_landing``);
    ``labels`` (see :func:`landing_labels`) names the positions by the operations."""
    policies = sorted(by_landing["policy"].unique())
    counts = sorted(by_landing["gpu_consumed"].unique())
    positions = sorted(by_landing["land_pos"].unique(), key=lambda p: (p < 0, p))
    labels = labels or {}
    ticks = [labels.get(int(p), str(p)) for p in positions]
    fig = Figure(figsize=(2.6 * len(policies) + 0.6, 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(policies), sharey=True))
    colors = {c: ("tab:green" if c == 1 else f"C{3 + i}") for i, c in enumerate(counts)}
    for ax, policy in zip(axes, policies, strict=True):
        g = by_landing[by_landing["policy"] == policy]
        bottom = np.zeros(len(positions))
        for c in counts:
            h = np.array(
                [g[(g.land_pos == p) & (g.gpu_consumed == c)]["replays"].sum() for p in positions]
            )
            ax.bar(range(len(positions)), h, bottom=bottom, label=f"consumed {c}", color=colors[c])
            bottom += h
        ax.set_xticks(range(len(positions)), ticks, fontsize=7, rotation=60, ha="right")
        ax.set_title(f"{policy}\n{int(g['replays'].sum()):,} replays", fontsize=9)
        ax.set_xlabel("where the copy landed")
    axes[0].set_ylabel("replays")
    axes[-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig
