"""A ``vllm-run`` raw record -> specrace data: ``schedule.json``, ``observed_vllm.parquet``,
``steps_vllm.parquet`` and ``export.json`` (no vLLM, no GPU).

``schedule.json`` is sim's own schema (:class:`sim.model.schedule.Schedule` of
:class:`StepRecord` with :class:`sim.model.input_batch.RowOp`), built from what vLLM did, so
every tool that reads a sim schedule reads vLLM's. Differences from a simulated schedule:
``accepted`` is the count the D2H carried (align: the fused postprocess output, which is 1
where the state block did not move), arrival steps count the driver's engine steps, and the
scenario's ``timing`` is sim's default (see :func:`scenario_of`). The schedule passes sim's own
``check_schedule`` (every step's ops replayed on the previous layout give its rows).

One row of ``observed_vllm.parquet`` per read (a row of step N+1 with a previous row in step N):

=====================  =============================================================================
``true_count``         the count step N's D2H carried for this request (private GPU snapshot)
``cpu_value``          ``num_accepted_tokens.np`` after ``_prepare_inputs`` (align: the gather;
                       none: the fill of 1)
``gpu_value``          ``num_accepted_tokens.gpu`` as the forward read it (align: after
                       ``preprocess_mamba`` reset rows whose state it copied to 1)
``consumed``           the row is a speculative decode now (drafts scheduled), so GDN reads it
``wrong``              align: ``cpu_value != true_count`` (that value is the bias of
                       ``preprocess_mamba``'s state copy and the GDN count); none:
                       ``consumed and gpu_value != true_count``
``land_pos``           where step N's D2H landed among step N+1's row ops, from
                       ``event.query()`` polled before and after each op: 0 before the first, i
                       before op i, ``n_ops`` after the last; -1 not landed when
                       ``_prepare_inputs`` started (align then waits for it)
``land_pos_hi``        equal to ``land_pos`` unless the landing fell inside an op (or a
                       ``condense`` call): then the landing lies between the two
``landed_before_moves``  landed before the first op that writes the buffer (add, move, swap)
``margin_ns``          from the first poll that saw the landing to the nearest writing op of
                       the step (-1: the step has no writing op)
=====================  =============================================================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_check.vllm.consumed import wrong_reads
from gpu_check.vllm.gauge import host_gauge
from sim.errors import SpecraceError
from sim.model.input_batch import RowOp
from sim.model.params import EngineParams, LengthParams, Scenario, TimingParams, WorkloadParams
from sim.model.schedule import Schedule, StepRecord, dumps
from sim.model.verdict import is_close_call
from sim.runs.inputs import META_MAX, read_json
from sim.runs.io import atomic_write, atomic_write_text

WRITING = ("add", "move", "swap")

READ_COLUMNS = {
    "step": "int64",
    "req_id": "string",
    "row": "int32",
    "prev_row": "int32",
    "prev_drafts": "int32",
    "drafts": "int32",
    "true_count": "int32",
    "cpu_value": "int32",
    "gpu_value": "int32",
    "consumed": "bool",
    "wrong": "bool",
    "land_pos": "int32",
    "land_pos_hi": "int32",
    "landed_before_moves": "bool",
    "n_ops": "int32",
    "margin_ns": "int64",
}


# A vllm-run raw record once decompressed: the largest committed (20,480 requests) is 32 MB.
RAW_MAX = 1 << 30


def load_raw(path: Path) -> dict[str, Any]:
    raw = read_json(path, "vllm-run record", RAW_MAX)
    if not isinstance(raw, dict) or raw.get("schema") != "specrace.vllm_raw":
        raise SpecraceError(f"{path}: not a vllm-run raw record")
    return raw


def raw_record_of(folder: Path) -> Path:
    """Where ``vllm-run`` put the raw record of the pass exported at ``folder``
    (``<run>/<mode>_<config>/``): ``<run>/raw/raw_<mode>_<config>.json.gz``."""
    return folder.parent / "raw" / f"raw_{folder.name}.json.gz"


def run_summary_of(raw_path: Path) -> dict[str, Any] | None:
    """The ``summary.json`` vllm-run wrote beside a raw record (its folder or the one above)."""
    near = [raw_path.parent / "summary.json", raw_path.parent.parent / "summary.json"]
    found = next((q for q in near if q.exists()), None)
    if found is None:
        return None
    doc = read_json(found, "vllm-run summary", META_MAX)
    if not isinstance(doc, dict):
        raise SpecraceError(f"{found}: not a vllm-run summary.json (not a JSON object)")
    return doc


def prepared_steps(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Engine steps that built inputs (an empty step has no layout)."""
    return [s for s in raw["steps"] if "req_ids" in s]


