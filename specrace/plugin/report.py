"""``python -m specrace.plugin report WATCHDIR``: the watch's output summed over processes.

Reads ``summary-*.json`` (totals each process wrote with its last log line) and
``wrong-reads-*.jsonl``; prints the rate with its 95 % interval, the reads by hazard kind and
the worst step's timeline (the step with the most wrong reads).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from sim.runs.stats import wilson

PER = 10_000


def summary_line(t: dict[str, Any]) -> str:
    """The log line: wrong reads per 10,000 reads with the Wilson 95 % interval."""
    lo, hi = wilson(int(t["wrong"]), int(t["reads"]))
    rate = PER * t["wrong"] / t["reads"] if t["reads"] else 0.0
    return (
        f"specrace watch: {t['wrong']} wrong accepted counts in {t['reads']:,} reads "
        f"({rate:.2f} per 10,000, 95 % CI {PER * float(lo):.2f}-{PER * float(hi):.2f}) "
        f"over {t['steps']:,} steps observed; vLLM {t['vllm']}, policy {t['policy']}"
    )


def load(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    totals: dict[str, Any] = {"steps": 0, "reads": 0, "wrong": 0, "skipped_steps": 0,
                              "vllm": "?", "policy": "?"}  # fmt: skip
    for p in sorted(folder.glob("summary-*.json")):
        t = json.loads(p.read_text())
        for k in ("steps", "reads", "wrong", "skipped_steps"):
            totals[k] += int(t.get(k, 0))
        totals["vllm"], totals["policy"] = t.get("vllm", "?"), t.get("policy", "?")
    reads = [json.loads(line) for p in sorted(folder.glob("wrong-reads-*.jsonl"))
             for line in p.read_text().splitlines() if line.strip()]  # fmt: skip
    return totals, reads


def report(folder: Path) -> str:
    totals, reads = load(folder)
    lines = [summary_line(totals)]
    if totals["wrong"] != len(reads):
        lines.append(f"(the JSONL holds {len(reads)} wrong reads: the summaries are written "
                     f"every SPECRACE_WATCH_EVERY steps, the JSONL at once)")  # fmt: skip
    kinds = Counter(r["kind"] for r in reads)
    for kind, n in kinds.most_common():
        lines.append(f"  {kind or '?'}: {n}")
    if reads:
        per_step = Counter(r["step"] for r in reads)
        step, n = per_step.most_common(1)[0]
        worst = [r for r in reads if r["step"] == step]
        lines.append(f"worst step {step}: {n} wrong reads, the copy landed "
                     f"{worst[0]['landed']} ({worst[0]['kind']})")  # fmt: skip
        for ev in worst[0].get("timeline", []):
            mark = "landed" if ev.get("landed_before") else "in flight"
            what = ev["kind"] if ev["kind"] == "read" else \
                f"{ev['kind']} {ev['a']}->{ev['b']} {ev['req_id']}"  # fmt: skip
            lines.append(f"  {ev['t0_us']:9.1f} us  {what:<40} counts {mark}")
        for r in worst:
            lines.append(f"  {r['req_id']}: consumed {r['consumed']}, true {r['true_count']}")
    return "\n".join(lines)
