"""The committed tables of data/vllm: every raw record exported and compared, one results row
per measured configuration (``results.csv``), the timing of its passes (``timing.csv``) and the
host time of vLLM's row ops (``op_timing.csv``).

``python -m gpu_check vllm-export data/vllm/v0.24.0`` regenerates one version's folder from its
``raw/*.json.gz``; ``python -m gpu_check vllm-compare data/vllm`` prints the table of all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.errors import SpecraceError
from sim.runs.inputs import META_MAX, read_json

RESULT_COLUMNS = [
    "vllm", "runner", "run", "mode", "max_num_seqs", "gpu_delay_ms", "arrivals", "policy",
    "steps", "reads", "wrong_observed", "wrong_predicted", "agree", "scored", "ambiguous",
    "close_call_steps", "close_call_reads", "close_call_agree", "close_call_ambiguous",
    "steps_landed_at_update_states", "steps_landed_between_ops", "steps_not_landed_at_read",
    "wrong_pairs",
]  # fmt: skip


def _json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object a vllm command wrote (a regular file of bounded size; one line if not)."""
    doc = read_json(path, what, META_MAX)
    if not isinstance(doc, dict):
        raise SpecraceError(f"{what} {path}: not a JSON object")
    return doc


def raw_name(path: Path) -> str:
    """``raw/raw_align_s16_d0ms.json.gz`` -> ``align_s16_d0ms``."""
    name = path.name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name.removeprefix("raw_")


def export_folder(folder: Path) -> list[dict[str, Any]]:
    """Export and compare every raw record under ``folder/raw`` into ``folder/<name>/``."""
    from gpu_check.vllm.agreement import compare_dir
    from gpu_check.vllm.export import export_run, load_raw
    from gpu_check.vllm.export_v2 import export_run_v2, is_v2
    from sim.runs.io import fresh_output_dir

    raws = sorted((folder / "raw").glob("raw_*.json*"))
    if not raws:
        raise SpecraceError(f"no raw/raw_*.json(.gz) under {folder}")
    summary_path = folder / "summary.json"
    summary = _json(summary_path, "vllm-run summary") if summary_path.exists() else None
    out = []
    for raw in raws:
        dest = folder / raw_name(raw)
        record = load_raw(raw)
        # Each export whole or not at all, replacing only an export specrace wrote there.
        with fresh_output_dir(dest, force=True, kind="vllm-export") as tmp:
            if is_v2(record):  # MRv2: no row ops to export; the reads are checked directly
                out.append(export_run_v2(record, tmp, summary))
            else:
                export_run(raw, tmp)
        if not is_v2(record):
            out.append(compare_dir(dest))
    return out


def _own(root: Path, path: Path) -> bool:
    """``root/<version>/<item>/<file>`` at most: a campaign folder one level further down
    (``data/vllm/ab/``, ``data/vllm/fixes/``) is a root of its own, with its own tables."""
    return len(path.relative_to(root).parts) <= 3


def run_folders(root: Path) -> list[Path]:
    """Folders holding an exported run (``export.json``), sorted."""
    return sorted(p.parent for p in root.rglob("export.json") if _own(root, p))


def _timing(folder: Path) -> dict[str, Any]:
    """This configuration's passes from the version folder's ``summary.json``."""
    path = folder.parent / "summary.json"
    if not path.exists():
        return {}
    summary = _json(path, "vllm-run summary")
    mode, _, cfg = folder.name.partition("_")
    for res in summary.get("modes", {}).get(mode, {}).get("configs", []):
        if res["config"]["name"] == cfg:
            return res
    return {}


