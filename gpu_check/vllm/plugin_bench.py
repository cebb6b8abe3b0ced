"""``python -m gpu_check vllm-plugin-bench``: what the vLLM plugin costs (issue 46), measured.

One process, one ``vllm.LLM`` (the tiny model of ``vllm-run``, V1 runner, async scheduling,
MTP), and every arm of the plugin run on it in alternating rounds: round r runs each
configuration's arms once, in the order of ``--arms`` rotated by r (ABCDE, BCDEA, ...), so
host-speed drift (the same host varies 1.5x between windows) reaches every arm alike and no arm
always runs first. The arms (:data:`ARMS`): ``off`` (the plugin loaded with nothing enabled),
``watch``, each guard, and watch with a guard.

Why one engine with the plugin toggled, not one engine per arm: building an engine takes 45 to
155 s on the H200 (data/vllm), so an engine per arm and round would allow one round per call.
What :func:`specrace.plugin.register` does is confined to the V1 runner class (the guard's
methods, the watch's ``execute_model`` wrapper, its mark) and, at the first step of each
runner, the watch's instance hooks; the process keeps only ``specrace.plugin._loaded``. So per
pass: the class's ``__dict__`` is copied, ``_loaded`` cleared, ``register()`` called with the
arm's environment (the entry point is not installed on the GPU machine); after the pass the
watch's hooks are taken off, the class's ``__dict__`` is put back and checked entry by entry
(identity), and an instance attribute left shadowing a method stops the bench. Two things
differ from a server started with the plugin: ``private-d2h``'s buffer is allocated by the same
``gpu_check.vllm.patches.allocate_private`` its ``__init__`` wrapper calls, since the runner
already exists; and the watch arms set up a new watch at each pass's first step (a pinned
ring of 16 steps, a CUDA stream, 16 events), inside the timed pass, which a server pays once.

Per pass: ``drive``'s wall clock over the whole workload (requests added at their arrival
step, prefix cache reset first, a ``gc.collect`` and a device sync before every arm alike),
output tokens and engine steps; for watch arms the watch's own totals after the pass (steps
judged, reads, wrong reads, steps skipped) and the lines of its JSONL, which are copied under
``watch/``. Output: ``rounds.csv`` (one row per round x configuration x arm) and
``summary.json`` (:func:`summarize`), both rewritten after every pass, so a call cut short
keeps what it measured. ``--time-limit`` starts no round the slowest round so far would not
finish in.
"""

from __future__ import annotations

import atexit
import csv
import gc
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

KIND = "vllm-plugin-bench"
# arm -> (watch, guard)
ARMS: dict[str, tuple[bool, str | None]] = {
    "off": (False, None),
    "watch": (True, None),
    "private-d2h": (False, "private-d2h"),
    "sync-before-moves": (False, "sync-before-moves"),
    "watch+private-d2h": (True, "private-d2h"),
    "watch+sync-before-moves": (True, "sync-before-moves"),
}
DEFAULT_ARMS = "off,watch,private-d2h,sync-before-moves,watch+private-d2h"
PLUGIN_ENV = ("SPECRACE_WATCH", "SPECRACE_GUARD", "SPECRACE_WATCH_OUT", "SPECRACE_WATCH_EVERY")
COLUMNS = (
    "round", "config", "position", "arm", "watch", "guard", "plugin_state", "t_start_s",
    "wall_s", "out_tokens", "engine_steps", "tokens_per_s", "watch_runner_steps",
    "watch_steps", "watch_reads", "watch_wrong", "watch_skipped_steps", "watch_jsonl_lines",
    "watch_host_ms",
)  # fmt: skip
BOOTSTRAP = 4000  # resamples of the paired ratios' median (seeded: the summary is reproducible)


class BenchError(RuntimeError):
    """The bench cannot go on (a class not restored, a plugin that did not install)."""