# -- the schedule -----------------------------------------------------------------------------
def _ops(s: dict[str, Any]) -> list[RowOp]:
    return [RowOp(op[0], int(op[1]), int(op[2]), str(op[3])) for op in s["ops"]]


def step_record(n: int, s: dict[str, Any], prev: dict[str, Any] | None) -> StepRecord:
    ids = list(s["req_ids"])
    new = [x[0] for x in s["new"]]
    finished = list(s["finished"])
    ops = _ops(s)
    unscheduled = [op.req_id for op in ops if op.kind == "remove" and op.req_id not in finished]
    resumed = [op.req_id for op in ops if op.kind == "add" and op.req_id not in new]
    truth = s.get("truth") or [1] * len(ids)
    if s.get("truth_req_ids", ids) != ids:
        raise SpecraceError(f"step {n}: the D2H rows do not match the step's layout")
    n_prev = len(prev["req_ids"]) if prev else 0
    pnd = (s.get("prev_num_draft_tokens") or [0] * n_prev)[:n_prev]
    return StepRecord(
        step=n,
        finished=finished,
        unscheduled=unscheduled,
        new=new,
        resumed=resumed,
        ops=ops,
        req_ids=ids,
        num_scheduled=np.asarray(s["num_sched_rows"], dtype=np.int64),
        num_computed=np.asarray(s["num_computed"], dtype=np.int64),
        num_prompt=np.asarray(s["num_prompt"], dtype=np.int64),
        drafts=np.asarray([s["spec"].get(r, 0) for r in ids], dtype=np.int64),
        accepted=np.asarray(truth, dtype=np.int64),
        discard=np.asarray(s["discard"], dtype=bool),
        prev_positions=np.asarray(s["prev_positions"], dtype=np.int64),
        prev_num_draft_tokens=np.asarray(pnd, dtype=np.int64),
    )


def scenario_of(raw: dict[str, Any], num_steps: int, block_size: int = 0) -> Scenario:
    """A sim :class:`Scenario` describing the measured run as closely as sim's parameters can.

    ``engine`` is exact (``block_size``: align mode's cache block as the run recorded it in
    summary.json; 0 where none is recorded). ``workload`` describes the requests (lengths as a
    uniform range over the measured ones; every draft accepted, as the zeroed weights make it).
    ``timing`` keeps sim's defaults: it is not what the GPU did (the measured times are in
    steps_vllm.parquet).
    """
    cfg = raw["config"]
    engine = EngineParams(
        max_num_seqs=int(raw["max_num_reqs"]),
        max_num_batched_tokens=int(raw["max_num_batched_tokens"]),
        num_speculative_tokens=int(raw["num_speculative_tokens"]),
        async_scheduling=True,
        mamba_cache_mode=raw["mode"],
        mamba_block_size=block_size if raw["mode"] == "align" else 0,
    )
    prompts = [int(r["prompt_len"]) for r in raw["requests"]]
    outputs = [int(r["output_len"]) for r in raw["requests"]]

    def lengths(xs: list[int]) -> LengthParams:
        return LengthParams(dist="uniform", mean=float(np.mean(xs)), min=min(xs), max=max(xs))

    staggered = cfg.get("arrivals", "all-at-start") != "all-at-start"
    workload = WorkloadParams(
        arrival="poisson",
        initial_requests=0 if staggered else len(prompts),
        arrival_rate_per_step=1 / int(cfg.get("arrival_every", 1)) if staggered else 0.0,
        max_requests=len(prompts),
        prompt_len=lengths(prompts),
        output_len=lengths(outputs),
        acceptance_probs=(1.0,) * engine.num_speculative_tokens,
    )
    return Scenario(
        name=f"vllm-{raw['mode']}-{cfg['name']}",
        description=(
            f"measured: vLLM {raw.get('vllm_version', '?')} on a GPU (gpu_check vllm-run), "
            f"concurrency {cfg['max_num_seqs']}, GPU delay {cfg['gpu_delay_us']} us; "
            "timing is sim's default, not the measurement"
        ),
        default_steps=max(num_steps, 1),
        engine=engine,
        workload=workload,
        timing=TimingParams(),
    )


def _recorded_block_size(run_summary: dict[str, Any] | None, mode: str) -> int:
    """``cache_config.block_size`` of the mode's LLM() as the run's summary.json has it."""
    try:
        block = (run_summary or {})["modes"][mode]["resolved"]["block_size"]
    except (KeyError, TypeError):
        return 0
    return block if isinstance(block, int) and block > 0 else 0


