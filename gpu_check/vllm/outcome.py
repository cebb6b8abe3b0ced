"""A pre-registered prediction against the run that tested it; #45100's A/B and the fixes' arms.

``python -m gpu_check vllm-outcome PREREG RUNS...`` reads ``PREREG/predictions.json``
(:mod:`gpu_check.vllm.plan`) and, for each predicted configuration, the exported run
``RUNS/v<release>/<mode>_<config>/`` (``vllm-export``), and writes ``PREREG/outcome.json``:
per configuration the three parts of the criterion and ``meets_all``, then
``{"configs": N, "meets_all_fraction": x}``. The criterion (issue #23):

- rate: the predicted rate of wrong consumed reads lies inside the observed Wilson 95 %
  interval, and where at least 20 wrong reads were observed, within 25 % of the observed rate;
- step time: the predicted median step within 10 % of the observed median step interval;
- landing: the total-variation distance between the predicted and observed landing mix
  (entry / between / after / waited, :func:`observed_regime`) <= 0.10.

``python -m gpu_check vllm-ab RUNS... --out FILE`` writes the arms table of the A/B and the
fixes (``data/vllm/ab/summary.json``): per run its reads, prefill -> first-spec transitions,
wrong consumed counts (the value the GDN kernel restored its state from), corrupted
generations (requests with at least one), the rate per 10,000 transitions with its Wilson
interval, and tokens/s of the pass (instrumented: every arm carries the same hooks).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, TypeGuard

import pandas as pd

from sim.errors import SpecraceError
from sim.runs.inputs import META_MAX, read_json, regular_file
from sim.runs.io import write_json
from sim.runs.stats import wilson

LANDING = ("entry", "between", "after", "waited")
RATE_REL = 0.25
RATE_MIN_WRONG = 20
STEP_REL = 0.10
LANDING_TV = 0.10


def observed_regime(folder: Path) -> dict[str, float]:
    """The landing mix and median step interval of an exported configuration (its
    steps_vllm.parquet)."""
    t = _parquet(folder / "steps_vllm.parquet", "vLLM step table")
    t = t[t["step"] >= 1]
    lp, hi, n_ops = t["land_pos"], t["land_pos_hi"], t["n_ops"]
    entry = t["landed_at_update_states"]
    waited = lp < 0
    inside = ((lp > 0) & (lp < n_ops)) | (lp != hi) | ((lp == 0) & (n_ops > 0))
    between = ~entry & ~waited & inside  # after _update_states began, before its last op
    after = ~entry & ~waited & ~between
    n = len(t)
    iv = t["step_interval_ns"][t["step_interval_ns"] > 0]
    return {
        "entry": round(float(entry.sum()) / n, 4),
        "between": round(float(between.sum()) / n, 4),
        "after": round(float(after.sum()) / n, 4),
        "waited": round(float(waited.sum()) / n, 4),
        "step_ms": round(float(iv.median()) / 1e6, 3),
    }


def _json(path: Path, what: str = "JSON file") -> dict[str, Any]:
    doc = read_json(path, what, META_MAX)
    if not isinstance(doc, dict):
        raise SpecraceError(f"{what} {path}: not a JSON object")
    return doc


def _parquet(path: Path, what: str) -> pd.DataFrame:
    try:
        return pd.read_parquet(regular_file(path, what))
    except (OSError, ValueError) as e:
        raise SpecraceError(f"{path}: unreadable ({e})") from None


# -- predictions.json, checked whole before anything is judged against it ----------------------
EPS = 1e-9  # rounding between a rate and its interval as vllm-plan computed them


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> TypeGuard[float]:
    return (isinstance(x, int | float) and not isinstance(x, bool)) and math.isfinite(x)


def check_predictions(doc: Any, origin: str) -> list[dict[str, Any]]:
    """The configurations of a ``predictions.json`` (:func:`gpu_check.vllm.plan.plan`), each
    checked for what vllm-plan writes: its schema, types and ranges (counts integers, reads
    positive, no more wrong than there were; rates finite in [0, 1] and per 10k transitions in
    [0, 10,000], each inside its ordered 95 % interval; a landing mix that sums to 1; a release
    sim models). The first thing wrong is one line naming the file and the configuration."""
    from gpu_check.vllm.config import MODES
    from gpu_check.vllm.patches import NONE, PATCHES
    from gpu_check.vllm.plan import FOLDER_NAME
    from sim.resolve.release_facts import RELEASES

    if not isinstance(doc, dict) or doc.get("schema") != "specrace.vllm_predictions":
        raise SpecraceError(f"{origin}: not written by gpu_check vllm-plan")
    configs = doc.get("configs")
    if not isinstance(configs, list) or not configs:
        raise SpecraceError(f"{origin}: configs must be a non-empty list")
    for key in ("command", "made_at_commit"):
        if key in doc and not isinstance(doc[key], str):
            raise SpecraceError(f"{origin}: {key} must be a string, got {doc[key]!r}")
    for i, c in enumerate(configs):
        if not isinstance(c, dict):
            raise SpecraceError(f"{origin}: configs[{i}] must be a table, got {c!r}")
        where = f"{origin}: configs[{i}]"

        def bad(key: str, want: str, where: str = where, c: dict = c) -> SpecraceError:
            got = repr(c.get(key)) if key in c else "nothing"
            return SpecraceError(f"{where}: {key} must be {want}, got {got}"[:400])

        missing = [k for k in ("vllm", "mode", "patch", "config", "reads", "wrong", "rate",
                               "rate_ci95", "transitions", "wrong_transitions", "step_ms",
                               "landing") if k not in c]  # fmt: skip
        if missing:
            raise SpecraceError(f"{where}: missing {', '.join(missing)}")
        if c["vllm"] not in RELEASES:
            raise bad("vllm", f"a release sim models ({', '.join(RELEASES)})")
        if c["mode"] not in MODES:
            raise bad("mode", " or ".join(MODES))
        if c["patch"] not in (NONE, *PATCHES):
            raise bad("patch", f"one of {', '.join((NONE, *PATCHES))}")
        for key in ("config", "run"):
            if key in c and not (isinstance(c[key], str) and FOLDER_NAME.fullmatch(c[key])):
                if key == "run" and c[key] == "":
                    continue
                raise bad(key, "a folder name (letters, digits, . _ + -)")
        where = f"{origin}: configs[{i}] ({c['vllm']} {c['mode']} {c['config']})"
        if not (_is_int(c["reads"]) and c["reads"] >= 1):
            raise bad("reads", "a positive integer", where)
        if not (_is_int(c["transitions"]) and c["transitions"] >= 0):
            raise bad("transitions", "an integer >= 0", where)
        for key, total in (("wrong", "reads"), ("wrong_transitions", "transitions")):
            if not (_is_int(c[key]) and 0 <= c[key] <= c[total]):
                raise bad(key, f"an integer in 0..{total} ({c[total]:,})", where)
        if "seeds" in c and not (_is_int(c["seeds"]) and c["seeds"] >= 1):
            raise bad("seeds", "a positive integer", where)
        if "k" in c and not (_is_int(c["k"]) and 1 <= c["k"] <= 15):
            raise bad("k", "an integer in 1..15", where)
        per = c.get("wrong_per_seed")
        if per is not None and not (
            isinstance(per, list)
            and all(_is_int(x) and x >= 0 for x in per)
            and sum(per) == c["wrong"]
            and len(per) == c.get("seeds", len(per))
        ):
            raise bad("wrong_per_seed", "a count >= 0 per seed, summing to wrong", where)
        _check_rate(c, "rate", "rate_ci95", 1.0, c["wrong"] / c["reads"], where)
        if "per_10k_transitions" in c or "per_10k_transitions_ci95" in c:
            point = 1e4 * c["wrong_transitions"] / max(c["transitions"], 1)
            _check_rate(c, "per_10k_transitions", "per_10k_transitions_ci95", 1e4, point, where)
        if not (_is_num(c["step_ms"]) and c["step_ms"] > 0):
            raise bad("step_ms", "a finite number of milliseconds > 0", where)
        land = c["landing"]
        if not (
            isinstance(land, dict)
            and set(land) == set(LANDING)
            and all(_is_num(v) and 0 <= v <= 1 for v in land.values())
            and abs(sum(land.values()) - 1) <= 1e-3
        ):
            raise bad("landing", f"shares of {', '.join(LANDING)} in [0, 1] summing to 1", where)
    return configs


def _check_rate(c: dict[str, Any], key: str, ci_key: str, top: float, counted: float,
                where: str) -> None:  # fmt: skip
    """``c[key]`` a number in [0, top] equal to what its counts give, inside ``c[ci_key]``, an
    ordered pair in [0, top]."""
    x, ci = c.get(key), c.get(ci_key)
    if not (_is_num(x) and 0 <= x <= top):
        raise SpecraceError(f"{where}: {key} must be a finite number in [0, {top:g}], got {x!r}")
    if abs(x - counted) > EPS * max(1.0, top):
        raise SpecraceError(f"{where}: {key} {x!r} is not what its counts give ({counted!r})")
    if not (isinstance(ci, list) and len(ci) == 2 and all(_is_num(v) for v in ci)):
        raise SpecraceError(f"{where}: {ci_key} must be [low, high], two finite numbers, "
                            f"got {ci!r}"[:400])  # fmt: skip
    lo, hi = ci
    tol = EPS * max(1.0, top)
    if not (0 <= lo <= hi <= top):
        raise SpecraceError(f"{where}: {ci_key} {ci!r} must be ordered, within [0, {top:g}]")
    if not (lo - tol <= x <= hi + tol):
        raise SpecraceError(f"{where}: {key} {x!r} lies outside its interval {ci_key} {ci!r}")


def wrong_gdn(reads: pd.DataFrame) -> pd.DataFrame:
    """The reads whose GDN-consumed count was wrong (``observed_vllm.parquet``): a speculative
    row whose wrong count the GDN kernel restored its state from. What ``vllm-ab`` counts as
    ``wrong_gdn`` and its corrupted generations, and ``vllm-consequence`` joins to tokens."""
    return reads[reads["consumed"] & reads["wrong"]]


def observed(folder: Path) -> dict[str, Any]:
    """One exported run: reads, transitions, wrong consumed counts, step time, landing mix,
    tokens/s."""
    meta = _json(folder / "export.json", "vllm-export summary")
    reads = _parquet(folder / "observed_vllm.parquet", "vLLM reads")
    consumed = reads[reads["consumed"]]
    wrong = consumed["wrong"]
    first = consumed["prev_drafts"] == 0
    reg = observed_regime(folder)
    tok = _tokens_per_s(folder, meta)
    lo, hi = wilson(int(wrong.sum()), len(consumed))
    tlo, thi = wilson(int((wrong & first).sum()), int(first.sum()))
    return {
        "vllm": meta["vllm_version"], "mode": meta["mode"], "patch": meta.get("patch", "none"),
        "config": meta["config"], "reads": int(len(consumed)), "wrong": int(wrong.sum()),
        "transitions": int(first.sum()), "wrong_transitions": int((wrong & first).sum()),
        "corrupted_generations": int(wrong_gdn(reads)["req_id"].nunique()),
        "generations": int(reads["req_id"].nunique()),
        "rate": float(wrong.mean()) if len(consumed) else 0.0, "rate_ci95": [float(lo), float(hi)],
        "per_10k_transitions_ci95": [1e4 * float(tlo), 1e4 * float(thi)],
        "step_ms": reg["step_ms"], "landing": {k: reg[k] for k in LANDING},
        "tokens_per_s": tok,
    }  # fmt: skip


def _tokens_per_s(folder: Path, meta: dict[str, Any]) -> float | None:
    path = folder.parent / "summary.json"
    if not path.is_file():
        return None
    summary = _json(path, "vllm-run summary")
    for res in summary.get("modes", {}).get(meta["mode"], {}).get("configs", []):
        if res["config"]["name"] == meta["config"]:
            p = res["instrumented"]
            return round(p["out_tokens"] / p["wall_s"], 1) if p.get("wall_s") else None
    return None


def judge(pred: dict[str, Any], obs: dict[str, Any]) -> dict[str, Any]:
    """The three parts of the criterion for one configuration."""
    lo, hi = obs["rate_ci95"]
    rate_in = lo <= pred["rate"] <= hi
    rel = abs(pred["rate"] - obs["rate"]) / obs["rate"] if obs["rate"] else 0.0
    rate_ok = rate_in and (obs["wrong"] < RATE_MIN_WRONG or rel <= RATE_REL)
    step_rel = abs(pred["step_ms"] - obs["step_ms"]) / obs["step_ms"]
    tv = 0.5 * sum(abs(pred["landing"][k] - obs["landing"][k]) for k in LANDING)
    return {
        "rate_ok": bool(rate_ok), "rate_inside_observed_ci": bool(rate_in),
        "rate_rel_error": round(rel, 4),
        "step_ok": bool(step_rel <= STEP_REL), "step_rel_error": round(step_rel, 4),
        "landing_ok": bool(tv <= LANDING_TV), "landing_tv": round(tv, 4),
        "meets_all": bool(rate_ok and step_rel <= STEP_REL and tv <= LANDING_TV),
    }  # fmt: skip


def run_folder(roots: list[Path], vllm: str, mode: str, config: str, run: str = "") -> Path:
    """The exported configuration under one of ``roots``; a grid prediction names its run
    (``vllm-plan --grid``): then only a root of that name, or that folder under a root."""
    if run:  # vllm-run --out RUNS/<run>, exported in place: RUNS/<run>/<mode>_<config>/
        runs = [r for r in roots if r.name == run] + [r / run for r in roots if (r / run).is_dir()]
        for folder in (d / f"{mode}_{config}" for d in runs):
            if (folder / "export.json").is_file():
                return folder
        roots = runs
    for root in roots:
        folder = root / f"v{vllm}" / f"{mode}_{config}"
        if (folder / "export.json").is_file():
            return folder
    raise SpecraceError(
        f"no exported run v{vllm}/{mode}_{config} under {', '.join(map(str, roots))}"
    )


def outcome(prereg: Path, roots: list[Path], partial: bool = False, score=None) -> dict[str, Any]:
    """Judge every prediction against its run. ``partial``: a prediction whose run did not
    happen (a device call cut short) is listed under ``not_run`` and left out of the fraction,
    instead of stopping the whole outcome. ``score(judged, predictions)``: more judgement of
    the (prediction, observed, export folder) triples, kept under ``forecast`` where it
    returns one (:mod:`gpu_check.vllm.prereg_forecast`)."""
    path = prereg / "predictions.json"
    preds = _json(path, "predictions")
    configs = check_predictions(preds, str(path))
    rows, not_run, judged = [], [], []
    for p in configs:
        try:
            folder = run_folder(roots, p["vllm"], p["mode"], p["config"], p.get("run", ""))
        except SpecraceError:
            if not partial:
                raise
            not_run.append(f"{p.get('run') or 'v' + p['vllm']}/{p['mode']}_{p['config']}")
            continue
        obs = observed(folder)
        judged.append((p, obs, folder))
        summary = _json(folder.parent / "summary.json", "vllm-run summary")
        rows.append(
            {
                "vllm": p["vllm"], "mode": p["mode"], "patch": p["patch"], "config": p["config"],
                "run": str(folder), "run_commit": summary.get("environment", {}).get("git_commit"),
                "predicted": {k: p[k] for k in ("reads", "wrong", "rate", "rate_ci95",
                                                "transitions", "wrong_transitions", "step_ms",
                                                "landing")},
                "observed": {k: obs[k] for k in ("reads", "wrong", "rate", "rate_ci95",
                                                 "transitions", "wrong_transitions", "step_ms",
                                                 "landing")},
                **judge(p, obs),
            }
        )  # fmt: skip
    n = len(rows)
    doc = {
        "schema": "specrace.vllm_outcome",
        "predictions_commit": preds.get("made_at_commit"),
        "criterion": {
            "rate_rel": RATE_REL,
            "rate_min_wrong": RATE_MIN_WRONG,
            "step_rel": STEP_REL,
            "landing_tv": LANDING_TV,
        },  # fmt: skip
        "configs": n,
        "meets_all_fraction": round(sum(r["meets_all"] for r in rows) / n, 4) if n else 0.0,
        **({"not_run": not_run} if partial else {}),
        "results": rows,
    }
    extra = score(judged, preds) if score is not None else None
    if extra is not None:
        doc["forecast"] = extra
    write_json(prereg / "outcome.json", doc, sign=True)
    return doc


RELEASE_FOLDER = re.compile(r"v\d+\.\d+\.\d+")
THROUGHPUT_FOLDER = re.compile(r"v(\d+\.\d+\.\d+)-throughput")


def throughput(folder: Path) -> dict[str, Any]:
    """``vllm-run --arm-repeats``: tokens/s of each arm's uninstrumented (baseline) pass, per
    round, and each round's ratio to the unpatched arm of the same round."""
    summary = _json(folder / "summary.json", "vllm-run summary")
    per: dict[str, dict[int, float]] = {}
    for res in summary["modes"]["align"]["configs"]:
        cfg, p = res["config"], res["baseline"]
        per.setdefault(cfg.get("patch", "none"), {})[int(cfg.get("rep", 0))] = round(
            p["out_tokens"] / p["wall_s"], 1
        )
    base = per.get("none")
    if not base:
        raise SpecraceError(f"{folder}: no unpatched arm to compare with")
    arms = {}
    for name, rounds in per.items():
        ratios = [round(rounds[r] / base[r], 4) for r in sorted(rounds) if r in base]
        arms[name] = {
            "tokens_per_s": [rounds[r] for r in sorted(rounds)],
            "tokens_per_s_mean": round(sum(rounds.values()) / len(rounds), 1),
            "ratio_to_unpatched": ratios,
            "ratio_mean": round(sum(ratios) / len(ratios), 4),
        }
    return {"vllm": summary["vllm_version"], "run": str(folder), "rounds": len(base), "arms": arms}


