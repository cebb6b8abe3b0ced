"""Calibration of sim's timing from the measured real-vLLM runs (``vllm-forward``'s first half).

One timing set per (vLLM release, ``mamba_cache_mode``, ``max_num_seqs``), every median over
steps >= 2 of the group's configurations, read from their raw step records: host costs from
the runs without added GPU delay, the jitter and stalls from the step spans, one GPU line for
every release from the GPU-bound align runs, the copy's landing delay from the ``h200`` timing
file. docs/forward-prediction.md gives every rule.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_check.vllm.export import load_raw, prepared_steps, raw_record_of
from gpu_check.vllm.gauge import decode_only
from gpu_check.vllm.gpu_line import MIN_MODE_STEPS, fit_gpu_line
from sim.errors import SpecraceError
from sim.model.params import (
    TimingParams,
    timing_file_values,
)

GPU_BOUND_ENTRY_FRACTION = 0.1  # configs whose copy landed at _update_states in < 10 % of steps
SLOW_FACTOR = 1.25  # a step whose host span is > 1.25 x its batch shape's median: a slow phase
PCTS = (5, 25, 50, 75, 95)
STALL_FACTOR = 1.5
MEASURED_ON_H200 = ("dma_land_delay_ns", "worker_event_sync_ns", "worker_copy_to_gpu_ns")
PRIORS = ("gpu_prep_ns", "gpu_sample_ns", "gpu_drafter_ns")
ZEROED = (
    "engine_output_ipc_ns", "engine_update_ns_per_req", "engine_schedule_ns_base",
    "engine_schedule_ns_per_req", "engine_input_ipc_ns",
)  # fmt: skip


@dataclass(frozen=True)
class Measured:
    """One exported V1 configuration of data/vllm and its raw record."""

    run: str
    folder: Path
    raw_path: Path
    mode: str
    vllm: str
    max_num_seqs: int
    gpu_delay_us: int
    export: dict[str, Any]
    k: int = 3  # num_speculative_tokens of the run

    @property
    def group(self) -> tuple[str, str, int, int]:
        return (self.vllm, self.mode, self.max_num_seqs, self.k)


def run_device(run: Path) -> str | None:
    """The GPU a vllm-run folder ran on (its summary.json's ``environment.device``), or None
    where none is recorded."""
    try:
        device = json.loads((run / "summary.json").read_text())["environment"]["device"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return device if isinstance(device, str) else None


def find_configs(root: Path) -> list[Measured]:
    """Every exported V1 configuration under ``root`` recorded on ``CALIBRATION_DEVICE`` (MRv2
    folders are left out: no row ops, no counts D2H, nothing for sim's row model to time).

    The timing is one machine's: the GPU line and every host cost are fitted together, and a
    run on another machine (another GPU, another host CPU) would mix two machines into one
    line. Runs recorded on another device are judged where they were pre-registered
    (``vllm-outcome``), not calibrated from; a run that names no device is kept."""
    if not root.is_dir():
        raise SpecraceError(f"{root}: not a folder (expected data/vllm)")
    out = []
    devices: dict[Path, str | None] = {}  # one read of each run's summary.json
    found = sorted(root.glob("*/*/export.json"))
    found += sorted(root.glob(f"{FORWARD_RUNS}/*/*/export.json"))
    for exp in found:
        meta = json.loads(exp.read_text())
        if meta.get("runner") == "v2" or not (exp.parent / "steps_vllm.parquet").is_file():
            continue
        if meta.get("patch", "none") != "none":
            continue
        run_dir = exp.parent.parent
        if run_dir not in devices:
            devices[run_dir] = run_device(run_dir)
        if devices[run_dir] not in (CALIBRATION_DEVICE, None):
            continue
        run = str(exp.parent.parent.relative_to(root))
        raw = raw_record_of(exp.parent)
        if not raw.is_file():
            raise SpecraceError(f"{raw}: raw record missing for {exp.parent}")
        out.append(
            Measured(
                run=run, folder=exp.parent, raw_path=raw, mode=meta["mode"],
                vllm=meta["vllm_version"], max_num_seqs=int(meta["max_num_seqs"]),
                gpu_delay_us=int(meta["gpu_delay_us"]), export=meta,
                k=run_k(exp.parent.parent, meta["mode"]),
            )
        )  # fmt: skip
    if not out:
        raise SpecraceError(f"{root}: no exported vLLM configuration (*/<mode>_<config>/)")
    return out


FORWARD_RUNS = "forward-*"  # the pre-registered forward runs: data/vllm/forward-23/<run>/...
CALIBRATION_DEVICE = "NVIDIA H200"  # the machine of every calibrating run (find_configs)


def run_k(run: Path, mode: str) -> int:
    """``num_speculative_tokens`` of a vllm-run folder's ``mode`` (its summary.json; 3 where a
    run before k was an option recorded none)."""
    path = run / "summary.json"
    try:
        engine = json.loads(path.read_text())["modes"][mode]["engine"]
    except (OSError, ValueError, KeyError, TypeError):
        return 3
    k = engine.get("num_speculative_tokens", 3)
    if not isinstance(k, int) or not 1 <= k <= 15:
        raise SpecraceError(f"{path}: num_speculative_tokens {k!r} is not in 1..15")
    return k


# -- measured spans ---------------------------------------------------------------------------
def _n_cached(s: dict[str, Any]) -> int:
    """The step's requests that ``_update_states``' cached-request loop walks: neither new nor
    resumed."""
    new = {x[0] for x in s["new"]}
    return len(s["req_ids"]) - len(new) - len(s.get("resumed", []))


def step_spans(raw: dict[str, Any]) -> pd.DataFrame:
    """Per step (>= 2) the host spans the calibration uses, ns."""
    steps = prepared_steps(raw)
    rows = []
    for n in range(2, len(steps)):
        s, prev = steps[n], steps[n - 1]
        nxt = steps[n + 1] if n + 1 < len(steps) else None
        ops = s["ops"]
        prefill = not decode_only(s)
        n_cached = _n_cached(s)
        rows.append(
            {
                "num_reqs": len(s["req_ids"]),
                "n_cached": n_cached,
                "tokens": int(sum(s["num_sched_rows"])),
                "ops_ns": int(sum(o[5] - o[4] for o in ops)),
                "update_states_ns": int(s["t_us_end"] - s["t_us_start"]),
                "prepare_1_ns": int(s["t_read"] - s["t_us_end"]),
                "prepare_inputs_ns": int(s["t_read_end"] - s["t_read"]),
                "launch_to_d2h_ns": int(s["t_d2h_issued"] - s["t_read_end"]),
                "d2h_to_update_ns": int(s["t_us_start"] - prev["t_d2h_issued"]),
                "interval_ns": int(s["t_enter"] - prev["t_enter"]),
                # from this step's read of the counts to the next's: the GPU's step where
                # align waits for them (past the boundary)
                "gpu_interval_ns": float(nxt["t_read_end"] - s["t_read_end"]) if nxt else np.nan,
                "entry": bool(s.get("landed_at_update_states")),
                "prefill": prefill,
            }
        )
    return pd.DataFrame(rows)


def op_spans(raw: dict[str, Any]) -> dict[str, list[int]]:
    """Span of every remove/add/swap, and per condense call its span over its moves (ns)."""
    out: dict[str, list[int]] = {"remove": [], "add": [], "swap": [], "move": []}
    for s in prepared_steps(raw)[2:]:
        calls: dict[int, list] = {}
        for o in s["ops"]:
            if o[0] == "move":
                calls.setdefault(int(o[8]), []).append(o)
            else:
                out[o[0]].append(int(o[5] - o[4]))
        for moves in calls.values():
            span = max(m[5] for m in moves) - min(m[4] for m in moves)
            out["move"].append(int(span / len(moves)))
    return out


def update_phases(raw: dict[str, Any]) -> dict[str, list[int]]:
    """Where ``_update_states`` spends its time between the row ops (ns), per step:
    ``pre_add`` the gap before its first add or move (the cached-request loop included:
    ``_host`` takes its slope off, ``n_cached`` beside it); ``reorder`` the gap from the add or
    move before its first swap to that swap; ``refresh`` from a last swap to the end."""
    out: dict[str, list[int]] = {"pre_add": [], "n_cached": [], "reorder": [], "refresh": []}
    for s in prepared_steps(raw)[2:]:
        ops, start = s["ops"], int(s["t_us_start"])
        if not ops:
            continue
        first = next((i for i, o in enumerate(ops) if o[0] != "remove"), None)
        if first is not None and ops[first][0] in ("add", "move"):
            before = int(ops[first - 1][5]) if first else start
            out["pre_add"].append(int(ops[first][4]) - before)
            out["n_cached"].append(_n_cached(s))
        swap = next((i for i, o in enumerate(ops) if o[0] == "swap"), None)
        if swap and ops[swap - 1][0] in ("add", "move"):
            out["reorder"].append(int(ops[swap][4]) - int(ops[swap - 1][5]))
        if ops[-1][0] == "swap":
            out["refresh"].append(int(s["t_us_end"]) - int(ops[-1][5]))
    return out


def _median(xs: Iterable[float]) -> int:
    a = np.asarray(list(xs), dtype=np.float64)
    return int(round(float(np.median(a)))) if a.size else 0


# -- calibration ------------------------------------------------------------------------------
def calibrate(configs: list[Measured]) -> dict[str, Any]:
    """The calibrated timing of every (release, mode, max_num_seqs) group and the GPU line."""
    raws = {c.folder: load_raw(c.raw_path) for c in configs}
    spans = {c.folder: step_spans(raws[c.folder]) for c in configs}
    _host_factor(configs, spans)
    phases = _slow_phases(configs, spans)
    measured = timing_file_values(["h200"]).items()
    h200 = {k.split(".", 1)[1]: int(v) for k, v in measured}
    prior = TimingParams()
    rpc_req = _rpc_per_req(configs, spans)
    groups: dict[str, Any] = {}
    for group in sorted({c.group for c in configs}):
        base = [c for c in configs if c.group == group and c.gpu_delay_us == 0]
        if base:
            slow = phases[group[0]]["timing"]["worker_slow_factor"]
            per_req = rpc_req[group[0]]["ns_per_req"]
            groups[group_name(group)] = _host(base, raws, spans, h200, prior, slow, per_req)
            groups[group_name(group)]["timing"].update(phases[group[0]]["timing"])
    gpu = _gpu_line(configs, spans, prior, groups)
    rpc_k = _rpc_per_k(configs, spans)
    for g in groups.values():
        g["timing"]["gpu_forward_ns_base"] = gpu["gpu_forward_ns_base"]
        g["timing"]["gpu_forward_ns_per_token"] = gpu["gpu_forward_ns_per_token"]
        g["timing"]["gpu_forward_ns_prefill"] = gpu["gpu_forward_ns_prefill"]
        g["timing"]["gpu_jitter_frac"] = gpu["gpu_jitter_frac"]
        g["timing"] = dict(sorted(g["timing"].items()))
    return {"gpu": gpu, "host_phases": phases, "rpc_per_k": rpc_k, "rpc_per_req": rpc_req,
            "groups": groups}  # fmt: skip


def _rpc_per_k(configs: list[Measured], spans: dict[Path, pd.DataFrame]) -> dict[str, Any]:
    """How the drafter's share of the host step grows with k: per host-only pass (delay 0),
    the median of ``d2h_to_update`` (drafter launch + engine core) over the median of
    ``launch_to_d2h`` (forward launch + sampler, which k leaves alone) on its decode-only steps
    landed at entry; a ratio, so the pass's own host speed cancels. A line in k per release
    over its passes, given as the relative slope ``beta`` (rpc(k) = rpc(3) x (1 + beta (k -
    3))); a release whose passes have one k takes the slope of the pooled releases, each
    pass's ratio over its release's median ratio at k = 3."""
    per: dict[str, list[tuple[int, float]]] = {}
    for c in configs:
        if c.gpu_delay_us != 0:
            continue
        t = spans[c.folder]
        calm = t[t["entry"] & ~t["prefill"]]
        if len(calm) < MIN_MODE_STEPS:
            continue
        ratio = float(calm["d2h_to_update_ns"].median() / calm["launch_to_d2h_ns"].median())
        per.setdefault(c.vllm, []).append((c.k, ratio))

    def line(points: list[tuple[int, float]]) -> tuple[float, float]:
        b, a = np.polyfit([k for k, _ in points], [r for _, r in points], 1)
        return float(a), float(b)

    pooled = []
    for pts in per.values():
        at3 = [r for k, r in pts if k == 3]
        if at3:
            pooled += [(k, r / float(np.median(at3))) for k, r in pts]
    pooled_beta = None
    if len({k for k, _ in pooled}) >= 2:
        a, b = line(pooled)
        pooled_beta = b / (a + 3 * b)
    out: dict[str, Any] = {}
    for vllm, pts in sorted(per.items()):
        ks = sorted({k for k, _ in pts})
        by_k = {str(k): round(float(np.median([r for k_, r in pts if k_ == k])), 4) for k in ks}
        if len(ks) >= 2:
            a, b = line(pts)
            beta, source = b / (a + 3 * b), "own passes"
        elif pooled_beta is not None:
            beta, source = pooled_beta, "pooled releases"
        else:
            beta, source = 0.0, "no pass at another k: rpc left as at k = 3"
        out[vllm] = {"ratio_rpc_over_sample_by_k": by_k, "passes": len(pts),
                     "beta": round(beta, 4), "from": source}  # fmt: skip
    return out


def _rpc_per_req(configs: list[Measured], spans: dict[Path, pd.DataFrame]) -> dict[str, Any]:
    """How the gap from the counts' D2H to the next ``_update_states`` (drafter launch, engine
    core, IPC) grows with the step's requests: per release, one least-squares slope in
    ``num_reqs`` pooled within its groups (each group's steps centred on their own means, so
    groups of other speeds and batch sizes share the slope, not the level), over the steps of
    its 0 ms passes landed at entry outside the slow phases. In ns per request, >= 0."""
    per: dict[str, list[pd.DataFrame]] = {}
    for group in sorted({c.group for c in configs}):
        base = [spans[c.folder] for c in configs if c.group == group and c.gpu_delay_us == 0]
        if not base:
            continue
        t = pd.concat(base, ignore_index=True)
        t = t[t["entry"] & ~(t["host_factor"] > SLOW_FACTOR)]
        x = t["num_reqs"].to_numpy(np.float64)
        y = t["d2h_to_update_ns"].to_numpy(np.float64)
        per.setdefault(group[0], []).append(pd.DataFrame({"x": x - x.mean(), "y": y - y.mean()}))
    out: dict[str, Any] = {}
    for vllm, parts in sorted(per.items()):
        d = pd.concat(parts, ignore_index=True)
        sxx = float((d["x"] ** 2).sum())
        slope = float((d["x"] * d["y"]).sum()) / sxx if sxx > 0 else 0.0
        out[vllm] = {"ns_per_req": max(int(round(slope)), 0), "steps": len(d),
                     "groups": len(parts)}  # fmt: skip
    return out


def _pure_host(c: Measured) -> bool:
    """Whether the sample_tokens span of ``c`` is host work only: align waits for the copy
    before it (in _prepare_inputs), so at any delay; none's sampler syncs, so only at 0."""
    return c.mode == "align" or c.gpu_delay_us == 0


