"""The host's slow phases, gauged before a configuration runs (issue #44).

The host-speed gauge (:mod:`gpu_check.vllm.gauge`) is a median: it says how fast the host
is outside its slow phases, not how often it is in one. How often differs from window to
window far more than the share :mod:`gpu_check.vllm.calibrate` fits (the median over the
records' configurations): forward-28's and forward-29's processes had almost no slow step,
forward-26's and forward-27's up to a third (``scripts/slow_phases.py``). Past the
boundary, the copies that land at entry are those of slow steps, so a window without slow
phases is GPU-bound where the calibrated share is not.

**The slow gauge.** ``slow_share``: the share of a pass's steps (2 on) whose host span
(``sample_tokens``, launch to the counts' D2H) is more than
:data:`gpu_check.vllm.calibrate.SLOW_FACTOR` x the median of its batch shape (with a prefill
chunk or not, full batch or not) in the same pass. Measured on a process's pure pass (align
at the least GPU delay, as the host gauge), it is known before the process's other
configurations run.

**What it says about the other passes** (``fit``): over every process of the records that
ran a pure pass and others, the median line (least absolute deviations) of each other pass's
share on its process's gauge-pass share. The median, not the mean: the shares are skewed (most
passes of a quiet process have none, a few have a long phase), and the conditional forecast
is judged as a point, pass by pass. ``vllm-outcome``'s (iv), where the round's frozen
calibration carries the line (``forecast.slow_given_gauge``), runs sim at the line's share
instead of the calibrated one. Measured on the five H100 rounds and not adopted: it fixes the
GPU-bound tail of quiet windows and loses more elsewhere (``scripts/gauge_rules.py``;
docs/forward-prediction.md, "Gauged by mode"), so ``vllm-forward`` does not write the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_check.vllm.calibrate import SLOW_FACTOR, step_spans

MIN_PAIRS = 10  # fewer (gauge pass, other pass) pairs than this: no fit


def slow_flags(raw: dict[str, Any]) -> np.ndarray:
    """Per step (>= 2) of a record, whether its host span is slow (module docstring)."""
    sp = step_spans(raw)
    if sp.empty:
        return np.zeros(0, dtype=bool)
    full = sp["num_reqs"] == sp["num_reqs"].max()
    med = sp.groupby([sp["prefill"], full])["launch_to_d2h_ns"].transform("median")
    return (sp["launch_to_d2h_ns"] / med > SLOW_FACTOR).to_numpy()


def has_spans(raw: dict[str, Any]) -> bool:
    """Whether the record carries the row ops the host spans need (early records do not)."""
    steps = raw.get("steps") or []
    return bool(steps) and not any("req_ids" in s and "ops" not in s for s in steps)


def slow_share(raw: dict[str, Any]) -> float | None:
    """The share of the pass's steps in a slow phase; None without host spans."""
    if not has_spans(raw):
        return None
    flags = slow_flags(raw)
    return round(float(flags.mean()), 4) if flags.size else None


def pass_table(root: Path) -> pd.DataFrame:
    """Every exported V1 pass under ``root`` with host spans
    (:func:`gpu_check.vllm.repeatability.v1_passes`): its process (run folder and repeat),
    mode, GPU delay and slow share."""
    from gpu_check.vllm.repeatability import v1_passes

    rows = []
    for folder, raw in v1_passes([root]):
        share = slow_share(raw)
        if share is None:
            continue
        cfg = raw.get("config", {})
        delay = int(cfg.get("gpu_delay_us", 0))
        rows.append({
            "pass": str(folder.relative_to(root)), "run": str(folder.parent),
            "rep": int(cfg.get("rep", 0)), "mode": raw.get("mode"), "gpu_delay_us": delay,
            "pure": raw.get("mode") == "align" or delay == 0, "share": share,
        })  # fmt: skip
    return pd.DataFrame(rows)


def process_pairs(passes: pd.DataFrame) -> pd.DataFrame:
    """Per process with a pure pass and others: each other pass's share beside the share of
    the process's gauge pass (its pure pass of least GPU delay, the first in path order)."""
    out = []
    for _, proc in passes.groupby(["run", "rep"], sort=True):
        pure = proc[proc["pure"]].sort_values(["gpu_delay_us", "pass"], kind="stable")
        if pure.empty:
            continue
        gauge = pure.iloc[0]
        for _, other in proc[proc["pass"] != gauge["pass"]].iterrows():
            out.append({"gauge_pass": gauge["pass"], "gauge_share": gauge["share"],
                        "pass": other["pass"], "share": other["share"]})  # fmt: skip
    return pd.DataFrame(out, columns=["gauge_pass", "gauge_share", "pass", "share"])


def median_line(x: np.ndarray, y: np.ndarray, rounds: int = 200) -> tuple[float, float]:
    """Intercept and slope of the least-absolute-deviations line of ``y`` on ``x``, by
    iteratively reweighted least squares from the least-squares line (deterministic)."""
    design = np.column_stack([np.ones_like(x), x])
    beta = np.linalg.lstsq(design, y, rcond=None)[0]
    for _ in range(rounds):
        w = np.sqrt(1.0 / np.maximum(np.abs(y - design @ beta), 1e-4))
        beta = np.linalg.lstsq(design * w[:, None], y * w, rcond=None)[0]
    return float(beta[0]), float(beta[1])


def fit(pairs: pd.DataFrame) -> dict[str, Any] | None:
    """The median line of a pass's slow share on its process's gauge-pass share (module
    docstring); None with fewer than :data:`MIN_PAIRS` pairs or no spread in the gauge shares."""
    x, y = pairs["gauge_share"].to_numpy(float), pairs["share"].to_numpy(float)
    if x.size < MIN_PAIRS or np.ptp(x) == 0:
        return None
    intercept, slope = median_line(x, y)
    zero = y[x == 0]
    return {
        "intercept": round(float(intercept), 4), "slope": round(float(slope), 4),
        "pairs": int(x.size), "processes": int(pairs["gauge_pass"].nunique()),
        "pearson": round(float(np.corrcoef(x, y)[0, 1]), 3),
        "mean_share": round(float(y.mean()), 4),
        "mean_share_gauge_zero": round(float(zero.mean()), 4) if zero.size else None,
        "pairs_gauge_zero": int(zero.size),
        "what": "median line (least absolute deviations) of each pass's slow share on its "
                "process's gauge-pass share (gpu_check.vllm.slow_gauge)",
    }  # fmt: skip


def slow_prob(line: dict[str, Any], share: float) -> float:
    """The slow share the line gives a pass of a process whose gauge pass had ``share``."""
    return round(float(np.clip(line["intercept"] + line["slope"] * share, 0.0, 1.0)), 4)


def fit_records(root: Path) -> dict[str, Any] | None:
    """:func:`fit` over every process of the records under ``root``."""
    return fit(process_pairs(pass_table(root)))