def ab_summary(roots: list[Path], out: Path) -> dict[str, Any]:
    """Every exported run under ``roots`` (release folders ``v<X.Y.Z>/``) as one arm; the
    throughput rounds of ``v<X.Y.Z>-throughput/`` folders beside them."""
    folders = sorted(
        p.parent
        for r in roots
        for p in r.glob("v*/*/export.json")
        if RELEASE_FOLDER.fullmatch(p.parent.parent.name)
    )
    if not folders:
        raise SpecraceError(f"no exported run under {', '.join(map(str, roots))}")
    arms = []
    for f in folders:
        o = observed(f)
        arms.append(
            {
                "name": f"{o['vllm']} {o['mode']} {o['config']}", "vllm": o["vllm"],
                "patch": o["patch"], "mode": o["mode"], "reads": o["reads"],
                "transitions": o["transitions"], "wrong_gdn": o["wrong"],
                "wrong_gdn_at_transitions": o["wrong_transitions"],
                "corrupted_generations": o["corrupted_generations"],
                "generations": o["generations"],
                "rate_per_10k": round(1e4 * o["wrong_transitions"] / max(o["transitions"], 1), 2),
                "ci95": [round(x, 2) for x in o["per_10k_transitions_ci95"]],
                "rate_per_10k_reads": round(1e4 * o["rate"], 2),
                "ci95_reads": [round(1e4 * x, 2) for x in o["rate_ci95"]],
                "tokens_per_s": o["tokens_per_s"], "step_ms": o["step_ms"], "run": str(f),
            }
        )  # fmt: skip
    tp = [
        throughput(f)
        for r in roots
        for f in sorted(r.iterdir())
        if f.is_dir() and THROUGHPUT_FOLDER.fullmatch(f.name)
    ]
    doc = {"schema": "specrace.vllm_ab", "arms": arms, "throughput": tp}
    write_json(out, doc, sign=True)
    return doc