# -- the plan (no torch, no vLLM) -----------------------------------------------------------
def parse_arms(text: str) -> list[str]:
    """``"off,watch"`` -> the arms, in order: distinct, known, ``off`` among them (the ratios'
    reference)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in ARMS]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(
            f"--arms takes a comma list of distinct names from {', '.join(ARMS)}; got {text!r}"
        )
    if "off" not in names:
        raise ValueError(f"--arms {text!r}: off must be one of them (each arm is compared to it)")
    return names


def schedule(arms: list[str], rounds: int) -> list[list[str]]:
    """Each round's arm order: ``arms`` rotated by the round number, so every arm runs once a
    round, takes every position equally often over ``len(arms)`` rounds, and no arm runs twice
    in a row with three or more arms (two give AB BA AB ..., balanced against a linear drift)."""
    n = len(arms)
    return [arms[r % n :] + arms[: r % n] for r in range(rounds)]


@dataclass(frozen=True)
class Plan:
    arms: list[str]
    configs: list[Any]  # gpu_check.vllm.config.RunConfig
    rounds: int
    mode: str
    k: int
    weights: str
    time_limit_s: float


def plan_from_args(args: Any) -> Plan:
    """The checked arguments (ValueError: one line for the CLI). Imports no torch."""
    from gpu_check.vllm import weights
    from gpu_check.vllm.config import RunConfig, parse_configs
    from gpu_check.vllm.run import parse_range, runner_refusal

    arms = parse_arms(args.arms)
    out_min, out_max = parse_range(args.output_range)
    base = RunConfig(num_requests=args.num_requests, seed=args.seed, baseline=False,
                     output_min=out_min, output_max=out_max)  # fmt: skip
    configs = parse_configs(args.configs, base)
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ValueError(f"--configs {args.configs!r}: a configuration is named twice")
    weights.check_variant(args.weights)
    if args.rounds < 1:
        raise ValueError("--rounds must be >= 1")
    if args.time_limit < 0:
        raise ValueError("--time-limit must be >= 0 (0: none)")
    refusal = runner_refusal("v1", args.vllm_version)
    if refusal:
        raise ValueError(f"{refusal.split(':')[0]}: the plugin has nothing to measure there")
    return Plan(arms, configs, args.rounds, args.mode, args.k, args.weights,
                float(args.time_limit))  # fmt: skip


def arm_env(arm: str, watch_dir: Path) -> dict[str, str]:
    """The plugin's environment for ``arm`` (every key of :data:`PLUGIN_ENV`; "" is unset)."""
    watch, guard = ARMS[arm]
    return {
        "SPECRACE_WATCH": "1" if watch else "",
        "SPECRACE_GUARD": guard or "",
        "SPECRACE_WATCH_OUT": str(watch_dir) if watch else "",
        "SPECRACE_WATCH_EVERY": "",
    }


def expected_state(arm: str) -> str:
    """What ``register()`` must report for ``arm`` on a V1 release."""
    return "inert" if arm == "off" else "installed"


# -- the summary (no torch) -------------------------------------------------------------------
def _num(x: Any) -> float | None:
    if x is None or x == "":
        return None
    return float(x)


def bootstrap_median(values: list[float], n: int = BOOTSTRAP, seed: int = 0) -> list[float] | None:
    """The 95 % percentile interval of the median of ``values`` (None under 3 values)."""
    if len(values) < 3:
        return None
    rng = np.random.default_rng(seed)
    v = np.asarray(values, dtype=float)
    med = np.median(rng.choice(v, size=(n, len(v)), replace=True), axis=1)
    return [round(float(np.percentile(med, 2.5)), 4), round(float(np.percentile(med, 97.5)), 4)]


def paired_ratios(rows: list[dict[str, Any]], config: str, arm: str) -> list[tuple[int, float]]:
    """(round, tokens/s of ``arm`` / tokens/s of ``off``) for every round of ``config`` that
    measured both, in round order."""
    tps: dict[tuple[int, str], float] = {}
    for r in rows:
        if r["config"] == config and _num(r.get("tokens_per_s")):
            tps[(int(r["round"]), r["arm"])] = float(r["tokens_per_s"])
    rounds = sorted({k[0] for k in tps})
    return [
        (rd, tps[(rd, arm)] / tps[(rd, "off")])
        for rd in rounds
        if (rd, arm) in tps and (rd, "off") in tps
    ]