def _host_factor(configs: list[Measured], spans: dict[Path, pd.DataFrame]) -> None:
    """Per step, ``host_factor``: its sample_tokens span over the median span of its batch
    shape (prefill or not, full batch or not) in its (release, mode, seqs) group, over the
    group's runs where that span is host work only (:func:`_pure_host`); NaN elsewhere."""
    for group in {c.group for c in configs}:
        mine = [c for c in configs if c.group == group and _pure_host(c)]
        for c in configs:
            if c.group == group:
                spans[c.folder]["full"] = spans[c.folder]["num_reqs"] == c.max_num_seqs
                spans[c.folder]["host_factor"] = np.nan
        if not mine:
            continue
        pool = pd.concat([spans[c.folder] for c in mine], ignore_index=True)
        ref = pool.groupby(["prefill", "full"])["launch_to_d2h_ns"].median()
        for c in mine:
            t = spans[c.folder]
            med = ref.loc[list(zip(t["prefill"], t["full"], strict=True))].to_numpy(np.float64)
            t["host_factor"] = t["launch_to_d2h_ns"].to_numpy(np.float64) / med


def _slow_phases(configs: list[Measured], spans: dict[Path, pd.DataFrame]) -> dict[str, Any]:
    """Per release, the host's slow phases. A step is slow when its host-only span is more
    than SLOW_FACTOR x its batch shape's median. The share of slow steps is a property of
    the run, not of the step (0.24.0: 0 in 7 of 32 configurations, up to 1.0 in two; the
    phases last tens of steps), so the prediction takes the typical configuration's: the
    median over the release's configurations of their share; the factor is the median slow
    step's over the median of the rest, pooled. How they cluster, ``worker_slow_persistence``
    (:func:`sim.model.rng.slow_phases`' rho): from the share of slow steps that follow a slow
    step, pooled over consecutive step pairs of every configuration, ``(P(slow | slow) - p) /
    (1 - p)`` at the share ``p`` above."""
    out = {}
    for vllm in sorted({c.vllm for c in configs}):
        whole = [spans[c.folder]["host_factor"].to_numpy() for c in configs if c.vllm == vllm]
        per = [f[np.isfinite(f)] for f in whole]
        per = [f for f in per if f.size]
        shares = [float((f > SLOW_FACTOR).mean()) for f in per]
        f = np.concatenate(per) if per else np.zeros(0)
        slow = f > SLOW_FACTOR
        prob = float(np.median(shares)) if shares else 0.0
        factor = float(np.median(f[slow]) / np.median(f[~slow])) if slow.any() else 1.0
        after, stayed = _slow_pairs(whole)  # in step order: NaNs kept, never paired
        rho = (stayed / after - prob) / (1.0 - prob) if after and prob < 1.0 else 0.0
        out[vllm] = {
            "configs": len(per),
            "steps": int(f.size),
            "slow_share_per_config": sorted(round(x, 3) for x in shares),
            "host_factor_percentiles": {
                str(q): round(float(v), 3)
                for q, v in zip(PCTS, np.percentile(f, PCTS), strict=True)
            },
            "timing": {
                "worker_slow_prob": round(prob, 4),
                "worker_slow_factor": round(factor, 4),
                "worker_slow_persistence": round(min(max(rho, 0.0), 0.99), 4),
            },
            "slow_after_slow": {"pairs": after, "slow": stayed},
        }
    return out


