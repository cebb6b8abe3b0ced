"""Pictures of sweeps and runs: functions from tables to ``matplotlib.figure.Figure``.

No file I/O and no pyplot state here: a Figure made directly is not registered with any
backend, so importing this module never switches a notebook's inline backend off, and the
caller decides where the figure goes (``fig.savefig`` in the CLI, display in Jupyter).
Every rate is drawn with its 95 % Wilson interval and its count.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
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
from sim.model.policies import POLICIES
from sim.model.verdict import HazardKind

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
    swarm = "set.swarm" in sweep.columns  # every point its own timing set: never a line
    rates = point_rates(sweep) if swarm else hazard_rates(sweep, x)
    label, scale = param_axis(x, rates[x])
    fig = Figure(figsize=(12, 5.8), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True, sharey=True)
    policies = policy_order(rates["policy"].unique())
    xs = rates[x].to_numpy(dtype=float) * scale
    span = (xs.max() - xs.min()) or max(abs(xs.max()), 1.0)
    handles: list[Line2D] = []
    for ax, (what, panel_title) in zip(axes, PANELS, strict=True):
        # A count several policies share at one x is labelled once, in black, not once each
        # (three labels "203" on top of each other read as one smudge).
        counts = rates[rates[what] > 0].groupby([x, what])["policy"].nunique()
        labelled: set[tuple[float, int]] = set()
        for i, policy in enumerate(policies):
            g = rates[rates["policy"] == policy].sort_values(x)
            # Dodge each policy by 1.5 % of the range: equal series sit side by side.
            gx = g[x].to_numpy(dtype=float) * scale + (i - (len(policies) - 1) / 2) * 0.015 * span
            y = g[f"{what}_rate"].to_numpy() * PER
            lo, hi = g[f"{what}_lo"].to_numpy() * PER, g[f"{what}_hi"].to_numpy() * PER
            k = g[what].to_numpy()
            st, color = _style(i), f"C{i}"
            seen = k > 0
            ax.errorbar(
                gx[seen],
                y[seen],
                yerr=np.vstack([y[seen] - lo[seen], hi[seen] - y[seen]]),
                marker=st["marker"],
                linestyle="none" if swarm else st["linestyle"],
                color=color,
                capsize=3,
                markersize=5,
                alpha=0.85,
            )
            # None seen: a hollow down-triangle at the 95 % upper bound (a log axis has no 0).
            ax.plot(gx[~seen], hi[~seen], marker="v", linestyle="none", markersize=6,
                    markerfacecolor="none", markeredgecolor=color, alpha=0.9)  # fmt: skip
            if ax is axes[1]:
                name = f"{policy}: {int(k.sum()):,} consumed wrong"
                ls: Any = "none" if swarm else st["linestyle"]
                handles.append(
                    Line2D([], [], color=color, marker=st["marker"], linestyle=ls, label=name)
                )
            if not swarm:
                # Staggered by policy, so equal counts of two policies do not print on each other.
                dy = (6, -12, 15, -21, 24, -30)[i % 6]
                raw = g[x].to_numpy()[seen]
                for xr, xi, yi, ki in zip(raw, gx[seen], y[seen], k[seen], strict=True):
                    if (xr, int(ki)) in labelled:
                        continue
                    labelled.add((xr, int(ki)))
                    shared = counts.get((xr, ki), 1) > 1
                    ax.annotate(f"{int(ki):,}", (xi, yi), textcoords="offset points",
                                xytext=(5, label_offset(rates, x, what, policy, xr, yi, dy)),
                                fontsize=7, color="black" if shared else color)  # fmt: skip
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel(label)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    reads = int(rates["reads"].median())
    axes[0].set_ylabel(f"wrong reads per {PER:,} reads (95 % CI)")
    handles.append(Line2D([], [], color="grey", marker="v", markerfacecolor="none",
                          linestyle="none", label="none seen: 95 % upper bound"))  # fmt: skip
    # Below the panels: inside, nine policies' entries covered the right panel's count labels.
    fig.legend(handles=handles, fontsize=8, loc="outside lower center", ncol=4, frameon=False)
    kind = "swarm: one point per timing set" if swarm else f"~{reads:,} reads per point"
    fig.suptitle(
        f"{title or 'Wrong accepted counts'} vs {label}\n{sweep_title(sweep)}; {kind}",
        fontsize=11,
    )
    return fig


def label_offset(rates: pd.DataFrame, x: str, what: str, policy: str, xr: float, y: float,
                 default: int) -> int:  # fmt: skip
    """A count label's vertical offset (points): away from another policy's point at the same
    x within a factor of 3 (a label above a point with another just above it touched that
    marker), else the policy's staggered ``default``."""
    at = rates[(rates[x] == xr) & (rates["policy"] != policy) & (rates[what] > 0)]
    near = at[f"{what}_rate"].to_numpy() * PER
    near = near[(near > y / 3) & (near < y * 3)]
    if near.size and (near >= y).all():
        return -12
    if near.size and (near < y).all():
        return 6
    return default


