"""Agreement between the model and a hardware replay (``observed.parquet`` of gpu_check).

For every replayed read the replay measured where step N's counts landed among step N+1's
row operations and what the real pinned memory returned; ``cpu_predicted`` is what
``sim.counts_buffer`` says memory returns for that landing. This module turns the table
into the agreement summary; it reads no GPU library.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.errors import SpecraceError

REQUIRED = (
    "policy",
    "step",
    "req_id",
    "true_count",
    "cpu_observed",
    "cpu_predicted",
    "agree",
    "gpu_consumed",
    "gpu_wrong",
    "land_pos",
    "n_ops",
    "reads_buffer",
)


def read_observed(run_dir: Path) -> pd.DataFrame:
    path = run_dir / "observed.parquet"
    if not path.is_file():
        raise SpecraceError(f"{path} not found (run `python -m gpu_check replay` first)")
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise SpecraceError(f"{path}: unreadable or truncated ({type(e).__name__})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise SpecraceError(f"{path}: not a replay table (missing {', '.join(missing)})")
    return df


def agreement(observed: pd.DataFrame) -> pd.DataFrame:
    """Per policy: reads, agreement of real memory with the model, wrong reads both ways."""
    reads_buffer = observed["reads_buffer"]  # device-authoritative fills 1: no buffer read
    df = observed.assign(
        cpu_wrong_observed=reads_buffer & (observed["cpu_observed"] != observed["true_count"]),
        cpu_wrong_predicted=reads_buffer & (observed["cpu_predicted"] != observed["true_count"]),
        landed_inside=(observed["land_pos"] > 0) & (observed["land_pos"] < observed["n_ops"]),
    )
    during = df["land_during_op"] if "land_during_op" in df.columns else False
    df = df.assign(
        scored=~during, agree_scored=df["agree"] & ~during, disagree_scored=~df["agree"] & ~during
    )
    g = df.groupby("policy", sort=True)
    out = g.agg(
        reads=("agree", "size"),
        scored=("scored", "sum"),
        agree=("agree_scored", "sum"),
        disagree=("disagree_scored", "sum"),
        cpu_wrong_observed=("cpu_wrong_observed", "sum"),
        cpu_wrong_predicted=("cpu_wrong_predicted", "sum"),
        gpu_wrong_observed=("gpu_wrong", "sum"),
        landed_inside_ops=("landed_inside", "sum"),
    ).reset_index()
    # Reads whose landing fell inside one op's microseconds are not scored (see the replay).
    out["agreement"] = out["agree"] / out["scored"].clip(lower=1)
    if "gdn_diverged" in df.columns:
        ran = df[df["gdn_rel_err"].notna()]
        out = out.merge(
            ran.groupby("policy").apply(
                lambda x: pd.Series({
                    "gdn_checked": len(x),
                    "wrong_iff_diverged": int((x["gpu_wrong"] == x["gdn_diverged"]).sum()),
                }), include_groups=False,
            ).reset_index(), on="policy", how="left",
        )  # fmt: skip
    return out


def by_landing(observed: pd.DataFrame, req_id: str, step: int) -> pd.DataFrame:
    """What one request read, by landing position (the minimal race: R at step 4)."""
    one = observed[(observed["req_id"] == req_id) & (observed["step"] == step)]
    return (one.groupby(["policy", "land_pos", "cpu_observed"]).size()
            .rename("replays").reset_index())  # fmt: skip