def _slow_pairs(factors: list[np.ndarray]) -> tuple[int, int]:
    """Over every pair of consecutive steps (both with a host factor) of each configuration:
    how many first steps were slow, and how many of those were followed by a slow step."""
    after = stayed = 0
    for f in factors:
        ok = np.isfinite(f[:-1]) & np.isfinite(f[1:])
        first, second = (f[:-1] > SLOW_FACTOR) & ok, (f[1:] > SLOW_FACTOR) & ok
        after += int(first.sum())
        stayed += int((first & second).sum())
    return after, stayed


def _gpu_line(
    configs: list[Measured],
    spans: dict[Path, pd.DataFrame],
    prior: TimingParams,
    groups: dict[str, Any],
) -> dict[str, Any]:
    bound = [  # k = 3: the drafter's GPU time is k's
        c
        for c in configs
        if c.mode == "align"
        and c.k == 3
        and spans[c.folder]["entry"].mean() < GPU_BOUND_ENTRY_FRACTION
    ]
    seqs = sorted({c.max_num_seqs for c in bound})
    if len(seqs) < 2 or len({c.gpu_delay_us for c in bound}) < 2:
        raise SpecraceError("the GPU line needs GPU-bound runs at two delays and two concurrencies")
    # the host gap between the copy landing (align waits for it) and the next forward's launch
    gap = {}
    for s in seqs:
        name = group_name((bound[0].vllm, "align", s, 3))
        if name not in groups:
            raise SpecraceError(f"the GPU line needs a delay-0 run of {name}")
        t = groups[name]["timing"]
        gap[s] = (
            t["worker_prepare_inputs_ns"] // 2 + t["worker_copy_to_gpu_ns"] + t["worker_launch_ns"]
        )
    return fit_gpu_line(bound, spans, prior, gap)