def summarize(rows: list[dict[str, Any]], arms: list[str], configs: list[str]) -> dict[str, Any]:
    """Per configuration and arm: tokens/s (median, min, max over rounds), the paired ratio to
    ``off`` (per round, then median, min, max, a bootstrap interval of the median, the count),
    the watch's totals; and the checks: every arm's plugin state as expected, every watch's
    JSONL as long as its wrong count, every watch armed and judging steps in every pass, no
    wrong read under watch with a guard."""
    results: dict[str, Any] = {}
    states_ok = jsonl_ok = armed_ok = True
    guarded_zero: dict[str, bool] = {}
    for cfg in configs:
        per: dict[str, Any] = {}
        for arm in arms:
            mine = [r for r in rows if r["config"] == cfg and r["arm"] == arm]
            tps = [float(r["tokens_per_s"]) for r in mine if _num(r.get("tokens_per_s"))]
            entry: dict[str, Any] = {"passes": len(tps)}
            if tps:
                entry |= {"median_tokens_per_s": round(float(np.median(tps)), 1),
                          "min_tokens_per_s": round(min(tps), 1),
                          "max_tokens_per_s": round(max(tps), 1)}  # fmt: skip
            for r in mine:
                states_ok &= r.get("plugin_state") == expected_state(arm)
            if arm != "off":
                pairs = paired_ratios(rows, cfg, arm)
                ratios = [x for _, x in pairs]
                entry["ratio_to_off"] = {
                    "rounds": len(ratios),
                    "per_round": [round(x, 4) for x in ratios],
                    "median": round(float(np.median(ratios)), 4) if ratios else None,
                    "min": round(min(ratios), 4) if ratios else None,
                    "max": round(max(ratios), 4) if ratios else None,
                    "bootstrap95_median": bootstrap_median(ratios),
                }
            if ARMS[arm][0]:
                keys = ("watch_runner_steps", "watch_steps", "watch_reads", "watch_wrong",
                        "watch_skipped_steps", "watch_jsonl_lines")  # fmt: skip
                done = [r for r in mine if _num(r.get("watch_steps")) is not None]
                armed_ok &= len(done) == len(mine) and all(_num(r["watch_steps"]) for r in done)
                entry["watch"] = {k[6:]: int(sum(_num(r[k]) or 0 for r in done)) for k in keys}
                entry["watch"]["wrong_per_round"] = [int(_num(r["watch_wrong"]) or 0) for r in done]
                entry["watch"].update(host_share(done))
                jsonl_ok &= all(_num(r["watch_jsonl_lines"]) == _num(r["watch_wrong"])
                                for r in done)  # fmt: skip
                if ARMS[arm][1] is not None:
                    ok = bool(done) and entry["watch"]["wrong"] == 0
                    guarded_zero[arm] = guarded_zero.get(arm, True) and ok
            per[arm] = entry
        results[cfg] = per
    watched = [results[c][a]["watch"]["wrong"] for c in configs for a in arms
               if a == "watch" and "watch" in results[c][a]]  # fmt: skip
    checks = {
        "plugin_states_as_expected": states_ok,
        "jsonl_lines_equal_wrong_reads": jsonl_ok,
        "watch_armed_and_judging_every_pass": armed_ok,
        "watch_with_guard_shows_0": guarded_zero,
        # not a pass/fail: whether the unguarded watch saw the race at all (if not, the 0 under
        # a guard says little)
        "watch_alone_wrong_reads": sum(watched) if watched else None,
    }
    checks["ok"] = states_ok and jsonl_ok and armed_ok and all(guarded_zero.values())
    return {"results": results, "checks": checks}


def host_share(passes: list[dict[str, Any]]) -> dict[str, float]:
    """The watch's own host time per runner step (ms) and as a share of the step (the pass's
    wall time per engine step), over the passes that timed it."""
    timed = [r for r in passes if _num(r.get("watch_host_ms")) is not None]
    steps = sum(_num(r["watch_runner_steps"]) or 0 for r in timed)
    if not timed or not steps:
        return {}
    host = sum(_num(r["watch_host_ms"]) or 0 for r in timed) / steps
    step = sum(_num(r["wall_s"]) or 0 for r in timed) * 1e3 / sum(
        _num(r["engine_steps"]) or 0 for r in timed)  # fmt: skip
    return {"host_ms_per_step": round(host, 4), "host_share_of_step": round(host / step, 4)}


