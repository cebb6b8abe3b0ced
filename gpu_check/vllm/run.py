"""``python -m gpu_check vllm-run``: real vLLM in-process on one GPU, instrumented.

One process builds one ``vllm.LLM`` per mamba mode (align, none) with the tiny Qwen3-Next of
``config``, zeroes its weights (every draft accepted; ``--weights`` picks another variant of
``weights``), and runs every configuration on it:
concurrency is set per configuration through the scheduler's ``max_num_running_reqs`` (the
engine is built for the largest), the GPU delay through the forward hook. Per configuration:
a baseline pass with only a step clock (``Recorder(level="timing")``), then the instrumented
pass on the same workload (prefix cache reset before each). Output per mode and configuration:
``raw_<mode>_<config>.json`` (every step's record, see ``instrument``, and every request's
greedy tokens) and ``summary.json``. With ``--reference async-off`` each mode's engine is
followed by one with async scheduling off, which runs each configuration's requests once more
and writes their tokens to ``ref_<mode>_<config>.json`` (``vllm-consequence`` compares them).

Engine set-up that is not vLLM's default, and why:

- ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the engine core and the worker run in this process, so
  the hooks can reach the runner. The order of ``schedule``/``execute_model``/``sample_tokens``
  is the same as with the multiprocess engine; the IPC latencies are absent;
- ``VLLM_USE_V2_MODEL_RUNNER=0``: the V1 runner, where the race lives (docs/versions.md);
  ``--runner v2`` sets it to 1 instead, and MRv2 is recorded by ``instrument_v2``. vLLM 0.34.0
  removed the V1 runner (``platforms/interface.py`` raises for any other value): from 0.34.0
  ``--runner v1`` is refused before vLLM is built;
- from 0.34.0, ``enable_extensible_kv_cache=False``: 0.34.0 turns on by default a KV cache in
  driver-mapped virtual memory (``config/vllm.py`` ``_resolve_extensible_kv_cache``), which
  no earlier release had; off, the KV cache is allocated as in 0.33.0. The accepted counts
  never live in the KV cache;
- ``enforce_eager``: no CUDA graphs or torch.compile (a cold compile would not fit a session);
- Qwen3-Next's model class insists on at least one MoE layer; ``_allow_no_experts`` lets its
  ``set_moe_parameters`` accept zero, since the tiny model has dense MLPs only.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
import time
import traceback
from contextlib import ExitStack
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpu_check.vllm import weights
from gpu_check.vllm.config import (
    EngineConfig,
    RunConfig,
    reference_name,
    workload,
    write_model_dir,
)
from sim.runs.io import atomic_write_text

ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_USE_V2_MODEL_RUNNER": "0",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "VLLM_USE_DEEP_GEMM": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}

T0 = time.time()


def log(*parts: object) -> None:
    print(f"[vllm-run {time.time() - T0:7.1f}s]", *parts, flush=True)


class Unavailable(RuntimeError):
    """No CUDA, or no vLLM to import: reported as one line by the CLI."""


def ensure_vllm(carry: str | None, version: str = "") -> str:
    """Import vLLM, setting up the carried tree first if there is one. Returns its version."""
    for k, v in ENV.items():
        os.environ.setdefault(k, v)
    try:
        import torch
    except ImportError:
        raise Unavailable(
            "vllm-run needs torch with a CUDA device; torch is not installed"
        ) from None
    if not torch.cuda.is_available():
        raise Unavailable("vllm-run needs a CUDA device and none is available")
    if carry and Path(carry).is_dir():
        from gpu_check.vllm.carry import CarryError, prepare

        try:
            prepare(Path(carry), version=version or None)
        except CarryError as e:
            raise Unavailable(str(e)) from None
    try:
        import vllm
    except ImportError as e:
        where = f" (carry folder {carry} not found)" if carry and not Path(carry).is_dir() else ""
        raise Unavailable(f"vllm-run needs vLLM and cannot import it: {e}{where}") from None
    return vllm.__version__


def _allow_no_experts() -> None:
    from vllm.model_executor.models import qwen3_next

    cls = qwen3_next.QwenNextMixtureOfExperts
    if getattr(cls, "_specrace_no_experts", False):
        return
    orig = cls.set_moe_parameters

    def set_moe_parameters(self):
        try:
            orig(self)
        except RuntimeError:  # "no MoE layer found": a dense model, as intended here
            self.expert_weights, self.moe_layers = [], []
            for name in ("num_moe_layers", "num_shared_experts", "num_logical_experts",
                         "num_physical_experts", "num_local_physical_experts",
                         "num_routed_experts", "num_redundant_experts"):  # fmt: skip
                setattr(self, name, 0)
            self.num_expert_groups = 1

    cls.set_moe_parameters = set_moe_parameters
    cls._specrace_no_experts = True


def _runner(llm: Any) -> Any:
    core = llm.llm_engine.engine_core.engine_core
    return core.model_executor.driver_worker.worker.model_runner


def _drafter(runner: Any) -> Any:
    """MRv1 calls the MTP proposer ``drafter``, MRv2 ``speculator``."""
    return getattr(runner, "drafter", None) or runner.speculator


def _scheduler(llm: Any) -> Any:
    return llm.llm_engine.engine_core.engine_core.scheduler


def set_concurrency(llm: Any, max_num_seqs: int) -> None:
    """A configuration's concurrency on an engine built for the largest. From 0.33.0 the
    scheduler admits into RUNNING against ``max_num_active_reqs``, a copy of
    ``max_num_running_reqs`` made at start-up (``v1/core/sched/scheduler.py`` L134-138 and
    L1073 in 0.33.0, L132-136 and L1096 in 0.34.0): set both, or a configuration smaller than
    the engine admits the engine's capacity."""
    sched = _scheduler(llm)
    sched.max_num_running_reqs = max_num_seqs
    if hasattr(sched, "max_num_active_reqs"):
        sched.max_num_active_reqs = max_num_seqs