def _host(
    base: list[Measured],
    raws: dict[Path, dict[str, Any]],
    spans: dict[Path, pd.DataFrame],
    h200: dict[str, int],
    prior: TimingParams,
    slow_factor: float = 1.0,
    rpc_per_req: int = 0,
) -> dict[str, Any]:
    ops: dict[str, list[int]] = {"remove": [], "add": [], "swap": [], "move": []}
    phases: dict[str, list[int]] = {"pre_add": [], "n_cached": [], "reorder": [], "refresh": []}
    for c in base:
        for k, v in op_spans(raws[c.folder]).items():
            ops[k] += v
        for k, v in update_phases(raws[c.folder]).items():
            phases[k] += v
    t = pd.concat([spans[c.folder] for c in base], ignore_index=True)
    rest = (t["update_states_ns"] - t["ops_ns"]).to_numpy(np.float64)
    per_req, intercept = np.polyfit(t["n_cached"].to_numpy(np.float64), rest, 1)
    # the fit's fixed time, laid out where vLLM spends it: before the adds, before the swaps,
    # and the rest at the end (the total, so the step, is the fit's)
    fixed = max(int(round(intercept)), 0)
    loop = per_req * np.asarray(phases["n_cached"], dtype=np.float64)
    pre_add = min(max(_median(np.asarray(phases["pre_add"]) - loop), 0), fixed)
    reorder = min(_median(phases["reorder"]), fixed - pre_add)
    prepare = 2 * _median(t["prepare_1_ns"])
    calm = t[t["entry"]]
    launch = _median(calm["prepare_inputs_ns"]) - prepare // 2 - h200["worker_copy_to_gpu_ns"]
    # sample_tokens' host span has two modes: decode-only steps and steps with a prefill chunk
    decode = _median(calm.loc[~calm["prefill"], "launch_to_d2h_ns"])
    prefill_extra = max(_median(calm.loc[calm["prefill"], "launch_to_d2h_ns"]) - decode, 0)
    jitter, stall_prob, stall_ns = [], [], []
    for c in base:  # spread and stalls within one pass: one process's host speed
        one = spans[c.folder]
        # one mode of the bimodal span, outside the slow phases (their own parameters)
        mode = one["entry"] & ~one["prefill"] & ~(one["host_factor"] > SLOW_FACTOR)
        full = mode & (one["num_reqs"] == c.max_num_seqs)
        sel = full if full.sum() >= MIN_MODE_STEPS else mode
        p10_, p50_, p90_ = np.percentile(one.loc[sel, "launch_to_d2h_ns"], [10, 50, 90])
        jitter.append((p90_ - p10_) / (1.6 * p50_))
        iv = one["interval_ns"].to_numpy(np.float64)
        long = iv[iv > STALL_FACTOR * slow_factor * np.median(iv)]  # past a slow phase
        stall_prob.append(len(long) / len(iv))
        stall_ns.append(float(np.median(long - np.median(iv))) if len(long) else 0.0)
    timing = {
        "worker_remove_ns": _median(ops["remove"]),
        "worker_add_ns": _median(ops["add"]),
        "worker_swap_ns": _median(ops["swap"]),
        "worker_condense_move_ns": _median(ops["move"]),
        "worker_cached_loop_ns_per_req": max(int(round(per_req)), 0),
        "worker_pre_add_ns": pre_add,
        "worker_reorder_ns": reorder,
        "worker_refresh_metadata_ns": fixed - pre_add - reorder,
        "worker_prepare_inputs_ns": prepare,
        "worker_launch_ns": max(launch, 0),
        "worker_sample_tokens_ns": decode,
        "worker_sample_tokens_ns_prefill": prefill_extra,
        # the level: this group's span less the release's slope (_rpc_per_req) per request
        "worker_rpc_dispatch_ns": _median(
            calm["d2h_to_update_ns"] - rpc_per_req * calm["num_reqs"]
        ),
        "worker_rpc_dispatch_ns_per_req": rpc_per_req,
        "jitter_frac": round(min(float(np.median(jitter)), 0.9), 4),
        "worker_stall_prob": round(float(np.median(stall_prob)), 4),
        "worker_stall_ns": _median(stall_ns),
        **{k: h200[k] for k in MEASURED_ON_H200},
        **{k: int(getattr(prior, k)) for k in PRIORS},
        **dict.fromkeys(ZEROED, 0),
    }
    return {
        "from": [f"{c.run}/{c.folder.name}" for c in base],
        "steps": int(len(t)),
        "steps_entry": int(len(calm)),
        "ops": {k: len(v) for k, v in ops.items()},
        "step_ms_median": round(float(np.median(t["interval_ns"])) / 1e6, 3),
        "timing": dict(sorted(timing.items())),
    }


