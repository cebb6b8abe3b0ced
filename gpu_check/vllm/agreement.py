"""What sim predicts for every read of a real vLLM run, against what vLLM did.

Input: a folder from ``vllm-export``: vLLM's own schedule (``schedule.json``), the measured
landing of each step's D2H among the next step's row ops and the buffer the ops started from
(``steps_vllm.parquet``), and the observed reads (``observed_vllm.parquet``). Only sim's public
model API is used: :func:`sim.model.verdict.at_landing` replays step N+1's row ops on the
buffer with step N's counts landing where they were seen to land, and judges the reads by the
:class:`Policy` of the configuration (when the worker waits, what the CPU builds from the
buffer, what the GDN kernel consumes).

The policy is the one ``sim.resolve`` assigns the run's configuration (release, runner,
``mamba_cache_mode``, prefix caching on with align, async scheduling on): align -> ``align``,
none -> ``device-authoritative`` from 0.24.0 (#45100) and ``synced-gather`` on 0.23.0.

A read is scored on the values the policy says can be wrong: the value the GDN consumed, and
also the CPU value when the policy's CPU build reads the buffer the DMA writes. For align's
family (the GDN restores from the CPU value) only the CPU value is scored: the value the
forward read there is the CPU value after ``preprocess_mamba`` reset the rows whose state it
moved, which sim does not model. A read is predicted *wrong* when the count it consumed differs
from the truth (align: the CPU value; otherwise the predicted GPU value of a decode row).
Where the landing fell inside an op (poll
before it false, after it true), every placement inside it is predicted; if they differ the
read is ``ambiguous`` and not scored. A close call is a step whose landing was first seen within
100 us of a writing row op (add, condense move, swap): sim.model.verdict.is_close_call.
A scored disagreement is named by the landing the polls could not see that reproduces it
(:mod:`gpu_check.vllm.mismatch`); the counts stay as scored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_check.vllm.mismatch import explain_step
from gpu_check.vllm.watch_check import text as watch_text
from sim.errors import SpecraceError
from sim.model.policies import Policy, get_policy
from sim.model.schedule import Schedule, StepRecord
from sim.model.schedule_io import read_schedule
from sim.model.verdict import at_seen_landing, consumed_wrong, is_close_call
from sim.runs.io import atomic_write, atomic_write_text, read_json, read_parquet


def policy_for(mode: str, vllm_version: str, runner: str = "v1") -> Policy:
    """The sim policy that ``sim.resolve`` assigns a measured configuration (async scheduling
    on, prefix caching on exactly with align); a release sim.resolve does not model is an
    error, not a guess."""
    from sim.resolve.resolution import VllmSetup, resolve

    setup = VllmSetup(
        vllm=vllm_version, runner=runner, mamba_cache_mode=mode, async_scheduling="on",
        prefix_caching="on" if mode == "align" else "off",
        max_num_seqs=64, max_num_batched_tokens=2048,
    )  # fmt: skip
    return get_policy(resolve(setup).policy)


def predict_step(
    policy: Policy,
    prev: StepRecord,
    cur: StepRecord,
    buffer_before: np.ndarray,
    land_pos: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(cpu, gpu) per row of ``cur``: step N's counts land before ``cur.ops[land_pos]``
    (``len(ops)``: after the last; -1: not before the read), where the policy's read sees it
    (:func:`sim.model.verdict.seen_landing`); judged by :func:`sim.model.verdict.at_landing`."""
    before = np.asarray(buffer_before, dtype=np.int64)
    v = at_seen_landing(policy, prev.accepted, cur, before, before, land_pos)
    return np.asarray(v.cpu, dtype=np.int64), np.asarray(v.gpu, dtype=np.int64)


def buffer_before(step: pd.Series, max_num_reqs: int) -> np.ndarray:
    """The pinned buffer as the step's row ops found it (``steps_vllm`` ``buffer_before``),
    its unrecorded tail at the initial 1."""
    before = np.asarray(step["buffer_before"], dtype=np.int64)
    pad = max(max_num_reqs - len(before), 0)
    return np.concatenate([before, np.ones(pad, np.int64)]) if pad else before


