"""A ``vllm-run --runner v2`` raw record (MRv2, ``instrument_v2``) -> reads and their verdicts.

MRv2 has no row-indexed counts buffer and no row ops, so there is no schedule of row ops to
export and no landing to place: what is checked is whether each request's GDN count at step
N+1 is its own. One row of ``observed_vllm.parquet`` per read (a request of step N+1 that was
in step N and sampled there):

=====================  =============================================================================
``true_count``         ``max(num_sampled, 1)`` of the request at step N (what ``postprocess_state``
                       scattered into its slot)
``expected``           the count the forward should read: ``true_count``, or 1 under align where
                       this step's tokens cross a mamba block boundary (``preprocess_state``'s
                       kernel then moves the state and resets the count to 1, by design)
``gpu_value``          ``num_accepted_tokens_gpu[idx_mapping]`` as ``prepare_attn`` gathered it
``consumed``           the row is a speculative decode now (drafts scheduled), so GDN reads it
``boundary_reset``     the block-crossing rule above applied
``wrong``              ``consumed and gpu_value != expected``
=====================  =============================================================================

``num_computed`` before step N+1 is the sum of the request's scheduled tokens so far (every draft
is accepted with zeroed weights and the prompts are random, so no prefix-cache hits). The sim
policy is ``sim.resolve``'s for the run (``mrv2``); it predicts the count of the request's own
slot for every read.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.model.verdict import consumed_wrong
from sim.runs.io import atomic_write, atomic_write_text

READ_COLUMNS = {
    "step": "int64",
    "req_id": "string",
    "row": "int32",
    "prev_row": "int32",
    "drafts": "int32",
    "num_computed": "int64",
    "true_count": "int32",
    "expected": "int32",
    "gpu_value": "int32",
    "consumed": "bool",
    "boundary_reset": "bool",
    "wrong": "bool",
}


def is_v2(raw: dict[str, Any]) -> bool:
    return raw.get("runner") == "v2"


def mamba_block_size(raw: dict[str, Any], summary: dict[str, Any] | None) -> int:
    """The run's mamba block size (``summary.json``'s resolved engine), else the block size
    vLLM picked for the tiny model with prefix caching on (80)."""
    if summary:
        info = summary.get("modes", {}).get(raw["mode"], {}).get("resolved", {})
        if isinstance(info.get("mamba_block_size"), int):
            return int(info["mamba_block_size"])
    return 80


def build_reads(raw: dict[str, Any], block: int) -> tuple[pd.DataFrame, int]:
    """The reads table and the number of new rows whose count was not 1."""
    steps = raw["steps"]
    align = raw["mode"] == "align"
    computed: Counter[str] = Counter()
    rows: list[tuple] = []
    new_not_one = 0
    for n in range(1, len(steps)):
        a, b = steps[n - 1], steps[n]
        for rid, k in a.get("num_scheduled", {}).items():
            computed[rid] += k
        if "num_sampled" not in a or "consumed" not in b:
            continue
        prev_row = {rid: i for i, rid in enumerate(a["req_ids"])}
        sampled = dict(zip(a["req_ids"], a["num_sampled"], strict=True))
        for row, (rid, value) in enumerate(zip(b["req_ids"], b["consumed"], strict=True)):
            if rid not in sampled:
                new_not_one += int(value != 1)
                continue
            true = max(int(sampled[rid]), 1)
            start, sched = computed[rid], int(b["num_scheduled"].get(rid, 0))
            reset = align and sched > 0 and (start + sched - 1) // block > (start - 1) // block
            expected = 1 if reset else true
            drafts = int(b["spec"].get(rid, 0))
            consumed = drafts > 0
            rows.append((n, rid, row, prev_row[rid], drafts, start, true, expected, int(value),
                         consumed, reset, consumed and int(value) != expected))  # fmt: skip
    df = pd.DataFrame(rows, columns=list(READ_COLUMNS))
    return df.astype(READ_COLUMNS), new_not_one


def predict(reads: pd.DataFrame, raw: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """sim's policy for the run predicts every read's consumed count."""
    from gpu_check.vllm.agreement import policy_for, report

    policy = policy_for(raw["mode"], raw.get("vllm_version", ""), "v2")
    expected = reads["expected"].to_numpy()
    ones = np.ones(len(reads), dtype=np.int64)
    participating = reads["consumed"].to_numpy()
    pred = np.asarray(policy.gpu_consumed(ones, expected, participating), dtype=np.int64)
    g = reads.copy()
    g["predicted"] = pred
    g["agree"] = pred == g["gpu_value"].to_numpy()
    g["predicted_wrong"] = consumed_wrong(policy, ones, pred, expected, participating)
    g["ambiguous"] = False
    g["close_call"] = False  # MRv2 has no row ops for a landing to fall near
    g["scored_value"] = g["gpu_value"]
    meta = {"mode": raw["mode"], "config": raw["config"]["name"],
            "vllm_version": raw.get("vllm_version", ""), "steps": len(raw["steps"])}  # fmt: skip
    rep = report(g, policy, meta)
    return g, rep


def export_run_v2(raw: dict[str, Any], out: Path, summary: dict[str, Any] | None) -> dict:
    """``observed_vllm.parquet``, ``export.json``, ``agreement.parquet``, ``agreement.json``."""
    reads, new_not_one = build_reads(raw, mamba_block_size(raw, summary))
    pred, rep = predict(reads, raw)
    wrong = reads[reads["wrong"]]
    cfg = raw["config"]
    exp = {
        "runner": "v2",
        "mode": raw["mode"],
        "config": cfg["name"],
        "vllm_version": raw.get("vllm_version", ""),
        "max_num_seqs": int(cfg["max_num_seqs"]),
        "gpu_delay_us": int(cfg["gpu_delay_us"]),
        "arrivals": cfg.get("arrivals", "all-at-start"),
        "steps": len(raw["steps"]),
        "reads": int(len(reads)),
        "consumed_reads": int(reads["consumed"].sum()),
        "wrong": int(len(wrong)),
        "wrong_pairs": {
            f"{a}->{b}": int(c)
            for (a, b), c in wrong.groupby(["expected", "gpu_value"]).size().items()
        },  # fmt: skip
        "boundary_resets": int(reads["boundary_reset"].sum()),
        "new_rows_not_one": new_not_one,
        # MRv2 has no row ops and no D2H of the counts: nothing lands among ops
        "steps_landed_at_update_states": None,
        "steps_landed_between_ops": None,
        "steps_not_landed_at_read": None,
    }
    from sim.runs.outputs import claim_dir

    claim_dir(out, "vllm-export")
    atomic_write(out / "observed_vllm.parquet", lambda t: reads.to_parquet(t, index=False))
    atomic_write(out / "agreement.parquet", lambda t: pred.to_parquet(t, index=False))
    atomic_write_text(out / "export.json", json.dumps(exp, indent=2) + "\n")
    if "watch" in raw:  # vllm-run --watch on MRv2: the plugin stood aside, the export saw
        from gpu_check.vllm.watch_check import compare_stood_aside  # what wrong reads

        text = json.dumps(compare_stood_aside(raw, reads), indent=2) + "\n"
        atomic_write_text(out / "watch.json", text)
    rep = {**rep, "runner": "v2"}
    atomic_write_text(out / "agreement.json", json.dumps(rep, indent=2) + "\n")
    return rep
