"""Agreement between the model and a hardware replay (``observed.parquet`` of gpu_check).

For every replayed read the replay measured where step N's counts landed among step N+1's
row operations and what the real pinned memory returned; ``cpu_predicted`` is what
``sim.model.counts_buffer`` says memory returns for that landing. This module turns the table
into the agreement summary; it reads no GPU library.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.errors import SpecraceError
from sim.runs.io import OBSERVED_COLUMNS, read_table

# The columns compare needs, with the kind of values each must hold (sim.runs.io checks them).
REQUIRED = OBSERVED_COLUMNS


def read_observed(path: Path) -> pd.DataFrame:
    """A replay table: a directory holding ``observed.parquet``, or the file itself."""
    if path.is_dir() or path.suffix != ".parquet":
        path = path / "observed.parquet"
    return read_table(path, "observed.parquet")


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


def landing_timing(observed: pd.DataFrame) -> pd.DataFrame:
    """How far the hardware's landing and row-op stores were from where the replay put them.

    One row per policy, over steps whose landing the replay aimed (a policy that waits before
    the moves has none) and saw: landing error = first sighting of the tag - aimed time
    (median, p95, max of |error|, in µs), the sighting's own uncertainty (the gap to the poll
    before it), and the op-placement error (|store time - scheduled time|, the step's worst op).
    Replays without these columns (recorded before they existed) give an empty table.
    """
    cols = ("land_predicted_ns", "land_seen_ns", "land_bracket_ns", "op_err_max_ns")
    if not all(c in observed.columns for c in cols):
        return pd.DataFrame()
    steps = observed.drop_duplicates(["policy", "step", "land_predicted_ns", "land_seen_ns"])
    aimed = steps[(steps["land_predicted_ns"] >= 0) & (steps["land_seen_ns"] >= 0)]
    err = (aimed["land_seen_ns"] - aimed["land_predicted_ns"]).abs() / 1000
    g = aimed.assign(
        err_us=err, op_us=aimed["op_err_max_ns"] / 1000, bracket_us=aimed["land_bracket_ns"] / 1000
    ).groupby("policy", sort=True)
    out = pd.DataFrame({
        "steps": g.size(),
        "land_err_p50_us": g["err_us"].median(),
        "land_err_p95_us": g["err_us"].quantile(0.95),
        "land_err_max_us": g["err_us"].max(),
        "bracket_p95_us": g["bracket_us"].quantile(0.95),
        "op_err_p95_us": g["op_us"].quantile(0.95),
        "op_err_max_us": g["op_us"].max(),
    })  # fmt: skip
    return out.round(2).reset_index()