def build_schedule(raw: dict[str, Any], block_size: int = 0) -> Schedule:
    steps = prepared_steps(raw)
    records = [step_record(n, s, steps[n - 1] if n else None) for n, s in enumerate(steps)]
    requests = [r | {"prefix_hit_tokens": 0} for r in raw["requests"]]
    scenario = scenario_of(raw, len(records), block_size).to_dict()
    seed = int(raw["config"]["seed"])
    return Schedule(scenario=scenario, seed=seed, requests=requests, steps=records)


# -- landing and timing -----------------------------------------------------------------------
def landing(s: dict[str, Any]) -> tuple[int, int, int]:
    """(land_pos, land_pos_hi, first time the landing was seen; -1 if not before the read)."""
    if s.get("landed_at_update_states"):
        return 0, 0, int(s["t_us_start"])
    ops = s["ops"]
    for i, op in enumerate(ops):
        t0, t1, before, after, group = op[4], op[5], op[6], op[7], op[8]
        if before:
            return i, i, int(t0)
        if after:
            if group >= 0:  # inside one condense call: anywhere among its moves
                last = max(j for j, o in enumerate(ops) if o[8] == group)
                return group, last + 1, int(t1)
            return i, i + 1, int(t1)
    if s.get("landed_at_read"):
        return len(ops), len(ops), int(s["t_read"])
    return -1, -1, -1


def step_table(raw: dict[str, Any]) -> pd.DataFrame:
    """One row per step: layout size, op counts and times, landing, read wait (ns, relative to
    the start of ``_update_states`` unless named otherwise)."""
    steps = prepared_steps(raw)
    rows = []
    for n, s in enumerate(steps):
        t_us = int(s["t_us_start"])
        ops = s["ops"]
        writes = [o for o in ops if o[0] in WRITING]
        lp, lp_hi, seen = landing(s)
        prev = steps[n - 1] if n else None
        issued = int(prev["t_d2h_issued"]) - t_us if prev and "t_d2h_issued" in prev else None
        margin = -1
        if writes and seen >= 0:
            margin = min(0 if o[4] <= seen <= o[5] else min(abs(seen - o[4]), abs(seen - o[5]))
                         for o in writes)  # fmt: skip
        rows.append(
            {
                "step": n,
                "num_reqs": len(s["req_ids"]),
                "n_ops": len(ops),
                **{
                    f"n_{k}": sum(o[0] == k for o in ops) for k in ("remove", "add", "move", "swap")
                },
                "step_interval_ns": int(s["t_enter"] - steps[n - 1]["t_enter"]) if n else -1,
                "update_states_ns": int(s["t_us_end"]) - t_us,
                "first_write_ns": int(writes[0][4]) - t_us if writes else -1,
                "last_write_ns": int(writes[-1][5]) - t_us if writes else -1,
                "read_ns": int(s["t_read"]) - t_us,
                "read_wait_ns": int(s["t_read_end"]) - int(s["t_read"]),
                "d2h_issued_ns": issued if issued is not None else 0,
                "landed_at_update_states": bool(s.get("landed_at_update_states")),
                "landed_at_read": bool(s.get("landed_at_read")),
                "land_pos": lp,
                "land_pos_hi": lp_hi,
                "land_seen_ns": seen - t_us if seen >= 0 else -1,
                "margin_ns": margin,
                "buffer_before": list(prev["buffer_after"]) if prev else [],
            }
        )
    return pd.DataFrame(rows)


# -- the reads --------------------------------------------------------------------------------
def build_reads(raw: dict[str, Any], schedule: Schedule, table: pd.DataFrame) -> pd.DataFrame:
    steps = prepared_steps(raw)
    parts = []
    for n in range(1, len(steps)):
        s, cur, prev = steps[n], schedule.steps[n], schedule.steps[n - 1]
        rows = np.flatnonzero(cur.prev_positions >= 0)
        if not rows.size:
            continue
        src = cur.prev_positions[rows]
        true = prev.accepted[src]
        cpu = np.asarray(s["cpu_value"], dtype=np.int64)[rows]
        gpu = np.asarray(s.get("gpu_value") or s["cpu_value"], dtype=np.int64)[rows]
        consumed = cur.drafts[rows] > 0
        wrong = wrong_reads(raw["mode"], cpu, gpu, true, consumed)
        t = table.iloc[n]
        first_write = next((i for i, op in enumerate(cur.ops) if op.kind in WRITING), len(cur.ops))
        lp, lp_hi = int(t["land_pos"]), int(t["land_pos_hi"])
        before_moves = 0 <= lp_hi <= first_write
        k = len(rows)
        parts.append(
            {
                "step": np.full(k, n),
                "req_id": np.asarray(cur.req_ids, dtype=object)[rows],
                "row": rows,
                "prev_row": src,
                "prev_drafts": prev.drafts[src],
                "drafts": cur.drafts[rows],
                "true_count": true,
                "cpu_value": cpu,
                "gpu_value": gpu,
                "consumed": consumed,
                "wrong": wrong,
                "land_pos": np.full(k, lp),
                "land_pos_hi": np.full(k, lp_hi),
                "landed_before_moves": np.full(k, before_moves),
                "n_ops": np.full(k, len(cur.ops)),
                "margin_ns": np.full(k, int(t["margin_ns"])),
            }
        )
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in READ_COLUMNS.items()})
    cols = {c: np.concatenate([p[c] for p in parts]) for c in READ_COLUMNS}
    return pd.DataFrame(cols).astype(READ_COLUMNS)