def group_name(group: tuple[str, str, int] | tuple[str, str, int, int]) -> str:
    """``0.24.0-align-s16`` (k = 3, the committed runs' k), ``0.24.0-align-s24-k1``."""
    k = group[3] if len(group) > 3 else 3  # type: ignore[misc]
    return f"{group[0]}-{group[1]}-s{group[2]}" + (f"-k{k}" if k != 3 else "")


def parse_group_name(name: str) -> tuple[str, str, int, int]:
    parts = name.split("-")
    k = int(parts[3][1:]) if len(parts) > 3 else 3
    return parts[0], parts[1], int(parts[2][1:]), k


MAX_EXTRAPOLATED_SEQS = 64


def group_timing(
    cal: dict[str, Any], vllm: str, mode: str, seqs: int, k: int = 3
) -> dict[str, int]:
    """The calibrated timing of (release, mode, ``max_num_seqs``, k), for a configuration no
    run measured too: every host cost at k = 3 linear in ``max_num_seqs`` between the
    release's two measured concurrencies of that mode (16 and 64), or, where the release
    measured only one (0.33.0: 16), that one plus the per-sequence slope of the release that
    measured two (0.24.0, the same mode); then, for another k, the drafter's part
    (``worker_rpc_dispatch_ns``) scaled by the release's line in k (``rpc_per_k``). Counts and
    probabilities are not interpolated; nothing past 64 sequences is extrapolated."""
    groups = cal["groups"]
    name = group_name((vllm, mode, seqs, k))
    if name in groups:
        return dict(groups[name]["timing"])
    out = _timing_at_k3(cal, vllm, mode, seqs)
    if k != 3:
        beta = cal.get("rpc_per_k", {}).get(vllm, {}).get("beta", 0.0)
        factor = 1.0 + beta * (k - 3)
        if factor <= 0:
            raise SpecraceError(f"{name}: the drafter's line in k gives no time at k = {k}")
        for key in ("worker_rpc_dispatch_ns", "worker_rpc_dispatch_ns_per_req"):
            out[key] = int(round(out.get(key, 0) * factor))
    return out