def release(version: str) -> tuple[int, ...]:
    """``"0.34.0"`` -> (0, 34, 0); what follows the numbers (``rc1``, ``+cu130``) is dropped."""
    m = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(x) for x in m.group().split(".")) if m else ()


NO_V1_RUNNER = (0, 34)  # vLLM 0.34.0 removed the V1 model runner


def runner_refusal(runner: str, version: str) -> str | None:
    """Why ``--runner`` cannot run on ``version`` (None: it can)."""
    if runner == "v1" and version and release(version) >= NO_V1_RUNNER:
        return (f"vLLM {version} has no V1 model runner (removed in 0.34.0; "
                "VLLM_USE_V2_MODEL_RUNNER=0 raises): pass --runner v2")  # fmt: skip
    return None


def _resolved(runner: Any) -> dict[str, Any]:
    vc = runner.vllm_config

    def safe(f):
        try:
            return f()
        except Exception as e:  # noqa: BLE001 - a report, not control flow
            return f"<{type(e).__name__}: {e}>"

    return {
        "runner_class": safe(lambda: f"{type(runner).__module__}.{type(runner).__name__}"),
        "mamba_cache_mode": safe(lambda: vc.cache_config.mamba_cache_mode),
        "enable_prefix_caching": safe(lambda: vc.cache_config.enable_prefix_caching),
        "block_size": safe(lambda: vc.cache_config.block_size),
        "mamba_block_size": safe(lambda: vc.cache_config.mamba_block_size),
        "async_scheduling": safe(lambda: vc.scheduler_config.async_scheduling),
        "use_async_spec_decode": safe(lambda: runner.use_async_spec_decode),
        "num_spec_tokens": safe(lambda: runner.num_spec_tokens),
        "drafter": safe(lambda: type(_drafter(runner)).__name__),
        "target_model": safe(lambda: type(runner.model).__name__),
        "max_concurrent_batches": safe(lambda: vc.max_concurrent_batches),
        "max_num_reqs": safe(lambda: runner.max_num_reqs),
        "extensible_kv_cache": safe(lambda: vc.cache_config.enable_extensible_kv_cache),
    }


def build_llm(engine: EngineConfig, model_dir: Path) -> tuple[Any, dict[str, Any]]:
    import torch
    import vllm
    from vllm import LLM

    _allow_no_experts()
    kwargs = engine.llm_kwargs(str(model_dir))
    if release(vllm.__version__) >= (0, 34):  # see the module docstring
        kwargs["enable_extensible_kv_cache"] = False
    t = time.time()
    llm = LLM(**kwargs)
    info: dict[str, Any] = {"init_s": round(time.time() - t, 1)}
    runner = _runner(llm)
    drafter = _drafter(runner)
    done = weights.apply(runner.model, drafter.model, engine.weights)
    torch.cuda.synchronize()
    if engine.weights == "zero":  # the record every committed run has
        info["zeroed_params"] = done["zeroed_params"]
    else:
        info["weights"] = done
    info["resolved"] = _resolved(runner)
    return llm, info


