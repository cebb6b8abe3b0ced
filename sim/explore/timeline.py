"""The timeline of one step: why one request's read was right or wrong, as a picture.

From a run's tables (``trace.parquet``, ``reads.parquet``, ``schedule.json``) for step N+1
and one request R: the worker CPU's row operations of ``_update_states`` (remove, add,
condense move, swap) with their rows and requests, the event wait and the read, the GPU
streams (forward, sample, the counts D2H, drafter), the moment step N's counts landed, the
pinned buffer's value in R's rows, and the verdict for R.

The race window is computed, not drawn by hand: the buffer is rebuilt from the trace
(:func:`replay_buffer`, the same writers in the same order as ``sim.model.simulate``), then
for every place the landing could fall among step N+1's ops the policy's own read and GPU
consumption say what R would get (:func:`landing_outcomes`); the intervals where R's
consumed count would be wrong are shaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from sim.errors import SpecraceError
from sim.model.counts_buffer import apply_op
from sim.model.policies import POLICIES, Policy, named
from sim.model.schedule import Schedule
from sim.model.trace import ROW_OPS, EventKind, events, select
from sim.model.verdict import NOT_LANDED, at_landing, land_copy, landing_positions

OP_COLORS = {
    "remove": "#8c8c8c",
    "add": "#2ca02c",
    "move": "#bcbd22",
    "swap": "#9467bd",
    "cached_request_loop": "#d9d9d9",
    "_prepare_inputs": "#c6dbef",
    "wait": "#ff7f0e",
    "forward": "#1f77b4",
    "sample": "#17becf",
    "counts_d2h": "#d62728",
    "drafter": "#aec7e8",
    "prep": "#c7c7c7",
    "valid_count_d2h": "#f7b6d2",
    "output_d2h": "#c49c94",
}
# Ticks on a buffer row, by writer (a row op's write is black).
WRITE_COLORS = {"dma": "#d62728", "gather": "#1f77b4"}
# The small copies, named as in vLLM; their labels go above the bar when it is narrow.
COPIES = {
    "counts_d2h": "counts D2H",
    "valid_count_d2h": "valid count D2H",
    "output_d2h": "output D2H",
}
MAX_LISTED_OPS = 24
CHAR_FRAC = 0.0052  # width of one 7-pt character as a fraction of the axis (13-inch figure)
GPU_LANES = {
    "default_stream": "GPU default stream",
    "valid_sampled_token_count_copy_stream": "GPU copy streams",
    "async_output_copy_stream": "GPU copy streams",
}


def policy_for(name: str) -> Policy:
    """The policy a run's ``meta.json`` names (async-off runs name vLLM's synchronous path)."""
    try:
        return named(name)
    except SpecraceError:
        raise SpecraceError(
            f"unknown policy {name!r} in the run (known: {', '.join(POLICIES)})"
        ) from None


# -- the buffer, rebuilt from the trace -------------------------------------------------------
@dataclass
class BufferReplay:
    """Every write into the pinned ``num_accepted_tokens_cpu`` of a run, and every read."""

    writes: pd.DataFrame  # time_ns, step, writer (dma|add|move|swap|gather), row, value
    reads: dict[int, np.ndarray]  # step -> what the CPU built
    before_ops: dict[int, np.ndarray]  # step -> buffer just before its first row op...
    before_ops_private: dict[int, np.ndarray]  # ... and the private buffer, same moment
    landed_before_ops: dict[int, bool]  # step -> whether step-1's DMA had landed by then


def _events(trace: pd.DataFrame) -> list[tuple]:
    """(time, priority, seq, what, step): ops act at their end, the DMA at its landing; at
    the same nanosecond the DMA goes first (the tie rule of sim.model.cuda)."""
    out = []
    for seq, ev in enumerate(events(trace)):
        if ev.kind is EventKind.LANDING:
            out.append((ev.time_ns, 0, seq, "dma", ev.step))
        elif ev.kind is EventKind.ROW_OP:
            out.append((ev.end_ns, 1, seq, ev.name, ev.step))
        elif ev.kind is EventKind.READ:
            out.append((ev.time_ns, 1, seq, "read", ev.step))
    return sorted(out)


def replay_buffer(
    trace: pd.DataFrame, schedule: Schedule, policy: Policy, skip_dma: int | None = None
) -> BufferReplay:
    """Replay every writer of the run in time order; ``skip_dma``: leave out that step's DMA
    (what the buffer would have held had it not landed yet)."""
    n = schedule.max_num_reqs
    buf = np.ones(n, dtype=np.int64)
    private = np.ones(n, dtype=np.int64)
    writes: list[tuple] = []
    reads: dict[int, np.ndarray] = {}
    before: dict[int, np.ndarray] = {}
    before_private: dict[int, np.ndarray] = {}
    landed: dict[int, bool] = {}
    op_index: dict[int, int] = {}
    dma_done: set[int] = set()
    for t, _prio, _seq, what, step in _events(trace):
        if what != "dma" and step not in before:
            # The first op (or, without ops, the read) of a step: the state its ops start from.
            before[step] = buf.copy()
            before_private[step] = private.copy()
            landed[step] = (step - 1) in dma_done
        if what == "dma":
            if step == skip_dma:
                continue
            counts = schedule.steps[step].accepted
            land_copy(policy, buf, private, counts)
            dma_done.add(step)
            if not policy.dma_into_private:  # #51599: the copy never writes B
                writes.extend((t, step, "dma", r, int(v)) for r, v in enumerate(counts))
        elif what == "read":
            rec = schedule.steps[step]
            old = buf.copy()
            reads[step] = policy.cpu_read(buf, private, rec.prev_positions, rec.num_reqs)
            writes.extend(
                (t, step, "gather", int(r), int(buf[r])) for r in np.flatnonzero(old != buf)
            )
        else:
            i = op_index.get(step, 0)
            op = schedule.steps[step].ops[i]
            if op.kind != what:
                raise SpecraceError(
                    f"trace and schedule disagree at step {step} op {i}: {what} vs {op.kind}"
                )
            op_index[step] = i + 1
            apply_op(buf, op, i, None)
            rows = {"add": [op.a], "move": [op.b], "swap": [op.a, op.b]}.get(op.kind, [])
            writes.extend((t, step, op.kind, r, int(buf[r])) for r in rows)
    df = pd.DataFrame(writes, columns=["time_ns", "step", "writer", "row", "value"])
    return BufferReplay(df, reads, before, before_private, landed)


# -- what a landing at each place would have done --------------------------------------------
@dataclass
class LandingOutcome:
    position: int  # before ops[position]; len(ops): after the last op; -1: after the read
    start_ns: int  # the landing times that fall here: (start_ns, end_ns]
    end_ns: int
    cpu_value: int
    gpu_value: int


def landing_outcomes(
    schedule: Schedule,
    policy: Policy,
    step: int,
    row: int,
    buf0: np.ndarray,
    private0: np.ndarray,
    op_write_ns: Sequence[int],
    read_ns: int,
    start_ns: int,
    end_ns: int,
) -> list[LandingOutcome]:
    """R's CPU and consumed count for each place step-1's DMA can land in step ``step``
    (:func:`sim.model.verdict.landing_positions`): before each row op, after the last, and
    (for a policy that never waits) after the read. ``buf0``/``private0``: the buffers before
    the first op, without that DMA."""
    rec, prev = schedule.steps[step], schedule.steps[step - 1]
    seen = landing_positions(policy, len(rec.ops), schedule.async_scheduling)
    positions = sorted(p for p in seen if p >= 0)
    # One position (a wait before the moves, or async off): every landing before the read.
    bounds = [start_ns, *op_write_ns, read_ns] if len(positions) > 1 else [start_ns, read_ns]
    out = []
    for i, p in enumerate(positions):
        v = at_landing(policy, prev.accepted, rec, buf0, private0, p)
        out.append(LandingOutcome(p, bounds[i], bounds[i + 1], int(v.cpu[row]), int(v.gpu[row])))
    if NOT_LANDED in seen:
        v = at_landing(policy, prev.accepted, rec, buf0, private0, NOT_LANDED)
        out.append(LandingOutcome(NOT_LANDED, read_ns, end_ns, int(v.cpu[row]), int(v.gpu[row])))
    return out


# -- one step, one request --------------------------------------------------------------------
@dataclass
class Span:
    lane: str
    start_ns: int
    end_ns: int
    kind: str  # colour key: an op kind or a GPU item
    label: str


@dataclass
class Timeline:
    """Everything the picture shows, in ns of the run's clock (``zero_ns`` is the origin)."""

    policy: str
    step: int
    req_id: str
    row: int
    prev_row: int
    spans: list[Span]
    land_ns: int  # when step-1's counts landed (-1: never)
    read_ns: int
    wait: tuple[int, int] | None  # the event wait, if the policy waited in this step
    outcomes: list[LandingOutcome]
    verdict: dict  # the row of reads.parquet
    buffer: pd.DataFrame  # writes into the rows of interest, inside the view
    buffer_start: dict[int, int]  # row -> value at view start
    zero_ns: int
    view: tuple[int, int]
    lanes: list[str] = field(default_factory=list)
    lane_names: dict[str, str] = field(default_factory=dict)  # B lanes' readable names

    @property
    def wrong_windows(self) -> list[tuple[int, int]]:
        """Landing intervals that would hand R a wrong consumed count."""
        true = int(self.verdict["true_count"])
        return [(o.start_ns, o.end_ns) for o in self.outcomes if o.gpu_value != true]

    @property
    def cpu_only_windows(self) -> list[tuple[int, int]]:
        true = int(self.verdict["true_count"])
        return [
            (o.start_ns, o.end_ns)
            for o in self.outcomes
            if o.cpu_value != true and o.gpu_value == true
        ]

    def verdict_text(self) -> str:
        v = self.verdict
        where = f"row {self.row} (row {self.prev_row} at step {self.step - 1})"
        head = (
            f"{self.req_id} at step {self.step}, {where}: read {v['cpu_value']}, "
            f"true {v['true_count']}, GDN consumed {v['gpu_value']}"
        )
        if bool(v["gpu_wrong"]):
            tail = f" -> WRONG ({v['kind']}): state restored from slot {v['gdn_slot']}"
            if bool(v["prompt_state_lost"]):
                tail += ", first speculative step: prompt state lost"
        elif bool(v["cpu_wrong"]):
            tail = f" -> CPU read wrong ({v['kind']}), repaired by the correction kernel"
        else:
            tail = " -> right"
        return head + tail