def cost_markdown(summary: dict[str, Any]) -> str:
    """Each arm of each configuration of a bench's ``summary.json``: tokens/s and the paired
    ratio to ``off`` (``vllm-compare DIR --markdown`` on a folder holding ``bench-*/``)."""
    env = summary.get("environment", {})
    out = [
        f"vLLM {summary.get('vllm_version', '?')}, {env.get('device', '?')}, "
        f"{summary.get('engine', {}).get('weights', 'zero')} weights, "
        f"{summary.get('rounds_done', '?')} rounds, commit {str(env.get('git_commit', '?'))[:7]}",
        "",
        "| config | arm | median tokens/s | ratio to off: median (min-max) | 95 % CI of the "
        "median | rounds | wrong reads seen by the watch | the watch's host time per step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cfg, arms in summary.get("results", {}).items():
        for arm, e in arms.items():
            r = e.get("ratio_to_off")
            ratio = ci = rounds = ""
            if r and r.get("median") is not None:
                ratio = f"{r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f})"
                b = r.get("bootstrap95_median")
                ci = f"{b[0]:.3f}-{b[1]:.3f}" if b else ""
                rounds = str(r["rounds"])
            w = e.get("watch")
            wrong = f"{w['wrong']} in {w['reads']:,} reads" if w else ""
            host = ""
            if w and "host_ms_per_step" in w:
                host = f"{w['host_ms_per_step']:.3f} ms ({100 * w['host_share_of_step']:.1f} %)"
            tps = e.get("median_tokens_per_s", "")
            out.append(f"| {cfg} | {arm} | {tps} | {ratio or 1} | {ci} | {rounds} | {wrong} "
                       f"| {host} |")  # fmt: skip
    return "\n".join(out) + "\n"


def rounds_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in COLUMNS})
    return buf.getvalue()


# -- toggling the plugin on a live runner ----------------------------------------------------
_MISSING = object()


def class_changes(cls: type, saved: dict[str, Any]) -> list[str]:
    """Names whose entry in ``cls.__dict__`` is not (by identity) the one in ``saved``."""
    names = set(saved) | set(cls.__dict__)
    return sorted(n for n in names if cls.__dict__.get(n, _MISSING) is not saved.get(n, _MISSING))


def restore_class(cls: type, saved: dict[str, Any]) -> None:
    """Put ``cls.__dict__`` back as ``saved`` had it; BenchError if it cannot."""
    for name in class_changes(cls, saved):
        if name in saved:
            setattr(cls, name, saved[name])
        else:
            delattr(cls, name)
    left = class_changes(cls, saved)
    if left:
        raise BenchError(f"{cls.__name__}: not restored after the arm: {', '.join(left)}")


def shadowed(obj: Any) -> set[str]:
    """Instance attributes of ``obj`` that shadow a method of its class (what hooks set)."""
    cls = type(obj)
    return {n for n in vars(obj) if callable(getattr(cls, n, None))}


@contextmanager
def plugin_arm(arm: str, runner: Any, watch_dir: Path) -> Iterator[str]:
    """``register()`` with ``arm``'s environment on ``runner``'s class, for one pass; yields
    the plugin's state. Afterwards the class, the runner and the environment are as before."""
    import specrace.plugin as plugin

    cls = type(runner)
    saved = dict(cls.__dict__)
    objs = tuple(o for o in (runner, getattr(runner, "input_batch", None)) if o is not None)
    before = [shadowed(o) for o in objs]
    old_env = {k: os.environ.get(k) for k in PLUGIN_ENV}
    try:
        for k, v in arm_env(arm, watch_dir).items():
            if v:
                os.environ[k] = v
            else:
                os.environ.pop(k, None)
        plugin._loaded.clear()
        plugin.register()
        state = plugin._loaded.get("state", "?")
        if state == "installed" and ARMS[arm][1] == "private-d2h":
            from gpu_check.vllm.patches import allocate_private

            allocate_private(runner)  # what the guard's __init__ wrapper does for a new runner
        yield state
    finally:
        watch = runner.__dict__.pop("_specrace_watch", None)
        if watch is not None:
            watch.uninstall()
            atexit.unregister(watch.write_totals)
        for name in ("_private_num_accepted_cpu_tensor", "_private_num_accepted_cpu"):
            runner.__dict__.pop(name, None)
        restore_class(cls, saved)
        plugin._loaded.clear()
        for k, was in old_env.items():
            if was is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = was
    left = [n for o, b in zip(objs, before, strict=True) for n in sorted(shadowed(o) - b)]
    if left:
        raise BenchError(f"after the {arm} arm, instance hooks left: {', '.join(left)}")


