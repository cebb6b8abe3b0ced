"""The committed tables of data/vllm: every raw record exported and compared, one results row
per measured configuration (``results.csv``), the timing of its passes (``timing.csv``) and the
host time of vLLM's row ops (``op_timing.csv``).

``python -m gpu_check vllm-export data/vllm/v0.24.0`` regenerates one version's folder from its
``raw/*.json.gz``; ``python -m gpu_check vllm-compare data/vllm`` prints the table of all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.errors import SpecraceError

RESULT_COLUMNS = [
    "vllm", "run", "mode", "max_num_seqs", "gpu_delay_ms", "arrivals", "policy", "steps", "reads",
    "wrong_observed", "wrong_predicted", "agree", "scored", "ambiguous", "close_call_steps",
    "steps_landed_at_update_states", "steps_landed_between_ops", "steps_not_landed_at_read",
    "wrong_pairs",
]  # fmt: skip


def raw_name(path: Path) -> str:
    """``raw/raw_align_s16_d0ms.json.gz`` -> ``align_s16_d0ms``."""
    name = path.name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name.removeprefix("raw_")


def export_folder(folder: Path) -> list[dict[str, Any]]:
    """Export and compare every raw record under ``folder/raw`` into ``folder/<name>/``."""
    from gpu_check.vllm.agreement import compare_dir
    from gpu_check.vllm.export import export_run

    raws = sorted((folder / "raw").glob("raw_*.json*"))
    if not raws:
        raise SpecraceError(f"no raw/raw_*.json(.gz) under {folder}")
    out = []
    for raw in raws:
        dest = folder / raw_name(raw)
        export_run(raw, dest)
        out.append(compare_dir(dest))
    return out


def run_folders(root: Path) -> list[Path]:
    """Folders holding an exported run (``export.json``), sorted."""
    return sorted(p.parent for p in root.rglob("export.json"))


def _timing(folder: Path) -> dict[str, Any]:
    """This configuration's passes from the version folder's ``summary.json``."""
    path = folder.parent / "summary.json"
    if not path.is_file():
        return {}
    summary = json.loads(path.read_text())
    mode, _, cfg = folder.name.partition("_")
    for res in summary.get("modes", {}).get(mode, {}).get("configs", []):
        if res["config"]["name"] == cfg:
            return res
    return {}


def results(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, timing = [], []
    for folder in run_folders(root):
        exp = json.loads((folder / "export.json").read_text())
        agr_path = folder / "agreement.json"
        agr = json.loads(agr_path.read_text()) if agr_path.is_file() else {}
        res = _timing(folder)
        seqs, delay = exp["max_num_seqs"], exp["gpu_delay_us"]
        run = folder.parent.name
        rows.append(
            {
                "vllm": exp.get("vllm_version", ""),
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
    for raw_path in sorted(root.rglob("raw/raw_*.json*")):
        raw = load_raw(raw_path)
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


def write_tables(root: Path) -> tuple[Path, Path, Path]:
    from gpu_check.store import write_csv

    rows, timing = results(root)
    return (
        write_csv(rows, root / "results.csv"),
        write_csv(timing, root / "timing.csv"),
        write_csv(op_timing(root), root / "op_timing.csv"),
    )
