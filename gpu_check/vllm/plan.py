"""``python -m gpu_check vllm-plan``: what sim predicts for a ``vllm-run`` before it runs.

It takes ``vllm-run``'s own arguments (releases, modes, configurations, workload, patch arms)
and writes ``predictions.json``: per configuration the rate of wrong consumed counts over all
reads and over the prefill -> first-spec transitions (counts, Wilson 95 % intervals), the
median step and the landing mix (entry / between / after / waited, as ``vllm-forward`` counts
them). The file is committed before the hardware run that tests it and never edited after;
the outcome goes beside it (``outcome.json``). The model is run forward exactly as
``vllm-forward`` runs it: sim's own scheduler on the configuration's requests, the timing of
the committed calibration (``data/vllm/forward/summary.json``) for the (release, mode,
``max_num_seqs``) group, seeds 0..N-1 drawing jitter and stalls. A patch arm is predicted with
the sim policy its fix implements (:data:`gpu_check.vllm.patches.PATCHES`).

``--grid FILE`` predicts several ``vllm-run`` invocations at once (releases, k, arrivals
differ between them): a TOML file of ``[[run]]`` tables, each one invocation's arguments
(``name``, its ``--out`` folder; ``vllm``, ``k``, ``modes``, ``configs``, and optionally
``arrivals``, ``arrival_every``, ``num_requests``, ``seed``, ``output_range``, ``patch``,
``repeats``: every configuration that many passes, each predicted alike; ``baseline = false``:
no uninstrumented pass before each, ``--no-baseline``; the prediction is of the instrumented
pass either way).
``predictions.json`` then lists each invocation's exact ``vllm-run`` command, and every
configuration names its run (``run``) so ``vllm-outcome`` finds it even where two runs share a
configuration name. Each configuration says whether any committed run under data/vllm
already measured it (``never_run``). A concurrency without a calibration group is
interpolated (:func:`gpu_check.vllm.calibrate.group_timing`). Where the committed
``vllm-forward`` carries its forecast model (summary.json ``forecast``), each configuration
also carries ``forecast``: central values and 90 % predictive intervals of rate, step and
entry share over the records' host speeds (:func:`gpu_check.vllm.forecast.unconditional`;
no gauge yet). ``vllm-outcome`` reads predictions with or without it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from gpu_check.vllm.config import RunConfig, workload
from gpu_check.vllm.forward import Measured, policy_for, scenario_for, simulate_seed
from gpu_check.vllm.patches import PATCHES
from sim.errors import SpecraceError
from sim.model.policies import get_policy
from sim.model.scheduling import build_schedule
from sim.runs.inputs import read_bounded
from sim.runs.io import write_json
from sim.runs.stats import wilson

CALIBRATION = Path("data/vllm/forward/summary.json")


def _scenario(vllm: str, mode: str, cfg: RunConfig, cal: dict[str, Any], k: int):
    """``vllm-forward``'s scenario for a configuration that has not run: its requests are
    ``config.workload(cfg)``, its align block the committed runs' (80)."""
    reqs = workload(cfg)
    raw = {
        "num_speculative_tokens": k,
        "config": cfg.to_dict(),
        "requests": [
            {"prompt_len": len(r["prompt_token_ids"]), "output_len": r["max_tokens"]} for r in reqs
        ],
    }
    c = Measured(
        run="plan", folder=Path("data/vllm/v0.24.0/align_s16_d0ms"), raw_path=Path("-"),
        mode=mode, vllm=vllm, max_num_seqs=cfg.max_num_seqs, gpu_delay_us=cfg.gpu_delay_us,
        export={}, k=k,
    )  # fmt: skip
    return scenario_for(c, cal, raw)