def predict_reads(
    schedule: Schedule, steps: pd.DataFrame, reads: pd.DataFrame, policy: Policy
) -> pd.DataFrame:
    """``reads`` with the prediction of every read added (``predicted``, ``predicted_wrong``,
    ``agree``, ``ambiguous``, ``close_call``)."""
    out = []
    by_step = steps.set_index("step")
    for n, group in reads.groupby("step", sort=True):
        prev, cur = schedule.steps[n - 1], schedule.steps[n]
        t = by_step.loc[n]
        before = buffer_before(t, schedule.max_num_reqs)
        lo, hi = int(t["land_pos"]), int(t["land_pos_hi"])
        rows = group["row"].to_numpy()
        # every placement the polls leave open (one if exact): (cpu, gpu) of each read
        preds = [predict_step(policy, prev, cur, before, pos) for pos in range(lo, hi + 1)]
        cpu0, gpu0 = preds[0][0][rows], preds[0][1][rows]
        score_cpu = policy.reads_buffer
        score_gpu = not policy.consumes_cpu_value
        ambiguous = np.zeros(len(rows), dtype=bool)
        for cpu, gpu in preds[1:]:
            ambiguous |= (score_cpu & (cpu[rows] != cpu0)) | (score_gpu & (gpu[rows] != gpu0))
        obs_cpu, obs_gpu = group["cpu_value"].to_numpy(), group["gpu_value"].to_numpy()
        agree = ~ambiguous
        if score_cpu:
            agree &= cpu0 == obs_cpu
        if score_gpu:
            agree &= gpu0 == obs_gpu
        true = group["true_count"].to_numpy()
        g = group.copy()
        g["scored_value"] = obs_gpu if score_gpu else obs_cpu
        g["predicted"] = gpu0 if score_gpu else cpu0
        g["predicted_cpu"] = cpu0
        g["predicted_gpu"] = gpu0
        g["ambiguous"] = ambiguous
        g["agree"] = agree
        g["predicted_wrong"] = consumed_wrong(policy, cpu0, gpu0, true, g["consumed"].to_numpy())
        margin = int(t["margin_ns"])
        g["close_call"] = is_close_call(margin) and not bool(t["landed_at_update_states"])
        out.append(g)
    if not out:
        return reads.assign(scored_value=0, predicted=0, ambiguous=False, agree=True,
                            predicted_wrong=False, close_call=False)  # fmt: skip
    return pd.concat(out, ignore_index=True)


def explain_mismatches(
    schedule: Schedule, steps: pd.DataFrame, pred: pd.DataFrame, policy: Policy
) -> list[dict[str, Any]]:
    """One record per scored disagreement: its step, request and the kind of landing that
    reproduces it (:func:`gpu_check.vllm.mismatch.explain_step`)."""
    scored = pred[~pred["ambiguous"]]
    by_step = steps.set_index("step")
    out = []
    for n, rows in scored[~scored["agree"]].groupby("step", sort=True):
        t = by_step.loc[n]
        lo, hi = int(t["land_pos"]), int(t["land_pos_hi"])
        kind = explain_step(policy, schedule.steps[n - 1], schedule.steps[n],
                            buffer_before(t, schedule.max_num_reqs), lo, hi,
                            scored[scored["step"] == n])  # fmt: skip
        out += [{"step": int(n), "req_id": str(r), "land_pos": lo, "land_pos_hi": hi,
                 "explained": kind} for r in rows["req_id"]]  # fmt: skip
    return out


