"""sim run *forward* on the real-vLLM configurations: its own scheduler, a timing calibrated
from the measured runs, several seeds; the predicted wrong-read rate against the observed one.

Unlike :mod:`gpu_check.vllm.agreement` (which replays vLLM's own schedule with the measured
landing of every step), nothing per step is taken from the measurement here: the schedule is
sim's (:func:`sim.model.scheduling.build_schedule` on the configuration's 192 requests,
:func:`gpu_check.vllm.config.workload`), the timing is one calibrated set per (vLLM release,
``mamba_cache_mode``, ``max_num_seqs``), and the landing of every copy is whatever the SimPy
model makes of them.

Calibration (:func:`calibrate`; every median is over steps >= 2 of the named configurations,
read from the raw step records ``<run>/raw/raw_*.json.gz``):

- host costs of a group (release, ``mamba_cache_mode``, max_num_seqs) come from its
  configurations **without added GPU delay** (delay 0). Row ops: median span of each
  ``remove``/``add``/``swap``; a condense move is a ``condense`` call's span over its moves.
  ``_update_states`` minus its ops is fitted linearly against the cached requests of the step
  (intercept -> ``worker_refresh_metadata_ns``, slope -> ``worker_cached_loop_ns_per_req``).
  ``worker_prepare_inputs_ns`` is twice the median gap ``_update_states`` end ->
  ``_prepare_inputs`` start (sim splits it around the read, which sim places there). The rest
  of the host step is measured in three spans, on steps whose copy had landed by
  ``_update_states`` (no wait in them): ``_prepare_inputs`` itself (its start -> end) becomes
  ``worker_launch_ns`` (less the second half of prepare and the H2D issue): host work after
  the read and before the forward is enqueued; ``_prepare_inputs`` end -> the counts D2H issued
  (the eager forward launch, the sampler) becomes ``worker_sample_tokens_ns``, so the GPU
  forward runs while it is being launched, as it does in eager mode; D2H issued -> the next
  ``_update_states`` (drafter launch, engine core's update_from_output and schedule, one
  thread in-process) becomes ``worker_rpc_dispatch_ns``. The engine core's own costs and
  IPCs are 0: the in-process engine shares the worker's thread, so they are inside that span.
- ``jitter_frac``: the spread of the longest single span (``_prepare_inputs`` end -> D2H),
  (p90 - p10) / (1.6 * median), the width of a uniform ±f, per configuration on its
  full-batch steps (``num_reqs == max_num_seqs``; the span is bimodal in the batch size, about
  7 ms below ~12 of 16 rows and 11-12 ms above, which sim's constant cannot follow), median
  over the group's configurations. Stalls: per configuration, the share of steps longer than
  1.5x its median step interval and their median excess; median over the configurations.
- the GPU: one line for every release, fitted on the align configurations where the copy
  landed before ``_update_states`` in fewer than 10 % of the steps (GPU-bound; only 0.24.0 has
  them): median step interval = ``slope * delay + a_seqs`` (least squares, one slope, an
  intercept per ``max_num_seqs``). GPU-bound, align's host waits for the copy, then spends the
  gap (prepare/2 + H2D + ``worker_launch_ns`` of the 0.24.0 align group) before it enqueues the
  next forward; the drafter runs in that gap. So ``a_seqs`` - gap = prep + forward + sample;
  the two give ``gpu_forward_ns_per_token`` (difference over the difference of the median
  scheduled tokens per step) and ``gpu_forward_ns_base`` at delay 0 (after the priors for prep
  and sample, which these host-side records cannot separate). A configuration's forward is
  ``gpu_forward_ns_base + slope * gpu_delay_ns``.
- ``dma_land_delay_ns``, ``worker_event_sync_ns``, ``worker_copy_to_gpu_ns``: the built-in
  ``h200`` timing file (`gpu_check calibrate` on the same GPU model); the polls of these runs do
  not resolve a 16 us landing delay.

A configuration *agrees* when the observed rate's and the predicted rate's Wilson 95 %
intervals overlap. The predicted rate pools every seed's reads (seeds 0..seeds-1 draw the
jitter and stalls; the workload is the measured one). Wrong: the value the configuration's
policy consumes differs from the truth (align: the CPU value; otherwise the GDN's), the same
definition as the observed ``wrong``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from gpu_check.vllm.agreement import policy_for
from gpu_check.vllm.config import RunConfig, workload
from gpu_check.vllm.export import load_raw, prepared_steps
from sim.errors import SpecraceError
from sim.model.params import (
    EngineParams,
    Scenario,
    ScriptedRequest,
    TimingParams,
    WorkloadParams,
    timing_file_overrides,
    with_overrides,
)
from sim.model.schedule import Schedule
from sim.model.scheduling import build_schedule
from sim.model.simulate import simulate
from sim.resolve.risk import wilson
from sim.runs.io import atomic_write_text, write_json

SEEDS = 5
GPU_BOUND_ENTRY_FRACTION = 0.1  # configs whose copy landed at _update_states in < 10 % of steps
STALL_FACTOR = 1.5
MEASURED_ON_H200 = ("dma_land_delay_ns", "worker_event_sync_ns", "worker_copy_to_gpu_ns")
PRIORS = ("gpu_prep_ns", "gpu_sample_ns", "gpu_drafter_ns")
ZEROED = (
    "engine_output_ipc_ns", "engine_update_ns_per_req", "engine_schedule_ns_base",
    "engine_schedule_ns_per_req", "engine_input_ipc_ns",
)  # fmt: skip
MAX_STEPS = 2000

TABLE_COLUMNS = [
    "vllm", "run", "mode", "max_num_seqs", "gpu_delay_ms", "policy",
    "reads_observed", "wrong_observed", "rate_observed", "rate_observed_lo", "rate_observed_hi",
    "seeds", "reads_predicted", "wrong_predicted", "rate_predicted", "rate_predicted_lo",
    "rate_predicted_hi", "wrong_per_seed_min", "wrong_per_seed_max", "agrees",
    "entry_observed", "between_observed", "after_observed", "waited_observed",
    "entry_predicted", "between_predicted", "after_predicted", "waited_predicted",
    "step_ms_observed", "step_ms_predicted",
]  # fmt: skip


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

    @property
    def group(self) -> tuple[str, str, int]:
        return (self.vllm, self.mode, self.max_num_seqs)


def find_configs(root: Path) -> list[Measured]:
    """Every exported V1 configuration under ``root`` (MRv2 folders are left out: no row ops,
    no counts D2H, nothing for sim's row model to time)."""
    if not root.is_dir():
        raise SpecraceError(f"{root}: not a folder (expected data/vllm)")
    out = []
    for exp in sorted(root.glob("*/*/export.json")):
        meta = json.loads(exp.read_text())
        if meta.get("runner") == "v2" or not (exp.parent / "steps_vllm.parquet").is_file():
            continue
        run = exp.parent.parent.name
        raw = exp.parent.parent / "raw" / f"raw_{exp.parent.name}.json.gz"
        if not raw.is_file():
            raise SpecraceError(f"{raw}: raw record missing for {exp.parent}")
        out.append(
            Measured(
                run=run, folder=exp.parent, raw_path=raw, mode=meta["mode"],
                vllm=meta["vllm_version"], max_num_seqs=int(meta["max_num_seqs"]),
                gpu_delay_us=int(meta["gpu_delay_us"]), export=meta,
            )
        )  # fmt: skip
    if not out:
        raise SpecraceError(f"{root}: no exported vLLM configuration (*/<mode>_<config>/)")
    return out


# -- measured spans ---------------------------------------------------------------------------
def step_spans(raw: dict[str, Any]) -> pd.DataFrame:
    """Per step (>= 2) the host spans the calibration uses, ns."""
    steps = prepared_steps(raw)
    rows = []
    for n in range(2, len(steps)):
        s, prev = steps[n], steps[n - 1]
        ops = s["ops"]
        new = {x[0] for x in s["new"]}
        n_cached = len(s["req_ids"]) - len(new) - len(s.get("resumed", []))
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
                "entry": bool(s.get("landed_at_update_states")),
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


def _median(xs: Iterable[float]) -> int:
    a = np.asarray(list(xs), dtype=np.float64)
    return int(round(float(np.median(a)))) if a.size else 0


# -- calibration ------------------------------------------------------------------------------
def calibrate(configs: list[Measured]) -> dict[str, Any]:
    """The calibrated timing of every (release, mode, max_num_seqs) group and the GPU line."""
    raws = {c.folder: load_raw(c.raw_path) for c in configs}
    spans = {c.folder: step_spans(raws[c.folder]) for c in configs}
    measured = timing_file_overrides(["h200"]).items()
    h200 = {k.split(".", 1)[1]: int(json.loads(v)) for k, v in measured}
    prior = TimingParams()
    groups: dict[str, Any] = {}
    for group in sorted({c.group for c in configs}):
        base = [c for c in configs if c.group == group and c.gpu_delay_us == 0]
        if base:
            groups[group_name(group)] = _host(base, raws, spans, h200, prior)
    gpu = _gpu_line(configs, spans, prior, groups)
    for g in groups.values():
        g["timing"]["gpu_forward_ns_base"] = gpu["gpu_forward_ns_base"]
        g["timing"]["gpu_forward_ns_per_token"] = gpu["gpu_forward_ns_per_token"]
        g["timing"] = dict(sorted(g["timing"].items()))
    return {"gpu": gpu, "groups": groups}


def _gpu_line(
    configs: list[Measured],
    spans: dict[Path, pd.DataFrame],
    prior: TimingParams,
    groups: dict[str, Any],
) -> dict[str, Any]:
    bound = [
        c
        for c in configs
        if c.mode == "align" and spans[c.folder]["entry"].mean() < GPU_BOUND_ENTRY_FRACTION
    ]
    seqs = sorted({c.max_num_seqs for c in bound})
    if len(seqs) < 2 or len({c.gpu_delay_us for c in bound}) < 2:
        raise SpecraceError("the GPU line needs GPU-bound runs at two delays and two concurrencies")
    # the host gap between the copy landing (align waits for it) and the next forward's launch
    gap = {}
    for s in seqs:
        name = group_name((bound[0].vllm, "align", s))
        if name not in groups:
            raise SpecraceError(f"the GPU line needs a delay-0 run of {name}")
        t = groups[name]["timing"]
        gap[s] = (
            t["worker_prepare_inputs_ns"] // 2 + t["worker_copy_to_gpu_ns"] + t["worker_launch_ns"]
        )
    x = np.array(
        [[c.gpu_delay_us * 1e3] + [float(c.max_num_seqs == s) for s in seqs] for c in bound]
    )
    y = np.array([float(spans[c.folder]["interval_ns"].median()) for c in bound])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    slope, intercepts = float(coef[0]), {s: float(v) for s, v in zip(seqs, coef[1:], strict=True)}
    tokens = {
        s: float(np.median(np.concatenate(
            [spans[c.folder]["tokens"].to_numpy() for c in bound if c.max_num_seqs == s]
        )))
        for s in seqs
    }  # fmt: skip
    lo, hi = seqs[0], seqs[-1]
    gpu_ns = {s: intercepts[s] - gap[s] for s in seqs}  # the GPU's part of the step at delay 0
    per_token = (gpu_ns[hi] - gpu_ns[lo]) / (tokens[hi] - tokens[lo])
    # the drafter runs while the host prepares the next step (gap > drafter): not in the line
    fwd_base = gpu_ns[lo] - per_token * tokens[lo] - prior.gpu_prep_ns - prior.gpu_sample_ns
    return {
        "configs": [f"{c.run}/{c.folder.name}" for c in bound],
        "slope": round(slope, 4),
        "intercept_ns": {str(s): int(round(v)) for s, v in intercepts.items()},
        "host_gap_ns": {str(s): int(v) for s, v in gap.items()},
        "tokens_per_step": {str(s): tokens[s] for s in seqs},
        "gpu_forward_ns_per_token": int(round(per_token)),
        "gpu_forward_ns_base": int(round(fwd_base)),
        "residual_ms_max": round(float(np.max(np.abs(x @ coef - y))) / 1e6, 3),
    }


def _host(
    base: list[Measured],
    raws: dict[Path, dict[str, Any]],
    spans: dict[Path, pd.DataFrame],
    h200: dict[str, int],
    prior: TimingParams,
) -> dict[str, Any]:
    ops: dict[str, list[int]] = {"remove": [], "add": [], "swap": [], "move": []}
    for c in base:
        for k, v in op_spans(raws[c.folder]).items():
            ops[k] += v
    t = pd.concat([spans[c.folder] for c in base], ignore_index=True)
    rest = (t["update_states_ns"] - t["ops_ns"]).to_numpy(np.float64)
    per_req, intercept = np.polyfit(t["n_cached"].to_numpy(np.float64), rest, 1)
    prepare = 2 * _median(t["prepare_1_ns"])
    calm = t[t["entry"]]
    launch = _median(calm["prepare_inputs_ns"]) - prepare // 2 - h200["worker_copy_to_gpu_ns"]
    jitter, stall_prob, stall_ns = [], [], []
    for c in base:  # spread and stalls within one pass: one process's host speed
        one = spans[c.folder]
        full = one["entry"] & (one["num_reqs"] == c.max_num_seqs)  # one mode of a bimodal span
        p10_, p50_, p90_ = np.percentile(one.loc[full, "launch_to_d2h_ns"], [10, 50, 90])
        jitter.append((p90_ - p10_) / (1.6 * p50_))
        iv = one["interval_ns"].to_numpy(np.float64)
        long = iv[iv > STALL_FACTOR * np.median(iv)]
        stall_prob.append(len(long) / len(iv))
        stall_ns.append(float(np.median(long - np.median(iv))) if len(long) else 0.0)
    timing = {
        "worker_remove_ns": _median(ops["remove"]),
        "worker_add_ns": _median(ops["add"]),
        "worker_swap_ns": _median(ops["swap"]),
        "worker_condense_move_ns": _median(ops["move"]),
        "worker_cached_loop_ns_per_req": max(int(round(per_req)), 0),
        "worker_refresh_metadata_ns": max(int(round(intercept)), 0),
        "worker_prepare_inputs_ns": prepare,
        "worker_launch_ns": max(launch, 0),
        "worker_sample_tokens_ns": _median(calm["launch_to_d2h_ns"]),
        "worker_rpc_dispatch_ns": _median(calm["d2h_to_update_ns"]),
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


def group_name(group: tuple[str, str, int]) -> str:
    return f"{group[0]}-{group[1]}-s{group[2]}"


SOURCES = {
    "worker_remove_ns": "median span of remove_request",
    "worker_add_ns": "median span of add_request",
    "worker_swap_ns": "median span of swap_states",
    "worker_condense_move_ns": "median span of a condense call / its moves",
    "worker_cached_loop_ns_per_req": "slope of (_update_states - its ops) vs cached requests",
    "worker_refresh_metadata_ns": "intercept of the same fit",
    "worker_prepare_inputs_ns": "2 x median(_update_states end -> _prepare_inputs start)",
    "worker_launch_ns": "median(_prepare_inputs) - prepare/2 - copy_to_gpu (landed at entry)",
    "worker_sample_tokens_ns": (
        "median(_prepare_inputs end -> counts D2H issued) (landed at entry): eager forward "
        "launch + sampler, the GPU forward runs meanwhile"
    ),
    "worker_rpc_dispatch_ns": (
        "median(counts D2H issued -> next _update_states) (steps landed at entry): "
        "drafter launch + engine core, one thread"
    ),
    "jitter_frac": "(p90 - p10) / (1.6 median) of that span, full-batch steps",
    "worker_stall_prob": "share of step intervals > 1.5 x median (median over configs)",
    "worker_stall_ns": "median excess of those over the median",
    "gpu_forward_ns_base": "GPU line at delay 0 less the host gap and the prep/sample priors",
    "gpu_forward_ns_per_token": "GPU line: intercept difference / token difference",
}


def timing_toml(cal: dict[str, Any], name: str) -> str:
    """A sim timing file (``[timing]`` only) of one group, with its provenance."""
    g, gpu = cal["groups"][name], cal["gpu"]
    vllm, mode, seqs = name.split("-")
    lines = [
        f"# vLLM {vllm}, mamba_cache_mode {mode}, max_num_seqs {seqs[1:]}: calibrated by",
        "# gpu_check/vllm/forward.py (`python -m gpu_check vllm-forward data/vllm`) from",
        f"# {', '.join(g['from'])} ({g['steps']} steps, {g['steps_entry']} landed at entry).",
        f"# GPU line from {len(gpu['configs'])} GPU-bound configs: step = {gpu['slope']} x delay"
        f" + {gpu['intercept_ns']} ns;",
        "# a config with GPU delay D adds slope x D to gpu_forward_ns_base (this file: D = 0).",
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
def scenario_for(c: Measured, cal: dict[str, Any], raw: dict[str, Any] | None = None) -> Scenario:
    """The configuration as a sim scenario: engine, the measured requests, the group's timing
    with the configuration's GPU delay."""
    name = group_name(c.group)
    if name not in cal["groups"]:
        raise SpecraceError(f"{c.folder}: no calibration for {name} (needs a delay-0 run)")
    k = int(raw["num_speculative_tokens"]) if raw is not None else 3
    # the generator's settings of the run (every committed run: RunConfig's defaults, seed 0)
    known = {f.name for f in fields(RunConfig)} - {"max_num_seqs", "gpu_delay_us", "label"}
    given = {n: v for n, v in (raw or {}).get("config", {}).items() if n in known}
    if "prompt_lens" in given:
        given["prompt_lens"] = tuple(given["prompt_lens"])
    cfg = RunConfig(max_num_seqs=c.max_num_seqs, **given)
    reqs = workload(cfg)
    if raw is not None:
        measured = [(r["prompt_len"], r["output_len"]) for r in raw["requests"]]
        ours = [(len(r["prompt_token_ids"]), r["max_tokens"]) for r in reqs]
        if measured != ours:
            raise SpecraceError(f"{c.raw_path}: requests differ from config.workload()")
    scripted = tuple(
        ScriptedRequest(
            req_id=f"req-{r['req_index']:03d}", arrival_step=int(r["arrival_step"]),
            prompt_len=len(r["prompt_token_ids"]), output_len=int(r["max_tokens"]),
            accepted=(k + 1,) * int(r["max_tokens"]),
        )
        for r in reqs
    )  # fmt: skip
    timing = dict(cal["groups"][name]["timing"])
    timing["gpu_forward_ns_base"] = int(
        round(timing["gpu_forward_ns_base"] + cal["gpu"]["slope"] * c.gpu_delay_us * 1e3)
    )
    base = Scenario(
        name=f"vllm-forward-{c.run}-{c.folder.name}",
        description=f"vLLM {c.vllm} {c.mode} {c.folder.name}, timing calibrated ({name})",
        default_steps=MAX_STEPS,
        engine=EngineParams(
            max_num_seqs=c.max_num_seqs, max_num_batched_tokens=2048, num_speculative_tokens=k,
            async_scheduling=True, mamba_cache_mode=_mode(c.mode),
            mamba_block_size=align_block_size(c) if c.mode == "align" else 0,
        ),
        workload=WorkloadParams(
            arrival="scripted", initial_requests=0, max_requests=len(scripted),
            requests=scripted, acceptance_probs=(1.0,) * k,
        ),
        timing=TimingParams(),
    )  # fmt: skip
    return with_overrides(base, {f"timing.{k_}": json.dumps(v) for k_, v in timing.items()})


def align_block_size(c: Measured) -> int:
    """The block align mode cut prefills at in this run: vLLM's ``cache_config.block_size`` as
    the run recorded it (``summary.json``: modes.align.resolved.block_size; 80 on every
    committed run)."""
    path = c.folder.parent / "summary.json"
    try:
        block = json.loads(path.read_text())["modes"]["align"]["resolved"]["block_size"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SpecraceError(f"{path}: no align block_size recorded ({e})") from None
    if not isinstance(block, int) or block <= 0:
        raise SpecraceError(f"{path}: align block_size {block!r} is not a positive integer")
    return block


def _mode(mode: str) -> Literal["none", "all", "align"]:
    if mode not in ("none", "all", "align"):
        raise SpecraceError(f"unknown mamba_cache_mode {mode!r}")
    return mode  # type: ignore[return-value]


def forward_schedule(sc: Scenario) -> Schedule:
    """sim's schedule of the whole workload: steps until the last request finished."""
    sched = build_schedule(sc, 0, MAX_STEPS)
    busy = [i for i, s in enumerate(sched.steps) if s.num_reqs]
    if not busy or busy[-1] >= MAX_STEPS - 1:
        raise SpecraceError(f"{sc.name}: the workload does not finish in {MAX_STEPS} steps")
    sched.steps = sched.steps[: busy[-1] + 1]
    return sched


def simulate_seed(sched: Schedule, sc: Scenario, policy, seed: int) -> dict[str, Any]:
    """One seed: reads, wrong reads, the regime of every step's landing (as
    :func:`observed_regime` counts it), mean step."""
    from sim.model.reads import build_reads

    m = simulate(sched, sc.timing, policy, seed, trace=True)
    reads = build_reads(sched, m)
    wrong = reads["cpu_wrong"] if policy.consumes_cpu_value else reads["gpu_wrong"]
    starts = {r[2]: r[0] for r in m.trace_rows or [] if r[4] == "_update_states"}
    regime = {"entry": 0, "between": 0, "after": 0, "waited": 0}
    for n in range(1, len(sched.steps)):
        land, tim = m.timing[n - 1].land_ns, m.timing[n]
        if land < 0 or land > tim.read_ns - tim.wait_ns:  # not landed when the read began
            regime["waited"] += 1
        elif land <= starts[n]:
            regime["entry"] += 1
        elif tim.op_write_ns and land < tim.op_write_ns[-1]:
            regime["between"] += 1
        else:
            regime["after"] += 1
    fwd = [t.forward_start_ns for t in m.timing if t.forward_start_ns >= 0]
    return {
        "reads": int(len(reads)),
        "wrong": int(wrong.sum()),
        "steps": len(sched.steps) - 1,
        "step_ns": (fwd[-1] - fwd[0]) / (len(fwd) - 1),
        **regime,
    }


def observed_regime(c: Measured) -> dict[str, float]:
    t = pd.read_parquet(c.folder / "steps_vllm.parquet")
    t = t[t["step"] >= 1]
    lp, hi, n_ops = t["land_pos"], t["land_pos_hi"], t["n_ops"]
    entry = t["landed_at_update_states"]
    waited = lp < 0
    inside = ((lp > 0) & (lp < n_ops)) | (lp != hi) | ((lp == 0) & (n_ops > 0))
    between = ~entry & ~waited & inside  # after _update_states began, before its last op
    after = ~entry & ~waited & ~between
    n = len(t)
    iv = t["step_interval_ns"][t["step_interval_ns"] > 0]
    return {
        "entry": round(float(entry.sum()) / n, 4),
        "between": round(float(between.sum()) / n, 4),
        "after": round(float(after.sum()) / n, 4),
        "waited": round(float(waited.sum()) / n, 4),
        "step_ms": round(float(iv.median()) / 1e6, 3),
    }


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def forward_row(c: Measured, cal: dict[str, Any], seeds: int) -> dict[str, Any]:
    raw = load_raw(c.raw_path)
    sc = scenario_for(c, cal, raw)
    sched = forward_schedule(sc)
    policy = policy_for(c.mode, c.vllm)
    per = [simulate_seed(sched, sc, policy, s) for s in range(seeds)]
    obs = pd.read_parquet(c.folder / "observed_vllm.parquet")
    n_obs, w_obs = int(len(obs)), int(obs["wrong"].sum())
    n_pred, w_pred = sum(p["reads"] for p in per), sum(p["wrong"] for p in per)
    olo, ohi = wilson(w_obs, n_obs)
    plo, phi = wilson(w_pred, n_pred)
    steps = sum(p["steps"] for p in per)
    reg = observed_regime(c)
    row = {
        "vllm": c.vllm, "run": c.run, "mode": c.mode, "max_num_seqs": c.max_num_seqs,
        "gpu_delay_ms": c.gpu_delay_us / 1000, "policy": policy.name,
        "reads_observed": n_obs, "wrong_observed": w_obs, "rate_observed": _r(w_obs / n_obs),
        "rate_observed_lo": _r(olo), "rate_observed_hi": _r(ohi),
        "seeds": seeds, "reads_predicted": n_pred, "wrong_predicted": w_pred,
        "rate_predicted": _r(w_pred / n_pred), "rate_predicted_lo": _r(plo),
        "rate_predicted_hi": _r(phi),
        "wrong_per_seed_min": min(p["wrong"] for p in per),
        "wrong_per_seed_max": max(p["wrong"] for p in per),
        "agrees": bool(olo <= phi and plo <= ohi),
        **{f"{k}_observed": reg[k] for k in ("entry", "between", "after", "waited")},
        **{f"{k}_predicted": round(sum(p[k] for p in per) / steps, 4)
           for k in ("entry", "between", "after", "waited")},
        "step_ms_observed": reg["step_ms"],
        "step_ms_predicted": round(float(np.mean([p["step_ns"] for p in per])) / 1e6, 3),
    }  # fmt: skip
    return row


def forward_table(configs: list[Measured], cal: dict[str, Any], seeds: int = SEEDS) -> pd.DataFrame:
    rows = [forward_row(c, cal, seeds) for c in configs if group_name(c.group) in cal["groups"]]
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


# -- output -----------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def table_markdown(df: pd.DataFrame) -> str:
    """Per configuration: observed and predicted rate with their 95 % intervals (%)."""
    head = (
        "| vLLM | run | mode | seqs | delay ms | observed wrong/reads | observed % [95 % CI] "
        "| predicted wrong/reads (seeds) | predicted % [95 % CI] | agrees | landed entry / "
        "between / after / waited, observed | predicted | step ms obs / pred |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in df.itertuples(index=False):
        lines.append(
            f"| {r.vllm} | {r.run} | {r.mode} | {r.max_num_seqs} | {r.gpu_delay_ms:g} "
            f"| {r.wrong_observed}/{r.reads_observed} | {_pct(r.rate_observed)} "
            f"[{_pct(r.rate_observed_lo)}, {_pct(r.rate_observed_hi)}] "
            f"| {r.wrong_predicted}/{r.reads_predicted} ({r.seeds}; {r.wrong_per_seed_min}–"
            f"{r.wrong_per_seed_max} per seed) | {_pct(r.rate_predicted)} "
            f"[{_pct(r.rate_predicted_lo)}, {_pct(r.rate_predicted_hi)}] "
            f"| {'yes' if r.agrees else '**no**'} "
            f"| {r.entry_observed:.2f} / {r.between_observed:.2f} / {r.after_observed:.2f} / "
            f"{r.waited_observed:.2f} | {r.entry_predicted:.2f} / {r.between_predicted:.2f} / "
            f"{r.after_predicted:.2f} / {r.waited_predicted:.2f} "
            f"| {r.step_ms_observed:.1f} / {r.step_ms_predicted:.1f} |"
        )
    return "\n".join(lines) + "\n"


def summary(df: pd.DataFrame, cal: dict[str, Any]) -> dict[str, Any]:
    bad = df[~df["agrees"]]
    return {
        "configs": int(len(df)),
        "agree": int(df["agrees"].sum()),
        "disagree": [
            f"{r.run}/{r.mode}_s{r.max_num_seqs}_d{r.gpu_delay_ms:g}ms"
            for r in bad.itertuples(index=False)
        ],  # fmt: skip
        "criterion": "Wilson 95 % intervals of observed and predicted rate overlap",
        "seeds": int(df["seeds"].max()) if len(df) else 0,
        "calibration": cal,
    }


def run_forward(root: Path, out: Path, seeds: int = SEEDS) -> dict[str, Any]:
    """Calibrate, write the timing files, run forward, write the table and the summary."""
    if seeds < 1:
        raise SpecraceError("--seeds must be >= 1")
    configs = find_configs(root)
    cal = calibrate(configs)
    from sim.runs.outputs import claim_dir

    claim_dir(out, "vllm-forward")
    for name in cal["groups"]:
        atomic_write_text(out / f"timing-{name}.toml", timing_toml(cal, name))
    df = forward_table(configs, cal, seeds)
    atomic_write_text(out / "forward.csv", df.to_csv(index=False, lineterminator="\n"))
    atomic_write_text(out / "forward.md", table_markdown(df))
    rep = summary(df, cal)
    write_json(out / "summary.json", rep)
    return rep


def summary_text(rep: dict[str, Any]) -> str:
    lines = [f"{rep['agree']}/{rep['configs']} configurations agree ({rep['criterion']})"]
    lines += [f"disagrees: {d}" for d in rep["disagree"]]
    return "\n".join(lines)