def prepared(vllm: str, mode: str, cfg: RunConfig, cal: dict[str, Any], k: int = 3):
    """The schedule sim's scheduler makes of the configuration's requests, its scenario and
    the policy its run gets: what every forecast of it simulates."""
    sc = _scenario(vllm, mode, cfg, cal, k)
    max_steps = 8 * (sum(r.output_len for r in sc.workload.requests) // cfg.max_num_seqs + 64)
    sched = build_schedule(sc, 0, max_steps)
    busy = [i for i, s in enumerate(sched.steps) if s.num_reqs]
    if not busy or busy[-1] >= max_steps - 1:
        raise SpecraceError(f"{cfg.name}: the workload does not finish in {max_steps} steps")
    sched.steps = sched.steps[: busy[-1] + 1]
    policy = (
        get_policy(PATCHES[cfg.patch].sim_policy) if cfg.patch != "none" else policy_for(mode, vllm)
    )
    return sched, sc, policy


def predict_config(
    vllm: str,
    mode: str,
    cfg: RunConfig,
    cal: dict[str, Any],
    k: int = 3,
    seeds: int = 3,
    run: str = "",
    model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One configuration's prediction; with ``model`` (the committed vllm-forward's
    ``forecast``), its 90 % intervals too (:func:`gpu_check.vllm.forecast.unconditional`)."""
    sched, sc, policy = prepared(vllm, mode, cfg, cal, k)
    keys = ("reads", "wrong", "transitions", "wrong_transitions", "steps")
    regime_keys = ("entry", "between", "after", "waited")
    per = [simulate_seed(sched, sc, policy, seed) for seed in range(seeds)]
    tot = {k_: sum(p[k_] for p in per) for k_ in keys}
    regime = {k_: sum(p[k_] for p in per) for k_ in regime_keys}
    per_seed = [p["wrong"] for p in per]
    step_ns = [p["step_ns_median"] for p in per]
    lo, hi = wilson(tot["wrong"], tot["reads"])
    tlo, thi = wilson(tot["wrong_transitions"], tot["transitions"])
    interval = {}
    if model is not None:
        from gpu_check.vllm import forecast as fc
        from gpu_check.vllm.calibrate import group_name

        interval = {"forecast": fc.unconditional(
            sched, sc, policy, model, group_name((vllm, mode, cfg.max_num_seqs, k)),
            max(tot["reads"] // seeds, 1), f"{run}/{vllm}/{mode}_{cfg.name}/k{k}",
            seeds, simulate_seed,
        )}  # fmt: skip
    return {
        "vllm": vllm, "mode": mode, "patch": cfg.patch, "policy": policy.name,
        "config": cfg.name, "run_config": cfg.to_dict(), "k": k, "seeds": seeds,
        **({"run": run} if run else {}), "never_run": never_run(vllm, mode, cfg, k),
        **{k_: v for k_, v in tot.items() if k_ != "steps"},
        "wrong_per_seed": per_seed,
        "rate": tot["wrong"] / tot["reads"] if tot["reads"] else 0.0,
        "rate_ci95": [float(lo), float(hi)],
        "per_10k_transitions": 1e4 * tot["wrong_transitions"] / max(tot["transitions"], 1),
        "per_10k_transitions_ci95": [1e4 * float(tlo), 1e4 * float(thi)],
        "step_ms": round(float(np.median(step_ns)) / 1e6, 3),
        "landing": {k_: round(v / tot["steps"], 4) for k_, v in regime.items()},
        **interval,
    }  # fmt: skip


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


Arm = tuple[str, str, RunConfig]
# The calibration a pre-registration was made on, frozen beside its predictions.json: a later
# regeneration of CALIBRATION must not move the round's gauge-conditioned forecast (iv).
FROZEN_CALIBRATION = "calibration.json"
GridArm = tuple[str, str, RunConfig, int, str]  # + k and the run (vllm-run --out) it is in


def plan(
    arms: list[Arm] | list[GridArm],
    out: Path,
    command: str,
    seeds: int = 3,
    k: int = 3,
    runs: list[str] | None = None,
) -> dict[str, Any]:
    """``arms``: (release, mode, configuration) as ``vllm-run`` would run them, or with a
    grid, (release, mode, configuration, k, run); ``runs``: the grid's vllm-run commands."""
    try:
        committed = json.loads(CALIBRATION.read_text())
        cal = committed["calibration"]
    except (OSError, ValueError, KeyError) as e:
        raise SpecraceError(f"{CALIBRATION}: no calibration ({e})") from None
    model = committed.get("forecast")  # a vllm-forward before #44's intervals has none
    full: list[GridArm] = [a if len(a) == 5 else (*a, k, "") for a in arms]  # type: ignore[misc]
    configs = []
    first: dict[tuple, dict[str, Any]] = {}  # a repeat (rep > 0) is predicted as its first pass
    for v, m, c, k_, r in full:
        key = (v, m, replace(c, rep=0), k_, r)
        if key not in first:
            first[key] = predict_config(v, m, replace(c, rep=0), cal, k_, seeds, r, model)
        configs.append({**first[key], "config": c.name, "run_config": c.to_dict()})
    doc = {
        "schema": "specrace.vllm_predictions",
        "command": command,
        "made_at_commit": _commit(),
        "calibration": str(CALIBRATION),
        "wrong": "the count the configuration's policy consumes differs from step N's true "
        "count (align and patch arms: the CPU value; none: what the GDN kernel reads)",
        **({"runs": runs} if runs else {}),
        "configs": configs,
    }
    # the calibration first: a predictions.json on disk always has its calibration beside it
    write_once(out / FROZEN_CALIBRATION, committed)  # what vllm-outcome's (iv) will run on
    write_once(out / "predictions.json", doc)
    return doc


def plan_dir(text: str) -> Path:
    """vllm-plan's ``--out``: a new or empty folder (a pre-registration is one file in a folder
    of its own, which vllm-outcome later joins), checked before any work."""
    from sim.runs.outputs import check_path

    path = check_path(text)
    if path.exists() and not (path.is_dir() and not any(path.iterdir())):
        raise SpecraceError(f"--out {text} exists and is not an empty folder: a "
                            "pre-registration goes into a new folder")  # fmt: skip
    return path


def write_once(path: Path, doc: dict[str, Any]) -> None:
    """A pre-registration is never edited: ``predictions.json`` and the calibration it was
    made on are written only where none is (checked again at the moment of writing), signed
    as specrace's."""
    from sim.runs.outputs import check_path

    check_path(path.parent)
    if os.path.lexists(path):
        raise SpecraceError(
            f"--out {path.parent} already holds a {path.name}: a pre-registered "
            "prediction is never overwritten; name a new folder"
        )
    write_json(path, doc, sign=True)


def _measured_keys(root: Path = Path("data/vllm")) -> set[tuple]:
    """(release, mode, k, seqs, delay us, arrivals, arrival_every, seed, requests) of every
    configuration a committed run's summary.json records."""
    keys = set()
    for path in root.glob("**/summary.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or "modes" not in doc:
            continue
        release = str(doc.get("vllm_version", ""))
        for mode, entry in doc["modes"].items():
            k = entry.get("engine", {}).get("num_speculative_tokens", 3)
            for res in entry.get("configs", []):
                c = res["config"]
                keys.add((release, mode, k, c["max_num_seqs"], c["gpu_delay_us"],
                          c.get("arrivals", "all-at-start"), c.get("arrival_every", 2),
                          c.get("seed", 0), c.get("num_requests", 192)))  # fmt: skip
    return keys


_MEASURED: set[tuple] | None = None


def never_run(vllm: str, mode: str, cfg: RunConfig, k: int) -> bool:
    global _MEASURED
    if _MEASURED is None:
        _MEASURED = _measured_keys()
    return (vllm, mode, k, cfg.max_num_seqs, cfg.gpu_delay_us, cfg.arrivals,
            cfg.arrival_every, cfg.seed, cfg.num_requests) not in _MEASURED  # fmt: skip


GRID_KEYS = {
    "name", "vllm", "k", "modes", "configs", "arrivals", "arrival_every", "num_requests",
    "seed", "output_range", "patch", "repeats", "baseline",
}  # fmt: skip


# A run's name is its vllm-run --out folder (RUNS/<name>), a configuration's part of one.
FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
GRID_MAX = 16 << 20  # a --grid file: the committed ones are a few KiB
# key -> (inclusive range) of the grid's integer values, as vllm-run's options bound them
GRID_INTS = {"k": (1, 15), "num_requests": (1, 10**6), "arrival_every": (1, 10**6),
             "seed": (0, 2**63 - 1), "repeats": (1, 100)}  # fmt: skip
GRID_STRS = ("modes", "configs", "arrivals", "output_range", "patch")
GRID_SEQS_MAX = 65_536  # max_num_seqs of a configuration, as vllm-run's batch sizes
GRID_DELAY_US_MAX = 10**8  # 100 s of GPU delay a step


def _read_grid(path: Path) -> list[dict[str, Any]]:
    """The ``[[run]]`` tables of a ``--grid`` file: a regular file of TOML, each run's keys
    known and of the type and range vllm-run takes (else a ValueError naming the run, the key
    and the value)."""
    import tomllib

    from sim.resolve.release_facts import RELEASES

    try:
        doc = tomllib.loads(read_bounded(path, "--grid", GRID_MAX))
    except SpecraceError as e:
        raise ValueError(str(e)) from None
    except ValueError as e:  # tomllib.TOMLDecodeError, or an integer of thousands of digits
        raise ValueError(f"--grid {path}: not valid TOML ({e})") from None
    except RecursionError:
        raise ValueError(f"--grid {path}: not valid TOML (nested too deeply)") from None
    extra = sorted(set(doc) - {"run"})
    if extra:
        raise ValueError(f"--grid {path}: unknown top-level keys {extra} (only [[run]] tables)")
    runs = doc.get("run")
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        raise ValueError(f"--grid {path}: no [[run]] table")

    def shown(x: Any) -> str:
        text = repr(x)
        return text if len(text) <= 60 else text[:57] + "..."

    for i, r in enumerate(runs):
        bad = set(r) - GRID_KEYS
        missing = {"name", "vllm", "k", "modes", "configs"} - set(r)
        if bad or missing:
            raise ValueError(
                f"--grid {path}: run {i}: unknown keys {sorted(bad)}, missing {sorted(missing)}"
            )
        name = r["name"]
        if not isinstance(name, str) or not FOLDER_NAME.fullmatch(name):
            raise ValueError(f"--grid {path}: run {i}: name must be a folder name (letters, "
                             f"digits, . _ + -), got {shown(name)}")  # fmt: skip
        label = f"--grid {path}: run {name}"
        if not isinstance(r["vllm"], str) or r["vllm"] not in RELEASES:
            raise ValueError(f"{label}: vllm must be a release sim models ({', '.join(RELEASES)})"
                             f", got {shown(r['vllm'])}")  # fmt: skip
        for key, (lo, hi) in GRID_INTS.items():
            v = r.get(key, lo)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{label}: {key} must be an integer in {lo:,}..{hi:,}, "
                                 f"got {shown(v)}")  # fmt: skip
        for key in GRID_STRS:
            if key in r and not isinstance(r[key], str):
                raise ValueError(f"{label}: {key} must be a string, got {shown(r[key])}")
        if not isinstance(r.get("baseline", True), bool):
            raise ValueError(f"{label}: baseline must be true or false, got "
                             f"{shown(r['baseline'])}")  # fmt: skip
    return runs


def arms_from_grid(path: Path) -> tuple[list[GridArm], list[str]]:
    """The arms of a ``--grid`` file and the ``vllm-run`` command of each of its runs."""
    import shlex

    from gpu_check.vllm.config import parse_plan
    from gpu_check.vllm.patches import patch_names
    from gpu_check.vllm.run import parse_range, with_patches, with_repeats

    runs = _read_grid(path)
    arms: list[GridArm] = []
    commands = []
    names = set()
    for r in runs:
        label = f"--grid {path}: run {r['name']}"
        if r["name"] in names:
            raise ValueError(f"--grid {path}: run name {r['name']!r} twice")
        names.add(r["name"])
        k = r["k"]
        patch = r.get("patch", "none")
        repeats = r.get("repeats", 1)
        try:
            lo, hi = parse_range(r.get("output_range", "8:160"))
            base = RunConfig(
                num_requests=r.get("num_requests", 192), seed=r.get("seed", 0),
                arrivals=r.get("arrivals", "all-at-start"),
                arrival_every=r.get("arrival_every", 2), output_min=lo, output_max=hi,
                baseline=False,
            )  # fmt: skip
            if base.arrivals not in ("all-at-start", "staggered"):
                raise ValueError(f"arrivals {base.arrivals!r}: all-at-start or staggered")
            modes = parse_plan(r["modes"], r["configs"], base)
            by_mode = with_repeats(with_patches(modes, patch_names(patch)), repeats)
        except ValueError as e:
            raise ValueError(f"{label}: {e}") from None
        for c in (c for cs in by_mode.values() for c in cs):
            if c.max_num_seqs > GRID_SEQS_MAX or c.gpu_delay_us > GRID_DELAY_US_MAX:
                raise ValueError(f"{label}: configuration {c.name}: max_num_seqs "
                                 f"must be in 1..{GRID_SEQS_MAX:,} and the GPU delay at most "
                                 f"{GRID_DELAY_US_MAX:,} us")  # fmt: skip
        arms += [(r["vllm"], m, c, k, r["name"]) for m, cs in by_mode.items() for c in cs]
        argv = ["vllm-run", "--vllm-version", r["vllm"], "--k", str(k), "--modes", r["modes"],
                "--configs", r["configs"], "--arrivals", base.arrivals,
                "--arrival-every", str(base.arrival_every),
                "--num-requests", str(base.num_requests), "--seed", str(base.seed),
                "--output-range", f"{lo}:{hi}", "--patch", patch,
                *(["--repeats", str(repeats)] if repeats > 1 else []),
                *([] if r.get("baseline", True) else ["--no-baseline"]),
                "--out", f"RUNS/{r['name']}"]  # fmt: skip
        commands.append("python -m gpu_check " + shlex.join(argv))
    return arms, commands


def arms_from_args(args: Any) -> list[tuple[str, str, RunConfig]]:
    from gpu_check.vllm.config import parse_plan
    from gpu_check.vllm.patches import patch_names
    from gpu_check.vllm.run import parse_range, with_patches

    lo, hi = parse_range(args.output_range)
    base = RunConfig(
        num_requests=args.num_requests, seed=args.seed, arrivals=args.arrivals,
        arrival_every=args.arrival_every, output_min=lo, output_max=hi, baseline=False,
    )  # fmt: skip
    by_mode = with_patches(parse_plan(args.modes, args.configs, base), patch_names(args.patch))
    versions = [v for v in args.vllm.split(",") if v]
    if not versions:
        raise ValueError("--vllm takes a comma list of releases")
    return [(v, m, c) for v in versions for m, cs in by_mode.items() for c in cs]


def summary_text(doc: dict[str, Any]) -> str:
    lines = [f"predictions ({doc['made_at_commit'][:12]}): {doc['command']}"]
    for c in doc["configs"]:
        lo, hi = c["rate_ci95"]
        tlo, thi = c["per_10k_transitions_ci95"]
        lines.append(
            f"  {c['vllm']} {c['mode']} {c['config']} [{c['policy']}]: wrong {c['wrong']:,} of "
            f"{c['reads']:,} reads ({100 * c['rate']:.3f} % [{100 * lo:.3f}, {100 * hi:.3f}]); "
            f"transitions {c['wrong_transitions']:,} of {c['transitions']:,} "
            f"({c['per_10k_transitions']:.1f} per 10k [{tlo:.1f}, {thi:.1f}]); "
            f"step {c['step_ms']} ms; landing {c['landing']}"
        )
        if "forecast" in c:
            f = c["forecast"]
            lines.append(
                f"    90 % interval (any host speed of the records): rate "
                f"[{100 * f['rate_pi90'][0]:.3f}, {100 * f['rate_pi90'][1]:.3f}] %, step "
                f"[{f['step_pi90'][0]:.1f}, {f['step_pi90'][1]:.1f}] ms, entry share "
                f"[{f['entry_pi90'][0]:.2f}, {f['entry_pi90'][1]:.2f}] ({f['regime_predicted']})"
            )
    return "\n".join(lines)