def pick_read(reads: pd.DataFrame, step: int | None = None, req_id: str | None = None) -> dict:
    """The read to explain: by default the first step with a consumed wrong count (else a CPU
    wrong one) and in it the first wrong request."""
    if step is None:
        for col in ("gpu_wrong", "cpu_wrong"):
            hit = reads[reads[col]]
            if len(hit):
                step = int(hit["step"].min())
                break
        else:
            raise SpecraceError("no wrong read in this run: give --step N (and --req R)")
    at = reads[reads["step"] == step]
    if at.empty:
        have = reads["step"].unique()
        raise SpecraceError(
            f"step {step}: no request read a previous count there "
            f"(steps with reads: {int(have.min())}..{int(have.max())})"
            if len(have)
            else f"step {step}: the run has no reads"
        )
    if req_id is not None:
        sel = at[at["req_id"] == req_id]
        if sel.empty:
            raise SpecraceError(
                f"--req {req_id!r}: not read at step {step} (read: {', '.join(at['req_id'])})"
            )
    else:
        order = at.assign(_w=~at["gpu_wrong"], _c=~at["cpu_wrong"]).sort_values(
            ["_w", "_c", "row"], kind="stable"
        )
        sel = order
    return sel.iloc[0][list(reads.columns)].to_dict()


