"""How well real vLLM predicts itself: the criterion of the forward predictions (issue #23,
:func:`gpu_check.vllm.outcome.judge`) applied between passes of one configuration.

``python -m gpu_check vllm-repeatability RUNS... --out DIR`` finds every exported V1 pass
under ``RUNS`` (``vllm-export`` folders, at any depth), groups the passes that ran the same
configuration (release, runner, mode, patch, k, token budget and :class:`RunConfig` less its
repeat number and label: ``vllm-run --repeats`` / ``--arm-repeats``, or two runs on different
days), and judges

- **pairs**: every ordered pair of passes (A, B) of a group, A's rate, median step and landing
  mix taken as the prediction of B. The fraction of pairs meeting all three parts is what a
  model that reproduced one pass of vLLM exactly would score against another;
- **leave-one-out**: each pass of a group with at least three, predicted by the median over the
  group's other passes (rate, step, each landing share): the best a deterministic prediction
  of "the typical pass" can do.

Either fraction is a ceiling on ``meets_all_fraction`` of ``vllm-forward`` and
``vllm-outcome``: no model of vLLM, however exact, can meet the criterion more often than vLLM
meets it against itself. Both are also given per regime of the *observed* pass (its
copy-at-entry share, :func:`gpu_check.vllm.forecast.regime`, the regimes issue 44's criterion
is judged in), so each regime's forecast score has its own ceiling beside it. It writes
``DIR/summary.json`` (the fractions with their counts and Wilson 95 % intervals, overall and
per regime, per group the spread of step time, rate, landing and host speed over its passes)
and ``DIR/pairs.csv`` (every judged pair, with the observed pass's regime).

Per regime it also judges the **gauge-matched pairs**: those whose two passes' host-speed
gauges (:func:`gpu_check.vllm.gauge.sample_tokens_ms`) differ by at most ``GAUGE_MATCH``. A
forecast given the pass's gauge (issue 44's (iv)) knows the host's speed; these pairs are
vLLM predicting itself with the host's speed known as well, the ceiling for that forecast.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_check.vllm.config import run_config_of
from gpu_check.vllm.export import load_raw, raw_record_of
from gpu_check.vllm.forecast import REGIMES, regime
from gpu_check.vllm.gauge import sample_tokens_ms
from gpu_check.vllm.outcome import LANDING, judge, observed
from sim.errors import SpecraceError
from sim.runs.io import atomic_write_text, write_json
from sim.runs.stats import wilson

PARTS = ("rate_ok", "step_ok", "landing_ok", "meets_all")
GAUGE_MATCH = 0.05  # two passes' gauges within 5 %: the host's speed known
PAIR_COLUMNS = [
    "group", "predictor", "observed", "rate_predictor", "rate_observed", "wrong_observed",
    "step_ms_predictor", "step_ms_observed", "landing_tv", *PARTS[:-1], "step_rel_error",
    "rate_rel_error", "meets_all", "regime", "gauge_ratio",
]  # fmt: skip


def pass_key(raw: dict[str, Any]) -> str:
    """What makes two passes the same configuration (a raw record's settings less its repeat
    number, label and whether an uninstrumented pass ran before it). A pass run with the
    plugin's watch (``vllm-run --watch``) is a configuration of its own: the watch adds host
    work to every step."""
    cfg = run_config_of(raw["config"]).to_dict()
    for k in ("name", "rep", "label", "baseline"):
        del cfg[k]
    return json.dumps(
        {
            "vllm": raw["vllm_version"], "runner": raw.get("runner", "v1"), "mode": raw["mode"],
            "patch": raw.get("patch", "none"), "k": int(raw["num_speculative_tokens"]),
            "max_num_batched_tokens": int(raw.get("max_num_batched_tokens", 0)),
            "watch": "watch" in raw, **cfg,
        },
        sort_keys=True,
    )  # fmt: skip


def v1_passes(roots: list[Path]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every exported V1 pass under ``roots`` with its raw record, in path order per root
    (MRv2 exports, which have no row ops, and exports without their raw record are skipped)."""
    for root in roots:
        if not root.is_dir():
            raise SpecraceError(f"{root}: not a folder of exported vLLM runs")
        for exp in sorted(root.glob("**/export.json")):
            folder = exp.parent
            raw_path = raw_record_of(folder)
            if not (folder / "steps_vllm.parquet").is_file() or not raw_path.is_file():
                continue  # an MRv2 export (no row ops) or one without its raw record
            raw = load_raw(raw_path)
            if raw.get("runner", "v1") == "v1":
                yield folder, raw


