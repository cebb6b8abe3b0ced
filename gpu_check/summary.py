"""``python -m gpu_check summary``: docs/reference.md's GPU tables, from ``data/bench``."""

from __future__ import annotations

from pathlib import Path


def _load(d: Path, name: str) -> dict:
    path = d / name
    from sim.errors import SpecraceError
    from sim.runs.io import read_json

    try:
        return read_json(path, "GPU result")
    except SpecraceError as e:
        raise ValueError(str(e)) from None


def summary_markdown(d: Path) -> str:
    bench, recall, pad = (
        _load(d, n) for n in ("bench_summary.json", "recall.json", "padding.json")
    )
    out = [
        f"{bench['device']}, driver {bench['driver']}, torch {bench['torch']}, triton "
        f"{bench['triton']}, fla-core {bench['fla_core']}, {bench['date_utc'][:10]}; "
        f"copy bandwidth {bench['copy_bw_GBps']:.0f} GB/s",
        "",
        "| state pool | N | floor µs | ours µs | ours ÷ floor | fla µs | ours ÷ fla |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in bench["cases"]:
        out.append(
            f"| {c['pool_dtype']} | {c['N']} | {c['floor_us']:.1f} | {c['ours_us']:.1f} "
            f"| {c['ours_ratio_to_floor']:.2f} | {c['fla_us']:.1f} "
            f"| {c['ours_ratio_to_fla']:.2f} |"
        )
    cfg = recall["config"]
    out += [
        "",
        f"Recall ({cfg['num_reqs']} requests, {cfg['num_pairs']} pairs, {cfg['dtype']}, "
        f"H={cfg['H']} HV={cfg['HV']} K={cfg['K']} V={cfg['V']}):",
        "",
        "| impl | count used (true 1) | recall | output rel err | next-step recall |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in recall["rows"]:
        out.append(
            f"| {r['impl']} | {r['count_used']} | {r['recall_acc']:.2f} "
            f"| {r['out_rel_err']:.2g} | {r['next_step_recall_acc']:.2f} |"
        )
    g = pad.get("graph_check", {})
    out += [
        "",
        f"FULL-graph padding, {pad['num_reqs']} requests, k = {pad['num_spec']}: "
        f"request-indexed views {pad['before']['batch_size']} rows before #45100, "
        f"{pad['after']['batch_size']} after ({pad['fake_rows']} fake rows).",
    ]
    for rule, r in g.items():
        out.append(
            f"- `batch_size = {rule}`: graph replay equals eager: "
            f"{r['real_rows_equal_eager'] and r['pool_equal_eager']}, "
            f"replay {r['replay_us_median']:.1f} µs"
        )
    if {"num_actual_tokens", "num_reqs"} <= g.keys():
        ratio = g["num_actual_tokens"]["replay_us_median"] / g["num_reqs"]["replay_us_median"]
        out.append(f"- the old rule's replay takes {ratio:.2f}x the new rule's")
    return "\n".join(out)


def summary_rows(d: Path) -> list[dict]:
    """The same tables for a program (``--format json|csv``): the kernel timings, the recall
    rows and the graph-padding checks, each row's ``table`` naming which."""
    from sim.runs.tables import flat_rows

    bench, recall, pad = (
        _load(d, n) for n in ("bench_summary.json", "recall.json", "padding.json")
    )
    graph = [{"rule": rule, **r} for rule, r in pad.get("graph_check", {}).items()]
    return (
        flat_rows(bench["cases"], "bench")
        + flat_rows(recall["rows"], "recall")
        + flat_rows(graph, "padding")
    )