def _timing_at_k3(cal: dict[str, Any], vllm: str, mode: str, seqs: int) -> dict[str, int]:
    groups = cal["groups"]
    name = group_name((vllm, mode, seqs, 3))
    if name in groups:
        return dict(groups[name]["timing"])
    if not 0 < seqs <= MAX_EXTRAPOLATED_SEQS:
        raise SpecraceError(f"{name}: no calibration past {MAX_EXTRAPOLATED_SEQS} sequences")

    def measured(release: str) -> list[int]:  # the concurrencies measured at k = 3
        keys = [parse_group_name(g) for g in groups]
        return sorted(s_ for v, m, s_, k_ in keys if v == release and m == mode and k_ == 3)

    own = measured(vllm)
    if not own:
        raise SpecraceError(f"{name}: no calibration of vLLM {vllm} {mode}")

    def version(release: str) -> tuple[int, ...]:
        return tuple(int(x) for x in release.split("."))

    # the release nearest to this one that measured two concurrencies (by version; the newer
    # of two as near): 0.24.0 for 0.33.0, not the first in sorted order (0.23.0, whose host
    # ran faster at 64 sequences than at 16 and would give 0.33.0 a step shorter at 64)
    two = [r for r in {g.split("-")[0] for g in groups} if len(measured(r)) >= 2]
    slope_from = vllm if len(own) >= 2 else min(
        two,
        key=lambda r: (abs(version(r)[1] - version(vllm)[1]), -version(r)[1]),
        default=None,
    )  # fmt: skip
    if slope_from is None:
        raise SpecraceError(f"{name}: no release measured two concurrencies of {mode}")
    lo_s, hi_s = measured(slope_from)[0], measured(slope_from)[-1]
    lo = groups[group_name((slope_from, mode, lo_s))]["timing"]
    hi = groups[group_name((slope_from, mode, hi_s))]["timing"]
    near = min(own, key=lambda s_: abs(s_ - seqs))
    base = groups[group_name((vllm, mode, near))]["timing"]
    out = {}
    for k, v in base.items():
        if k in NOT_INTERPOLATED or not isinstance(v, int):
            out[k] = v
            continue
        slope = (hi[k] - lo[k]) / (hi_s - lo_s)
        out[k] = max(int(round(v + slope * (seqs - near))), 0)
    return out