def report(pred: pd.DataFrame, policy: Policy, meta: dict[str, Any]) -> dict[str, Any]:
    scored = pred[~pred["ambiguous"]]
    obs, prd = pred["wrong"].astype(bool), pred["predicted_wrong"].astype(bool)
    close = pred[pred["close_call"]]
    mismatches = scored[~scored["agree"]]
    return {
        **meta,
        "policy": policy.name,
        "reads": int(len(pred)),
        "scored": int(len(scored)),
        "ambiguous": int(pred["ambiguous"].sum()),
        "agree": int(scored["agree"].sum()),
        "agreement": round(float(scored["agree"].mean()), 6) if len(scored) else None,
        "wrong_observed": int(obs.sum()),
        "wrong_predicted": int(prd.sum()),
        "confusion": {
            "observed_wrong_predicted_wrong": int((obs & prd).sum()),
            "observed_wrong_predicted_right": int((obs & ~prd).sum()),
            "observed_right_predicted_wrong": int((~obs & prd).sum()),
            "observed_right_predicted_right": int((~obs & ~prd).sum()),
        },
        "close_call_steps": int(close["step"].nunique()),
        "close_call_reads": int(len(close)),
        "close_call_agree": int(close["agree"].sum()),
        "close_call_ambiguous": int(close["ambiguous"].sum()),
        "first_mismatches": mismatches.head(8)[
            ["step", "req_id", "row", "prev_row", "true_count", "scored_value", "predicted"]
        ].to_dict("records"),
    }


def compare_dir(folder: Path) -> dict[str, Any]:
    """Predict every read of an exported run; write ``agreement.json`` and
    ``agreement.parquet`` beside the inputs and return the report."""
    schedule = read_schedule(folder / "schedule.json")
    steps = read_parquet(folder / "steps_vllm.parquet", "vLLM step table")
    reads = read_parquet(folder / "observed_vllm.parquet", "vLLM reads")
    meta = read_json(folder / "export.json", "vllm-export's export.json (run vllm-export)")
    if not isinstance(meta, dict) or "mode" not in meta:
        raise SpecraceError(f"{folder}/export.json: not vllm-export's export.json")
    policy = policy_for(meta["mode"], meta.get("vllm_version", ""), meta.get("runner", "v1"))
    if meta.get("patch", "none") != "none":  # a vllm-run --patch arm: the policy of its fix
        from gpu_check.vllm.patches import PATCHES

        policy = get_policy(PATCHES[meta["patch"]].sim_policy)
    pred = predict_reads(schedule, steps, reads, policy)
    rep = report(pred, policy, {k: meta[k] for k in ("mode", "config", "vllm_version", "steps")})
    landings = explain_mismatches(schedule, steps, pred, policy)
    if landings:  # a disagreement: the landing that reproduces it (gpu_check.vllm.mismatch)
        kinds = [x["explained"] for x in landings]
        rep["mismatches_explained"] = {k: kinds.count(k) for k in sorted(set(kinds))}
        rep["mismatch_landings"] = landings[:8]
    if (folder / "watch.json").is_file():  # vllm-run --watch: the plugin's verdict on the same run
        rep["watch"] = read_json(folder / "watch.json", "vllm-export's watch.json")
    atomic_write(folder / "agreement.parquet", lambda tmp: pred.to_parquet(tmp, index=False))
    atomic_write_text(folder / "agreement.json", json.dumps(rep, indent=2, default=int) + "\n")
    return rep


def report_text(rep: dict[str, Any]) -> str:
    c = rep["confusion"]
    lines = [
        f"vLLM {rep['vllm_version']} {rep['mode']} {rep['config']}: policy {rep['policy']}",
        f"reads {rep['reads']} (scored {rep['scored']}, ambiguous {rep['ambiguous']}), "
        f"agreement {rep['agree']}/{rep['scored']}",
        f"wrong observed {rep['wrong_observed']}, predicted {rep['wrong_predicted']}; "
        f"both {c['observed_wrong_predicted_wrong']}, only observed "
        f"{c['observed_wrong_predicted_right']}, only predicted "
        f"{c['observed_right_predicted_wrong']}",
        f"close calls (< 100 us): {rep['close_call_steps']} steps, "
        f"{rep['close_call_agree']}/{rep['close_call_reads']} reads agree",
    ]
    if "mismatches_explained" in rep:
        kinds = ", ".join(f"{k} {n}" for k, n in rep["mismatches_explained"].items())
        lines.append(f"disagreements, by the landing that reproduces them: {kinds}")
    if "watch" in rep:
        lines.append(watch_text(rep["watch"]))
    return "\n".join(lines)
