"""One observed wrong read in vLLM itself, drawn from its raw record: ``vllm-figure``.

The step's ``_update_states`` on a time axis (µs from its start, ``perf_counter_ns`` around
vLLM's own methods): every row op as a bar, the ops on the reader's rows (its row at step N,
its row now, and the rows that swapped through them) drawn dark; the interval in which step
N's copy was first seen landed (between the last poll that saw it in flight and the first
that saw it done); the read in ``_prepare_inputs``. The title says who read what.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from gpu_check.vllm.export import load_raw, prepared_steps, raw_record_of
from sim.errors import SpecraceError
from sim.runs.inputs import regular_file

COLORS = {"remove": "#9e9e9e", "add": "#4c72b0", "move": "#55a868", "swap": "#dd8452"}


def _landing_bracket(s: dict[str, Any]) -> tuple[int, int] | None:
    """(after, before): the copy landed after the first and was seen at the second (ns)."""
    if s.get("landed_at_update_states"):
        return None
    last = int(s["t_us_start"])
    for op in s["ops"]:
        t0, t1, before, after = int(op[4]), int(op[5]), op[6], op[7]
        if before:
            return last, t0
        if after:
            return t0, t1
        last = t1
    return (last, int(s["t_read"])) if s.get("landed_at_read") else None


def _few(names, n: int = 5) -> str:
    """A few of ``names`` (sorted), and how many there are."""
    names = sorted(map(str, names))
    shown = ", ".join(names[:n])
    return shown + (f", ... {len(names):,} in all" if len(names) > n else "")


def pick(reads: pd.DataFrame, step: int | None, req: str | None) -> pd.Series:
    """The read to draw: the given one (``step``, ``req``: of that step, of that request, or
    both), the wrong one among them if any; by default the wrong read whose step had the fewest
    ops. A step or request the run does not hold is refused, naming a few that it does."""
    chosen = reads
    if step is not None:
        chosen = reads[reads["step"] == step]
        if chosen.empty:
            steps = reads["step"]
            held = f"steps {int(steps.min())}..{int(steps.max())}" if len(steps) else "no read"
            raise SpecraceError(f"--step {step}: no read at that step in this run ({held})")
    if req is not None:
        scope = chosen
        chosen = chosen[chosen["req_id"] == req]
        if chosen.empty:
            where = f" at step {step}" if step is not None else ""
            raise SpecraceError(f"--req {req!r}: no read of that request{where} in this run "
                                f"(requests: {_few(scope['req_id'].unique())})")  # fmt: skip
    if step is None and req is None:
        chosen = reads[reads["wrong"]]
    elif chosen["wrong"].any():
        chosen = chosen[chosen["wrong"]]
    if chosen.empty:
        raise SpecraceError("no wrong read in this run: give --step (and --req) to draw another")
    return chosen.sort_values(["n_ops", "step"]).iloc[0]


def _clear_of(fig: Any, ax: Any, labels: list[tuple[Any, float]], x: float) -> None:
    """Each op's label that would cross the line at ``x`` goes to the left of its bar."""
    fig.canvas.draw()
    inv = ax.transData.inverted()
    for text, t0 in labels:
        box = text.get_window_extent()
        (x0, _), (x1, _) = inv.transform([(box.x0, box.y0), (box.x1, box.y1)])
        if x0 < x < x1:
            text.set_x(t0 - 2)
            text.set_horizontalalignment("right")


def wrong_read_figure(raw: dict[str, Any], read: pd.Series, title: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = prepared_steps(raw)[int(read["step"])]
    t_start = int(s["t_us_start"])
    rows = {int(read["row"]), int(read["prev_row"])}
    ops = s["ops"]
    for op in ops:  # rows a swap carried the reader's rows through
        if op[0] == "swap" and (op[1] in rows or op[2] in rows):
            rows |= {int(op[1]), int(op[2])}
    n = len(ops)
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.22 * n))
    labels = []
    for i, op in enumerate(ops):
        kind, a, b = op[0], int(op[1]), int(op[2])
        t0, t1 = (int(op[4]) - t_start) / 1e3, (int(op[5]) - t_start) / 1e3
        mine = a in rows or b in rows
        ax.barh(i, max(t1 - t0, 0.5), left=t0, color=COLORS.get(kind, "k"),
                alpha=1.0 if mine else 0.35, edgecolor="k" if mine else "none")  # fmt: skip
        label = f"{kind} row {a}" + (
            f" <-> {b}" if kind == "swap" else (f" -> {b}" if b >= 0 else "")
        )
        text = ax.text(t1 + 2, i, label, va="center", fontsize=7,
                       weight="bold" if mine else "normal")  # fmt: skip
        labels.append((text, t0))
    bracket = _landing_bracket(s)
    if bracket:
        lo, hi = ((t - t_start) / 1e3 for t in bracket)
        ax.axvspan(lo, max(hi, lo + 1), color="#c44e52", alpha=0.25,
                   label="step N's copy lands (between polls)")  # fmt: skip
    t_read = (int(s["t_read"]) - t_start) / 1e3
    # The label must not begin with "_": matplotlib's legend leaves such an entry out.
    ax.axvline(
        t_read, color="k", ls="--", lw=1, label="the runner reads the counts (_prepare_inputs)"
    )
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_yticks([])
    ax.set_xlabel("µs since _update_states began")
    handles: list[Any] = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    extra, names = ax.get_legend_handles_labels()
    ax.legend(handles=handles + list(extra), labels=list(COLORS) + names, loc="lower left",
              fontsize=7, ncol=3)  # fmt: skip
    ax.set_title(
        title
        or (
            f"vLLM {raw.get('vllm_version', '?')}, mamba_cache_mode={raw['mode']}, step "
            f"{int(read['step'])}: request {read['req_id']} (row {int(read['prev_row'])} -> "
            f"{int(read['row'])}) read "
            f"{int(read['gpu_value'])}, its count was {int(read['true_count'])}"
        ),
        fontsize=9,
    )
    fig.tight_layout()
    _clear_of(fig, ax, labels, t_read)  # measured at the final layout
    return fig


