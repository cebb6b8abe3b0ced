"""``python -m specrace.plugin report WATCHDIR [--html FILE]``: the watch's output summed over
processes.

Reads ``summary-*.json`` (totals each process wrote with its last log line) and
``wrong-reads-*.jsonl``; prints the rate with its 95 % interval, the reads by hazard kind and
the worst step's timeline (the step with the most wrong reads); ``--html`` writes the same
as one self-contained page, the timeline drawn.
"""

from __future__ import annotations

import html
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
        f"over {t['steps']:,} steps observed; vLLM {t['vllm']}, policy {t['policy']}" + host_time(t)
    )


def host_time(t: dict[str, Any]) -> str:
    """The watch's own host time per runner step, where the totals carry it."""
    steps = int(t.get("runner_steps", 0))
    if not steps or "host_ns" not in t:
        return ""
    return f"; the watch's own host time {int(t['host_ns']) / steps / 1e3:.0f} µs per step"


def load(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    totals: dict[str, Any] = {"steps": 0, "reads": 0, "wrong": 0, "skipped_steps": 0,
                              "runner_steps": 0, "host_ns": 0, "vllm": "?",
                              "policy": "?"}  # fmt: skip
    for p in sorted(folder.glob("summary-*.json")):
        t = json.loads(p.read_text())
        for k in ("steps", "reads", "wrong", "skipped_steps", "runner_steps", "host_ns"):
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


def _svg_timeline(events: list[dict[str, Any]]) -> str:
    """The worst step's row ops as bars on its host time axis (us from ``_update_states``),
    green once the counts had landed, red while in flight; the read as a line."""
    if not events:
        return ""
    end = max(float(ev.get("t1_us", ev["t0_us"])) for ev in events) or 1.0
    width, row_h, left = 720, 18, 220
    scale = (width - left - 20) / end
    parts = []
    for i, ev in enumerate(events):
        y = 10 + i * row_h
        t0, t1 = float(ev["t0_us"]), float(ev.get("t1_us", ev["t0_us"]))
        landed = ev.get("landed_after", ev.get("landed_before"))
        colour = "#2a9d4b" if landed else "#c0392b"
        what = "read" if ev["kind"] == "read" else f"{ev['kind']} {ev['a']}->{ev['b']}"
        label = html.escape(f"{what} {ev.get('req_id', '')}".strip())
        x = left + t0 * scale
        parts.append(f'<text x="4" y="{y + 12}" font-size="12">{label}</text>')
        w = max(2.0, (t1 - t0) * scale)
        parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 4}" '
                     f'fill="{colour}"><title>{t0:.1f}-{t1:.1f} us</title></rect>')  # fmt: skip
    h = 20 + len(events) * row_h
    axis = f'<text x="{width - 80}" y="{h + 4}" font-size="11">{end:.1f} us</text>'
    parts.append(f'<text x="{left}" y="{h + 4}" font-size="11">0 us</text>{axis}')
    return f'<svg width="{width}" height="{h + 10}" role="img">{"".join(parts)}</svg>'


def html_report(folder: Path) -> str:
    """One self-contained page: the summary, the kinds, the worst step's timeline and reads."""
    totals, reads = load(folder)
    e = html.escape
    body = [f"<h1>specrace watch: {e(str(folder))}</h1>", f"<p>{e(summary_line(totals))}</p>"]
    kinds = Counter(r["kind"] for r in reads)
    if kinds:
        rows = "".join(f"<tr><td>{e(k)}</td><td>{n}</td></tr>" for k, n in kinds.most_common())
        body.append(f"<h2>Wrong reads by hazard kind</h2><table><tr><th>kind</th>"
                    f"<th>reads</th></tr>{rows}</table>")  # fmt: skip
        step, n = Counter(r["step"] for r in reads).most_common(1)[0]
        worst = [r for r in reads if r["step"] == step]
        body.append(f"<h2>The worst step: {step} ({n} wrong reads)</h2><p>The counts' copy "
                    f"landed {e(worst[0]['landed'])}: {e(worst[0]['kind'])}. Green: the copy "
                    f"had landed after the op; red: still in flight.</p>")  # fmt: skip
        body.append(_svg_timeline(worst[0].get("timeline", [])))
        rows = "".join(f"<tr><td>{e(r['req_id'])}</td><td>{r['row']}</td><td>{r['consumed']}"
                       f"</td><td>{r['true_count']}</td></tr>" for r in worst)  # fmt: skip
        body.append(f"<table><tr><th>request</th><th>row</th><th>consumed</th><th>true</th>"
                    f"</tr>{rows}</table>")  # fmt: skip
    else:
        body.append("<p>No wrong read was recorded.</p>")
    style = "body{font-family:sans-serif;max-width:60em}td,th{padding:2px 8px;text-align:left}"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>specrace watch</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")  # fmt: skip
