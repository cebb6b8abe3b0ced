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

Beside it, the same pool judged on the interval **given the gauge** (``gc_*`` columns, the
band :func:`gpu_check.vllm.forecast.given_gauge_band` draws around the forecast at the host
factor of the process's gauge pass). That interval is made when its round is judged, since the
gauge is measured in the run: from the round's frozen ``calibration.json`` (its calibration and
residuals, ``forecast.model_error``) and sim as it stood when ``vllm-outcome`` ran. It is given
twice: over every pass, and without the passes at 0 ms, the gauge passes among them (a gauge
pass is judged on its own gauge).

It is reported beside the criterion (``summary.json`` ``forecast.preregistered_pooled``),
never instead of it: the issue owner decides whether (i) over the pooled rounds replaces (i)
per round.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from gpu_check.vllm import forecast as fc

#: the columns :func:`forecast.covered` and the safety count read from a round's passes
COLUMNS = (
    "regime", "rate_observed", "step_ms_observed", "entry_observed",
    "rate_pi_lo", "rate_pi_hi", "step_pi_lo", "step_pi_hi", "entry_pi_lo", "entry_pi_hi",
)  # fmt: skip
#: the interval given the gauge, where the round's outcome has it
GIVEN = tuple(f"gc_{p}_{x}" for p in fc.PARTS for x in ("pi_lo", "pi_hi"))
#: a pass at 0 ms, by its configuration key (:func:`gpu_check.vllm.prereg_forecast.config_key`,
#: ``release/mode/s<seqs>_d<delay>us/...``): each process's gauge pass is one of them
AT_ZERO = re.compile(r"/s\d+_d0us/")


def round_passes(prereg: Path) -> dict[str, pd.DataFrame]:
    """Each pre-registered round's judged passes, by folder name, in name order; a round
    without a forecast's passes (forward-23, forward-24: point predictions only) is skipped."""
    out: dict[str, pd.DataFrame] = {}
    for path in sorted(prereg.glob("*/outcome.json")):
        doc = json.loads(path.read_text())
        rows = (doc.get("forecast") or {}).get("passes_table")
        if not rows:
            continue
        frame = pd.DataFrame(rows)
        given = [c for c in GIVEN if c in frame.columns]
        out[path.parent.name] = frame[[*COLUMNS, "pass_group", *given]]
    return out


def _coverage(df: pd.DataFrame) -> dict[str, Any]:
    cov = fc.covered(df)
    return {p: int(cov[p].sum()) for p in fc.PARTS}


def _per_regime(df: pd.DataFrame) -> dict[str, Any]:
    """(i) per regime and overall, (iii) at the boundary and the passes above the rate's top in
    every regime (:func:`forecast.regime_calibration`), on the interval columns ``df`` has
    (``{part}_pi_lo`` / ``_pi_hi``); beside them, per part, the passes above the interval's top:
    outside it, above is the unsafe side (more wrong reads, a slower step, more copies at entry)."""
    cov = fc.covered(df)
    per: dict[str, Any] = {}
    for name in (*fc.REGIMES, "overall"):
        entry = fc.regime_calibration(df, cov, name)
        mask = fc.regime_mask(df, name)
        entry["above_top"] = {p: int((df[o][mask] > df[f"{p}_pi_hi"][mask]).sum())
                              for p, o in fc.OBSERVED.items()}  # fmt: skip
        per[name] = entry
    return per


def _on_given(r: pd.DataFrame) -> pd.DataFrame:
    """The passes with the interval given the gauge in the interval's columns."""
    return r.assign(**{f"{p}_pi_{x}": r[f"gc_{p}_pi_{x}"] for p in fc.PARTS for x in ("lo", "hi")})