def figure_for_run(folder: Path, out: Path, step: int | None = None, req: str | None = None):
    """``folder``: an exported run (``v<release>/<mode>_<config>/``) whose raw record is in
    ``../raw/``; writes ``out`` (.png) atomically."""
    from sim.runs.io import atomic_write

    raw_path = raw_record_of(folder)
    if not raw_path.exists():
        raw_path = raw_path.with_suffix("")
    if not raw_path.exists():
        raise SpecraceError(f"{folder}: no raw record at {raw_path}(.gz)")
    try:
        reads = pd.read_parquet(regular_file(folder / "observed_vllm.parquet", "vLLM reads"))
    except (OSError, ValueError) as e:
        raise SpecraceError(f"{folder}/observed_vllm.parquet: unreadable ({e})") from None
    read = pick(reads, step, req)
    fig = wrong_read_figure(load_raw(raw_path), read)
    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=130, format="png"), sign=".png")
    return read


LANDING_COLORS = {"entry": "#4c72b0", "between": "#dd8452", "after": "#55a868", "waited": "#8c8c8c"}


def _tally(ax, df: pd.DataFrame) -> None:
    """Per release and mode: configurations meeting each part of the criterion, of all."""
    parts = [("meets_all", "all"), ("rate_ok", "rate"), ("step_ok", "step time"),
             ("landing_ok", "landing")]  # fmt: skip
    groups = df.groupby(["vllm", "mode"], sort=True)
    rows = [[f"{v} {m}", *(f"{int(g[c].sum())}/{len(g)}" for c, _ in parts)]
            for (v, m), g in groups]  # fmt: skip
    rows.append(["every run", *(f"{int(df[c].sum())}/{len(df)}" for c, _ in parts)])
    ax.axis("off")
    ax.set_title("configurations that meet each part of the criterion", fontsize=9, loc="left")
    table = ax.table(cellText=rows, colLabels=["vLLM, mode", *(w for _, w in parts)],
                     loc="upper left", cellLoc="center", colLoc="center")  # fmt: skip
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.scale(1, 1.5)