NOT_INTERPOLATED = ("worker_stall_prob", "jitter_frac")


SOURCES = {
    "worker_remove_ns": "median span of remove_request",
    "worker_add_ns": "median span of add_request",
    "worker_swap_ns": "median span of swap_states",
    "worker_condense_move_ns": "median span of a condense call / its moves",
    "worker_cached_loop_ns_per_req": "slope of (_update_states - its ops) vs cached requests",
    "worker_pre_add_ns": (
        "median(first add or move - last remove before it, or the start) - the loop's slope x "
        "cached requests, within the intercept of the same fit"
    ),
    "worker_reorder_ns": "median(first swap - the add or move before it), within the rest",
    "worker_refresh_metadata_ns": "the rest of that intercept (the total is the fit's)",
    "worker_prepare_inputs_ns": "2 x median(_update_states end -> _prepare_inputs start)",
    "worker_launch_ns": "median(_prepare_inputs) - prepare/2 - copy_to_gpu (landed at entry)",
    "worker_sample_tokens_ns": (
        "median(_prepare_inputs end -> counts D2H issued) (landed at entry, decode-only "
        "steps): eager forward launch + sampler, the GPU forward runs meanwhile"
    ),
    "worker_sample_tokens_ns_prefill": "the same on steps with a prefill chunk, less that",
    "worker_rpc_dispatch_ns": (
        "median(counts D2H issued -> next _update_states - worker_rpc_dispatch_ns_per_req x "
        "num_reqs) (steps landed at entry): drafter launch + engine core, one thread"
    ),
    "worker_rpc_dispatch_ns_per_req": (
        "the release's least-squares slope of that span in num_reqs, pooled within its groups "
        "(each centred on its means), steps landed at entry outside the slow phases"
    ),
    "jitter_frac": "(p90 - p10) / (1.6 median) of that span, full decode-only steps",
    "gpu_jitter_frac": "the same of the step interval, tightest GPU-bound align run",
    "worker_stall_prob": (
        "share of step intervals > 1.5 x worker_slow_factor x median (median over configs)"
    ),
    "worker_slow_prob": (
        "median over the release's host-only runs of the share of steps whose sample_tokens "
        "span is > 1.25 x its batch shape's median"
    ),
    "worker_slow_factor": "median factor of those over the median of the rest",
    "worker_slow_persistence": (
        "(P(slow step | slow step before) - worker_slow_prob) / (1 - worker_slow_prob), "
        "consecutive steps pooled over the release's configs"
    ),
    "worker_stall_ns": "median excess of those over the median",
    "gpu_forward_ns_base": "GPU line's constant less the prep/sample priors",
    "gpu_forward_ns_per_token": "GPU line's slope in the step's tokens",
    "gpu_forward_ns_prefill": (
        "GPU line's term for a step with a prefill chunk (the line: per step of the GPU-bound "
        "align runs, one read of the counts to the next less the host gap, by least absolute "
        "deviations in the delay, the tokens and the chunk)"
    ),
}


