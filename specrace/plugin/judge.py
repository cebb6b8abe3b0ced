"""The watch's judgement of one step's reads, by :mod:`sim.model.verdict` (no torch).

A step here is the dict :class:`gpu_check.vllm.instrument.Recorder` records (``ops``,
``landed_at_update_states``, ``landed_at_read``, ``prev_positions``, ``cpu_value``,
``prev_num_draft_tokens``, ``req_ids``); the previous step's ``truth`` is its counts by row, as
its private snapshot holds them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.model.input_batch import RowOp
from sim.model.policies import Policy
from sim.model.verdict import hazard_kind, judge, participating


def landing(s: dict[str, Any]) -> tuple[int, str]:
    """(landing position among the step's row ops, -1 if not before the read; where, in words)
    from the polls of the counts' event (the first placement a poll leaves open)."""
    if s.get("landed_at_update_states"):
        return 0, "before the row ops"
    for i, op in enumerate(s["ops"]):
        before, after, group = op[6], op[7], op[8]
        if before:
            return i, f"before row op {i} ({op[0]})"
        if after:
            return (group if group >= 0 else i), f"during row op {i} ({op[0]})"
    if s.get("landed_at_read"):
        return len(s["ops"]), "after the row ops, before the read"
    return -1, "after the read"


def wrong_reads(policy: Policy, prev: dict[str, Any], cur: dict[str, Any]) -> list[dict]:
    """Every count ``cur`` consumed that differs from ``prev``'s true count of its request."""
    pp = np.asarray(cur["prev_positions"], dtype=np.int64)
    rows = np.flatnonzero(pp >= 0)
    truth = np.asarray(prev["truth"], dtype=np.int64)
    rows = rows[pp[rows] < len(truth)]
    if not rows.size:
        return []
    src = pp[rows]
    true = truth[src]
    cpu = np.asarray(cur["cpu_value"], dtype=np.int64)[rows]
    pnd = np.asarray(cur.get("prev_num_draft_tokens") or [0] * (int(src.max()) + 1))
    part = participating(pnd, src) if len(pnd) > int(src.max()) else np.zeros(len(src), bool)
    gpu, _cpu_wrong, gpu_wrong = judge(policy, cpu, true, part)
    if not gpu_wrong.any():
        return []
    land_pos, where = landing(cur)
    ops = [RowOp(o[0], int(o[1]), int(o[2]), str(o[3])) for o in cur["ops"]]
    kind = str(hazard_kind(ops, land_pos))
    out = []
    for k in np.flatnonzero(gpu_wrong):
        r = int(rows[k])
        out.append({
            "step": int(cur["step"]), "req_id": cur["req_ids"][r], "row": r,
            "prev_row": int(src[k]), "consumed": int(np.asarray(gpu)[k]),
            "true_count": int(true[k]), "cpu_value": int(cpu[k]), "kind": kind,
            "land_pos": land_pos, "landed": where,
        })  # fmt: skip
    return out


def timeline(cur: dict[str, Any]) -> list[dict]:
    """The step's row ops and polls, times in us from the start of ``_update_states``."""
    t0 = int(cur.get("t_us_start", 0))
    return [
        {"kind": o[0], "a": o[1], "b": o[2], "req_id": o[3], "t0_us": (o[4] - t0) / 1e3,
         "t1_us": (o[5] - t0) / 1e3, "landed_before": bool(o[6]), "landed_after": bool(o[7])}
        for o in cur["ops"]
    ] + [{"kind": "read", "t0_us": (int(cur.get("t_read", t0)) - t0) / 1e3,
          "landed_before": bool(cur.get("landed_at_read"))}]  # fmt: skip
