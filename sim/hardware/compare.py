"""Agreement between the model and a hardware replay (``observed.parquet`` of gpu_check).

For every replayed read the replay measured where step N's counts landed among step N+1's
row operations and what the real pinned memory returned; ``cpu_predicted`` is what
``sim.model.counts_buffer`` says memory returns for that landing. This module turns the table
into the agreement summary; it reads no GPU library.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import SpecraceError
from sim.model.verdict import is_close_call
from sim.runs.io import OBSERVED_COLUMNS, check_schema, read_table
from sim.runs.stats import wilson

# The columns compare needs, with the kind of values each must hold (sim.runs.io checks them).
REQUIRED = OBSERVED_COLUMNS


# Columns a replay table may hold (added as the replay grew; older tables lack them), with the
# kind of values each must hold where present: compare reads them when they are there.
OPTIONAL = {
    "land_predicted_ns": "int", "land_seen_ns": "int", "land_bracket_ns": "int",
    "op_err_max_ns": "int", "op_err_p50_ns": "int", "read_err_ns": "int",
    "land_predicted_pos": "int", "land_margin_ns": "int", "sim_cpu_value": "int",
    "sim_landed": "bool",
}  # fmt: skip


def read_observed(path: Path) -> pd.DataFrame:
    """A replay table: a directory holding ``observed.parquet``, or the file itself; its
    required columns and whichever optional ones it has, each of the right kind."""
    if path.is_dir() or path.suffix != ".parquet":
        path = path / "observed.parquet"
    df = read_table(path, "observed.parquet")
    check_schema(df, {c: k for c, k in OPTIONAL.items() if c in df.columns},
                 f"{path}: not a whole replay table")  # fmt: skip
    if "op_errs_ns" in df.columns and not _int_lists(path, df):
        raise SpecraceError(
            f"{path}: not a whole replay table (column op_errs_ns holds a value that is not a "
            "list of integers)"
        )
    return df


def _int_lists(path: Path, df: pd.DataFrame) -> bool:
    """Whether every cell of ``op_errs_ns`` (every op's error) is a list of integers: the
    file's column type says so for all cells at once, and no cell is null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_schema(path).field("op_errs_ns").type
    lists = pa.types.is_list(t) or pa.types.is_large_list(t)
    return lists and pa.types.is_integer(t.value_type) and not df["op_errs_ns"].isna().any()


def pool_runs(tables: list[pd.DataFrame], names: list[str] | None = None) -> pd.DataFrame:
    """Several replay tables as one: a ``run`` column (0, 1, ... in the order given) keeps
    their steps apart. One table is returned as it is. Tables of different kinds (a drawn
    replay and a ``--sim-run`` one, or from before and after a column was added) are refused:
    pooled, their missing columns would be holes."""
    if len(tables) == 1:
        return tables[0]
    names = names or [f"table {i + 1}" for i in range(len(tables))]
    first = set(tables[0].columns)
    for name, t in zip(names[1:], tables[1:], strict=True):
        if set(t.columns) != first:
            diff = sorted(first ^ set(t.columns))
            raise SpecraceError(
                f"{name}: not the same kind of replay table as {names[0]} (columns "
                f"{', '.join(diff[:3])}{' ...' if len(diff) > 3 else ''} in one only): "
                "compare them one at a time"
            )
    return pd.concat([t.assign(run=i) for i, t in enumerate(tables)], ignore_index=True)


def agreement(observed: pd.DataFrame) -> pd.DataFrame:
    """Per policy: reads, agreement of real memory with the model, wrong reads both ways.

    Reads whose landing fell inside one op's microseconds (``land_during_op``) are counted in
    ``reads`` but not scored: the replay cannot tell which side of the store they landed.
    """
    scored = ~observed["land_during_op"]
    reads_buffer = observed["reads_buffer"]  # device-authoritative fills 1: no buffer read
    true = observed["true_count"]
    df = observed.assign(
        scored=scored,
        agree_scored=observed["agree"] & scored,
        disagree_scored=~observed["agree"] & scored,
        cpu_wrong_observed=scored & reads_buffer & (observed["cpu_observed"] != true),
        cpu_wrong_predicted=scored & reads_buffer & (observed["cpu_predicted"] != true),
        gpu_wrong_scored=scored & observed["gpu_wrong"],
        landed_inside=(observed["land_pos"] > 0) & (observed["land_pos"] < observed["n_ops"]),
    )
    out = (
        df.groupby("policy", sort=True)
        .agg(
            reads=("agree", "size"),
            scored=("scored", "sum"),
            agree=("agree_scored", "sum"),
            disagree=("disagree_scored", "sum"),
            cpu_wrong_observed=("cpu_wrong_observed", "sum"),
            cpu_wrong_predicted=("cpu_wrong_predicted", "sum"),
            gpu_wrong_observed=("gpu_wrong_scored", "sum"),
            landed_inside_ops=("landed_inside", "sum"),
        )
        .reset_index()
    )
    out["agreement"] = out["agree"] / out["scored"].clip(lower=1)
    if "gdn_diverged" in df.columns:
        ran = df[df["gdn_rel_err"].notna()]
        gdn = ran.groupby("policy").agg(
            gdn_checked=("gdn_diverged", "size"),
            wrong_iff_diverged=(
                "gdn_diverged",
                lambda d: int((d == ran.loc[d.index, "gpu_wrong"]).sum()),
            ),
        )
        out = out.merge(gdn.reset_index(), on="policy", how="left")
    return out


def prediction_agreement(observed: pd.DataFrame) -> pd.DataFrame:
    """Model verdict vs hardware, read by read, for a replay driven by the model's timing.

    Where the model has the read before the landing (``sim_landed`` false), its value comes
    from the buffer's older history, which the replay presets rather than reproduces: those
    reads are counted apart, not compared.
    """
    if "sim_gpu_wrong" not in observed.columns:
        raise SpecraceError("not a replay of a sim run (no sim_* columns): use --sim-run")
    df = observed[~observed["land_during_op"]]
    landed = df["sim_landed"]
    c = df[landed]
    hw_wrong, sim_wrong = c["gpu_wrong"], c["sim_gpu_wrong"]
    same_cpu = c["cpu_observed"] == c["sim_cpu_value"]
    out = pd.DataFrame({
        "policy": c["policy"], "compared": 1, "same_cpu_value": same_cpu,
        "both_wrong": hw_wrong & sim_wrong, "sim_only": sim_wrong & ~hw_wrong,
        "hardware_only": hw_wrong & ~sim_wrong,
    }).groupby("policy", sort=True).sum().reset_index()  # fmt: skip
    # How close to a flip the differing reads were: the model's landing-to-op margin.
    margin = (c.loc[~same_cpu, "sim_margin_ns"].abs() / 1000).groupby(c["policy"]).max()
    out["differ_max_margin_us"] = out["policy"].map(margin).fillna(0).round(1)
    skipped = df[~landed].groupby("policy").size().rename("read_before_landing_not_compared")
    out = out.merge(skipped.reset_index(), on="policy", how="left")
    out["read_before_landing_not_compared"] = (
        out["read_before_landing_not_compared"].fillna(0).astype(int)
    )
    return out


def by_landing(observed: pd.DataFrame, req_id: str, step: int) -> pd.DataFrame:
    """What one request consumed, by landing position (the minimal race: R at step 4).

    Landings inside an op are left out, as in :func:`agreement`.
    """
    one = observed[(observed["req_id"] == req_id) & (observed["step"] == step)]
    if "land_during_op" in one.columns:
        one = one[~one["land_during_op"]]
    return (
        one.groupby(["policy", "land_pos", "gpu_consumed"]).size().rename("replays").reset_index()
    )


TIMING_COLUMNS = ("land_predicted_ns", "land_seen_ns", "land_bracket_ns", "op_err_max_ns")
VERDICT_COLUMNS = ("land_predicted_pos", "land_margin_ns", "sim_cpu_value", "sim_landed")
# What replay_steps reads of a replay table (TIMING_ and VERDICT_COLUMNS are optional ones).
STEP_COLUMNS = {*OPTIONAL, "op_errs_ns", "n_ops", "reads_buffer", "cpu_observed", "land_pos"}
WIDE_US = 25  # beyond this margin the replay's own errors must never flip a verdict


def step_type(pos: pd.Series, n_ops: pd.Series) -> pd.Series:
    """Where the model lands step N's counts among step N+1's events, in words."""
    kind = np.select(
        [pos < 0, n_ops == 0, pos == 0, pos < n_ops],
        ["after the read", "no row ops", "before the ops", "amid the ops"],
        "after the ops",
    )
    return pd.Series(kind, index=pos.index)


def replay_steps(observed: pd.DataFrame) -> pd.DataFrame:
    """One row per replayed step whose landing was aimed at the model's time and sighted:
    the landing error (first sighting - aim, ns), the worst op's placement error, and, where
    the table has them, the model's landing position, margin, and whether the hardware gave
    the model's verdict (every read's value; a read the model has before the landing, by the
    hardware also reading before it). Steps that landed inside an op are left out (unscored)."""
    if not all(c in observed.columns for c in TIMING_COLUMNS):
        return pd.DataFrame()
    keys = ["run", "policy", "step"] if "run" in observed.columns else ["policy", "step"]
    # Only the columns read below: the others (request ids, rows, ...) would be copied by the
    # filter and taken by the groupby for nothing (the held-out replays' 1.9 M reads: 0.72-1.02
    # s -> 0.54-0.63 s, side by side in one process).
    used = [c for c in observed.columns if c in STEP_COLUMNS or c in keys]
    df = observed.loc[(observed["land_predicted_ns"] >= 0) & ~observed["land_during_op"], used]
    first = df.groupby(keys, sort=True).first()
    out = pd.DataFrame(index=first.index)
    seen = first["land_seen_ns"]
    out["land_err_ns"] = np.where(seen >= 0, seen - first["land_predicted_ns"], np.nan)
    # The step's worst placed event: its row ops and, where recorded, the read.
    read = first["read_err_ns"].clip(lower=0) if "read_err_ns" in first.columns else 0
    out["op_err_ns"] = np.maximum(first["op_err_max_ns"], read)
    out["row_op_err_max_ns"] = first["op_err_max_ns"]
    out["n_ops"] = first["n_ops"]
    out["read_err_ns"] = first["read_err_ns"] if "read_err_ns" in first.columns else -1
    if "op_errs_ns" in first.columns:
        out["op_errs_ns"] = first["op_errs_ns"]
    out["bracket_ns"] = first["land_bracket_ns"]
    out["reads_buffer"] = first["reads_buffer"].astype(bool)
    if all(c in df.columns for c in VERDICT_COLUMNS):
        out["type"] = step_type(first["land_predicted_pos"], first["n_ops"])
        out["margin_ns"] = first["land_margin_ns"]
        same_value = (df["cpu_observed"] == df["sim_cpu_value"]) | ~df["sim_landed"]
        unlanded_ok = df["sim_landed"] | (df["land_pos"] == -1)
        out["same_verdict"] = (same_value & unlanded_ok).groupby([df[k] for k in keys]).all()
        out["same_position"] = first["land_pos"] == first["land_predicted_pos"]
    return out.reset_index()


def landing_timing(
    observed: pd.DataFrame, by: str = "policy", steps: pd.DataFrame | None = None
) -> pd.DataFrame:
    """How far the hardware's landing and row-op stores were from where the replay put them.

    One row per policy, over steps whose landing the replay aimed (a policy that waits before
    the moves has none) and saw: landing error = first sighting of the tag - aimed time
    (median, p95, max of |error|, in µs), the sighting's own uncertainty (the gap to the poll
    before it), and the op-placement error (|store time - scheduled time|, the step's worst op).
    Replays without these columns (recorded before they existed) give an empty table.
    ``steps``: :func:`replay_steps` of ``observed``, where the caller has it already.
    """
    steps = replay_steps(observed) if steps is None else steps
    if steps.empty or (by != "policy" and by not in steps.columns):
        return pd.DataFrame()
    aimed = steps[steps["land_err_ns"].notna()]
    groups = [*aimed.groupby(by, sort=True), ("all", aimed)]
    out = pd.DataFrame([{by: name, **_timing_row(g)} for name, g in groups]).set_index(by)
    return out.round(2).reset_index()


def _timing_row(g: pd.DataFrame) -> dict:
    """One group of steps: |landing error| and its bracket over steps; the op-placement error
    over every row op (each op's own error where recorded; else each step's worst op, an upper
    bound); the read's placement over steps whose read is placed (policies that do not wait)."""
    err, bracket = g["land_err_ns"].abs() / 1000, g["bracket_ns"] / 1000
    if "op_errs_ns" in g.columns:
        ops = pd.Series(np.concatenate([np.asarray(x, dtype=float) for x in g["op_errs_ns"]]
                                       + [np.zeros(0)])) / 1000  # fmt: skip
    else:
        ops = g.loc[g["n_ops"] > 0, "row_op_err_max_ns"] / 1000
    reads = g.loc[g["read_err_ns"] >= 0, "read_err_ns"] / 1000

    def q(x: pd.Series, f: float) -> float:
        return float(x.quantile(f)) if len(x) else float("nan")

    return {"steps": len(g), "land_err_median_us": q(err, 0.5), "land_err_p95_us": q(err, 0.95),
            "land_err_max_us": q(err, 1.0), "bracket_p95_us": q(bracket, 0.95),
            "row_ops": len(ops), "op_err_p95_us": q(ops, 0.95), "op_err_max_us": q(ops, 1.0),
            "read_err_p95_us": q(reads, 0.95)}  # fmt: skip


ATTRIBUTION = ("landing", "op placement", "both", "neither")


def attribute(land_err_ns: float, bracket_ns: float, op_err_ns: float, margin_ns: float) -> str:
    """Which of the replay's errors could have flipped a step. The landing may have moved by
    its error plus the sighting's bracket (it came at most that much before it was seen), an op
    (or the read) by its placement error; a flip needs the event and the landing to cross, so
    the margin must be covered by one of them alone ("landing", "op placement") or only by the
    two together ("both"); "neither": not even together."""
    land = abs(land_err_ns) + max(bracket_ns, 0) if np.isfinite(land_err_ns) else np.inf
    if land >= margin_ns and op_err_ns < margin_ns:
        return "landing"
    if op_err_ns >= margin_ns and land < margin_ns:
        return "op placement"
    return "both" if land + op_err_ns >= margin_ns else "neither"


def close_calls(observed: pd.DataFrame, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per policy and over all: how often the hardware gave the model's verdict on close calls
    (:func:`sim.model.verdict.is_close_call`: margin < 100 µs) and on steps with margin
    > 25 µs, each as a count, a rate and its 95 % Wilson interval, and every close call it did
    not give attributed to the landing error, the op-placement error, both, or neither. Empty
    for a replay without the model's verdicts."""
    steps = replay_steps(observed) if steps is None else steps
    if steps.empty or "same_verdict" not in steps.columns:
        return pd.DataFrame()
    # A step is at stake where the policy reads the buffer and some event's order against the
    # landing decides what it reads (margin -1: no such event, e.g. no ops before a waited read).
    steps = steps[(steps["margin_ns"] >= 0) & steps["reads_buffer"]]
    rows = []
    for name, g in [*steps.groupby("policy", sort=True), ("all", steps)]:
        row: dict = {"policy": name}
        for label, sel in (("close", is_close_call(g["margin_ns"])),
                           ("wide", g["margin_ns"] > WIDE_US * 1000)):  # fmt: skip
            n, k = int(sel.sum()), int(g.loc[sel, "same_verdict"].sum())
            lo, hi = wilson(k, n)
            row |= {f"{label}_steps": n, f"{label}_same": k,
                    f"{label}_rate": round(k / n, 4) if n else float("nan"),
                    f"{label}_ci95": f"[{float(lo):.3f}, {float(hi):.3f}]"}  # fmt: skip
        miss = g[is_close_call(g["margin_ns"]) & ~g["same_verdict"]]
        errors = zip(miss["land_err_ns"], miss["bracket_ns"], miss["op_err_ns"],
                     miss["margin_ns"], strict=True)  # fmt: skip
        why = [attribute(*e) for e in errors]
        row |= {f"miss_{a.replace(' ', '_')}": why.count(a) for a in ATTRIBUTION}
        rows.append(row)
    return pd.DataFrame(rows)
