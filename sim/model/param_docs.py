"""What every scenario parameter means, its unit, and where its default comes from.

One entry per ``section.key`` of :mod:`sim.model.params` (a test checks that none is missing);
``python -m sim params`` prints them beside their defaults. A default's source is one of three
kinds, and says which: ``measured (file, date, machine)`` (a test holds the value to that
file), ``vLLM source (file:line)`` (v0.24.0 unless it says otherwise), or ``prior (why)`` where
the value is an assumption (docs/timing.md §7 says how each was chosen). The dataclass defaults
are priors where a measurement exists but is not the default: the built-in timing files
(``--timing h200``) carry the measured values, and ``python -m sim params --timing FILE`` labels
them ``measured``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SourceKind = Literal["measured", "vllm", "prior"]


@dataclass(frozen=True)
class Source:
    """Where a value comes from: ``measured`` (``ref`` the file, with ``date`` and ``machine``),
    ``vllm`` (``ref`` a vLLM file:line) or ``prior`` (``ref`` why the value was chosen)."""

    kind: SourceKind
    ref: str
    date: str = ""
    machine: str = ""

    def __str__(self) -> str:
        if self.kind == "measured":
            return f"measured ({self.ref}, {self.date}, {self.machine})"
        if self.kind == "vllm":
            return f"vLLM source ({self.ref})"
        return f"prior ({self.ref})"


def prior(why: str) -> Source:
    return Source("prior", why)


def vllm(file_line: str) -> Source:
    return Source("vllm", file_line)


@dataclass(frozen=True)
class TimingFile:
    """A built-in timing file's provenance (its header says the same; a test checks both)."""

    date: str
    machine: str


# sim/model/timing/<name>.toml: when and where its values were measured.
TIMING_FILES: dict[str, TimingFile] = {
    "h200": TimingFile("2026-12-01", "NVIDIA H200, driver 580.159.04, torch 2.11.0+cu130"),
    "vllm-0.24.0-row-ops": TimingFile("2026-11-29", "AMD EPYC, Python 3.11.7"),
}


def measured(timing_file: str) -> Source:
    """The source of a value taken from the built-in timing file ``timing_file``."""
    tf = TIMING_FILES[timing_file]
    return Source("measured", f"sim/model/timing/{timing_file}.toml", tf.date, tf.machine)


@dataclass(frozen=True)
class ParamDoc:
    unit: str
    meaning: str
    source: Source


