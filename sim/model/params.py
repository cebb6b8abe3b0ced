"""Scenario parameters: frozen dataclasses loaded and validated from TOML.

Units are last in names and time is integer nanoseconds (``*_ns``). Loading does
validation only: no side effects, no defaults drawn at random. An unknown key, a
wrong type or an impossible value raises :class:`SpecraceError` naming the key and
the file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

from sim.errors import SpecraceError, did_you_mean

MambaCacheMode = Literal["none", "all", "align"]
MambaSplitRule = Literal["chunk", "boundary", "lookahead"]
PadNewDecode = Literal["off", "running", "running_or_hit"]
MAX_TOKENS = 10**7  # a request's prompt or output: beyond any model's context
ArrivalKind = Literal["poisson", "scripted"]
LengthDist = Literal["fixed", "uniform", "lognormal"]


@dataclass(frozen=True)
class EngineParams:
    """vLLM engine configuration that decides the schedule (docs/mechanism.md §1, §2, §6)."""

    max_num_seqs: int = 64
    max_num_batched_tokens: int = 8192
    num_speculative_tokens: int = 3
    async_scheduling: bool = True
    mamba_cache_mode: MambaCacheMode = "none"
    # GDN's builder asks for 1 + k (decode = up to 1 + k tokens); a FlashInfer builder
    # without TRT-LLM forces 1, which makes drafted decodes "long extends" (§2 item 8).
    reorder_threshold_is_one: bool = False
    # KV capacity in tokens; when the running set outgrows it the scheduler preempts the
    # most recently admitted running request (vLLM's FCFS policy). 0 means unlimited.
    kv_cache_capacity_tokens: int = 0
    # KV block size in tokens: a request holds whole blocks (vLLM's cache_config.block_size);
    # the capacity above is usable blocks * this. 1 counts tokens.
    kv_block_size: int = 1
    # mamba_cache_mode "align" caches the GDN state at multiples of this many tokens, so the
    # scheduler cuts prefill chunks there (vLLM's `_mamba_block_aligned_split`, v0.24.0
    # v1/core/sched/scheduler.py L330-391; the block is cache_config.block_size). 0: no cut,
    # as under "none" (the block size of a real model is not derived here: set it).
    mamba_block_size: int = 0
    # How align mode cuts a prefill chunk at those blocks: "chunk" (vLLM 0.23.0-0.25.1),
    # "boundary" (0.26.0-0.32.0), "lookahead" (0.33.0, prefix caching on); release fact
    # mamba_split_rule (sim.resolve.release_facts).
    mamba_split_rule: MambaSplitRule = "chunk"
    # A waiting request with one token left gets k placeholder drafts: "off" (vLLM 0.23.0,
    # 0.24.0), "running" (0.25.0-0.29.0: when running requests, none in prefill, were
    # scheduled), "running_or_hit" (0.30.0 on: also after a prefix hit); release fact
    # pad_new_decode.
    pad_new_decode: PadNewDecode = "off"

    @property
    def reorder_batch_threshold(self) -> int:
        return 1 if self.reorder_threshold_is_one else 1 + self.num_speculative_tokens

    def check(self) -> None:
        _positive("engine.max_num_seqs", self.max_num_seqs)
        _positive("engine.max_num_batched_tokens", self.max_num_batched_tokens)
        if not 0 <= self.num_speculative_tokens <= 15:
            raise ValueError("engine.num_speculative_tokens must be in 0..15")
        if self.max_num_batched_tokens < self.max_num_seqs * (1 + self.num_speculative_tokens):
            raise ValueError(
                "engine.max_num_batched_tokens must hold max_num_seqs * (1 + k) tokens, "
                "or decodes could never all be scheduled"
            )
        if self.kv_cache_capacity_tokens < 0:
            raise ValueError("engine.kv_cache_capacity_tokens must be >= 0")
        if not 1 <= self.kv_block_size <= 1_000_000:
            raise ValueError("engine.kv_block_size must be in 1..1000000")
        if not 0 <= self.mamba_block_size <= 1_000_000:
            raise ValueError("engine.mamba_block_size must be in 0..1000000")
        _at_most("engine.max_num_seqs", self.max_num_seqs, 65_536, "rows of one batch")
        _at_most("engine.max_num_batched_tokens", self.max_num_batched_tokens, 10**7,
                 "tokens of one step")  # fmt: skip


@dataclass(frozen=True)
class LengthParams:
    """A token-length distribution, drawn up front per request."""

    dist: LengthDist = "fixed"
    mean: float = 128.0
    sigma: float = 0.0  # lognormal: sigma of log(length)
    min: int = 1
    max: int = 1 << 20

    def check(self, name: str) -> None:
        if self.min < 1 or self.max < self.min:
            raise ValueError(f"{name}: need 1 <= min <= max")
        _at_most(f"{name}.max", self.max, MAX_TOKENS, "tokens of one request")
        if self.mean <= 0 or self.sigma < 0:
            raise ValueError(f"{name}: need mean > 0 and sigma >= 0")


@dataclass(frozen=True)
class ScriptedRequest:
    """One hand-written request of a scripted workload.

    ``accepted`` lists the true accepted count (1 + accepted drafts) of each of the
    request's speculative steps, in order; steps past its end accept 1.
    """

    req_id: str
    arrival_step: int
    prompt_len: int
    output_len: int
    accepted: tuple[int, ...] = ()
    prefix_hit_tokens: int = 0
    # True: the request stops on an EOS at output_len, which the scheduler cannot foresee;
    # False: it stops at max_tokens = output_len, and the async scheduler skips the step its
    # in-flight step is sure to make unnecessary (sim.model.scheduler_rules.sure_to_finish).
    eos: bool = False


@dataclass(frozen=True)
class WorkloadParams:
    """What requests arrive and how their drafts are accepted (§11 per-request state)."""

    arrival: ArrivalKind = "poisson"
    initial_requests: int = 64
    arrival_rate_per_step: float = 0.5
    max_requests: int = 1_000_000
    prompt_len: LengthParams = field(default_factory=LengthParams)
    output_len: LengthParams = field(default_factory=LengthParams)
    # Conditional probability that draft position p is accepted given p-1 was.
    acceptance_probs: tuple[float, ...] = (0.9, 0.75, 0.6)
    # Probability that a new request hits the prefix cache, and the hit's share of the
    # prompt (rounded down to whole tokens, at least 1 token left to compute).
    prefix_hit_prob: float = 0.0
    prefix_hit_fraction: float = 0.5
    # Share of drawn requests that stop on EOS at their output length; the others stop at
    # max_tokens (= output length), which vLLM's async scheduler sees coming.
    eos_fraction: float = 0.0
    requests: tuple[ScriptedRequest, ...] = ()

    def check(self, k: int) -> None:
        if self.initial_requests < 0 or self.arrival_rate_per_step < 0:
            raise ValueError("workload.initial_requests and arrival_rate_per_step must be >= 0")
        _positive("workload.max_requests", self.max_requests)
        _at_most("workload.initial_requests", self.initial_requests, 10**7, "requests")
        _at_most("workload.arrival_rate_per_step", self.arrival_rate_per_step, 10**4,
                 "requests per step")  # fmt: skip
        self.prompt_len.check("workload.prompt_len")
        self.output_len.check("workload.output_len")
        if len(self.acceptance_probs) < k:
            raise ValueError(
                f"workload.acceptance_probs needs at least num_speculative_tokens={k} entries"
            )
        for p in (*self.acceptance_probs, self.prefix_hit_prob, self.eos_fraction):
            if not 0.0 <= p <= 1.0:
                raise ValueError("workload probabilities must be in [0, 1]")
        if not 0.0 <= self.prefix_hit_fraction < 1.0:
            raise ValueError("workload.prefix_hit_fraction must be in [0, 1)")
        if self.arrival == "scripted" and not self.requests:
            raise ValueError("workload.arrival = 'scripted' needs [[workload.requests]]")
        seen: set[str] = set()
        for r in self.requests:
            if r.req_id in seen:
                raise ValueError(f"workload.requests: duplicate req_id {r.req_id!r}")
            seen.add(r.req_id)
            if r.arrival_step < 0 or r.prompt_len < 1 or r.output_len < 1:
                raise ValueError(f"workload.requests[{r.req_id}]: bad step or length")
            if max(r.prompt_len, r.output_len) > MAX_TOKENS:
                raise ValueError(f"workload.requests[{r.req_id}]: more than {MAX_TOKENS} tokens")
            if not 0 <= r.prefix_hit_tokens < r.prompt_len:
                raise ValueError(
                    f"workload.requests[{r.req_id}]: prefix_hit_tokens must be < prompt_len"
                )
            if any(not 1 <= a <= k + 1 for a in r.accepted):
                raise ValueError(
                    f"workload.requests[{r.req_id}]: accepted counts must be in 1..{k + 1}"
                )


@dataclass(frozen=True)
class TimingParams:
    """Durations of every timed actor (docs/mechanism.md §8, docs/timing.md §6).

    Means are nanoseconds; every duration is drawn as mean * (1 + jitter) with a seeded
    uniform jitter in [-jitter_frac, +jitter_frac]. Defaults describe the "balanced"
    regime where engine-core + worker CPU latency is close to the GPU step time.
    """

    # GPU default stream, per step.
    gpu_prep_ns: int = 40_000  # H2D input copies and metadata uploads
    gpu_forward_ns_base: int = 6_000_000  # 27B FP8 decode step: ~27 GB of weights at 4.8 TB/s
    gpu_forward_ns_per_token: int = 2_000
    # More forward time on a step whose batch holds a prefill chunk, whatever its tokens
    # (vLLM's GPU-bound records: +1.8 ms a step, against < 0.3 us a prefill token).
    gpu_forward_ns_prefill: int = 0
    gpu_sample_ns: int = 150_000  # sampler + rejection sampler + (ids != -1).sum
    gpu_drafter_ns: int = 800_000  # k MTP forwards
    # D2H of the accepted counts lands this long after sample(N) ends (§8: 15-40 us).
    dma_land_delay_ns: int = 20_000
    # Engine core (§1.1): get_output(N-1) -> update_from_output(N-1) -> schedule(N+1).
    engine_output_ipc_ns: int = 500_000
    engine_update_ns_per_req: int = 20_000
    engine_schedule_ns_base: int = 200_000
    engine_schedule_ns_per_req: int = 40_000
    engine_input_ipc_ns: int = 500_000
    # Worker CPU thread (§1.3, §1.4, §2).
    worker_sample_tokens_ns: int = 250_000
    # More host time in sample_tokens on a step whose batch holds a prefill chunk (eager
    # mode launches the GDN prefill path's kernels: vLLM's records show two modes).
    worker_sample_tokens_ns_prefill: int = 0
    worker_rpc_dispatch_ns: int = 30_000
    # More of that gap per request of the step: in vLLM's records the span from the counts'
    # D2H to the next _update_states (drafter launch, engine core, IPC) grows ~50 us/request.
    worker_rpc_dispatch_ns_per_req: int = 0
    worker_remove_ns: int = 20_000
    worker_cached_loop_ns_per_req: int = 6_000
    # Fixed host time of _update_states between its removes and its first add (zeroing new
    # blocks, the new requests' states, the loop's own fixed cost): vLLM's records put ~140 us
    # there that a model with only a per-request loop moves to after the swaps.
    worker_pre_add_ns: int = 0
    worker_add_ns: int = 30_000
    worker_condense_move_ns: int = 7_000
    worker_swap_ns: int = 18_000
    # _may_reorder_batch's own host time after condense, before its first swap (ahead of
    # refresh_metadata when it swaps nothing): ~120-250 us in vLLM's records.
    worker_reorder_ns: int = 0
    worker_refresh_metadata_ns: int = 60_000
    worker_prepare_inputs_ns: int = 400_000
    worker_event_sync_ns: int = 850
    worker_copy_to_gpu_ns: int = 4_800
    worker_launch_ns: int = 1_500_000  # metadata build + forward launch / graph replay
    # Host noise: with this probability per step the worker thread stalls (GC, host load).
    worker_stall_prob: float = 0.05
    worker_stall_ns: int = 2_000_000
    # Slow phases of the host: with this probability per step every worker duration of the
    # step is worker_slow_factor times its mean (vLLM's records: all host spans at once).
    worker_slow_prob: float = 0.0
    worker_slow_factor: float = 1.0
    # How slow phases cluster: the lag-1 autocorrelation of "this step is slow" (0: each step
    # drawn on its own; vLLM's records: phases of tens of steps in some passes, none in others).
    worker_slow_persistence: float = 0.0
    jitter_frac: float = 0.3
    # The GPU's durations' own jitter; -1: the same as jitter_frac (every actor alike).
    gpu_jitter_frac: float = -1.0

    def __post_init__(self) -> None:
        self.check()  # validated when made: the Python API runs no tier on invalid timing

    def check(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value < 0 and f.name != "gpu_jitter_frac":
                raise ValueError(f"timing.{f.name} must be >= 0")
        if not 0.0 <= self.jitter_frac < 1.0:
            raise ValueError("timing.jitter_frac must be in [0, 1)")
        if not (self.gpu_jitter_frac == -1.0 or 0.0 <= self.gpu_jitter_frac < 1.0):
            raise ValueError("timing.gpu_jitter_frac must be -1 (as jitter_frac) or in [0, 1)")
        if not 0.0 <= self.worker_stall_prob <= 1.0:
            raise ValueError("timing.worker_stall_prob must be in [0, 1]")
        if not 0.0 <= self.worker_slow_prob <= 1.0:
            raise ValueError("timing.worker_slow_prob must be in [0, 1]")
        if not 0.0 <= self.worker_slow_persistence < 1.0:
            raise ValueError("timing.worker_slow_persistence must be in [0, 1)")
        if not 0.0 < self.worker_slow_factor <= 100.0:
            raise ValueError("timing.worker_slow_factor must be in (0, 100]")

    @property
    def gpu_frac(self) -> float:
        """The jitter of the GPU's durations."""
        return self.jitter_frac if self.gpu_jitter_frac < 0 else self.gpu_jitter_frac


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    default_steps: int
    engine: EngineParams
    workload: WorkloadParams
    timing: TimingParams

    def check(self) -> None:
        _positive("default_steps", self.default_steps)
        _at_most("default_steps", self.default_steps, 10_000_000, "steps (as --steps)")
        self.engine.check()
        self.workload.check(self.engine.num_speculative_tokens)
        self.timing.check()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def row_op_ns(t: Any) -> dict[str, Any]:
    """Mean duration of each row operation of ``_update_states``, by kind, for a
    :class:`TimingParams` (or the vector tier's per-point means, which have the same fields)."""
    return {
        "remove": t.worker_remove_ns,
        "add": t.worker_add_ns,
        "move": t.worker_condense_move_ns,
        "swap": t.worker_swap_ns,
    }