def find_passes(roots: list[Path]) -> dict[str, dict[Path, float]]:
    """Exported V1 passes under ``roots`` grouped by :func:`pass_key`; each group's passes in
    path order, with each pass's host speed (:func:`sample_tokens_ms`)."""
    groups: dict[str, dict[Path, float]] = {}
    for folder, raw in v1_passes(roots):
        groups.setdefault(pass_key(raw), {})[folder] = sample_tokens_ms(raw)
    return {k: dict(sorted(v.items())) for k, v in groups.items()}


def _prediction(obs: dict[str, Any]) -> dict[str, Any]:
    return {"rate": obs["rate"], "step_ms": obs["step_ms"], "landing": obs["landing"]}


def _loo_median(others: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rate": float(np.median([o["rate"] for o in others])),
        "step_ms": float(np.median([o["step_ms"] for o in others])),
        "landing": {k: float(np.median([o["landing"][k] for o in others])) for k in LANDING},
    }


def _pair_row(group: str, name_a: str, pred: dict[str, Any], b: Path, ob: dict[str, Any],
              root: Path, gauge_ratio: float | None = None) -> dict[str, Any]:  # fmt: skip
    """One judged prediction; ``gauge_ratio`` is the observed pass's gauge over the
    predictor's (None for the median of the others)."""
    v = judge(pred, ob)
    return {
        "group": group, "predictor": name_a, "observed": _rel(b, root),
        "rate_predictor": round(pred["rate"], 6), "rate_observed": round(ob["rate"], 6),
        "wrong_observed": ob["wrong"], "step_ms_predictor": round(pred["step_ms"], 3),
        "step_ms_observed": ob["step_ms"], "landing_tv": v["landing_tv"],
        "rate_ok": v["rate_ok"], "step_ok": v["step_ok"], "landing_ok": v["landing_ok"],
        "step_rel_error": v["step_rel_error"], "rate_rel_error": v["rate_rel_error"],
        "meets_all": v["meets_all"], "regime": regime(ob["landing"]["entry"]),
        "gauge_ratio": None if gauge_ratio is None else round(gauge_ratio, 4),
    }  # fmt: skip


def _rel(p: Path, root: Path) -> str:
    try:
        return str(p.relative_to(root))
    except ValueError:
        return str(p)


