"""The evidence that the host-speed gauge (:mod:`gpu_check.vllm.gauge`) tracks a pass's speed:
``python -m gpu_check vllm-gauge RUNS --out DIR`` takes every exported V1 pass under ``RUNS``,
its gauge, median step and copy-at-entry share (``DIR/gauge.csv``), and how the gauge tracks
step time and how far it spreads within one configuration (``DIR/summary.json``)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from gpu_check.vllm.repeatability import find_passes


def gauge_rows(roots: list[Any]) -> list[dict[str, Any]]:
    """One row per exported V1 pass under ``roots``: its configuration group
    (:func:`gpu_check.vllm.repeatability.pass_key`), gauge, median step and copy-at-entry share."""
    rows = []
    for key, passes in find_passes(roots).items():
        cfg = json.loads(key)
        for folder, gauge in passes.items():
            exp = json.loads((folder / "export.json").read_text())
            steps = max(int(exp["steps"]), 1)
            rows.append({
                "pass": str(folder), "vllm": cfg["vllm"], "mode": cfg["mode"],
                "k": cfg["k"], "max_num_seqs": int(exp["max_num_seqs"]),
                "gpu_delay_ms": int(exp["gpu_delay_us"]) / 1000, "group": key,
                "host_gauge_ms": gauge,
                "host_gauge_pure": exp["mode"] == "align" or int(exp["gpu_delay_us"]) == 0,
                "step_ms": exp["step_interval_ms_median"],
                "entry_share": round(int(exp["steps_landed_at_update_states"]) / steps, 4),
            })  # fmt: skip
    return rows


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 3 or np.std(x) == 0 or np.std(y) == 0:
        return None
    return round(float(np.corrcoef(x, y)[0, 1]), 3)


def pure_ratios(df: Any) -> Any:
    """The pure passes (gauge measured, host work alone) of groups of >= 2, each with
    ``ratio``: its gauge over its (release, mode, seqs, k) group's median gauge. The spread
    of host speed from pass to pass (``spread`` below; the host factors of
    :mod:`gpu_check.vllm.forecast`)."""
    pure = df[df["host_gauge_pure"] & df["host_gauge_ms"].notna()].copy()
    shape = ["vllm", "mode", "max_num_seqs", "k"]
    pure["ratio"] = pure["host_gauge_ms"] / pure.groupby(shape)["host_gauge_ms"].transform("median")
    return pure[pure.groupby(shape)["ratio"].transform("size") >= 2]


def window_spread(df: Any, column: str) -> dict[str, Any]:
    """How far ``column`` of one pass lies from the median of its (release, mode, seqs, k)
    group's other passes, taken two ways: among the passes of the same run folder (one
    process, one window of the machine), and among the passes of other run folders (another
    window). ``width90``: twice the 90th percentile of ``|x / median - 1|``, the statistic of
    :func:`gpu_check.vllm.forecast.own_spread`; a forecast made before a run faces the second."""
    shape = ["vllm", "mode", "max_num_seqs", "k"]
    same: list[float] = []
    other: list[float] = []
    for _key, g in df.groupby(shape):
        v, runs = g[column].to_numpy(float), g["pass"].str.rsplit("/", n=1).str[0].to_numpy()
        for i in range(len(v)):
            mine = runs == runs[i]
            mine[i] = False
            if mine.any():
                same.append(abs(v[i] / float(np.median(v[mine])) - 1))
            if (runs != runs[i]).any():
                other.append(abs(v[i] / float(np.median(v[runs != runs[i]])) - 1))

    def stats(d: list[float]) -> dict[str, Any]:
        a = np.asarray(d)
        if not a.size:
            return {"passes": 0, "median": None, "width90": None}
        return {"passes": int(a.size), "median": round(float(np.median(a)), 3),
                "width90": round(2 * float(np.quantile(a, 0.9)), 3)}  # fmt: skip

    return {"same_run": stats(same), "other_runs": stats(other)}


def gauge_evidence(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How the gauge tracks step time, and how far it spreads.

    - ``host_only``: passes whose step is host work alone (delay 0: the copy lands at entry in
      >= 95 % of steps): Pearson r of log gauge against log median step, across passes and
      within configurations (each pass over its configuration's median, groups of >= 2).
    - ``spread``: the gauge of each pure pass over the median of its (release, mode, seqs, k)
      group's pure passes: quantiles of that ratio, per release and pooled; the host speeds a
      forecast must treat as plausible.
    - ``windows``: the same spread split by window (:func:`window_spread`), for the gauge of
      the pure passes and for the step of the host-only ones."""
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df[df["host_gauge_ms"].notna() & df["step_ms"].notna()]
    host = df[(df["gpu_delay_ms"] == 0) & (df["entry_share"] >= 0.95) & df["host_gauge_pure"]]
    lg, ls = np.log(host["host_gauge_ms"].to_numpy(float)), np.log(host["step_ms"].to_numpy(float))
    within = host.groupby("group").filter(lambda g: len(g) >= 2)
    wg = np.log(within["host_gauge_ms"]) - within.groupby("group")["host_gauge_ms"].transform(
        lambda s: np.log(s).median()
    )
    ws = np.log(within["step_ms"]) - within.groupby("group")["step_ms"].transform(
        lambda s: np.log(s).median()
    )
    multi = pure_ratios(df)

    def q(s: Any) -> dict[str, Any]:
        a = s.to_numpy(float)
        return {"passes": int(a.size), **{f"q{p:02d}": round(float(np.quantile(a, p / 100)), 3)
                                          for p in (5, 10, 50, 90, 95)},
                "min": round(float(a.min()), 3), "max": round(float(a.max()), 3)}  # fmt: skip

    return {
        "definition": "median sample_tokens host span (prepare_inputs end -> counts D2H issued) "
        "over decode-only steps, ms (gpu_check.vllm.gauge)",
        "host_only": {
            "passes": int(len(host)),
            "r_log_gauge_log_step_across": _pearson(lg, ls),
            "within_configuration_passes": int(len(within)),
            "within_configuration_groups": int(within["group"].nunique()),
            "r_log_gauge_log_step_within": _pearson(wg.to_numpy(float), ws.to_numpy(float)),
            "slope_log_step_on_log_gauge_within": (
                round(float(np.polyfit(wg, ws, 1)[0]), 3) if len(within) >= 3 else None
            ),
        },
        "spread": {
            "pooled": q(multi["ratio"]),
            "per_release": {v: q(g["ratio"]) for v, g in multi.groupby("vllm")},
        },
        "windows": {
            "gauge_pure_passes": window_spread(df[df["host_gauge_pure"]], "host_gauge_ms"),
            "step_host_only_passes": window_spread(host, "step_ms"),
        },
    }


def write_gauge(roots: list[Any], out: Any) -> dict[str, Any]:
    """``vllm-gauge``: ``gauge.csv`` (one row per pass) and ``summary.json`` under ``out``."""
    import pandas as pd

    from sim.runs.io import atomic_write_text, write_json
    from sim.runs.outputs import claim_dir

    rows = gauge_rows(roots)
    doc = gauge_evidence(rows)
    claim_dir(out, "vllm-gauge")
    atomic_write_text(
        out / "gauge.csv",
        pd.DataFrame(rows).drop(columns="group").to_csv(index=False, lineterminator="\n"),
    )
    write_json(out / "summary.json", doc)
    return doc