def watch_totals(runner: Any) -> dict[str, Any] | None:
    """After a pass (device synchronized): the watch judges what is left and writes its totals;
    None when the runner has no watch."""
    watch = runner.__dict__.get("_specrace_watch")
    if watch is None:
        return None
    watch.drain()
    t = watch.write_totals()
    lines = 0
    if watch.jsonl.is_file():
        with watch.jsonl.open() as f:
            lines = sum(1 for _ in f)
    return {
        "watch_runner_steps": watch.count,
        "watch_steps": t["steps"],
        "watch_reads": t["reads"],
        "watch_wrong": t["wrong"],
        "watch_skipped_steps": t["skipped_steps"],
        "watch_jsonl_lines": lines,
        "watch_host_ms": round(t["host_ns"] / 1e6, 3),
        "_files": [watch.jsonl, watch.summary],
    }


@contextmanager
def gpu_delay(runner: Any, cycles: int) -> Iterator[None]:
    """``torch.cuda._sleep(cycles)`` before each target forward, in every arm alike (the
    configuration's GPU delay, as ``vllm-run``'s); an instance attribute the watch never sets."""
    if not cycles:
        yield
        return
    import torch

    orig = runner._model_forward

    def _model_forward(*args, **kwargs):
        torch.cuda._sleep(cycles)
        return orig(*args, **kwargs)

    runner._model_forward = _model_forward
    try:
        yield
    finally:
        del runner._model_forward


# -- the run (CUDA) ---------------------------------------------------------------------------
T0 = time.monotonic()


def log(*parts: object) -> None:
    print(f"[vllm-plugin-bench {time.monotonic() - T0:7.1f}s]", *parts, flush=True)


