"""The pre-registered rounds pooled: each pass judged on the forecast frozen before its round.

Issue 44 judges a pre-registered round by (i)-(iii) on its own passes. A round runs in one
window of one machine, and the host's speed belongs to the window (docs/forward-prediction.md,
"The host's speed belongs to the window"), so a round's passes fall inside or outside the
interval's host spread together: forward-29's step interval held 48 of 48 passes, forward-30's
1 of 48. The calibration of an interval made before the run is a statement over windows, and
only the rounds pooled have more than one.

This module reads every ``outcome.json`` under a folder of pre-registered rounds that carries a
forecast's passes (``forecast.passes_table``, written by ``vllm-outcome``) and judges them as
:func:`gpu_check.vllm.forecast.criterion` judges the records, (i) and (iii) with the same
targets, on each round's own frozen intervals: no interval is remade, so the rounds pooled are
each forecast as it stood when its round was committed. Beside it, per round, the coverage of
each part, which shows how a round moves as one.

It is reported beside the criterion (``summary.json`` ``forecast.preregistered_pooled``),
never instead of it: the issue owner decides whether (i) over the pooled rounds replaces (i)
per round.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from gpu_check.vllm import forecast as fc

#: the columns :func:`forecast.covered` and the safety count read from a round's passes
COLUMNS = (
    "regime", "rate_observed", "step_ms_observed", "entry_observed",
    "rate_pi_lo", "rate_pi_hi", "step_pi_lo", "step_pi_hi", "entry_pi_lo", "entry_pi_hi",
)  # fmt: skip


def round_passes(prereg: Path) -> dict[str, pd.DataFrame]:
    """Each pre-registered round's judged passes, by folder name, in name order; a round
    without a forecast's passes (forward-23, forward-24: point predictions only) is skipped."""
    out: dict[str, pd.DataFrame] = {}
    for path in sorted(prereg.glob("*/outcome.json")):
        doc = json.loads(path.read_text())
        rows = (doc.get("forecast") or {}).get("passes_table")
        if not rows:
            continue
        out[path.parent.name] = pd.DataFrame(rows, columns=list(COLUMNS))
    return out


def _coverage(df: pd.DataFrame) -> dict[str, Any]:
    cov = fc.covered(df)
    return {p: int(cov[p].sum()) for p in fc.PARTS}


def pooled(prereg: Path) -> dict[str, Any]:
    """(i) and (iii) over every pre-registered round with a forecast, pooled, per regime (by
    the observed entry share); the passes above the rate's top in every regime; and each
    round's own coverage. Empty when no round has a forecast."""
    rounds = round_passes(prereg)
    if not rounds:
        return {}
    df = pd.concat(rounds.values(), ignore_index=True)
    cov = fc.covered(df)
    per: dict[str, Any] = {}
    for name in (*fc.REGIMES, "overall"):
        mask = df["regime"] == name if name != "overall" else pd.Series(True, index=df.index)
        entry: dict[str, Any] = {
            "passes": int(mask.sum()),
            "coverage": fc._coverage(cov[mask], overall=name == "overall"),
        }
        if name == "boundary":
            above = int((df["rate_observed"][mask] > df["rate_pi_hi"][mask]).sum())
            n = int(mask.sum())
            entry["safety"] = {
                "above_upper": above, "passes": n, "fraction": fc._frac(above, n),
                "wilson95": fc._wilson(above, n),
                "met": bool(n and above / n <= fc.TARGETS["boundary_above_max"]),
            }  # fmt: skip
        if name == "overall":
            entry["rate_above_upper"] = fc.rate_above_upper(df)
        per[name] = entry
    return {
        "what": "every pre-registered round with a forecast, each pass judged on the interval "
        "frozen before its round ((i) and (iii) as in per_regime); proposed, not the criterion",
        "rounds": {
            name: {
                "passes": len(r),
                "covered": _coverage(r),
                "by_regime": {g: int((r["regime"] == g).sum()) for g in fc.REGIMES},
            }
            for name, r in rounds.items()
        },  # fmt: skip
        "per_regime": per,
    }


def markdown(pool: dict[str, Any]) -> str:
    """forward.md's section: the pooled (i) and (iii), then each round's coverage."""
    if not pool:
        return ""
    per = pool["per_regime"]

    def cov(name: str) -> str:
        c = per[name]["coverage"]
        n = per[name]["passes"]
        if not n:
            return "-"
        return " / ".join(f"{c[p]['covered']}" for p in fc.PARTS) + f" of {n} (" + " / ".join(
            f"{c[p]['fraction']:.2f}" for p in fc.PARTS) + ")"  # fmt: skip

    safety = per["boundary"]["safety"]
    above = per["overall"]["rate_above_upper"]
    lines = [
        "**The pre-registered rounds pooled** (a proposed restatement of (i), beside the "
        f"criterion): {len(pool['rounds'])} rounds, {per['overall']['passes']} passes, each "
        "judged on the interval frozen before its round.",
        "",
        "| observed regime | (i) inside the 90 % interval: rate / step / entry |",
        "|---|---|",
        *(f"| {name} | {cov(name)} |" for name in (*fc.REGIMES, "overall")),
        "",
        f"(iii) boundary passes above the rate's top: {safety['above_upper']} of "
        f"{safety['passes']}; passes of every regime above it: {above['above_upper']} of "
        f"{above['passes']}.",
        "",
        "| round | passes | inside: rate / step / entry |",
        "|---|---:|---|",
        *(f"| {name} | {r['passes']} | "
          + " / ".join(str(r["covered"][p]) for p in fc.PARTS) + " |"
          for name, r in pool["rounds"].items()),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"
