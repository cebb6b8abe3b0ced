"""Which part of a pre-registered round's 90 % intervals makes them wide: the host's spread or
the model error?

``vllm-plan``'s interval (``forecast.unconditional``) simulates every configuration at the
records' host factors and draws each sample with a leave-one-out residual of the committed
``vllm-forward``. This rebuilds each configuration's interval three ways from the round's own
frozen calibration (the same samples, the same residual pool, the same seed): ``full`` (as
committed), ``host_only`` (every host factor, no residuals: count noise alone) and
``resid_only`` (the median host factor only, with the residuals), then prints, per variant,
the share of the round's passes inside (rate / step / entry) and the median width per observed
regime. Nothing in the round is changed.

    python scripts/interval_parts.py data/vllm/preregistered/forward-27

docs/forward-prediction.md ("forward-27") quotes it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_check.vllm import forecast as fc
from gpu_check.vllm.calibrate import group_name
from gpu_check.vllm.config import RunConfig
from gpu_check.vllm.forward import simulate_seed
from gpu_check.vllm.plan import prepared

PARTS = ("rate", "step", "entry")


def _bands(c: dict[str, Any], cal: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    rc = dict(c["run_config"], prompt_lens=tuple(c["run_config"]["prompt_lens"]))
    rc.pop("name")
    cfg = RunConfig(**rc)
    sched, sc, policy = prepared(c["vllm"], c["mode"], cfg, cal, c["k"])
    factors, seeds = model["host"]["factors"], c["forecast"]["seeds_per_factor"]
    samples = fc.sim_samples(sched, sc, policy, factors, seeds, simulate_seed)
    middle = samples[(len(factors) // 2) * seeds : (len(factors) // 2 + 1) * seeds]
    reg = fc.regime(float(np.median([s["entry"] for s in samples])))
    res = fc.loo_residuals(
        model["model_error"], group_name((c["vllm"], c["mode"], cfg.max_num_seqs, c["k"])), reg
    )
    key = f"{c['run']}/{c['vllm']}/{c['mode']}_{c['config']}/k{c['k']}"  # vllm-plan's
    n, seed = max(c["reads"] // c["seeds"], 1), fc.config_seed(key)
    return {
        "full": fc.predictive(samples, n, res, seed),
        "host_only": fc.predictive(samples, n, np.zeros((0, 3)), seed),
        "resid_only": fc.predictive(middle, n, res, seed),
    }


def table(prereg: Path) -> pd.DataFrame:
    """One row per (variant, observed pass): inside or not per part, and the widths."""
    frozen = json.loads((prereg / "calibration.json").read_text())
    preds = json.loads((prereg / "predictions.json").read_text())
    passes = json.loads((prereg / "outcome.json").read_text())["forecast"]["passes_table"]
    rows = []
    for c in preds["configs"]:
        if "forecast" not in c or c["run_config"]["rep"] != 0:  # the reps share one forecast
            continue
        bands = _bands(c, frozen["calibration"], frozen["forecast"])
        group = f"{c['vllm']}/{c['mode']}/s{c['run_config']['max_num_seqs']}_d" + str(
            c["run_config"]["gpu_delay_us"]
        )
        mine = [
            p for p in passes if p["run"] == c["run"] and p["pass_group"].startswith(group + "us/")
        ]
        for variant, b in bands.items():
            for p in mine:
                obs = {"rate": p["rate_observed"], "step": p["step_ms_observed"],
                       "entry": p["entry_observed"]}  # fmt: skip
                rows.append({
                    "variant": variant, "regime": p["regime"],
                    **{f"{k}_in": b[k]["lo"] <= obs[k] <= b[k]["hi"] for k in PARTS},
                    "rate_width": b["rate"]["hi"] - b["rate"]["lo"],
                    "step_width": (b["step"]["hi"] - b["step"]["lo"]) / b["step"]["mid"],
                    "entry_width": b["entry"]["hi"] - b["entry"]["lo"],
                })  # fmt: skip
    return pd.DataFrame(rows)


def main(argv: list[str]) -> int:
    t = table(Path(argv[0] if argv else "data/vllm/preregistered/forward-27"))
    with pd.option_context("display.width", 200):
        print(t.groupby("variant")[[f"{k}_in" for k in PARTS]].mean().round(3))
        widths = [f"{k}_width" for k in PARTS]
        print(t.groupby(["variant", "regime"])[widths].median().round(4))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