def outcome_text(doc: dict[str, Any]) -> str:
    lines = [f"{doc['configs']} configurations, meets_all {doc['meets_all_fraction']:.2f}"]
    for name, e in doc.get("forecast", {}).get("per_regime", {}).items():
        cov = ", ".join(f"{p} {c['covered']}/{c['passes']}" for p, c in e["coverage"].items())
        c4 = e["conditional_meets_all"]
        lines.append(f"  forecast, {name}: {e['passes']} passes; inside the 90 % interval: {cov}; "
                     f"given the gauge, meets all {c4['meets']}/{c4['passes']}")  # fmt: skip
        if "rate_above_upper" in e:  # beside (iii): the unsafe direction in any regime
            up = e["rate_above_upper"]
            lines.append(f"  forecast, rate above the interval's top, any regime: "
                         f"{up['above_upper']}/{up['passes']} {up['by_regime']}")  # fmt: skip
    for name, e in doc.get("forecast", {}).get("step_gauge", {}).items():
        if name != "factors":
            lines.append(f"  step gauge, {name}: meets all {e['step_gauge_meets_all']}/"
                         f"{e['passes']} (the gauge: {e['gauge_meets_all']})")  # fmt: skip
    for r in doc["results"]:
        p, o = r["predicted"], r["observed"]
        lines.append(
            f"  {r['vllm']} {r['mode']} {r['config']}: rate {100 * p['rate']:.3f} % predicted, "
            f"{100 * o['rate']:.3f} % [{100 * o['rate_ci95'][0]:.3f}, "
            f"{100 * o['rate_ci95'][1]:.3f}] observed ({'ok' if r['rate_ok'] else 'miss'}); "
            f"step {p['step_ms']} / {o['step_ms']} ms ({'ok' if r['step_ok'] else 'miss'}); "
            f"landing TV {r['landing_tv']} ({'ok' if r['landing_ok'] else 'miss'})"
        )
    return "\n".join(lines)