def timing_toml(cal: dict[str, Any], name: str) -> str:
    """A sim timing file (``[timing]`` only) of one group, with its provenance."""
    g, gpu = cal["groups"][name], cal["gpu"]
    vllm, mode, seqs, k = parse_group_name(name)
    lines = [
        f"# vLLM {vllm}, mamba_cache_mode {mode}, max_num_seqs {seqs}"
        + (f", k {k}" if k != 3 else "")
        + ": calibrated by",
        "# gpu_check/vllm/forward.py (`python -m gpu_check vllm-forward data/vllm`) from",
        f"# {', '.join(g['from'])} ({g['steps']} steps, {g['steps_entry']} landed at entry).",
        f"# GPU line from {len(gpu['configs'])} GPU-bound configs: step = {gpu['slope']} x delay"
        f" + {gpu['intercept_ns']} ns",
        "# (+ gpu_forward_ns_prefill on a step with a prefill chunk; per step, least absolute"
        " deviations);",
        "# a config with GPU delay D adds slope x D to gpu_forward_ns_base (this file: D = 0).",
        f"# Slow host phases (worker_slow_*) from every host-only run of vLLM {vllm} "
        f"({cal['host_phases'][vllm]['configs']} configs, {cal['host_phases'][vllm]['steps']} "
        "steps;",
        "# summary.json calibration.host_phases); gpu_jitter_frac from the tightest GPU-bound run.",
        f"# Measured on the H200 (built-in `h200`): {', '.join(MEASURED_ON_H200)}.",
        f"# Priors (sim defaults, not separable here): {', '.join(PRIORS)}.",
        f"# Zero (in the worker's spans, in-process engine): {', '.join(ZEROED)}.",
        "[timing]",
    ]
    for k, v in g["timing"].items():
        note = SOURCES.get(k)
        lines.append(f"{k} = {v}" + (f"  # {note}" if note else ""))
    return "\n".join(lines) + "\n"


# -- the forward runs -------------------------------------------------------------------------