def forward_figure(df: pd.DataFrame, title: str = ""):
    """``vllm-forward``'s table as a figure: top left, predicted against observed wrong-read
    rate with both Wilson 95 % intervals on log axes (a zero drawn at the axis floor), coloured
    by whether the configuration meets the whole criterion; top right, how many configurations
    of each release and mode meet each part of it; below, the landing mix per configuration,
    observed (left bar) and predicted (right bar) side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    floor = 1e-5
    n = len(df)
    # the rate panel above (square, so the diagonal is one), the landing bars below at about
    # 0.17 inch a configuration, so that every label stays legible however many runs there are
    width = max(16.0, 0.17 * n)
    fig, axes = plt.subplot_mosaic(
        [["rate", "tally"], ["landing", "landing"]], figsize=(width, 13),
        gridspec_kw={"width_ratios": [6, width - 6], "height_ratios": [1, 1.15]},
    )  # fmt: skip
    ax, bx = axes["rate"], axes["landing"]
    _tally(axes["tally"], df)
    for ok, color, label in ((True, "#55a868", "meets all"), (False, "#c44e52", "misses")):
        d = df[df["meets_all"] == ok]
        x = np.maximum(d["rate_observed"], floor)
        y = np.maximum(d["rate_predicted"], floor)
        xerr = [x - np.maximum(d["rate_observed_lo"], floor), d["rate_observed_hi"] - x]
        yerr = [y - np.maximum(d["rate_predicted_lo"], floor), d["rate_predicted_hi"] - y]
        ax.errorbar(x, y, xerr=np.clip(xerr, 0, None), yerr=np.clip(yerr, 0, None), fmt="o",
                    ms=4, color=color, ecolor=color, alpha=0.8, elinewidth=0.8,
                    label=f"{label} ({len(d)})")  # fmt: skip
    ax.plot([floor, 0.1], [floor, 0.1], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlim=(floor / 2, 0.1), ylim=(floor / 2, 0.1),
           xlabel="observed wrong-read rate [95 % CI]",
           ylabel="predicted wrong-read rate [95 % CI]")  # fmt: skip
    ax.set_title(f"rate (zero at {floor:g})", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    pos = np.arange(n)
    for side, off in (("observed", -0.2), ("predicted", 0.2)):
        bottom = np.zeros(n)
        for k, color in LANDING_COLORS.items():
            v = df[f"{k}_{side}"].to_numpy(dtype=float)
            bx.bar(pos + off, v, 0.38, bottom=bottom, color=color,
                   alpha=1.0 if side == "observed" else 0.6,
                   label=f"{k}" if side == "observed" else None)  # fmt: skip
            bottom += v

    def tick(r) -> str:  # the run's tag past its release (v0.24.0-k1 -> k1), the pass number
        tag = r.run.rsplit("/", 1)[-1].partition("-")[2]
        rep = int(getattr(r, "rep", 0) or 0)
        return (f"{r.vllm} {r.mode} s{r.max_num_seqs} d{r.gpu_delay_ms:g}"
                + (f" ({tag})" if tag else "") + (f" p{rep + 1}" if rep else "")
                + ("" if r.landing_ok else " ✗"))  # fmt: skip

    labels = [tick(r) for r in df.itertuples(index=False)]
    bx.set_xticks(pos, labels, rotation=90, fontsize=6)
    bx.set(ylim=(0, 1), ylabel="share of steps", xlim=(-0.7, n - 0.3))
    bx.set_title("landing mix: observed (left, solid) | predicted (right, pale); ✗: TV > 0.10",
                 fontsize=9, loc="left")  # fmt: skip
    bx.legend(fontsize=8, ncol=4, loc="lower right", bbox_to_anchor=(1.0, 1.04), frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def forecast_figure(df: pd.DataFrame, title: str = ""):
    """Observed wrong-read rate of every pass over its predicted 90 % interval, against the GPU
    delay: one panel per (release, mode, seqs) with >= 3 delays; a pass inside its interval
    green, outside red; the gauge-conditioned central forecast a cross (1000 px wide)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = [k for k, g in df.groupby(["vllm", "mode", "max_num_seqs"], sort=True)
            if g["gpu_delay_ms"].nunique() >= 3]  # fmt: skip
    cols = 3
    rows = max(1, -(-len(keys) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(10, 2.9 * rows + 0.6), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        g = df[(df["vllm"] == key[0]) & (df["mode"] == key[1]) & (df["max_num_seqs"] == key[2])]
        g = g.sort_values(["gpu_delay_ms", "run", "rep"])
        # passes at one delay side by side
        offs = g.groupby("gpu_delay_ms").cumcount().to_numpy(float)
        span = max(float(g["gpu_delay_ms"].max() - g["gpu_delay_ms"].min()), 1.0)
        x = g["gpu_delay_ms"].to_numpy(float) + (offs - offs.mean()) * span * 0.012
        lo, hi = 100 * g["rate_pi_lo"].to_numpy(float), 100 * g["rate_pi_hi"].to_numpy(float)
        ax.vlines(x, lo, hi, color="#9ecae1", lw=5, alpha=0.9, label="predicted 90 %")
        ok = g["rate_covered"].to_numpy(bool)
        obs = 100 * g["rate_observed"].to_numpy(float)
        ax.plot(x[ok], obs[ok], "o", ms=4, color="#2ca02c", label="observed, inside")
        ax.plot(x[~ok], obs[~ok], "o", ms=5, color="#d62728", label="observed, outside")
        ax.plot(x, 100 * g["cond_rate"].to_numpy(float), "x", ms=4, color="#555555",
                label="given the gauge")  # fmt: skip
        ax.set_title(f"{key[0]} {key[1]} {key[2]} seqs ({len(g)} passes)", fontsize=10)
        ax.set_ylim(bottom=0, top=max(float(np.max(hi)), float(np.max(obs)), 0.1) * 1.1)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(keys) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("wrong reads, %", fontsize=9)
    for ax in axes[-1, :]:
        ax.set_xlabel("GPU delay, ms", fontsize=9)
    if keys:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=9,
                   bbox_to_anchor=(0.5, 1 - 0.35 / fig.get_figheight()))  # fmt: skip
    fig.suptitle(title, fontsize=11, y=0.999)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
    return fig