def summarize(raw: dict[str, Any], reads: pd.DataFrame, table: pd.DataFrame) -> dict[str, Any]:
    wrong = reads[reads["wrong"]]
    lp, hi, n_ops = table["land_pos"], table["land_pos_hi"], table["n_ops"]
    between = ((lp > 0) & (lp < n_ops)) | (lp != hi)
    iv = table["step_interval_ns"][table["step_interval_ns"] > 0] / 1e6
    return {
        "mode": raw["mode"],
        "config": raw["config"]["name"],
        "vllm_version": raw.get("vllm_version", ""),
        # a patched arm (vllm-run --patch) only: unpatched exports keep their bytes
        **({"patch": raw["patch"]} if raw.get("patch", "none") != "none" else {}),
        # vllm-run --weights other than zero only, likewise
        **({"weights": raw["weights"]} if raw.get("weights", "zero") != "zero" else {}),
        "max_num_seqs": int(raw["config"]["max_num_seqs"]),
        "gpu_delay_us": int(raw["config"]["gpu_delay_us"]),
        "arrivals": raw["config"].get("arrivals", "all-at-start"),
        "steps": int(len(table)),
        "reads": int(len(reads)),
        "consumed_reads": int(reads["consumed"].sum()),
        "wrong": int(len(wrong)),
        "wrong_steps": int(wrong["step"].nunique()),
        "wrong_pairs": {
            f"{a}->{b}": int(c)
            for (a, b), c in wrong.groupby(["true_count", "cpu_value"]).size().items()
        },  # fmt: skip
        "cpu_differs": int((reads["cpu_value"] != reads["true_count"]).sum()),
        "steps_landed_at_update_states": int(table["landed_at_update_states"].sum()),
        "steps_landed_between_ops": int(between.sum()),
        "steps_not_landed_at_read": int((table["land_pos"] < 0).sum()),
        "close_call_steps": int(
            (is_close_call(table["margin_ns"]) & ~table["landed_at_update_states"]).sum()
        ),
        "step_interval_ms_median": round(float(iv.median()), 3) if len(iv) else None,
        "update_states_us_median": round(float(table["update_states_ns"].median() / 1e3), 1),
        **host_gauge(raw),  # the pass's host speed (gpu_check.vllm.gauge)
    }


def _parquet(df: pd.DataFrame, path: Path) -> None:
    atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False))


def export_run(raw_path: Path, out: Path) -> dict[str, Any]:
    """Write the four files under ``out``; return the summary (also ``export.json``)."""
    raw = load_raw(raw_path)
    run_summary = run_summary_of(raw_path)
    if raw.get("runner") == "v2":  # MRv2: gpu_check.vllm.export_v2 (reads and verdicts only)
        from gpu_check.vllm.export_v2 import export_run_v2

        return export_run_v2(raw, out, run_summary)
    schedule = build_schedule(raw, _recorded_block_size(run_summary, raw["mode"]))
    table = step_table(raw)
    reads = build_reads(raw, schedule, table)
    from sim.runs.outputs import claim_dir

    claim_dir(out, "vllm-export")
    atomic_write_text(out / "schedule.json", dumps(schedule))
    _parquet(reads, out / "observed_vllm.parquet")
    _parquet(table, out / "steps_vllm.parquet")
    if "watch" in raw:  # vllm-run --watch: the plugin's wrong reads against these
        from gpu_check.vllm.watch_check import compare

        ids = [int(s["step"]) for s in prepared_steps(raw)]
        atomic_write_text(out / "watch.json", json.dumps(compare(raw, reads, ids), indent=2) + "\n")
    summary = summarize(raw, reads, table)
    atomic_write_text(out / "export.json", json.dumps(summary, indent=2) + "\n")
    return summary