def run_bench(plan: Plan, out: Path, version: str) -> dict[str, Any]:
    import gpu_check.vllm.agreement  # noqa: F401 - imported now, not inside a watched pass
    import gpu_check.vllm.patches  # noqa: F401
    import specrace.plugin.judge  # noqa: F401
    import specrace.plugin.report  # noqa: F401
    import specrace.plugin.watch  # noqa: F401
    from gpu_check.environment import environment
    from gpu_check.vllm.config import EngineConfig, workload, write_model_dir
    from gpu_check.vllm.run import MODEL_DIR, _runner, build_llm, drive, set_concurrency, shutdown
    from sim.runs.io import atomic_write_text, write_json
    from sim.runs.outputs import claim_dir

    claim_dir(out, KIND)
    write_model_dir(MODEL_DIR)
    capacity = max(c.max_num_seqs for c in plan.configs)
    engine = EngineConfig(mamba_cache_mode=plan.mode, num_speculative_tokens=plan.k,
                          max_num_seqs=capacity, weights=plan.weights)  # fmt: skip
    summary: dict[str, Any] = {
        "schema": "specrace.vllm_plugin_bench",
        "environment": environment(),
        "vllm_version": version,
        "commit": os.environ.get("SPECRACE_COMMIT", "unknown"),
        "arms": {a: {"watch": ARMS[a][0], "guard": ARMS[a][1]} for a in plan.arms},
        "configs": [c.to_dict() for c in plan.configs],
        "engine": asdict(engine),
        "rounds_requested": plan.rounds,
        "rounds_done": 0,
        "time_limit_s": plan.time_limit_s,
        "stopped": None,
        "errors": [],
        "method": "one engine; per pass register() with the arm's environment on the V1 "
        "runner class, restored after it; arms rotated per round; tokens/s = output tokens / "
        "drive wall clock; ratio = arm / off of the same round",
    }
    rows: list[dict[str, Any]] = []
    names = [c.name for c in plan.configs]

    def dump() -> None:
        atomic_write_text(out / "rounds.csv", rounds_csv(rows))
        write_json(out / "summary.json", summary | summarize(rows, plan.arms, names))

    dump()
    llm, info = build_llm(engine, MODEL_DIR)
    summary["init_s"], summary["resolved"] = info["init_s"], info["resolved"]
    log(f"LLM ready in {info['init_s']} s", json.dumps(info["resolved"]))
    runner = _runner(llm)
    from vllm.v1.worker import gpu_model_runner

    if type(runner) is not gpu_model_runner.GPUModelRunner:
        raise BenchError(f"the runner is {type(runner).__name__}, not the V1 GPUModelRunner "
                         "the plugin installs on")  # fmt: skip
    t = time.monotonic()
    first = plan.configs[0]
    set_concurrency(llm, first.max_num_seqs)
    drive(llm, workload(replace(first, num_requests=min(first.num_requests, 192))), "warm-")
    summary["warmup_s"] = round(time.monotonic() - t, 1)
    cycles: dict[str, int] = {}
    if any(c.gpu_delay_us for c in plan.configs):
        from gpu_check.vllm.instrument import calibrate_sleep

        ns = calibrate_sleep()
        summary["sleep_ns_per_cycle"] = ns
        cycles = {c.name: int(c.gpu_delay_us * 1000 / ns) for c in plan.configs}
    loads = {c.name: workload(c) for c in plan.configs}
    scratch = Path(tempfile.mkdtemp(prefix="specrace-plugin-bench-"))
    slowest = 0.0
    dump()
    try:
        for rnd, order in enumerate(schedule(plan.arms, plan.rounds)):
            now = time.monotonic() - T0
            if plan.time_limit_s and rnd and now + slowest > plan.time_limit_s:
                summary["stopped"] = (
                    f"time limit: {now:.0f} s gone, a round takes up to "
                    f"{slowest:.0f} s, limit {plan.time_limit_s:.0f} s"
                )
                log(summary["stopped"])
                break
            t_round = time.monotonic()
            for cfg in plan.configs:
                set_concurrency(llm, cfg.max_num_seqs)
                for pos, arm in enumerate(order):
                    row = one_pass(llm, runner, arm, cfg, rnd, pos, loads[cfg.name],
                                   cycles.get(cfg.name, 0), scratch, out)  # fmt: skip
                    rows.append(row)
                    log(
                        f"round {rnd} {cfg.name} {arm}: {row['tokens_per_s']} tokens/s",
                        json.dumps({k: v for k, v in row.items() if k.startswith("watch_")}),
                    )
                    dump()
            slowest = max(slowest, time.monotonic() - t_round)
            summary["rounds_done"] = rnd + 1
            dump()
    except Exception as e:  # noqa: BLE001 - recorded; the engine may hold a pass's requests
        summary["errors"].append(repr(e)[:2000])
        log(f"stopped: {e!r}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        dump()
    shutdown(llm)
    return summary | summarize(rows, plan.arms, names)


def one_pass(llm: Any, runner: Any, arm: str, cfg: Any, rnd: int, pos: int,
             reqs: list[dict[str, Any]], cycles: int, scratch: Path,
             out: Path) -> dict[str, Any]:  # fmt: skip
    import torch

    from gpu_check.vllm.run import drive
    from sim.runs.io import atomic_write_text

    slug = f"{cfg.name}_r{rnd}_{arm.replace('+', '_')}"
    llm.reset_prefix_cache()
    gc.collect()
    torch.cuda.synchronize()
    t_start = round(time.monotonic() - T0, 2)
    with plugin_arm(arm, runner, scratch / slug) as state:
        if state != expected_state(arm):
            raise BenchError(f"{arm}: the plugin's state is {state!r}, not "
                             f"{expected_state(arm)!r} (its log line says why)")  # fmt: skip
        with gpu_delay(runner, cycles):
            stats = drive(llm, reqs, f"r{rnd}p{pos}-")
        torch.cuda.synchronize()
        watch = watch_totals(runner)
    watch_, guard = ARMS[arm]
    row: dict[str, Any] = {
        "round": rnd, "config": cfg.name, "position": pos, "arm": arm, "watch": int(watch_),
        "guard": guard or "", "plugin_state": state, "t_start_s": t_start,
        "wall_s": stats["wall_s"], "out_tokens": stats["out_tokens"],
        "engine_steps": stats["engine_steps"],
        "tokens_per_s": round(stats["out_tokens"] / stats["wall_s"], 1),
    }  # fmt: skip
    if watch is not None:
        for f in watch.pop("_files"):
            if f.is_file():
                atomic_write_text(out / "watch" / slug / f.name, f.read_text())
        row |= watch
    return row


def main_bench(args: Any) -> int:
    """The CLI entry: one line and status 2 for bad arguments, no CUDA or no vLLM; 1 when a
    check failed or the bench stopped on an error."""
    from gpu_check.vllm.run import Unavailable, ensure_vllm, runner_refusal

    try:
        plan = plan_from_args(args)
    except ValueError as e:
        print(f"gpu_check: error: {e}", file=sys.stderr)
        return 2
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    try:
        version = ensure_vllm(args.carry, args.vllm_version)
    except Unavailable as e:
        print(f"gpu_check: error: {str(e).replace('vllm-run', KIND)}", file=sys.stderr)
        return 2
    refusal = runner_refusal("v1", version)
    if refusal:
        print(f"gpu_check: error: {refusal.split(':')[0]}", file=sys.stderr)
        return 2
    log("vLLM", version)
    try:
        doc = run_bench(plan, Path(args.out), version)
    except BenchError as e:
        print(f"gpu_check: error: {e}", file=sys.stderr)
        return 1
    log("checks", json.dumps(doc["checks"]))
    return 0 if doc["checks"]["ok"] and not doc["errors"] else 1


def add_parser(sub, count, seed_arg, int_in) -> None:
    """``vllm-plugin-bench``'s arguments (gpu_check's own argument types passed in)."""
    import os

    pb = sub.add_parser(
        "vllm-plugin-bench", help="tokens/s with the vLLM plugin off, watching, guarding (CUDA)"
    )
    pb.add_argument("--carry", default=os.environ.get("SPECRACE_VLLM_CARRY", ".vllmcarry"))
    pb.add_argument("--vllm-version", default="", help="which carried vllm-<V>.zip (V1 runner)")
    pb.add_argument(
        "--rounds", type=count(100), default=6,
        help="rounds; each runs every arm once, the order rotated per round",
    )  # fmt: skip
    pb.add_argument("--configs", default="16:0", help="MAX_NUM_SEQS[:GPU_DELAY_US],...")
    pb.add_argument(
        "--arms", default=DEFAULT_ARMS,
        help=f"comma list of {', '.join(ARMS)} (off is required: each arm is compared to it)",
    )  # fmt: skip
    pb.add_argument("--mode", choices=("align", "none"), default="align",
                    help="mamba_cache_mode (the guards edit the align path)")  # fmt: skip
    pb.add_argument("--num-requests", type=count(10**6), default=192)
    pb.add_argument("--output-range", default="8:160", help="MIN:MAX output tokens per request")
    pb.add_argument("--k", type=count(15), default=3, help="MTP draft tokens per step")
    pb.add_argument("--seed", type=seed_arg, default=0)
    pb.add_argument("--weights", default="zero", help="zero, dummy or gdn-bit (as vllm-run's)")
    pb.add_argument(
        "--time-limit", type=int_in(0, 10**6, "0..10^6"), default=0,
        help="seconds from the start: no round begins that the slowest so far would not end "
        "in (0: none)",
    )  # fmt: skip
    pb.add_argument("--out", required=True, help="folder for rounds.csv, summary.json, watch/")