_SECTION_CLASSES: dict[str, type] = {
    "engine": EngineParams,
    "workload": WorkloadParams,
    "timing": TimingParams,
}


def parameter_keys() -> list[str]:
    """Every ``section.key`` that ``--set`` accepts."""
    return [f"{sec}.{f.name}" for sec, cls in _SECTION_CLASSES.items() for f in fields(cls)]


def parameter_defaults() -> dict[str, Any]:
    """``section.key -> default`` of the dataclasses (a scenario file may change them)."""
    out: dict[str, Any] = {}
    for sec, cls in _SECTION_CLASSES.items():
        inst = cls()
        for f in fields(cls):
            out[f"{sec}.{f.name}"] = getattr(inst, f.name)
    return out


# ---------------------------------------------------------------------------------------
# Loading


def _builtin(folder: str) -> dict[str, Traversable]:
    """Package data shipped with sim (importlib.resources): name -> TOML resource."""
    root = resources.files("sim.model") / folder
    return {q.name[: -len(".toml")]: q for q in root.iterdir() if q.name.endswith(".toml")}


def builtin_scenarios() -> list[str]:
    return sorted(_builtin("scenarios"))


def builtin_timing_files() -> list[str]:
    return sorted(_builtin("timing"))


def _resolve(name_or_path: str, folder: str, what: str) -> tuple[str, str, str]:
    """(text, stem, origin) of a TOML file given by path or by built-in name."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists() or "/" in name_or_path:
        noun = what if what.endswith(" file") else f"{what} file"
        if not p.exists():
            raise SpecraceError(f"{noun} not found: {p}")
        if not p.is_file():  # a FIFO would block the read, a device never end it: unopened
            raise SpecraceError(f"{noun} {p} is not a regular file (a FIFO, device or folder)")
        return _read_text(p), p.stem, str(p)
    builtin = _builtin(folder)
    if name_or_path not in builtin:
        known = ", ".join(sorted(builtin))
        hint = did_you_mean(name_or_path, builtin)
        raise SpecraceError(f"unknown {what} {name_or_path!r}{hint} (built-in: {known})")
    return builtin[name_or_path].read_text(), name_or_path, f"built-in {what} {name_or_path}"


def scenario_path(name_or_path: str) -> str:
    """Where a scenario comes from: the path as given, or ``built-in scenario NAME``."""
    return _resolve(name_or_path, "scenarios", "scenario")[2]


def load_scenario(
    name_or_path: str,
    values: dict[str, Any] | None = None,
    timing_files: tuple[str, ...] = (),
) -> Scenario:
    """Load, apply timing files (``[timing]`` tables: a path or a built-in name such as
    ``h200``, in order), then ``section.key`` values (typed, as ``parse_sets`` gives them
    from ``--set``), and validate a scenario."""
    text, stem, origin = _resolve(name_or_path, "scenarios", "scenario")
    raw = _parse_toml(text, origin)
    base = scenario_from_dict(raw, stem, origin)  # the file itself must be valid
    values = {**timing_file_values(timing_files), **(values or {})}
    if not values:
        return base
    return with_values(base, values)


def timing_file_values(files: tuple[str, ...] | list[str]) -> dict[str, int | float]:
    """``timing.key -> value`` (a number) from ``[timing]``-only TOML files, later files
    winning."""
    out: dict[str, int | float] = {}
    for f in files:
        text, _stem, origin = _resolve(f, "timing", "timing file")
        table = _parse_toml(text, origin)
        extra = set(table) - {"timing"}
        if extra:
            raise SpecraceError(f"{origin}: a timing file holds only [timing], not {sorted(extra)}")
        timing = table.get("timing", {})
        if not isinstance(timing, dict):
            raise SpecraceError(f"{origin}: [timing] must be a table")
        known = {f.name for f in fields(TimingParams)}
        for key, value in timing.items():
            if key not in known:
                raise SpecraceError(f"{origin}: unknown key timing.{key}{did_you_mean(key, known)}")
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SpecraceError(f"{origin}: timing.{key} must be a number, got {value!r}")
        out.update({f"timing.{k}": v for k, v in timing.items()})
    return out


def builtin_timing_text(name_or_path: str) -> tuple[str, bool]:
    """A timing file's text, and whether it is a built-in one (by name, not by path)."""
    text, _stem, origin = _resolve(name_or_path, "timing", "timing file")
    return text, origin.startswith("built-in ")


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecraceError(f"{path}: cannot read: {e}") from None


