"""Would a calibration fitted window by window move the gauge-conditioned forecast?

The calibration (``gpu_check.vllm.calibrate``) fits each host span as the median over every
step of its group's 0 ms passes, pooled over the windows they ran in; the forecast given a
gauge scales every span by the gauge over the pooled ``sample_tokens`` span. If the pooled
fit mixed windows unevenly (one span from the slow window, another from the fast), a fit per
window would matter. This prints, per calibration group with more than one 0 ms pass, each
pass's host spans *as ratios to its own gauge*, and the pooled fit's: where they agree, the
pooled fit is already each window's, scaled. The step intervals' ratios say which step
statistic a gauge carries from one window to another.

Columns: ``gauge_ms`` (median decode-only ``sample_tokens`` span of steps landed at entry, the
calibration's ``worker_sample_tokens_ns``), then over it ``prefill_span`` (the same span on
steps with a prefill chunk), ``prepare`` (``_prepare_inputs``), ``rpc`` (counts D2H issued to
the next ``_update_states``), ``update`` (``_update_states`` less its row ops), and the step
intervals: ``decode_step`` (steps without a prefill chunk), ``prefill_step`` (with one) and
``step`` (all: #23's statistic).

    python scripts/calibration_windows.py [data/vllm]

docs/forward-prediction.md ("A fit per window: measured, not needed") quotes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from gpu_check.vllm.calibrate import find_configs, step_spans
from gpu_check.vllm.export import load_raw
from gpu_check.vllm.gauge import step_populations

FITTED = ("prefill_span", "prepare", "rpc", "update")  # ratios of spans the calibration fits


def ratios(t: pd.DataFrame, run: str, pops: dict | None) -> dict[str, float | str]:
    """``t``: step_spans of the passes; ``pops``: gauge.step_populations of the pass (None for
    the pooled fit: the calibration fits no step interval)."""
    calm = t[t["entry"]]
    gauge = float(calm.loc[~calm["prefill"], "launch_to_d2h_ns"].median())
    rest = t["update_states_ns"] - t["ops_ns"]
    steps = {"decode_step": "decode_ms", "prefill_step": "prefill_ms", "step": "all_ms"}
    return {
        "run": run,
        "gauge_ms": round(gauge / 1e6, 3),
        "prefill_span": float(calm.loc[calm["prefill"], "launch_to_d2h_ns"].median()) / gauge,
        "prepare": float(calm["prepare_inputs_ns"].median()) / gauge,
        "rpc": float(calm["d2h_to_update_ns"].median()) / gauge,
        "update": float(rest.median()) / gauge,
        **{k: pops[v] * 1e6 / gauge if pops else float("nan") for k, v in steps.items()},
    }


def table(root: Path) -> dict[tuple, pd.DataFrame]:
    groups: dict[tuple, list] = {}
    for c in find_configs(root):
        if c.gpu_delay_us == 0:
            groups.setdefault(c.group, []).append(c)
    out = {}
    for group, base in sorted(groups.items()):
        if len(base) < 2:
            continue
        raws = [load_raw(c.raw_path) for c in base]
        spans = [step_spans(raw) for raw in raws]
        rows = [ratios(t, f"{c.run}/{c.folder.name}", step_populations(raw))
                for c, t, raw in zip(base, spans, raws, strict=True)]  # fmt: skip
        # a pooled median of intervals mixes the windows otherwise than the entry-landed spans:
        # the calibration fits no interval, so none is shown for it
        rows.append(ratios(pd.concat(spans, ignore_index=True), "pooled (the calibration)", None))
        out[group] = pd.DataFrame(rows)
    return out


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("data/vllm")
    for group, df in table(root).items():
        print("group", "/".join(map(str, group)))
        print(df.round(3).to_string(index=False), end="\n\n")