def _given_gauge(rounds: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The pool on the interval given the gauge: the rounds whose outcome has it, every pass
    and without the passes at 0 ms, and each round's coverage."""
    have = {n: _on_given(r) for n, r in rounds.items() if all(c in r.columns for c in GIVEN)}
    if not have:
        return {}
    df = pd.concat(have.values(), ignore_index=True)
    at_zero = df["pass_group"].astype(str).str.contains(AT_ZERO)
    return {
        "what": "the same passes on the interval given the gauge (gc_*), made at judgment from "
        "the round's frozen calibration and residuals; without_gauge_passes leaves out every "
        "pass at 0 ms, the gauge passes among them",
        "rounds_without": sorted(set(rounds) - set(have)),
        "rounds": {n: {"passes": len(r), "covered": _coverage(r)} for n, r in have.items()},
        "per_regime": _per_regime(df),
        "passes_at_0ms": int(at_zero.sum()),
        "without_gauge_passes": _per_regime(df[~at_zero].reset_index(drop=True)),
    }


def pooled(prereg: Path) -> dict[str, Any]:
    """(i) and (iii) over every pre-registered round with a forecast, pooled, per regime (by
    the observed entry share); the passes above the rate's top in every regime; each round's
    own coverage; and the same on the interval given the gauge. Empty when no round has a
    forecast."""
    rounds = round_passes(prereg)
    if not rounds:
        return {}
    df = pd.concat([r[list(COLUMNS)] for r in rounds.values()], ignore_index=True)
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
        "per_regime": _per_regime(df),
        "given_gauge": _given_gauge(rounds),
    }


def _cov_cell(per: dict[str, Any], name: str) -> str:
    """One regime's (i): inside per part of its passes, and the fractions."""
    c, n = per[name]["coverage"], per[name]["passes"]
    if not n:
        return "-"
    return " / ".join(f"{c[p]['covered']}" for p in fc.PARTS) + f" of {n} (" + " / ".join(
        f"{c[p]['fraction']:.2f}" for p in fc.PARTS) + ")"  # fmt: skip


def _above_cell(per: dict[str, Any], name: str) -> str:
    """One regime's passes above the interval's top, per part."""
    if not per[name]["passes"]:
        return "-"
    return " / ".join(str(per[name]["above_top"][p]) for p in fc.PARTS)


def _safety_line(per: dict[str, Any]) -> str:
    safety, above = per["boundary"]["safety"], per["overall"]["rate_above_upper"]
    return (f"boundary passes above the rate's top: {safety['above_upper']} of "
            f"{safety['passes']}; passes of every regime above it: {above['above_upper']} of "
            f"{above['passes']}")  # fmt: skip


def _rounds_table(rounds: dict[str, Any]) -> list[str]:
    return [
        "| round | passes | inside: rate / step / entry |",
        "|---|---:|---|",
        *(f"| {name} | {r['passes']} | " + " / ".join(str(r["covered"][p]) for p in fc.PARTS)
          + " |" for name, r in rounds.items()),
    ]  # fmt: skip


def markdown(pool: dict[str, Any]) -> str:
    """forward.md's section: the pooled (i) and (iii), then each round's coverage; then the
    same on the interval given the gauge, every pass and without those at 0 ms."""
    if not pool:
        return ""
    per = pool["per_regime"]
    lines = [
        "**The pre-registered rounds pooled** (a proposed restatement of (i), beside the "
        f"criterion): {len(pool['rounds'])} rounds, {per['overall']['passes']} passes, each "
        "judged on the interval frozen before its round.",
        "",
        "| observed regime | (i) inside the 90 % interval: rate / step / entry | above its top |",
        "|---|---|---|",
        *(f"| {name} | {_cov_cell(per, name)} | {_above_cell(per, name)} |"
          for name in (*fc.REGIMES, "overall")),
        "",
        f"(iii) {_safety_line(per)}.",
        "",
        *_rounds_table(pool["rounds"]),
    ]  # fmt: skip
    given = pool.get("given_gauge") or {}
    if given:
        gper, wper = given["per_regime"], given["without_gauge_passes"]
        lines += [
            "",
            f"**Given the gauge**: the passes of {len(given['rounds'])} rounds on the interval "
            "given the gauge, made when the round was judged from its frozen calibration and "
            f"residuals; then without the {given['passes_at_0ms']} passes at 0 ms (each "
            "process's gauge pass among them).",
            "",
            "| observed regime | inside given the gauge: rate / step / entry | above its top | "
            "without the passes at 0 ms | above its top |",
            "|---|---|---|---|---|",
            *(f"| {name} | {_cov_cell(gper, name)} | {_above_cell(gper, name)} | "
              f"{_cov_cell(wper, name)} | {_above_cell(wper, name)} |"
              for name in (*fc.REGIMES, "overall")),
            "",
            f"(iii) given the gauge, {_safety_line(gper)}.",
            "",
            *_rounds_table(given["rounds"]),
        ]  # fmt: skip
        if given["rounds_without"]:
            lines += ["", "Rounds without it: " + ", ".join(given["rounds_without"]) + "."]
    return "\n".join(lines) + "\n"
