"""What every scenario parameter means, its unit, and where its value comes from.

One entry per ``section.key`` of :mod:`sim.model.params` (a test checks that none is missing);
``python -m sim params`` prints them beside their defaults. Sources: vLLM file and line (v0.24.0),
a measurement committed under data/ or shipped in ``sim/model/timing/``, or "prior" where the
value is an assumption (docs/timing.md says how each was chosen).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParamDoc:
    unit: str
    meaning: str
    source: str


_P = ParamDoc
DOCS: dict[str, ParamDoc] = {
    # -- engine --------------------------------------------------------------------------
    "engine.max_num_seqs": _P("requests", "rows of the persistent batch (InputBatch max_num_reqs)",
                              "vLLM --max-num-seqs"),
    "engine.max_num_batched_tokens": _P("tokens", "token budget of one step (chunked prefill)",
                                        "vLLM --max-num-batched-tokens"),
    "engine.num_speculative_tokens": _P("tokens", "k: drafts per decode (MTP)",
                                        "vLLM speculative_config.num_speculative_tokens"),
    "engine.async_scheduling": _P("bool", "CPU prepares step N+1 while the GPU runs step N",
                                  "config/vllm.py L964-1004 (on by default with MTP)"),
    "engine.mamba_cache_mode": _P("none|all|align", "GDN state cache mode of the run (label; the "
                                  "policy decides what the code path does)",
                                  "config/cache.py L37, models/config.py L404-456"),
    "engine.reorder_threshold_is_one": _P("bool", "reorder threshold 1 instead of 1 + k",
                                          "attention/backends/utils.py L637-714"),
    "engine.kv_cache_capacity_tokens": _P("tokens", "KV capacity; outgrowing it preempts the "
                                          "newest running request; 0 = unlimited",
                                          "v1/core/sched/scheduler.py (FCFS preemption)"),
    "engine.kv_block_size": _P("tokens", "KV block size: requests hold whole blocks "
                               "(cache_config.block_size); 1 counts tokens", "vLLM"),
    "engine.mamba_block_size": _P("tokens", "align mode: prefill chunks cut at multiples of "
                                  "this (the GDN state cache block); 0 = no cut",
                                  "v1/core/sched/scheduler.py L330-391 (v0.24.0)"),
    "engine.mamba_split_rule": _P("chunk|boundary|lookahead", "align mode's chunk cut: floor "
                                  "the chunk (0.23.0-0.25.1), end on block boundaries "
                                  "(0.26.0-0.32.0), no EAGLE block drop (0.33.0)",
                                  "v1/core/sched/scheduler.py _mamba_block_aligned_split"),
    "engine.pad_new_decode": _P("off|running|running_or_hit", "a waiting request with one "
                                "token left is scheduled with k placeholder drafts",
                                "v1/core/sched/scheduler.py pad_spec_decode (0.25.0 on)"),
    # -- workload ------------------------------------------------------------------------
    "workload.arrival": _P("poisson|scripted", "how requests arrive", "prior"),
    "workload.initial_requests": _P("requests", "requests waiting at step 0", "prior"),
    "workload.arrival_rate_per_step": _P("requests/step", "Poisson arrival rate", "prior"),
    "workload.max_requests": _P("requests", "stop admitting after this many", "prior"),
    "workload.prompt_len": _P("tokens", "prompt length distribution {dist, mean, sigma, min, "
                              "max}", "prior"),
    "workload.output_len": _P("tokens", "output length distribution {dist, mean, sigma, min, "
                              "max}", "prior"),
    "workload.acceptance_probs": _P("probability", "P(draft p accepted | p-1 accepted), per "
                                    "position", "recipes PR #839, qwen36 reports (§8 of "
                                    "docs/timing.md)"),
    "workload.prefix_hit_prob": _P("probability", "a new request hits the prefix cache",
                                   "prior"),
    "workload.prefix_hit_fraction": _P("fraction", "share of the prompt a hit covers", "prior"),
    "workload.eos_fraction": _P("fraction", "share of requests stopping on EOS (the others "
                                "at max_tokens = output length)", "prior"),
    "workload.requests": _P("table", "scripted requests (req_id, arrival_step, prompt_len, "
                            "output_len, accepted, prefix_hit_tokens, eos)", "scenario file"),
    # -- timing: GPU ---------------------------------------------------------------------
    "timing.gpu_prep_ns": _P("ns", "H2D input copies and metadata uploads per step", "prior"),
    "timing.gpu_forward_ns_base": _P("ns", "forward time of a step, fixed part",
                                     "roofline: ~27 GB of weights at 4.8 TB/s"),
    "timing.gpu_forward_ns_per_token": _P("ns/token", "forward time per scheduled token",
                                          "prior"),
    "timing.gpu_sample_ns": _P("ns", "sampler + rejection sampler + (ids != -1).sum", "prior"),
    "timing.gpu_drafter_ns": _P("ns", "k MTP forwards", "prior"),
    "timing.dma_land_delay_ns": _P("ns", "counts D2H lands this long after sampling ends",
                                   "measured: built-in timing file h200"),
    # -- timing: engine core ------------------------------------------------------------
    "timing.engine_output_ipc_ns": _P("ns", "output IPC worker -> engine core",
                                      "prior (v1/engine/core.py L519-632)"),
    "timing.engine_update_ns_per_req": _P("ns/request", "update_from_output per request",
                                          "prior"),
    "timing.engine_schedule_ns_base": _P("ns", "schedule(), fixed part", "prior"),
    "timing.engine_schedule_ns_per_req": _P("ns/request", "schedule() per request", "prior"),
    "timing.engine_input_ipc_ns": _P("ns", "scheduler output IPC engine core -> worker",
                                     "prior"),
    # -- timing: worker CPU --------------------------------------------------------------
    "timing.worker_sample_tokens_ns": _P("ns", "CPU side of sample_tokens (enqueue, no wait)",
                                         "prior"),
    "timing.worker_rpc_dispatch_ns": _P("ns", "RPC dispatch to execute_model", "prior"),
    "timing.worker_remove_ns": _P("ns", "one remove_request", "measured: vllm-0.24.0-row-ops"),
    "timing.worker_cached_loop_ns_per_req": _P("ns/request", "cached-request loop of "
                                               "_update_states", "prior"),
    "timing.worker_add_ns": _P("ns", "one add_request", "measured: vllm-0.24.0-row-ops"),
    "timing.worker_condense_move_ns": _P("ns", "one condense move",
                                         "mock InputBatch on the H200 host"),
    "timing.worker_swap_ns": _P("ns", "one swap_states", "measured: vllm-0.24.0-row-ops"),
    "timing.worker_refresh_metadata_ns": _P("ns", "refresh_metadata", "prior"),
    "timing.worker_prepare_inputs_ns": _P("ns", "_prepare_inputs (split around the counts read)",
                                          "prior"),
    "timing.worker_event_sync_ns": _P("ns", "event.synchronize() on a completed event",
                                      "measured: built-in timing file h200"),
    "timing.worker_copy_to_gpu_ns": _P("ns", "small H2D issue (copy_to_gpu)",
                                       "measured: built-in timing file h200"),
    "timing.worker_launch_ns": _P("ns", "metadata build + forward launch / graph replay",
                                  "prior"),
    "timing.worker_stall_prob": _P("probability", "per step: the worker thread stalls (GC, "
                                   "host load)", "prior"),
    "timing.worker_stall_ns": _P("ns", "length of a stall", "prior"),
    "timing.jitter_frac": _P("fraction", "every duration is mean * (1 + U[-f, f])", "prior"),
}  # fmt: skip