def policy_order(names) -> list[str]:
    """Policies in the canonical order of sim.model.policies (then any others by name)."""
    names = set(names)
    return [p for p in POLICIES if p in names] + sorted(names - set(POLICIES))


def phase_diagram(
    sweep: pd.DataFrame, x: str, y: str, what: str = "gpu_wrong", title: str = ""
) -> Figure:
    """The rate of ``what`` (``gpu_wrong``: consumed wrong counts) over two swept parameters as a
    heat map, one panel per policy that has any (the others are named under the title, so the
    figure reads at 900 px); each cell says its count and its rate with the 95 % interval per
    10,000 reads, and the reads per cell are in the title (or in the cell where they differ).
    Cells without one are grey."""
    if what not in ("gpu_wrong", "cpu_wrong"):
        raise SpecraceError(f"what={what!r}: gpu_wrong or cpu_wrong")
    rates = phase_rates(sweep, x, y)
    every = policy_order(rates["policy"].unique())
    totals = rates.groupby("policy")[what].sum()
    policies = [p for p in every if totals[p] > 0] or every[:1]
    none = [p for p in every if p not in policies]
    xv = sorted(rates[x].unique())
    yv = sorted(rates[y].unique())
    xlabel, xs = param_axis(x, np.asarray(xv))
    ylabel, ys = param_axis(y, np.asarray(yv))
    one_n = rates["reads"].nunique() == 1
    positive = rates.loc[rates[what] > 0, f"{what}_rate"] * PER
    norm = LogNorm(vmin=positive.min(), vmax=positive.max()) if len(positive) else None
    if norm is not None and norm.vmin == norm.vmax and norm.vmin is not None:
        norm = LogNorm(vmin=norm.vmin / 2, vmax=norm.vmin * 2)
    ncols = min(len(policies), 2)
    nrows = -(-len(policies) // ncols)
    panel_w, panel_h = 0.82 * len(xv) + 0.7, 0.5 * len(yv) + 0.9
    fig = Figure(figsize=(ncols * panel_w + 1.3, nrows * panel_h + 1.3), layout="constrained")
    axes = np.atleast_2d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False))
    image = None
    for ax, policy in zip(axes.flat, policies, strict=False):
        g = rates[rates["policy"] == policy]
        grid = np.full((len(yv), len(xv)), np.nan)
        ax.set_facecolor("#e6e6e6")
        for r in g.itertuples(index=False):
            i, j = yv.index(getattr(r, _attr(g, y))), xv.index(getattr(r, _attr(g, x)))
            k, n = getattr(r, what), r.reads
            rate = k / n * PER if n else np.nan
            grid[i, j] = rate if k > 0 else np.nan
            lo, hi = getattr(r, f"{what}_lo") * PER, getattr(r, f"{what}_hi") * PER
            count = f"{k:,}" if one_n else f"{k:,} / {n:,}"
            text = f"{count}\n{_num(rate)} [{_num(lo)}, {_num(hi)}]" if k else count
            ax.text(
                j, i, text, ha="center", va="center", fontsize=6.5,
                # White on the darkest cells.
                color="white" if norm is not None and k > 0 and norm(rate) > 0.65 else "black",
            )  # fmt: skip
        if norm is not None:
            image = ax.imshow(grid, cmap="YlOrRd", norm=norm, origin="lower", aspect="auto")
        ax.set_xlim(-0.5, len(xv) - 0.5)
        ax.set_ylim(-0.5, len(yv) - 0.5)
        ax.set_xticks(range(len(xv)), [_num(v * xs) for v in xv])
        ax.set_yticks(range(len(yv)), [_num(v * ys) for v in yv])
        total = int(g[what].sum())
        ax.set_title(f"{policy}: {total:,} of {int(g['reads'].sum()):,} reads", fontsize=9)
    for ax in axes.flat[len(policies) :]:
        ax.set_visible(False)
    for ax in axes[-1, :]:
        ax.set_xlabel(xlabel)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    if image is not None:
        cb = fig.colorbar(image, ax=axes.ravel().tolist(), label=f"per {PER:,} reads", shrink=0.8)
        assert norm is not None and norm.vmin is not None and norm.vmax is not None
        ticks = [
            m * 10.0**e
            for e in range(-4, 6)
            for m in (1, 2, 5)
            if norm.vmin <= m * 10.0**e <= norm.vmax
        ]
        cb.minorticks_off()
        cb.set_ticks(ticks, labels=[_num(t) for t in ticks])
    name = dict(PANELS)[what]
    per_cell = f"{int(rates['reads'].iloc[0]):,} reads per cell; " if one_n else ""
    zeros = rates.loc[rates[what] == 0, f"{what}_hi"] * PER
    grey = f"grey: none seen (at most {_num(zeros.max())}, 95 %)" if len(zeros) else "grey: none"
    lines = [
        title or name,
        f"per cell: count, rate [95 % CI] per {PER:,} reads; {per_cell}{grey}",
        sweep_title(sweep),
    ]
    if none:
        lines.append(textwrap.fill(f"none in any cell: {', '.join(none)}", 90))
    fig.suptitle("\n".join(lines), fontsize=9)
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

    out = {i: f"before {name(op)}" for i, op in enumerate(ops)}
    out[len(ops)] = f"after {name(ops[-1])}" if ops else "after the ops"
    out[-1] = "not landed at the read"
    return out