def _parse_toml(text: str, origin: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecraceError(f"{origin}: not valid TOML: {e}") from None
    except ValueError:  # int() of a literal past Python's 4,300 digits
        raise SpecraceError(f"{origin}: an integer of thousands of digits is out of range "
                            "(|x| <= 10^13)") from None  # fmt: skip
    except RecursionError:
        raise SpecraceError(f"{origin}: nested too deeply") from None


def scenario_from_dict(raw: dict[str, Any], name: str, origin: str) -> Scenario:
    raw = dict(raw)
    known = {"name", "description", "default_steps", "engine", "workload", "timing"}
    for key in raw:
        if key not in known:
            raise SpecraceError(f"{origin}: unknown key {key!r}")
    for key in ("name", "description"):
        if key in raw and not isinstance(raw[key], str):
            raise SpecraceError(f"{origin}: {key} must be text, got {type(raw[key]).__name__}")
    try:
        engine = _build(EngineParams, raw.get("engine", {}), "engine", origin)
        workload = _build(WorkloadParams, raw.get("workload", {}), "workload", origin)
        timing = _build(TimingParams, raw.get("timing", {}), "timing", origin)
        scenario = Scenario(
            name=str(raw.get("name", name)),
            description=str(raw.get("description", "")),
            default_steps=_convert(int, raw.get("default_steps", 2000), "default_steps", origin),
            engine=engine,
            workload=workload,
            timing=timing,
        )
        scenario.check()
    except ValueError as e:
        raise SpecraceError(f"{origin}: {e}") from None
    return scenario


def with_values(scenario: Scenario, values: dict[str, Any]) -> Scenario:
    """Re-validate a scenario with ``section.key`` values applied as they are (a sweep's
    point, a calibrated timing): no round trip through text, where ``True`` would not read
    back as a boolean."""
    raw = json.loads(json.dumps(scenario.to_dict()))  # tuples -> lists, as TOML gives
    del raw["name"]
    for key, value in values.items():
        section, name = check_key(key)
        raw.setdefault(section, {})[name] = list(value) if isinstance(value, tuple) else value
    return scenario_from_dict(raw, scenario.name, "--set")


def check_key(key: str) -> tuple[str, str]:
    parts = key.split(".")
    if len(parts) != 2 or parts[0] not in _SECTION_CLASSES:
        raise SpecraceError(
            f"--set {key}: expected section.key with section engine|workload|timing"
            f"{did_you_mean(key, parameter_keys())}"
        )
    known = {f.name for f in fields(_SECTION_CLASSES[parts[0]])}
    if parts[1] not in known:
        raise SpecraceError(
            f"--set {key}: unknown key{did_you_mean(key, parameter_keys())} "
            f"(python -m sim params lists them)"
        )
    return parts[0], parts[1]


def parse_value(text: str) -> Any:
    """A TOML value (``3``, ``0.5``, ``true``, ``[1, 2]``); a bare word is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except ValueError:  # int() of a literal past Python's 4,300 digits
        raise SpecraceError(f"{text[:12]}... ({len(text):,} characters) is out of range "
                            "(|x| <= 10^13)") from None  # fmt: skip


def _build(cls: type, table: Any, prefix: str, origin: str) -> Any:
    if not isinstance(table, dict):
        raise SpecraceError(f"{origin}: {prefix} must be a table")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key not in names:
            raise SpecraceError(f"{origin}: unknown key {prefix}.{key}")
        kwargs[key] = _convert(hints[key], value, f"{prefix}.{key}", origin)
    required = [
        f.name
        for f in fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [k for k in required if k not in kwargs]
    if missing:
        raise SpecraceError(f"{origin}: {prefix} is missing {', '.join(missing)}")
    return cls(**kwargs)


def _convert(hint: Any, value: Any, key: str, origin: str) -> Any:
    origin_t = typing.get_origin(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, key, origin)
    if origin_t is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise SpecraceError(f"{origin}: {key} must be one of {list(allowed)}, got {value!r}")
        return value
    if origin_t is tuple:
        if not isinstance(value, list):
            raise SpecraceError(f"{origin}: {key} must be an array")
        (item, _ellipsis) = typing.get_args(hint)
        return tuple(_convert(item, v, f"{key}[{i}]", origin) for i, v in enumerate(value))
    if origin_t in (types.UnionType, typing.Union):
        raise TypeError(f"unsupported union type for {key}")
    if hint is bool:
        if not isinstance(value, bool):
            raise SpecraceError(f"{origin}: {key} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecraceError(f"{origin}: {key} must be an integer, got {value!r}")
        if not -INT_LIMIT <= value <= INT_LIMIT:
            raise SpecraceError(f"{origin}: {key} = {value} is out of range (|x| <= 10^13)")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecraceError(f"{origin}: {key} must be a number, got {value!r}")
        if not math.isfinite(value) or abs(value) > INT_LIMIT:
            raise SpecraceError(f"{origin}: {key} must be a finite number, got {value!r}")
        return float(value) + 0.0  # -0.0 -> 0.0
    if hint is str:
        if not isinstance(value, str):
            raise SpecraceError(f"{origin}: {key} must be a string, got {value!r}")
        return value
    raise TypeError(f"no converter for {hint!r} ({key})")


# The largest integer or number any parameter may take: 10^13 ns is ~2.8 hours of simulated time.
INT_LIMIT = 10**13


def _at_most(name: str, value: float, limit: float, why: str) -> None:
    if value > limit:
        raise ValueError(f"{name} = {value} is more than {limit:g} ({why})")


def _positive(name: str, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be > 0")


__all__ = [
    "EngineParams",
    "LengthParams",
    "Scenario",
    "ScriptedRequest",
    "TimingParams",
    "WorkloadParams",
    "load_scenario",
    "replace",
    "scenario_path",
]
