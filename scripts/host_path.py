"""Where GPU-bound align lands the copy at entry: after which steps, and on what host path.

Past the boundary, align's host waits in ``_prepare_inputs`` for the previous step's counts,
so the GPU cannot run ahead: the copy of step N is at ``_update_states`` of N+1 before the
host only when the host's path from step N's launch to N+1's ``_update_states`` (its
``sample_tokens`` span, the counts' D2H, the engine core, the RPC) outlasts the GPU's step N.
That path is host work only at any delay (step N-1 has landed when it starts). This prints,
per align pass the records call GPU-bound (copy at entry in <= 10 % of its steps), the share
of steps landed at entry after a decode-only step and after a step with a prefill chunk, the
median host path of each population, and, where the process ran the same configuration at
0 ms, the pass's median host path over those passes' (``path_vs_0ms``). Then the same counts and
medians from sim, run as ``vllm-forward`` runs it (the calibrated timing, seeds 0..4): the
reader sees whether a miss is the GPU's timing (the same host path, different landings) or
the pass's host speed (the path itself moved).

    python scripts/host_path.py [data/vllm]

Given a pre-registered round and its runs, it prints the same populations for the round's
0.24.0 align passes (first round), sim given the round's gauge (:func:`round_table`):

    python scripts/host_path.py data/vllm/preregistered/forward-28 data/vllm/forward-28

docs/forward-prediction.md ("GPU-bound landing at entry: the pass's host path") quotes it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_check.vllm.agreement import policy_for
from gpu_check.vllm.calibrate import decode_only, find_configs, prepared_steps
from gpu_check.vllm.export import load_raw
from gpu_check.vllm.forecast import GPU_BOUND_ENTRY
from gpu_check.vllm.forward import UPDATE_STATES, forward_schedule, scenario_for
from sim.model.simulate import simulate

SEEDS = 5


def vllm_path(raw: dict[str, Any]) -> pd.DataFrame:
    """Per step N >= 2 of a record: whether N carries a prefill chunk, the host path from
    its launch (``t_read_end``) to N+1's ``_update_states``, ms, and whether N's copy was
    at N+1's ``_update_states`` (entry)."""
    st = prepared_steps(raw)
    rows = [
        {"prefill": not decode_only(a), "path_ms": (b["t_us_start"] - a["t_read_end"]) / 1e6,
         "entry": bool(b.get("landed_at_update_states"))}
        for a, b in zip(st[2:-1], st[3:], strict=True)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def sim_path(sched, timing, policy) -> pd.DataFrame:
    """The same columns from sim's trace: the launch's end to the next ``_update_states``."""
    rows = []
    for seed in range(SEEDS):
        m = simulate(sched, timing, policy, seed, trace=True)
        start = {r[2]: r[0] for r in m.trace_rows if r[4] == UPDATE_STATES}
        launched = {r[2]: r[0] + r[1] for r in m.trace_rows if r[4] == "launch"}
        for n in range(2, len(sched.steps) - 1):
            land = m.timing[n].land_ns
            rows.append({"prefill": sched.steps[n].has_prefill,
                         "path_ms": (start[n + 1] - launched[n]) / 1e6,
                         "entry": 0 <= land <= start[n + 1]})  # fmt: skip
    return pd.DataFrame(rows)


def by_population(t: pd.DataFrame) -> dict[str, float]:
    """Entry share and median host path after decode-only steps and after prefill steps."""
    out: dict[str, float] = {}
    for name, pre in (("decode", False), ("prefill", True)):
        p = t[t["prefill"] == pre]
        out[f"entry_{name}"] = float(p["entry"].mean()) if len(p) else np.nan
        out[f"path_{name}_ms"] = float(p["path_ms"].median()) if len(p) else np.nan
    return out


def table(root: Path) -> pd.DataFrame:
    cal = json.loads((root / "forward" / "summary.json").read_text())["calibration"]
    configs = [c for c in find_configs(root) if c.mode == "align"]
    raws = {c.folder: load_raw(c.raw_path) for c in configs}
    zero: dict[tuple[str, int], list[float]] = {}  # the process's 0 ms passes' median paths
    for c in configs:
        if c.gpu_delay_us == 0:
            path = float(vllm_path(raws[c.folder])["path_ms"].median())
            zero.setdefault((c.run, c.max_num_seqs), []).append(path)
    rows = []
    for c in configs:
        v = vllm_path(raws[c.folder])
        if v["entry"].mean() > GPU_BOUND_ENTRY:
            continue
        ref = zero.get((c.run, c.max_num_seqs))
        vs0 = float(v["path_ms"].median() / np.median(ref)) if ref else np.nan
        sc = scenario_for(c, cal, raws[c.folder])
        s = sim_path(forward_schedule(sc), sc.timing, policy_for(c.mode, c.vllm))
        rows.append({"pass": f"{c.run}/{c.folder.name}", "entry": float(v["entry"].mean()),
                     **by_population(v), "path_vs_0ms": vs0,
                     "sim_entry": float(s["entry"].mean()),
                     **{f"sim_{k}": x for k, x in by_population(s).items()}})  # fmt: skip
    return pd.DataFrame(rows)


def round_table(prereg: Path, runs: Path, vllm: str = "0.24.0") -> pd.DataFrame:
    """A pre-registered round's align passes of ``vllm``'s first round: the same populations,
    vLLM's against sim's given the round's gauge (the factor ``vllm-outcome`` used, on the
    frozen calibration)."""
    from gpu_check.vllm.prereg_forecast import first_round_passes
    from sim.resolve.host_band import scale_host

    rows = []
    for c, p, (sched, sc, policy) in first_round_passes(prereg, vllm):
        v = vllm_path(load_raw(runs / c["run"] / "raw" / f"raw_align_{c['config']}.json.gz"))
        s = sim_path(sched, scale_host(sc.timing, p["cond_factor"]), policy)
        rows.append({"pass": c["config"], **by_population(v),
                     **{f"sim_{k}": x for k, x in by_population(s).items()}})  # fmt: skip
    return pd.DataFrame(rows)


def main(argv: list[str]) -> int:
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        if len(argv) == 2:  # a pre-registered round and its runs
            print(round_table(Path(argv[0]), Path(argv[1])).round(3).to_string(index=False))
            return 0
        root = Path(argv[0] if argv else "data/vllm")
        print(table(root).round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