def landing_outcome_plot(
    by_landing: pd.DataFrame, title: str, labels: dict[int, str] | None = None, true: int = 1
) -> Figure:
    """Replays per landing position, split by the count consumed (from ``compare.by_landing``);
    ``labels`` (see :func:`landing_labels`) names the positions by the operations; counts
    other than ``true`` are drawn in red."""
    policies = policy_order(by_landing["policy"].unique())
    counts = sorted(by_landing["gpu_consumed"].unique())
    positions = sorted(by_landing["land_pos"].unique(), key=lambda p: (p < 0, p))
    labels = labels or {}
    ticks = [labels.get(int(p), f"position {p}") for p in positions]
    ncols = min(3, len(policies))
    nrows = -(-len(policies) // ncols)
    fig = Figure(figsize=(4.3 * ncols + 1.2, 0.35 * len(positions) * nrows + 1.1 * nrows + 0.8),
                 layout="constrained")  # fmt: skip
    axes = np.atleast_2d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False))
    reds = iter(["#d62728", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"])
    colors = {c: ("#2ca02c" if c == true else next(reds, "#d62728")) for c in counts}
    for ax, policy in zip(axes.flat, policies, strict=False):
        g = by_landing[by_landing["policy"] == policy]
        left = np.zeros(len(positions))
        for c in counts:
            w = np.array(
                [g[(g.land_pos == p) & (g.gpu_consumed == c)]["replays"].sum() for p in positions]
            )
            ax.barh(range(len(positions)), w, left=left, color=colors[c],
                    label=f"consumed {c}" + (" (true)" if c == true else ""))  # fmt: skip
            left += w
        ax.set_yticks(range(len(positions)), ticks, fontsize=8)
        bad = int(g[g.gpu_consumed != true]["replays"].sum())
        ax.set_title(f"{policy}: {bad} of {int(g['replays'].sum()):,} replays wrong", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].invert_yaxis()  # the ops in their order, top to bottom (the axes share y)
    for ax in axes.flat[len(policies) :]:
        ax.set_visible(False)
    for ax in axes[-1, :]:
        ax.set_xlabel("replays")
    axes[0, -1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return fig


HAZARD_COLORS = {HazardKind.UNLANDED: "#1f77b4", HazardKind.OWNERSHIP: "#d62728",
                 HazardKind.DOUBLE_PERMUTE: "#9467bd"}  # fmt: skip


def hazard_summary(rows: pd.DataFrame, title: str = "") -> Figure:
    """One run's wrong reads per 10,000 reads, one bar per policy (``rows``: ``policy, reads,
    cpu_wrong, gpu_wrong`` and a count per hazard kind), with 95 % Wilson intervals and counts.
    The CPU panel splits each bar by hazard kind; the axis is linear to 1 and logarithmic
    above, so a policy with none shows as a bare 0."""
    from sim.runs.stats import wilson

    fig = Figure(figsize=(12, 1.5 + 0.5 * len(rows)), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    ys = np.arange(len(rows))[::-1]
    n = rows["reads"].to_numpy()
    for ax, (what, panel_title) in zip(axes, PANELS, strict=True):
        k = rows[what].to_numpy()
        lo, hi = wilson(k, n)
        rate = np.where(n > 0, k / np.maximum(n, 1), 0.0) * PER
        if what == "cpu_wrong":
            left = np.zeros(len(rows))
            for kind, color in HAZARD_COLORS.items():
                part = rows.get(kind, pd.Series(0, index=rows.index)).to_numpy()
                w = np.where(k > 0, rate * part / np.maximum(k, 1), 0.0)
                ax.barh(ys, w, left=left, color=color, height=0.6, label=kind)
                left = left + w
        else:
            ax.barh(ys, rate, color="#444444", height=0.6)
        some = k > 0
        err = np.vstack([rate - lo * PER, hi * PER - rate])
        ax.errorbar(rate[some], ys[some], xerr=err[:, some], fmt="none", ecolor="black",
                    capsize=3, lw=1)  # fmt: skip
        # none seen: the interval's upper end as a thin dotted line, so it reads as a bound,
        # not as a short bar
        ax.hlines(ys[~some], 0, hi[~some] * PER, colors="#888888", linestyles=":", lw=1,
                  gid="zero-bound")  # fmt: skip
        for y, r, ki, ni, h in zip(ys, rate, k, n, hi * PER, strict=True):
            text = f"{int(ki):,} of {int(ni):,}" + ("" if ki else f" (at most {h:.1f})")
            ax.annotate(text, (max(h, r), y), xytext=(4, -3), textcoords="offset points",
                        fontsize=8, color="black" if ki else "#555555")  # fmt: skip
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(0, PER * 3)
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel(f"per {PER:,} reads (95 % Wilson interval)")
        ax.grid(axis="x", alpha=0.3)
    from sim.model.policies import POLICIES

    def label(name: str) -> str:  # the policy and the vLLM it stands for
        pol = POLICIES.get(name)
        return f"{name}\n{pol.vllm}" if pol is not None and pol.vllm else name

    axes[0].set_yticks(ys, [label(p) for p in rows["policy"]], fontsize=9)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=3,
               fontsize=8, frameon=False, title="CPU-wrong reads by hazard kind",
               title_fontsize=8)  # fmt: skip
    fig.suptitle(title or "Wrong accepted counts by policy", fontsize=11)
    return fig