def _fractions(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    out: dict[str, Any] = {"judged": n}
    for part in PARTS:
        k = sum(bool(r[part]) for r in rows)
        lo, hi = wilson(k, n)
        out[part] = {"count": k, "fraction": round(k / n, 4) if n else 0.0,
                     "ci95": [round(float(lo), 4), round(float(hi), 4)]}  # fmt: skip
    return out


def group_name(key: str) -> str:
    d = json.loads(key)
    tail = "" if d["arrivals"] == "all-at-start" else f"_stag{d['arrival_every']}"
    patch = "" if d["patch"] == "none" else f"_{d['patch']}"
    patch += "_watch" if d.get("watch") else ""
    return (f"{d['vllm']}/{d['mode']}_k{d['k']}_s{d['max_num_seqs']}_d{d['gpu_delay_us'] / 1000:g}"
            f"ms_n{d['num_requests']}{tail}{patch}")  # fmt: skip


def repeatability(roots: list[Path]) -> tuple[dict[str, Any], pd.DataFrame]:
    """The judged pairs and leave-one-out predictions of every repeated configuration."""
    groups = {k: v for k, v in find_passes(roots).items() if len(v) >= 2}
    if not groups:
        raise SpecraceError(
            f"{', '.join(map(str, roots))}: no configuration with two or more exported passes"
        )
    base = roots[0] if len(roots) == 1 else Path(".")
    pairs, loo, per_group = [], [], []
    for key in sorted(groups, key=group_name):
        name, speed = group_name(key), groups[key]
        folders = list(speed)
        obs = {f: observed(f) for f in folders}
        for a, b in itertools.permutations(folders, 2):
            ratio = speed[b] / speed[a]
            pairs.append(
                _pair_row(name, _rel(a, base), _prediction(obs[a]), b, obs[b], base, ratio)
            )
        if len(folders) >= 3:
            for b in folders:
                pred = _loo_median([obs[f] for f in folders if f != b])
                loo.append(_pair_row(name, "median of the others", pred, b, obs[b], base))
        steps = [obs[f]["step_ms"] for f in folders]
        per_group.append({
            "group": name, "passes": [_rel(f, base) for f in folders],
            "step_ms": steps, "step_ms_max_over_min": round(max(steps) / min(steps), 3),
            "rate": [round(obs[f]["rate"], 6) for f in folders],
            "wrong": [obs[f]["wrong"] for f in folders],
            "reads": [obs[f]["reads"] for f in folders],
            "landing_entry": [obs[f]["landing"]["entry"] for f in folders],
            "sample_tokens_ms": [speed[f] for f in folders],
        })  # fmt: skip
    table = pd.DataFrame(pairs + loo, columns=PAIR_COLUMNS)
    matched = [r for r in pairs if abs(r["gauge_ratio"] - 1) <= GAUGE_MATCH]
    doc = {
        "schema": "specrace.vllm_repeatability",
        "roots": [str(r) for r in roots],
        "criterion": "gpu_check.vllm.outcome.judge (issue #23): rate, step time, landing",
        "groups": len(groups),
        "passes": sum(len(v) for v in groups.values()),
        "pairs": _fractions(pairs),
        "leave_one_out": _fractions(loo),
        "per_regime": {
            name: {
                what: _fractions([r for r in rows if r["regime"] == name])
                for what, rows in (
                    ("pairs", pairs),
                    ("leave_one_out", loo),
                    ("pairs_gauge_matched", matched),
                )
            }
            for name in REGIMES
        },  # fmt: skip
        "gauge_match": GAUGE_MATCH,
        "pairs_gauge_matched": _fractions(matched),
        "per_group": per_group,
    }
    return doc, table


def write_repeatability(roots: list[Path], out: Path) -> dict[str, Any]:
    from sim.runs.outputs import claim_dir

    doc, table = repeatability(roots)
    claim_dir(out, "vllm-repeatability")
    atomic_write_text(out / "pairs.csv", table.to_csv(index=False, lineterminator="\n"))
    write_json(out / "summary.json", doc)
    return doc


def repeatability_text(doc: dict[str, Any]) -> str:
    lines = [f"{doc['passes']} passes of {doc['groups']} repeated configurations"]
    for what, label in (("pairs", "pass predicts pass"),
                        ("leave_one_out", "median of the others predicts a pass")):  # fmt: skip
        f = doc[what]
        if not f["judged"]:
            lines.append(f"  {label}: no group with three or more passes")
            continue
        parts = ", ".join(
            f"{p.removesuffix('_ok')} {f[p]['count']}/{f['judged']}" for p in PARTS[:-1]
        )
        m = f["meets_all"]
        lines.append(
            f"  {label}: meets_all {m['count']}/{f['judged']} ({m['fraction']:.2f}, 95 % "
            f"[{m['ci95'][0]:.2f}, {m['ci95'][1]:.2f}]); {parts}"
        )
    for name, by in doc["per_regime"].items():
        cells = [
            f"{label} {by[what]['meets_all']['count']}/{by[what]['judged']}"
            for what, label in (("pairs", "pairs"), ("leave_one_out", "leave-one-out"),
                                ("pairs_gauge_matched", "gauge-matched pairs"))
        ]  # fmt: skip
        lines.append(f"  meets_all where the observed pass is {name}: {', '.join(cells)}")
    for g in doc["per_group"]:
        lines.append(
            f"  {g['group']}: {len(g['passes'])} passes, step {min(g['step_ms']):.1f}-"
            f"{max(g['step_ms']):.1f} ms, wrong {min(g['wrong'])}-{max(g['wrong'])}"
        )
    return "\n".join(lines)