def ab_text(doc: dict[str, Any]) -> str:
    lines = ["arms:"]
    for a in doc["arms"]:
        lo, hi = a["ci95"]
        lines.append(
            f"  {a['name']}: {a['wrong_gdn']:,} wrong of {a['reads']:,} reads; "
            f"{a['wrong_gdn_at_transitions']:,} of {a['transitions']:,} transitions "
            f"({a['rate_per_10k']:.1f} per 10k [{lo:.1f}, {hi:.1f}]); "
            f"{a['corrupted_generations']:,} of {a['generations']:,} generations; "
            f"{a['tokens_per_s']} tokens/s"
        )
    for t in doc["throughput"]:
        lines.append(f"throughput, vLLM {t['vllm']}, {t['rounds']} rounds (baseline passes):")
        for name, a in t["arms"].items():
            lines.append(
                f"  {name}: {a['tokens_per_s_mean']} tokens/s; ratio to unpatched per round "
                f"{a['ratio_to_unpatched']} (mean {a['ratio_mean']})"
            )
    return "\n".join(lines)


def ab_markdown(doc: dict[str, Any]) -> str:
    """The arms table as docs/vllm-fixes.md carries it (a test holds the two equal)."""
    rows = [
        "| vLLM | mode | patch | reads | wrong (GDN-consumed) | transitions | wrong at "
        "transitions | per 10k transitions [95 %] | per 10k reads [95 %] | corrupted "
        "generations | tokens/s (instrumented) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for a in doc["arms"]:
        t, r = a["ci95"], a["ci95_reads"]
        rows.append(
            f"| {a['vllm']} | {a['mode']} | {a['patch']} | {a['reads']:,} | {a['wrong_gdn']:,} | "
            f"{a['transitions']:,} | {a['wrong_gdn_at_transitions']:,} | "
            f"{a['rate_per_10k']:.1f} [{t[0]:.1f}, {t[1]:.1f}] | "
            f"{a['rate_per_10k_reads']:.1f} [{r[0]:.1f}, {r[1]:.1f}] | "
            f"{a['corrupted_generations']:,} / {a['generations']:,} | {a['tokens_per_s']:,.0f} |"
        )
    return "\n".join(rows) + "\n"