def results(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, timing = [], []
    for folder in run_folders(root):
        exp = _json(folder / "export.json", "vllm-export summary")
        agr_path = folder / "agreement.json"
        agr = _json(agr_path, "vllm-compare agreement") if agr_path.exists() else {}
        res = _timing(folder)
        seqs, delay = exp["max_num_seqs"], exp["gpu_delay_us"]
        run = folder.parent.name
        rows.append(
            {
                "vllm": exp.get("vllm_version", ""),
                "runner": exp.get("runner", "v1"),
                "run": run,
                "mode": exp["mode"],
                "max_num_seqs": seqs,
                "gpu_delay_ms": delay / 1000,
                "arrivals": exp["arrivals"],
                "policy": agr.get("policy", ""),
                "steps": exp["steps"],
                "reads": exp["reads"],
                "wrong_observed": exp["wrong"],
                "wrong_predicted": agr.get("wrong_predicted", ""),
                "agree": agr.get("agree", ""),
                "scored": agr.get("scored", ""),
                "ambiguous": agr.get("ambiguous", ""),
                "close_call_steps": agr.get("close_call_steps", ""),
                "close_call_reads": agr.get("close_call_reads", ""),
                "close_call_agree": agr.get("close_call_agree", ""),
                "close_call_ambiguous": agr.get("close_call_ambiguous", ""),
                "steps_landed_at_update_states": exp["steps_landed_at_update_states"],
                "steps_landed_between_ops": exp["steps_landed_between_ops"],
                "steps_not_landed_at_read": exp["steps_not_landed_at_read"],
                "wrong_pairs": " ".join(f"{k}:{v}" for k, v in exp["wrong_pairs"].items()),
            }
        )
        for name in ("baseline", "instrumented", "baseline_after"):
            if name in res:
                p = res[name]
                timing.append(
                    {
                        "vllm": exp.get("vllm_version", ""),
                        "run": run,
                        "mode": exp["mode"],
                        "max_num_seqs": seqs,
                        "gpu_delay_ms": delay / 1000,
                        "arrivals": exp["arrivals"],
                        "pass": name,
                        "runner_steps": p["runner_steps"],
                        "wall_s": p["wall_s"],
                        "step_ms_median": p["median_ms"],
                        "step_ms_p10": p["p10_ms"],
                        "step_ms_p90": p["p90_ms"],
                        "step_ms_mean": p["mean_ms"],
                    }
                )
    key = ("vllm", "run", "mode", "max_num_seqs", "gpu_delay_ms", "arrivals")
    rows.sort(key=lambda r: tuple(r[k] for k in key))
    timing.sort(key=lambda r: tuple(r[k] for k in key))
    return rows, timing


def op_timing(root: Path) -> list[dict[str, Any]]:
    """Host time of each kind of row op (``perf_counter_ns`` around vLLM's own method, hooks'
    polls outside the span; one ``condense`` call for all of its moves), per run."""
    import numpy as np

    from gpu_check.vllm.export import load_raw, prepared_steps

    out = []
    for raw_path in sorted(p for p in root.rglob("raw/raw_*.json*") if _own(root, p)):
        raw = load_raw(raw_path)
        if raw.get("runner") == "v2":  # MRv2 has no InputBatch row ops
            continue
        spans: dict[str, list[int]] = {}
        seen_groups = set()
        for s in prepared_steps(raw):
            for op in s["ops"]:
                if op[0] == "move":
                    if (s["step"], op[8]) in seen_groups:
                        continue
                    seen_groups.add((s["step"], op[8]))
                    kind = "condense"
                else:
                    kind = op[0]
                spans.setdefault(kind, []).append(op[5] - op[4])
            spans.setdefault("_update_states", []).append(s["t_us_end"] - s["t_us_start"])
        for kind, d in sorted(spans.items()):
            q = np.percentile(d, [50, 90])
            out.append(
                {
                    "vllm": raw.get("vllm_version", ""),
                    "run": raw_path.parent.parent.name,
                    "config": raw_name(raw_path),
                    "op": kind,
                    "count": len(d),
                    "p50_us": round(q[0] / 1e3, 1),
                    "p90_us": round(q[1] / 1e3, 1),
                }
            )
    return out


def _n(x: Any) -> int:
    return int(x) if x not in ("", None) else 0


def _pairs(rows: list[dict[str, Any]]) -> str:
    total: dict[str, int] = {}
    for r in rows:
        for item in filter(None, str(r["wrong_pairs"]).split(" ")):
            k, _, v = item.rpartition(":")
            total[k] = total.get(k, 0) + int(v)
    return ", ".join(f"{k.replace('->', '→')}: {v}" for k, v in sorted(total.items()))


def summary_markdown(rows: list[dict[str, Any]]) -> str:
    """One line per vLLM release, runner and mode: every configuration's reads together."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["vllm"], r["runner"], r["mode"]), []).append(r)
    out = [
        "| vLLM | runner | mode | sim policy | configs | reads | wrong observed | wrong predicted "
        "| agreement | ambiguous | close-call steps | close-call agreement | wrong pairs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (v, runner, mode), rs in sorted(groups.items()):

        def tot(col: str, rs: list[dict[str, Any]] = rs) -> int:
            return sum(_n(r[col]) for r in rs)

        runner_name = "MRv2" if runner == "v2" else "V1 (MRv1)"
        close_scored = tot("close_call_reads") - tot("close_call_ambiguous")
        policies = ", ".join(sorted({str(r["policy"]) for r in rs}))
        out.append(
            f"| {v} | {runner_name} | {mode} | {policies} | {len(rs)} | {tot('reads'):,} "
            f"| {tot('wrong_observed'):,} | {tot('wrong_predicted'):,} "
            f"| {tot('agree'):,}/{tot('scored'):,} | {tot('ambiguous')} "
            f"| {tot('close_call_steps')} | {tot('close_call_agree'):,}/{close_scored:,} "
            f"| {_pairs(rs)} |"
        )
    return "\n".join(out) + "\n"


def configs_markdown(rows: list[dict[str, Any]]) -> str:
    """One line per measured configuration (data/vllm/README.md)."""
    out = [
        "| vLLM | runner | run | mode | seqs | delay ms | steps | reads | wrong observed "
        "| wrong predicted | agreement | ambiguous | close calls "
        "| landed: entry / between / waited | wrong pairs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        landed = " / ".join(
            "–" if r[c] in ("", None) else str(r[c])
            for c in ("steps_landed_at_update_states", "steps_landed_between_ops",
                      "steps_not_landed_at_read")
        )  # fmt: skip
        out.append(
            f"| {r['vllm']} | {r['runner']} | {r['run']} | {r['mode']} | {r['max_num_seqs']} "
            f"| {r['gpu_delay_ms']:g} | {r['steps']} | {r['reads']} | {r['wrong_observed']} "
            f"| {r['wrong_predicted']} | {r['agree']}/{r['scored']} | {r['ambiguous']} "
            f"| {r['close_call_steps']} | {landed} | {_pairs([r])} |"
        )
    return "\n".join(out) + "\n"


def mrv2_markdown(rows: list[dict[str, Any]], timing: list[dict[str, Any]]) -> str:
    """MRv2's releases side by side, per mode and GPU delay: passes, reads, wrong reads observed
    and how many reads the policy predicted, and the median step of the passes (min-max)."""
    v2 = [r for r in rows if r["runner"] == "v2"]
    versions = sorted({str(r["vllm"]) for r in v2})
    if len(versions) < 2:
        return ""
    steps: dict[tuple[str, str, str, float], list[float]] = {}
    for t in timing:
        if t["pass"] == "instrumented":
            key = (str(t["vllm"]), str(t["run"]), str(t["mode"]), float(t["gpu_delay_ms"]))
            steps.setdefault(key, []).append(float(t["step_ms_median"]))
    head = "| mode | delay ms | " + " | ".join(
        f"{v}: passes | {v}: median step ms | {v}: wrong / reads | {v}: predicted" for v in versions
    )
    out = [head + " |", "|---|---|" + "---|---|---|---|" * len(versions)]
    for mode, delay in sorted({(str(r["mode"]), float(r["gpu_delay_ms"])) for r in v2}):
        cells = [mode, f"{delay:g}"]
        for v in versions:
            rs = [r for r in v2 if r["vllm"] == v and r["mode"] == mode
                  and float(r["gpu_delay_ms"]) == delay]  # fmt: skip
            ms = [m for r in rs for m in steps.get((v, str(r["run"]), mode, delay), [])]
            span = f"{min(ms):.1f}" + (f"–{max(ms):.1f}" if len(ms) > 1 else "") if ms else "–"
            reads, wrong = sum(_n(r["reads"]) for r in rs), sum(_n(r["wrong_observed"]) for r in rs)
            agree, scored = sum(_n(r["agree"]) for r in rs), sum(_n(r["scored"]) for r in rs)
            cells += [str(len(rs)), span, f"{wrong} / {reads:,}", f"{agree:,}/{scored:,}"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def markdown(
    root: Path, rows: list[dict[str, Any]], timing: list[dict[str, Any]] | None = None
) -> str:
    """``vllm-compare ROOT --markdown``: the agreement tables; where ``ROOT`` holds them, the
    plugin's watch against each export (``watch.json``) and its cost (``bench-*/summary.json``).
    ``timing``: :func:`results`' second table, where the caller has it already."""
    from gpu_check.vllm.plugin_bench import cost_markdown
    from gpu_check.vllm.watch_check import markdown as watch_markdown
    from gpu_check.vllm.watch_check import rows as watch_rows

    out = summary_markdown(rows) + "\n" + configs_markdown(rows)
    if any(r["runner"] == "v2" for r in rows):  # MRv2's releases side by side
        side = mrv2_markdown(rows, timing if timing is not None else results(root)[1])
        out += "\n" + side if side else ""
    watched = watch_rows(root)
    if watched:
        out += "\n" + watch_markdown(watched)
    for path in sorted(root.glob("bench-*/summary.json")):
        out += "\n" + cost_markdown(_json(path, "vllm-plugin-bench summary"))
    return out


def write_tables(root: Path) -> tuple[Path, Path, Path]:
    from gpu_check.store import write_csv
    from gpu_check.vllm.watch_check import rows as watch_rows

    rows, timing = results(root)
    watched = watch_rows(root)
    if watched:  # vllm-run --watch passes: the plugin's wrong reads against the export's
        write_csv(watched, root / "watch.csv")
    return (
        write_csv(rows, root / "results.csv"),
        write_csv(timing, root / "timing.csv"),
        write_csv(op_timing(root), root / "op_timing.csv"),
    )