def build_timeline(
    trace: pd.DataFrame,
    reads: pd.DataFrame,
    schedule: Schedule,
    policy: str,
    step: int | None = None,
    req_id: str | None = None,
) -> Timeline:
    """The :class:`Timeline` of one read (see :func:`pick_read` for the default)."""
    if trace is None or trace.empty:
        raise SpecraceError("the run has no trace (run it without --no-trace)")
    pol = policy_for(policy)
    v = pick_read(reads, step, req_id)
    step, row, prev_row = int(v["step"]), int(v["row"]), int(v["prev_row"])
    rep = replay_buffer(trace, schedule, pol)
    at = trace[trace["step"] == step]
    prev = trace[trace["step"] == step - 1]
    worker = at[at["actor"] == "worker_cpu"]
    ops = select(at, EventKind.ROW_OP)
    read_rows = select(at, EventKind.READ)
    read_ns = int(read_rows["time_ns"].iloc[0])
    upd = select(at, EventKind.UPDATE_STATES)
    upd_start = int(upd["time_ns"].iloc[0]) if len(upd) else int(read_ns)
    land = select(prev, EventKind.LANDING)
    land_ns = int(land["time_ns"].iloc[0]) if len(land) else -1
    d2h = prev[prev["event"] == "counts_d2h"]
    points = [upd_start, read_ns] + ([land_ns] if land_ns >= 0 else [])
    points += [int(d2h["time_ns"].iloc[0])] if len(d2h) else []
    lo, hi = min(points), max(points)
    pad = max((hi - lo) // 12, 5_000)
    view = (lo - pad, hi + pad)

    spans: list[Span] = []
    for r in worker.itertuples(index=False):
        ev = str(r.event)
        if ev in ROW_OPS:
            spans.append(Span("worker CPU", int(r.time_ns), int(r.time_ns + r.dur_ns), ev, ""))
        elif ev in ("cached_request_loop", "_prepare_inputs"):
            spans.append(Span("worker CPU", int(r.time_ns), int(r.time_ns + r.dur_ns), ev, ev))
    # Row-op labels from the schedule (the trace row holds one row and one request only).
    for sp, op in zip(
        [s for s in spans if s.kind in ROW_OPS], schedule.steps[step].ops, strict=True
    ):
        sp.label = _op_label(op)
    waits = worker[worker["event"] == "num_accepted_tokens_event.synchronize"]
    wait = None
    if len(waits):
        w = waits.iloc[0]
        wait = (int(w["time_ns"]), int(w["time_ns"] + w["dur_ns"]))
        label = f"event wait {(wait[1] - wait[0]) * 1e-3:.1f} µs"
        spans.append(Span("worker CPU", *wait, "wait", label))
    for r in trace[trace["actor"].isin(list(GPU_LANES))].itertuples(index=False):
        s, e = int(r.time_ns), int(r.time_ns + r.dur_ns)
        if r.dur_ns <= 0 or e < view[0] or s > view[1]:
            continue
        name = COPIES.get(str(r.event), str(r.event))
        spans.append(Span(GPU_LANES[str(r.actor)], s, e, str(r.event), f"{name} {r.step}"))

    rows = sorted({row, prev_row})
    op_ns = [int(t + d) for t, d in zip(ops["time_ns"], ops["dur_ns"], strict=True)]
    # The buffers R's ops started from, without step-1's DMA (wherever it really landed).
    bare = replay_buffer(trace, schedule, pol, skip_dma=step - 1)
    buf0, priv0 = bare.before_ops[step], bare.before_ops_private[step]
    outcomes = landing_outcomes(
        schedule, pol, step, row, buf0, priv0, op_ns, read_ns, view[0], view[1]
    )
    w = rep.writes
    inside = w[(w["row"].isin(rows)) & (w["time_ns"] > view[0]) & (w["time_ns"] <= view[1])]
    start_vals = {}
    for r_ in rows:
        before = w[(w["row"] == r_) & (w["time_ns"] <= view[0])]
        start_vals[r_] = int(before["value"].iloc[-1]) if len(before) else 1
    lanes = ["worker CPU", "GPU default stream", "GPU copy streams"] + [f"B[{r_}]" for r_ in rows]
    lane_names = {f"B[{row}]": f"B[{row}]: {v['req_id']}'s row now"}
    if prev_row != row:
        lane_names[f"B[{prev_row}]"] = f"B[{prev_row}]: {v['req_id']}'s row at step {step - 1}"
    else:
        lane_names[f"B[{row}]"] = f"B[{row}]: {v['req_id']}'s row (both steps)"
    return Timeline(
        policy=policy,
        step=step,
        req_id=str(v["req_id"]),
        row=row,
        prev_row=prev_row,
        spans=spans,
        land_ns=land_ns,
        read_ns=read_ns,
        wait=wait,
        outcomes=outcomes,
        verdict=v,
        buffer=inside.reset_index(drop=True),
        buffer_start=start_vals,
        zero_ns=upd_start,
        view=view,
        lanes=lanes,
        lane_names=lane_names,
    )


def _merged(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent landing intervals as one window: (a, b] + (b, c] = (a, c]."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(windows):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _landing_between(tl: Timeline) -> str:
    """ "landed 9.0 µs after add Q r0, 9.0 µs before swap 1↔0": the ops around the landing."""
    if tl.land_ns < 0:
        return ""
    ops = [s for s in tl.spans if s.kind in ROW_OPS]
    before = [s for s in ops if s.end_ns < tl.land_ns]
    after = [s for s in ops if s.end_ns >= tl.land_ns]
    parts = []
    if before:
        parts.append(f"{(tl.land_ns - before[-1].end_ns) * 1e-3:.1f} µs after {before[-1].label}")
    if after:
        parts.append(f"{(after[0].end_ns - tl.land_ns) * 1e-3:.1f} µs before {after[0].label} ends")
    if tl.land_ns > tl.read_ns:
        parts.append(f"{(tl.land_ns - tl.read_ns) * 1e-3:.1f} µs after the read")
    return ("\nlanded " + ", ".join(parts)) if parts else ""


def _op_label(op) -> str:
    if op.kind == "swap":
        return f"swap {op.a}↔{op.b}"
    if op.kind == "move":
        return f"move {op.a}→{op.b} {op.req_id}"
    return f"{op.kind} {op.req_id} r{op.a}"


# -- the picture --------------------------------------------------------------------------------
def timeline_figure(timelines: Timeline | Sequence[Timeline], title: str = "") -> Figure:
    """One panel per timeline (several: one per policy, stacked)."""
    tls = [timelines] if isinstance(timelines, Timeline) else list(timelines)
    if not tls:
        raise SpecraceError("no timeline to draw")
    heights = [len(t.lanes) for t in tls]
    fig = Figure(figsize=(13, 1.2 + sum(0.62 * h + 1.1 for h in heights)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(tls), 1, height_ratios=[h + 1.6 for h in heights]))
    for ax, tl in zip(axes, tls, strict=True):
        _draw(ax, tl)
    first = tls[0]
    fig.suptitle(
        title
        or f"Step {first.step}: does {first.req_id} read step {first.step - 1}'s count right?",
        fontsize=12,
    )
    names = {
        "counts_d2h": "counts D2H (non_blocking)",
        "valid_count_d2h": "valid count D2H",
        "wait": "num_accepted_tokens_event wait",
    }
    keys = ("remove", "add", "move", "swap", "forward", "sample", "counts_d2h", "drafter",
            "valid_count_d2h", "wait")  # fmt: skip
    legend = [Patch(color=OP_COLORS[k], label=names.get(k, k)) for k in keys]
    legend += [
        Patch(color="#d62728", alpha=0.18, label="a landing here: GDN consumes a wrong count"),
        Patch(color="#ff7f0e", alpha=0.18, label="a landing here: CPU wrong, repaired on GPU"),
    ]
    note = ("B[r] = input_batch.num_accepted_tokens_cpu[r], the pinned buffer the counts D2H "
            "writes; ticks mark its writes: red the D2H landing, blue the read's gather "
            "written back, black a row op")  # fmt: skip
    fig.legend(handles=legend, loc="outside lower center", ncol=6, fontsize=8, frameon=False,
               title=note, title_fontsize=7.5)  # fmt: skip
    return fig


def _draw(ax, tl: Timeline) -> None:
    us = 1e-3
    z = tl.zero_ns

    def x(t: int) -> float:
        return (t - z) * us

    lanes = tl.lanes
    ypos = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    v0, v1 = x(tl.view[0]), x(tl.view[1])
    for lo, hi in tl.wrong_windows:
        ax.axvspan(x(max(lo, tl.view[0])), x(min(hi, tl.view[1])), color="#d62728", alpha=0.14,
                   gid="window", zorder=0)  # fmt: skip
    for lo, hi in tl.cpu_only_windows:
        ax.axvspan(x(max(lo, tl.view[0])), x(min(hi, tl.view[1])), color="#ff7f0e", alpha=0.14,
                   gid="cpu-window", zorder=0)  # fmt: skip
    # Labels of narrow spans alternate above and below the bar so neighbours do not collide;
    # where op labels would still collide, the ops get numbers and are listed under the axis.
    ops = [sp for sp in tl.spans if sp.kind in ROW_OPS]
    numbered = any(
        len(sp.label) * CHAR_FRAC
        > 1.8
        * (min(sp.end_ns, tl.view[1]) - max(sp.start_ns, tl.view[0]))
        / (tl.view[1] - tl.view[0])
        for sp in ops
    )
    number = {id(sp): i + 1 for i, sp in enumerate(ops)}
    flip = 0
    for sp in tl.spans:
        y = ypos[sp.lane]
        s, e = max(sp.start_ns, tl.view[0]), min(sp.end_ns, tl.view[1])
        if e <= s:
            continue
        base = sp.kind.split(":")[0]
        h = 0.5 if sp.kind in ROW_OPS or sp.kind == "wait" else 0.36
        if sp.kind in ("_prepare_inputs", "cached_request_loop"):
            h = 0.22
        ax.broken_barh(
            [(x(s), x(e) - x(s))],
            (y - h / 2, h),
            facecolors=OP_COLORS.get(base, "#dddddd"),
            edgecolor="black" if sp.kind in ROW_OPS else "none",
            linewidth=0.6,
            gid=f"span:{sp.kind}",
            zorder=2,
        )
        label = str(number[id(sp)]) if numbered and sp.kind in ROW_OPS else sp.label
        if sp.start_ns < tl.view[0]:
            label += f" (began {(tl.view[0] - sp.start_ns) * us:,.0f} µs earlier)"
        if not label:
            continue
        frac = (x(e) - x(s)) / (v1 - v0)
        above = sp.kind in ROW_OPS or sp.kind in ("wait", *COPIES)
        if not above and len(label) * CHAR_FRAC > frac:
            label = sp.label  # drop "(began ... earlier)" where it does not fit
            if len(label) * CHAR_FRAC > frac:
                continue
        if sp.kind in COPIES and len(label) * CHAR_FRAC < frac:
            above = False  # wide enough: inside the bar
        if above and sp.kind in COPIES:
            # Under its bar: the space between two lanes that no CPU label uses.
            ax.text((x(s) + x(e)) / 2, y - 0.3, label, ha="center", va="top", fontsize=7.5,
                    zorder=4)  # fmt: skip
        elif above:
            flip ^= 1
            ax.text((x(s) + x(e)) / 2, y + (0.38 if flip else -0.38), label, ha="center",
                    va="bottom" if flip else "top", fontsize=7.5, zorder=4)  # fmt: skip
        else:
            ax.text((x(s) + x(e)) / 2, y, label, ha="center", va="center", fontsize=7, zorder=4)
    # The buffer rows: value segments between writes.
    for r in sorted(tl.buffer_start):
        y = ypos[f"B[{r}]"]
        w = tl.buffer[tl.buffer["row"] == r]
        times = [tl.view[0], *w["time_ns"].tolist(), tl.view[1]]
        vals = [tl.buffer_start[r], *w["value"].tolist()]
        writers = ["", *w["writer"].tolist()]
        for (t0, t1), val, wr in zip(zip(times, times[1:], strict=False), vals, writers,
                                     strict=True):  # fmt: skip
            ax.plot([x(t0), x(t1)], [y, y], color="#555555", lw=0.8, zorder=1)
            if x(t1) - x(t0) > 0.012 * (v1 - v0):
                ax.text((x(t0) + x(t1)) / 2, y + 0.08, str(val), ha="center", va="bottom",
                        fontsize=8, fontweight="bold", zorder=4)  # fmt: skip
            if wr:  # above the landing and read lines, which may fall at the same time
                ax.plot([x(t0)], [y], marker="|", markersize=12, markeredgewidth=2, zorder=7,
                        color=WRITE_COLORS.get(wr, "black"), gid=f"write:{wr}")  # fmt: skip
    # The landing, the read, the verdict.
    if tl.land_ns >= 0 and tl.view[0] <= tl.land_ns <= tl.view[1]:
        ax.axvline(x(tl.land_ns), color="#d62728", lw=1.6, ls="--", gid="landing", zorder=5)
        ax.text(x(tl.land_ns), len(lanes) - 0.1, f"step {tl.step - 1}'s counts land ",
                color="#d62728", fontsize=8, va="bottom", ha="right", zorder=6)  # fmt: skip
    ax.axvline(x(tl.read_ns), color="black", lw=1.4, gid="read", zorder=5)
    ax.text(x(tl.read_ns), len(lanes) - 0.1, f" read ({tl.policy})", fontsize=8, va="bottom",
            ha="left", zorder=6)  # fmt: skip
    windows = _merged(tl.wrong_windows or tl.cpu_only_windows)
    if windows:
        # Describe the window the landing is in (or the nearest one).
        lo, hi = min(
            windows, key=lambda w: 0 if w[0] < tl.land_ns <= w[1] else abs(w[0] - tl.land_ns)
        )
        clipped = lo <= tl.view[0] or hi >= tl.view[1]
        lo, hi = max(lo, tl.view[0]), min(hi, tl.view[1])
        m = int(tl.verdict["margin_ns"])
        if tl.land_ns > tl.read_ns or tl.land_ns < 0:
            # Not a race among the ops: the read simply came before the copy (no wait).
            txt = "read before the landing: a stale value" + (
                f"\nlanded {(tl.land_ns - tl.read_ns) * us:,.1f} µs after the read"
                if tl.land_ns >= 0
                else "\nthe copy never landed"
            )
        else:
            txt = f"race window {'≥ ' if clipped else ''}{(hi - lo) * us:.0f} µs"
            if bool(tl.verdict["cpu_wrong"]) or bool(tl.verdict["gpu_wrong"]):
                txt += f"; margin {m * us:.1f} µs" if m >= 0 else "; never landed"
            txt += _landing_between(tl)
        ax.text((x(lo) + x(hi)) / 2, -0.85, txt, ha="center", va="top", fontsize=8,
                color="#a01010", gid="window-label", zorder=7,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85})  # fmt: skip
    ax.set_yticks(
        [ypos[lane] for lane in lanes], [tl.lane_names.get(n, n) for n in lanes], fontsize=8
    )
    ax.set_ylim(-1.5, len(lanes) + 0.3)
    ax.set_xlim(v0, v1)
    xlabel = f"µs from the start of _update_states (step {tl.step})"
    if numbered:
        items = [f"{i + 1} {sp.label}" for i, sp in enumerate(ops[:MAX_LISTED_OPS])]
        items += [f"... {len(ops) - MAX_LISTED_OPS} more"] if len(ops) > MAX_LISTED_OPS else []
        lines = ["   ".join(items[i : i + 6]) for i in range(0, len(items), 6)]
        xlabel += "\nrow ops: " + "\n".join(lines)
    ax.set_xlabel(xlabel, fontsize=8)
    wrong = bool(tl.verdict["gpu_wrong"])
    # The facts on one line, the consequence on the next: a long verdict never runs off.
    verdict = f"{tl.policy}: {tl.verdict_text()}".replace(" -> ", "\n-> ", 1)
    ax.set_title(verdict, fontsize=9, loc="left",
                 color="#a01010" if wrong else "#1a6e1a")  # fmt: skip
    ax.grid(axis="x", alpha=0.25)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