def drive(
    llm: Any,
    requests: list[dict[str, Any]],
    tag: str,
    tokens: dict[str, list[int]] | None = None,
) -> dict[str, Any]:
    """Add requests at their arrival step and step the engine until all are done; with
    ``tokens``, each finished request's generated token ids go there under its request id."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    engine = llm.llm_engine
    pending = sorted(requests, key=lambda r: (r["arrival_step"], r["req_index"]))
    step, n_out, t = 0, 0, time.perf_counter()
    # a bound, so a wedged engine ends the pass instead of the session's device time
    limit = 4 * (sum(r["max_tokens"] for r in requests) + max(r["arrival_step"] for r in requests))
    while pending or engine.has_unfinished_requests():
        if step > limit:
            raise RuntimeError(f"{tag}: {step} engine steps and requests still unfinished")
        while pending and pending[0]["arrival_step"] <= step:
            r = pending.pop(0)
            sp = SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], ignore_eos=True,
                                detokenize=False)  # fmt: skip
            engine.add_request(
                f"{tag}{r['req_index']}", TokensPrompt(prompt_token_ids=r["prompt_token_ids"]), sp
            )
        for out in engine.step():
            if out.finished:
                n_out += len(out.outputs[0].token_ids)
                if tokens is not None:
                    tokens[out.request_id] = [int(x) for x in out.outputs[0].token_ids]
        step += 1
    return {"engine_steps": step, "out_tokens": n_out, "wall_s": round(time.perf_counter() - t, 3)}


def _interval_stats(steps: list[dict[str, Any]]) -> dict[str, float | None]:
    from gpu_check.vllm.instrument import step_intervals_ms

    d = step_intervals_ms(steps) if len(steps) > 1 else np.zeros(0)
    if not len(d):
        return {"median_ms": None, "p10_ms": None, "p90_ms": None, "mean_ms": None}
    pct = np.percentile(d, [10, 50, 90])
    return {
        "median_ms": round(float(pct[1]), 3),
        "p10_ms": round(float(pct[0]), 3),
        "p90_ms": round(float(pct[2]), 3),
        "mean_ms": round(float(d.mean()), 3),
    }


def run_config(
    llm: Any,
    cfg: RunConfig,
    mode: str,
    out: Path,
    ns_per_cycle: float,
    version: str,
    repeat_baseline: bool = False,
    weights_name: str = "zero",
    watch: bool = False,
) -> dict:
    from gpu_check.vllm.consequence import acceptance_histogram
    from gpu_check.vllm.instrument import Recorder
    from gpu_check.vllm.instrument_v2 import RecorderV2, is_v2_runner

    runner = _runner(llm)
    v2 = is_v2_runner(runner)
    stand_aside = watch and v2  # MRv2 keeps the counts on the GPU: the plugin must do nothing
    watch = watch and not v2
    if v2:
        Recorder = RecorderV2  # type: ignore[assignment,misc]  # noqa: N806
    set_concurrency(llm, cfg.max_num_seqs)
    reqs = workload(cfg)
    result: dict[str, Any] = {"config": cfg.to_dict()}

    def one_pass(
        level: str, tag: str, tokens: dict[str, list[int]] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        from gpu_check.vllm import patches

        llm.reset_prefix_cache()
        if stand_aside and level == "full":  # the plugin loaded as a server's: it stands aside
            from gpu_check.vllm.watch_check import stood_aside

            result["watch"] = stood_aside(runner, out / "watch" / f"{mode}_{cfg.name}")
        with ExitStack() as stack:
            if watch and level == "full":  # the plugin's class hook first: it restores the
                from gpu_check.vllm.watch_check import watched  # class as found, so before the fix

                pw = stack.enter_context(watched(runner, out / "watch" / f"{mode}_{cfg.name}"))
            fix = patches.install(runner, cfg.patch)  # before the hooks, which wrap what it set
            try:
                rec = Recorder(runner, level, cfg.gpu_delay_us, ns_per_cycle=ns_per_cycle)
                rec.install()
                try:
                    stats = drive(llm, reqs, f"{tag}{cfg.name}-", tokens)
                    if watch and level == "full":  # the watch's hooks lie over the recorder's
                        result["watch"] = pw.finish()
                finally:
                    rec.uninstall()
            finally:
                if fix is not None:
                    fix.uninstall()
        steps = rec.finish()
        return stats | {"runner_steps": len(steps), **_interval_stats(steps)}, steps

    if cfg.baseline:
        result["baseline"] = one_pass("timing", "b")[0]
    tokens: dict[str, list[int]] = {}
    result["instrumented"], steps = one_pass("full", "", tokens)
    if cfg.baseline and repeat_baseline:  # A-B-A: is a difference the hooks or the order?
        result["baseline_after"] = one_pass("timing", "a")[0]
    if not v2:  # the counts the D2H carried for rows that had drafts: partial acceptance
        result["acceptance"] = acceptance_histogram(steps)
    raw = {
        "schema": "specrace.vllm_raw",
        "runner": "v2" if v2 else "v1",
        "mode": mode,
        "vllm_version": version,
        "patch": cfg.patch,
        "config": cfg.to_dict(),
        "max_num_batched_tokens": int(runner.scheduler_config.max_num_batched_tokens),
        "num_speculative_tokens": int(runner.vllm_config.speculative_config.num_speculative_tokens),
        "max_num_reqs": int(runner.max_num_reqs),
        "sleep_ns_per_cycle": ns_per_cycle,
        "requests": [
            {
                "req_id": f"{cfg.name}-{r['req_index']}",
                "arrival_step": r["arrival_step"],
                "prompt_len": len(r["prompt_token_ids"]),
                "output_len": r["max_tokens"],
            }
            for r in reqs
        ],  # fmt: skip
        "steps": steps,
        "token_ids": tokens,  # req_id -> the greedy tokens this pass generated
    }
    if weights_name != "zero":  # unzeroed weights only: a default record keeps its keys
        raw["weights"] = weights_name
    if "watch" in result:  # vllm-run --watch: the plugin's watch beside the recorder
        raw["watch"] = result["watch"]
        result["watch"] = {k: v for k, v in result["watch"].items() if k != "wrong_reads"}
    path = out / f"raw_{mode}_{cfg.name}.json"
    atomic_write_text(path, json.dumps(raw, separators=(",", ":")) + "\n")  # listed as ours
    result["raw"] = path.name
    return result


def run_reference(
    llm: Any, cfg: RunConfig, mode: str, out: Path, version: str, engine: EngineConfig
) -> dict[str, Any]:
    """The same requests on an engine with async scheduling off: no hooks, no GPU delay (with
    async off the schedule does not depend on timing), the same request ids as the
    instrumented pass; writes ``ref_<mode>_<name>.json``."""
    set_concurrency(llm, cfg.max_num_seqs)
    reqs = workload(cfg)
    llm.reset_prefix_cache()
    tokens: dict[str, list[int]] = {}
    stats = drive(llm, reqs, f"{cfg.name}-", tokens)
    name = reference_name(cfg)
    ref = {
        "schema": "specrace.vllm_reference",
        "mode": mode,
        "vllm_version": version,
        "async_scheduling": engine.async_scheduling,
        "weights": engine.weights,
        "config": cfg.to_dict(),
        "requests": [
            {
                "req_id": f"{cfg.name}-{r['req_index']}",
                "prompt_len": len(r["prompt_token_ids"]),
                "output_len": r["max_tokens"],
            }
            for r in reqs
        ],  # fmt: skip
        "token_ids": tokens,
    }
    path = out / f"ref_{mode}_{name}.json"
    atomic_write_text(path, json.dumps(ref, separators=(",", ":")) + "\n")
    return {"config": name, "file": path.name, **stats}


def shutdown(llm: Any) -> None:
    import torch

    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception as e:  # noqa: BLE001
        log("engine shutdown:", repr(e))
    del llm
    gc.collect()
    try:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
    except Exception as e:  # noqa: BLE001
        log("cleanup_dist_env_and_memory:", repr(e))
    torch.cuda.empty_cache()


MODEL_DIR = Path("/tmp/specrace-tiny-qwen3-next")


def run(
    plan: dict[str, list[RunConfig]],
    out: Path,
    k: int = 3,
    version: str = "",
    repeat_baseline: bool = False,
    weights_name: str = "zero",
    reference: bool = False,
    watch: bool = False,
) -> dict:
    """Every mode x every configuration; one summary.json. Errors are recorded, not hidden.
    With ``watch``, every instrumented V1 pass also runs the plugin's watch
    (:mod:`gpu_check.vllm.watch_check`). With ``reference``, each mode's engine is followed
    by one with async scheduling off that runs every configuration's requests once more
    (:func:`run_reference`)."""
    from gpu_check.environment import environment
    from gpu_check.vllm import c_ops
    from gpu_check.vllm.instrument import calibrate_sleep
    from sim.runs.outputs import claim_dir

    claim_dir(out, "vllm-run")
    write_model_dir(MODEL_DIR)
    capacity = max(c.max_num_seqs for configs in plan.values() for c in configs)
    summary: dict[str, Any] = {"environment": environment(), "vllm_version": version,
                               "runner_env": os.environ.get("VLLM_USE_V2_MODEL_RUNNER", ""),
                               "modes": {}, "errors": []}  # fmt: skip
    ns_per_cycle = calibrate_sleep()
    summary["sleep_ns_per_cycle"] = ns_per_cycle
    for mode, configs in plan.items():
        engine = EngineConfig(
            mamba_cache_mode=mode, num_speculative_tokens=k, max_num_seqs=capacity,
            weights=weights_name,
        )  # fmt: skip
        entry: dict[str, Any] = {"engine": asdict(engine), "configs": []}
        summary["modes"][mode] = entry
        try:
            llm, info = build_llm(engine, MODEL_DIR)
        except Exception as e:  # noqa: BLE001 - recorded; the next mode may still run
            summary["errors"].append({"mode": mode, "stage": "LLM()", "error": repr(e)[:2000],
                                      "trace": traceback.format_exc()[-3000:]})  # fmt: skip
            log(f"{mode}: LLM() failed: {e!r}")
            _dump(summary, out)
            continue
        entry |= info
        log(f"{mode}: LLM ready in {info['init_s']} s", json.dumps(info["resolved"]))
        # warm-up: the first configuration's workload, so its baseline pass compiles nothing
        t = time.time()
        set_concurrency(llm, configs[0].max_num_seqs)
        drive(llm, workload(replace(configs[0], num_requests=min(configs[0].num_requests, 192))),
              "warm-")  # fmt: skip  # shapes, not volume: at most 192 requests
        entry["warmup_s"] = round(time.time() - t, 1)
        for cfg in configs:
            try:
                res = run_config(llm, cfg, mode, out, ns_per_cycle, version, repeat_baseline,
                                 weights_name, watch)  # fmt: skip
            except Exception as e:  # noqa: BLE001
                summary["errors"].append(
                    {"mode": mode, "config": cfg.name, "error": repr(e)[:2000]}
                )
                log(f"{mode} {cfg.name}: failed: {e!r}; the rest of {mode} skipped")
                _dump(summary, out)
                break  # the engine may hold the failed pass's requests: not a clean start
            entry["configs"].append(res)
            log(
                f"{mode} {cfg.name}:",
                json.dumps(
                    {
                        k: res[k]
                        for k in ("baseline", "instrumented", "baseline_after", "acceptance")
                        if k in res
                    }  # fmt: skip
                ),
            )
            _dump(summary, out)
        shutdown(llm)
        if reference:
            entry["reference"] = _reference_mode(engine, configs, mode, out, version, summary)
            _dump(summary, out)
    summary["c_ops_calls"] = dict(c_ops.CALLS)
    _dump(summary, out)
    return summary


def _reference_mode(
    engine: EngineConfig,
    configs: list[RunConfig],
    mode: str,
    out: Path,
    version: str,
    summary: dict[str, Any],
) -> dict[str, Any]:
    """The async-off arm of one mode: its own engine, every distinct workload once."""
    ref_engine = replace(engine, async_scheduling=False)
    entry: dict[str, Any] = {"engine": asdict(ref_engine), "configs": []}
    try:
        llm, info = build_llm(ref_engine, MODEL_DIR)
    except Exception as e:  # noqa: BLE001
        summary["errors"].append(
            {"mode": mode, "stage": "LLM() async off", "error": repr(e)[:2000]}
        )
        log(f"{mode} reference: LLM() failed: {e!r}")
        return entry
    entry |= info
    log(f"{mode} reference (async off): LLM ready in {info['init_s']} s",
        json.dumps(info["resolved"]))  # fmt: skip
    seen: set[str] = set()
    for cfg in configs:
        if reference_name(cfg) in seen:
            continue
        seen.add(reference_name(cfg))
        try:
            res = run_reference(llm, replace(cfg, patch="none", rep=0), mode, out, version,
                                ref_engine)  # fmt: skip
        except Exception as e:  # noqa: BLE001
            summary["errors"].append(
                {"mode": mode, "config": cfg.name, "stage": "reference", "error": repr(e)[:2000]}
            )
            log(f"{mode} {cfg.name} reference: failed: {e!r}")
            break
        entry["configs"].append(res)
        log(f"{mode} {cfg.name} reference:", json.dumps(res))
    shutdown(llm)
    return entry


def _dump(summary: dict, out: Path) -> None:
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=str) + "\n")


def parse_range(text: str) -> tuple[int, int]:
    """``"8:160"`` -> (8, 160): the output lengths (tokens) the workload draws from."""
    lo, sep, hi = text.partition(":")
    if not sep or not lo.isdigit() or not hi.isdigit() or not 1 <= int(lo) <= int(hi) <= 2048:
        raise ValueError(f"--output-range {text!r}: expected MIN:MAX with 1 <= MIN <= MAX <= 2048")
    return int(lo), int(hi)


def with_patches(
    plan: dict[str, list[RunConfig]], names: list[str], repeats: int = 1
) -> dict[str, list[RunConfig]]:
    """Every align configuration once per patch arm, the arms of one configuration side by side
    (both patches edit only the async + align path: none-mode configurations run unpatched).
    With ``repeats`` > 1 the arms run again, each round in a rotated order, so that no arm
    always runs first (the first pass after a warm-up is the slowest)."""
    if names == ["none"] and repeats == 1:
        return plan
    if "align" not in plan:
        raise ValueError("--patch needs align in --modes (the patches edit the align path)")
    arms = [
        replace(c, patch=n, rep=r)
        for c in plan["align"]
        for r in range(repeats)
        for n in names[r % len(names) :] + names[: r % len(names)]
    ]
    return {**plan, "align": arms}


def with_repeats(plan: dict[str, list[RunConfig]], repeats: int) -> dict[str, list[RunConfig]]:
    """Every configuration of every mode ``repeats`` times (``rep`` 0..N-1), round after round
    (each round runs every configuration once), so that the passes of one configuration are
    spread over the engine's life rather than back to back: how reproducible one
    configuration is from pass to pass (``vllm-repeatability``)."""
    if repeats == 1:
        return plan
    if any(c.rep for cs in plan.values() for c in cs):
        raise ValueError("--repeats and --arm-repeats cannot be combined")
    return {m: [replace(c, rep=r) for r in range(repeats) for c in cs] for m, cs in plan.items()}


def main_run(args: Any) -> int:
    """The CLI entry: one line and status 2 when CUDA or vLLM is missing."""
    from gpu_check.vllm.config import parse_plan
    from gpu_check.vllm.patches import patch_names

    try:
        out_min, out_max = parse_range(args.output_range)
        base = RunConfig(
            num_requests=args.num_requests,
            seed=args.seed,
            arrivals=args.arrivals,
            arrival_every=args.arrival_every,
            baseline=not args.no_baseline,
            output_min=out_min,
            output_max=out_max,
        )
        plan = with_patches(
            parse_plan(args.modes, args.configs, base), patch_names(args.patch), args.arm_repeats
        )
        plan = with_repeats(plan, getattr(args, "repeats", 1))
        weights.check_variant(getattr(args, "weights", "zero"))
    except ValueError as e:
        print(f"gpu_check: error: {e}", file=sys.stderr)
        return 2
    refusal = runner_refusal(args.runner, getattr(args, "vllm_version", ""))
    if refusal:  # the carried release is named: refuse before importing it
        print(f"gpu_check: error: {refusal}", file=sys.stderr)
        return 2
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if args.runner == "v2" else "0"
    try:
        version = ensure_vllm(args.carry, getattr(args, "vllm_version", ""))
    except Unavailable as e:
        print(f"gpu_check: error: {e}", file=sys.stderr)
        return 2
    refusal = runner_refusal(args.runner, version)
    if refusal:  # the newest carried release, or an installed one
        print(f"gpu_check: error: {refusal}", file=sys.stderr)
        return 2
    log("vLLM", version)
    summary = run(
        plan, Path(args.out), k=args.k, version=version, repeat_baseline=args.repeat_baseline,
        weights_name=getattr(args, "weights", "zero"),
        reference=getattr(args, "reference", "none") == "async-off",
        watch=getattr(args, "watch", False),
    )  # fmt: skip
    return 1 if summary["errors"] else 0
