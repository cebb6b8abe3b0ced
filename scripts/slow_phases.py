"""Whether the host's slow phases come in runs, and what that does to forward-28's boundary.

A step is slow when its ``sample_tokens`` host span is over ``SLOW_FACTOR`` (1.25) x the
median of its batch shape (prefill or not, full batch or not) in its own pass. This prints,
for every pass at 0 ms under ``data/vllm`` (align and none, every release), the share of slow
steps, how many phases (runs of consecutive slow steps) and the longest, and pooled over them
how often a slow step follows a slow step: independent steps would give the share itself.

Then forward-28's 0.24.0 align passes, every round: vLLM's median host path after a prefill
step (launch to the next ``_update_states``, as ``scripts/host_path.py``) and its landing at
entry after those steps, so the first round's longer path at 13 and 14.5 ms can be told from a
window's drift (the same delays in rounds two and three) or the GPU's delay acting on the host.

Last, sim given forward-28's gauge on its first round (the frozen calibration), with the slow
phases drawn step by step (as the round's predictions were) and clustered at the persistence
today's calibration fits: the entry share beside vLLM's. Nothing is written.

    python scripts/slow_phases.py

docs/forward-prediction.md ("Slow host phases come in runs") quotes it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_path import vllm_path  # noqa: E402

from gpu_check.vllm.export import load_raw  # noqa: E402
from gpu_check.vllm.slow_gauge import has_spans, slow_flags  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm"


def runs_table(root: Path = DATA) -> pd.DataFrame:
    """Per 0 ms pass with row ops recorded: steps, slow share, phases, longest, and the pairs
    (slow step, next step) with the next slow."""
    rows = []
    for f in sorted(root.rglob("raw/raw_*_d0ms*.json.gz")):
        raw = load_raw(f)
        if not has_spans(raw):
            continue  # an early record without row ops: no spans
        s = slow_flags(raw)
        edges = np.diff(np.concatenate([[0], s.astype(np.int8), [0]]))
        lengths = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
        rows.append({"pass": str(f.relative_to(root)), "steps": len(s),
                     "share": float(s.mean()), "phases": len(lengths),
                     "longest": int(lengths.max()) if len(lengths) else 0,
                     "after_slow": int(s[:-1].sum()),
                     "slow_after_slow": int((s[:-1] & s[1:]).sum())})  # fmt: skip
    return pd.DataFrame(rows)


def forward_28_paths() -> pd.DataFrame:
    """forward-28's 0.24.0 align passes, every round: vLLM's median host path after a prefill
    step, ms, and the share of those steps whose copy landed at entry."""
    rows = []
    for f in sorted((DATA / "forward-28" / "v0.24.0" / "raw").glob("raw_align_*.json.gz")):
        v = vllm_path(load_raw(f))
        pre = v[v["prefill"]]
        name = f.name.removeprefix("raw_align_").removesuffix(".json.gz")
        rows.append({"pass": name, "path_prefill_ms": float(pre["path_ms"].median()),
                     "entry_prefill": float(pre["entry"].mean())})  # fmt: skip
    return pd.DataFrame(rows)


def what_if() -> list[dict[str, float | str]]:
    """forward-28's 0.24.0 align configurations (first round): vLLM's entry share, sim's given
    the gauge with slow phases drawn step by step and clustered at today's persistence."""
    from gpu_check.vllm.prereg_forecast import first_round_entries

    cal = json.loads((DATA / "forward" / "summary.json").read_text())["calibration"]
    rho = cal["host_phases"]["0.24.0"]["timing"]["worker_slow_persistence"]
    return first_round_entries(DATA / "preregistered" / "forward-28", "0.24.0", {
        "sim": lambda t: replace(t, worker_slow_persistence=0.0),
        "sim_runs": lambda t: replace(t, worker_slow_persistence=rho),
    })  # fmt: skip


def none_steps() -> dict[str, list[float]]:
    """forward-28's 0.24.0 none pass at 0 ms (first round): sim's median step per seed, ms,
    given the round's gauge on the frozen calibration, slow steps drawn one by one and in runs,
    and per seed the median of its decode-only steps and of its steps with a prefill chunk
    (``*_decode``, ``*_prefill``); the schedule's prefill steps and steps; and vLLM's three
    passes' medians."""
    from gpu_check.vllm.forward import simulate_seed
    from gpu_check.vllm.prereg_forecast import first_round_passes
    from sim.resolve.host_band import scale_host

    cal = json.loads((DATA / "forward" / "summary.json").read_text())["calibration"]
    rho = cal["host_phases"]["0.24.0"]["timing"]["worker_slow_persistence"]
    prereg = DATA / "preregistered" / "forward-28"
    c, p, (sched, sc, policy) = next(x for x in first_round_passes(prereg, "0.24.0", "none")
                                     if x[0]["config"] == "s16_d0ms")  # fmt: skip
    out: dict[str, list[float]] = {}
    for name, r in (("sim", 0.0), ("sim_runs", rho)):
        t = scale_host(replace(sc.timing, worker_slow_persistence=r), p["cond_factor"])
        per = [simulate_seed(sched, replace(sc, timing=t), policy, s) for s in range(5)]
        out[name] = [round(x["step_ns_median"] / 1e6, 2) for x in per]
        for pop in ("decode", "prefill"):  # the medians of each population of steps
            out[f"{name}_{pop}"] = [round(x[f"step_ns_median_{pop}"] / 1e6, 2) for x in per]
    out["prefill_steps"] = [sum(s.has_prefill for s in sched.steps), len(sched.steps)]
    rows = json.loads((prereg / "outcome.json").read_text())["forecast"]["passes_table"]
    out["vllm"] = sorted(round(r["step_ms_observed"], 2) for r in rows if r["run"] == c["run"]
                         and r["pass_group"].split("/")[1] == "none"
                         and r["config"].startswith("s16_d0ms"))  # fmt: skip
    return out


def main() -> int:
    t = runs_table()
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(t.round(3).to_string(index=False))
    n, k = int(t["after_slow"].sum()), int(t["slow_after_slow"].sum())
    share = t["share"].mul(t["steps"]).sum() / t["steps"].sum()
    print(
        f"{len(t)} passes: a slow step followed by a slow step in {k} of {n} ({k / n:.2f}); "
        f"share of slow steps {share:.3f}; passes with no slow step {(t['share'] == 0).sum()}"
    )
    print(forward_28_paths().round(3).to_string(index=False))
    print("forward-28, 0.24.0 align, entry share: vLLM / sim, slow steps drawn one by one / "
          "in runs")  # fmt: skip
    for r in what_if():
        print(f"  {r['config']}: {r['vllm']:.2f} / {r['sim']:.2f} / {r['sim_runs']:.2f}")
    steps = none_steps()
    print(
        "forward-28, 0.24.0 none at 0 ms, median step per seed (ms): slow steps one by one "
        f"{steps['sim']}; in runs {steps['sim_runs']} (decode-only {steps['sim_runs_decode']}, "
        f"prefill {steps['sim_runs_prefill']}; {steps['prefill_steps']} prefill steps of "
        f"the schedule's); vLLM's passes {steps['vllm']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