_P = ParamDoc
_D2H = "docs/timing.md §3"
DOCS: dict[str, ParamDoc] = {
    # -- engine --------------------------------------------------------------------------
    "engine.max_num_seqs": _P("requests", "rows of the persistent batch (InputBatch max_num_reqs)",
                              prior("a 64-request serving batch; vLLM --max-num-seqs")),
    "engine.max_num_batched_tokens": _P("tokens", "token budget of one step (chunked prefill)",
                                        prior("a chunked-prefill budget that holds 64 x (1 + k) "
                                              "decode tokens; vLLM --max-num-batched-tokens")),
    "engine.num_speculative_tokens": _P("tokens", "k: drafts per decode (MTP)",
                                        prior("MTP k = 3 as in recipes PR #839 (docs/timing.md "
                                              "§8); vLLM num_speculative_tokens")),
    "engine.async_scheduling": _P("bool", "CPU prepares step N+1 while the GPU runs step N",
                                  vllm("config/vllm.py:964-1004, on by default with MTP")),
    "engine.mamba_cache_mode": _P("none|all|align", "GDN state cache mode of the run (label; the "
                                  "policy decides what the code path does)",
                                  vllm("config/cache.py:37, models/config.py:404-456")),
    "engine.reorder_threshold_is_one": _P("bool", "reorder threshold 1 instead of 1 + k",
                                          vllm("attention/backends/utils.py:637-714, GDN's "
                                               "builder asks for 1 + k")),
    "engine.kv_cache_capacity_tokens": _P("tokens", "KV capacity; outgrowing it preempts the "
                                          "newest running request; 0 = unlimited",
                                          prior("unlimited: the race needs no preemption; "
                                                "FCFS preemption as v1/core/sched/scheduler.py")),
    "engine.kv_block_size": _P("tokens", "KV block size: requests hold whole blocks "
                               "(cache_config.block_size); 1 counts tokens",
                               prior("1: capacity counted in tokens unless a scenario sets "
                                     "vLLM's block size")),
    "engine.mamba_block_size": _P("tokens", "align mode: prefill chunks cut at multiples of "
                                  "this (the GDN state cache block); 0 = no cut",
                                  prior("no cut, as under mode none; the cut itself is "
                                        "v1/core/sched/scheduler.py:330-391")),
    "engine.mamba_split_rule": _P("chunk|boundary|lookahead", "align mode's chunk cut: floor "
                                  "the chunk (0.23.0-0.25.1), end on block boundaries "
                                  "(0.26.0-0.32.0), no EAGLE block drop (0.33.0)",
                                  vllm("v1/core/sched/scheduler.py:330 _mamba_block_aligned_split "
                                       "(0.23.0-0.25.1 rule; sim.resolve sets each release's)")),
    "engine.pad_new_decode": _P("off|running|running_or_hit", "a waiting request with one "
                                "token left is scheduled with k placeholder drafts",
                                prior("off, as before 0.25.0; sim.resolve sets each release's "
                                      "(v1/core/sched/scheduler.py pad_spec_decode)")),
    # -- workload ------------------------------------------------------------------------
    "workload.arrival": _P("poisson|scripted", "how requests arrive",
                           prior("memoryless arrivals, the plainest open workload")),
    "workload.initial_requests": _P("requests", "requests waiting at step 0",
                                    prior("a full batch from step 0")),
    "workload.arrival_rate_per_step": _P("requests/step", "Poisson arrival rate",
                                         prior("enough arrivals to keep rows being added")),
    "workload.max_requests": _P("requests", "stop admitting after this many",
                                prior("no limit in practice")),
    "workload.prompt_len": _P("tokens", "prompt length distribution {dist, mean, sigma, min, "
                              "max}", prior("a placeholder; scenarios set their own")),
    "workload.output_len": _P("tokens", "output length distribution {dist, mean, sigma, min, "
                              "max}", prior("a placeholder; scenarios set their own")),
    "workload.acceptance_probs": _P("probability", "P(draft p accepted | p-1 accepted), per "
                                    "position", prior("recipes PR #839 and the qwen36 reports, "
                                                      "docs/timing.md §8")),
    "workload.prefix_hit_prob": _P("probability", "a new request hits the prefix cache",
                                   prior("prefix caching off, vLLM's default for hybrids "
                                         "before 0.28.0")),
    "workload.prefix_hit_fraction": _P("fraction", "share of the prompt a hit covers",
                                       prior("half the prompt, when hits are switched on")),
    "workload.eos_fraction": _P("fraction", "share of requests stopping on EOS (the others "
                                "at max_tokens = output length)",
                                prior("0: every stop at max_tokens, as in the benchmark "
                                      "reports")),
    "workload.requests": _P("table", "scripted requests (req_id, arrival_step, prompt_len, "
                            "output_len, accepted, prefix_hit_tokens, eos)",
                            prior("none: a scripted scenario file lists its own")),
    # -- timing: GPU ---------------------------------------------------------------------
    "timing.gpu_prep_ns": _P("ns", "H2D input copies and metadata uploads per step",
                             prior("tens of µs of small uploads")),
    "timing.gpu_forward_ns_base": _P("ns", "forward time of a step, fixed part",
                                     prior("roofline: ~27 GB of FP8 weights at 4.8 TB/s")),
    "timing.gpu_forward_ns_per_token": _P("ns/token", "forward time per scheduled token",
                                          prior("small beside the weight reads of a decode")),
    "timing.gpu_forward_ns_prefill": _P("ns", "more forward time on a step with a prefill chunk",
                                        prior("0: the roofline has no per-step prefill cost")),
    "timing.gpu_sample_ns": _P("ns", "sampler + rejection sampler + (ids != -1).sum",
                               prior("a few small kernels")),
    "timing.gpu_drafter_ns": _P("ns", "k MTP forwards", prior("k small MTP-layer forwards")),
    "timing.dma_land_delay_ns": _P("ns", "counts D2H lands this long after sampling ends",
                                   prior(f"inside the 15-40 µs of {_D2H} C's events-based "
                                         "upper bound; the clock-timed --timing h200 "
                                         "measures 6,571")),
    # -- timing: engine core ------------------------------------------------------------
    "timing.engine_output_ipc_ns": _P("ns", "output IPC worker -> engine core",
                                      prior("sub-ms IPC; v1/engine/core.py:519-632")),
    "timing.engine_update_ns_per_req": _P("ns/request", "update_from_output per request",
                                          prior("chosen with the rest so that engine + worker "
                                                "latency is close to the GPU step")),
    "timing.engine_schedule_ns_base": _P("ns", "schedule(), fixed part",
                                         prior("the balanced regime, docs/timing.md §7")),
    "timing.engine_schedule_ns_per_req": _P("ns/request", "schedule() per request",
                                            prior("below RFC #6854's multi-ms CPU step, "
                                                  "docs/timing.md §8")),
    "timing.engine_input_ipc_ns": _P("ns", "scheduler output IPC engine core -> worker",
                                     prior("sub-ms IPC, as the output side")),
    # -- timing: worker CPU --------------------------------------------------------------
    "timing.worker_sample_tokens_ns": _P("ns", "CPU side of sample_tokens (enqueue, no wait)",
                                         prior("enqueue only, with the 13 µs copy issue of "
                                               f"{_D2H} A")),
    "timing.worker_sample_tokens_ns_prefill": _P("ns", "more sample_tokens host time on a step "
                                                 "with a prefill chunk",
                                                 prior("0: one mode; vllm-forward's timing "
                                                       "files measure two (docs/timing.md §7)")),
    "timing.worker_rpc_dispatch_ns": _P("ns", "RPC dispatch to execute_model",
                                        prior("tens of µs of Python dispatch")),
    "timing.worker_rpc_dispatch_ns_per_req": _P("ns/request", "more of that dispatch gap per "
                                                "request of the step",
                                                prior("0: one constant; vllm-forward's timing "
                                                      "files fit ~45-55 µs from the records")),
    "timing.worker_remove_ns": _P("ns", "one remove_request",
                                  prior("10-50 µs per row op, docs/timing.md §4; "
                                        "--timing vllm-0.24.0-row-ops measures 6,593")),
    "timing.worker_cached_loop_ns_per_req": _P("ns/request", "cached-request loop of "
                                               "_update_states",
                                               prior("a few µs of Python per request")),
    "timing.worker_pre_add_ns": _P("ns", "fixed host time of _update_states before its first "
                                   "add (zeroing blocks, new requests' states)",
                                   prior("0: only the per-request loop; vllm-forward's timing "
                                         "files measure ~140-340 µs from the records")),
    "timing.worker_add_ns": _P("ns", "one add_request",
                               prior("10-50 µs per row op, docs/timing.md §4; "
                                     "--timing vllm-0.24.0-row-ops measures 64,260")),
    "timing.worker_condense_move_ns": _P("ns", "one condense move",
                                         prior("the numpy mock's 7.06 µs p50 at 8k tokens, "
                                               "docs/timing.md §4 (a lower bound)")),
    "timing.worker_swap_ns": _P("ns", "one swap_states",
                                prior("the numpy mock's 18.54 µs p50 at 8k tokens, "
                                      "docs/timing.md §4; --timing vllm-0.24.0-row-ops "
                                      "measures 47,754")),
    "timing.worker_reorder_ns": _P("ns", "_may_reorder_batch's own time before its first swap",
                                   prior("0: in refresh_metadata's time; vllm-forward's timing "
                                         "files measure ~120-250 µs from the records")),
    "timing.worker_refresh_metadata_ns": _P("ns", "refresh_metadata",
                                            prior("tens of µs of Python")),
    "timing.worker_prepare_inputs_ns": _P("ns", "_prepare_inputs (split around the counts read)",
                                          prior("the balanced regime, docs/timing.md §7")),
    "timing.worker_event_sync_ns": _P("ns", "event.synchronize() on a completed event",
                                      prior(f"{_D2H} D's 0.85 µs p50 (Run 1, H200 VM, date not "
                                            "recorded); --timing h200 measures 1,763")),
    "timing.worker_copy_to_gpu_ns": _P("ns", "small H2D issue (copy_to_gpu)",
                                       prior(f"{_D2H} D's 4.76 µs p50 (Run 1, H200 VM, date "
                                             "not recorded); --timing h200 measures 52,790")),
    "timing.worker_launch_ns": _P("ns", "metadata build + forward launch / graph replay",
                                  prior("the balanced regime, docs/timing.md §7")),
    "timing.worker_stall_prob": _P("probability", "per step: the worker thread stalls (GC, "
                                   "host load)", prior("host noise; the race needs jitter in "
                                                       "the balanced regime")),
    "timing.worker_stall_ns": _P("ns", "length of a stall", prior("a GC pause of ms size")),
    "timing.worker_slow_prob": _P("probability", "per step: the host is in a slow phase (every "
                                  "worker duration of the step scaled)",
                                  prior("0: no slow phases; vllm-forward's timing files "
                                        "measure them (docs/timing.md §7)")),
    "timing.worker_slow_factor": _P("factor", "how much slower every worker duration of a slow "
                                    "step is", prior("1: as calibrated")),
    "timing.worker_slow_persistence": _P("fraction", "how slow phases cluster: the lag-1 "
                                         "autocorrelation of a step being slow (0: each step "
                                         "drawn on its own)",
                                         prior("0; vllm-forward's timing files measure it "
                                               "(docs/timing.md §7)")),
    "timing.jitter_frac": _P("fraction", "every duration is mean * (1 + U[-f, f])",
                             prior("±30 %; the race needs jitter in the "
                                   "balanced regime, docs/mechanism.md §8")),
    "timing.gpu_jitter_frac": _P("fraction", "the GPU's durations' own jitter (-1: jitter_frac)",
                                 prior("-1, every actor alike; vllm-forward's timing files "
                                       "measure the GPU apart (docs/timing.md §7)")),
}  # fmt: skip


def timing_file_sources(files: tuple[str, ...] | list[str]) -> dict[str, Source]:
    """``timing.key -> measured source`` of the keys that built-in timing files set, later files
    winning (a timing file given by path is a measurement we cannot date: ``measured (PATH, see
    its header, -)``)."""
    import tomllib

    from sim.model.params import builtin_timing_text

    out: dict[str, Source] = {}
    for name in files:
        text, builtin = builtin_timing_text(name)
        src = (
            measured(name)
            if builtin and name in TIMING_FILES
            else Source("measured", name, "date in its header", "machine in its header")
        )
        for key in tomllib.loads(text).get("timing", {}):
            out[f"timing.{key}"] = src
    return out
