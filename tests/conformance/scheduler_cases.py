"""Random request streams for the scheduler conformance suite, and the side-by-side run.

One seed draws a whole stream (TigerBeetle-style): k in 1-4, max_num_seqs in 1-64, a token
budget from just enough for every decode to a few prompts (small budgets chunk prefills),
async scheduling on for three seeds in four, align mode (attention + mamba KV groups, block
8-32) for one in four, arrivals all at step 0 or spread out (Poisson), prompts sharing a
leading run of tokens with an earlier request's for prefix-cache hits, output lengths from 1
(finishes at max_tokens right after the prefill) to 60, and acceptance draws per drafted step.
One seed in four has a KV block pool small enough to preempt (prefix caching off there).
Align-mode streams share no prefixes: there vLLM cuts a chunk at the cached attention prefix
whose mamba state is not cached (the "Marconi" admission, v0.24.0 scheduler.py L380-387), a
fact of the cache's contents that sim's workload (a hit length per request) does not carry.

:func:`compare` runs vLLM (scheduler_driver.run_vllm) and sim (sim.model.scheduling on the
same stream, scripted, with the prefix hits vLLM's cache manager found) and returns every
step's differences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import vllm
from compare import canonical_ops, fmt_op, keyed_table, table
from scheduler_driver import EngineSetup, StreamRequest, VllmRun, run_vllm

from sim.model.params import scenario_from_dict
from sim.model.schedule import StepRecord
from sim.model.scheduling import build_schedule
from sim.resolve.release_facts import FACTS

NUM_STEPS = 120


@dataclass(frozen=True)
class Case:
    seed: int
    setup: EngineSetup
    stream: list[StreamRequest]
    num_steps: int
    warm: list[int]  # warm-up prompt lengths (the prefixes requests share)

    def describe(self) -> str:
        s = self.setup
        return (
            f"seed {self.seed}: k={s.num_speculative_tokens} max_num_seqs={s.max_num_seqs} "
            f"max_num_batched_tokens={s.max_num_batched_tokens} async={s.async_scheduling} "
            f"mamba_cache_mode={s.mamba_cache_mode} block={s.block_size} "
            f"blocks={s.num_gpu_blocks} threshold_one={s.reorder_threshold_is_one} "
            f"requests={len(self.stream)}"
        )


def case_for(seed: int) -> Case:
    rng = np.random.default_rng([0x5C4ED, seed])
    k = int(rng.integers(1, 5))
    max_num_seqs = int(rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 32, 64]))
    align = seed % 4 == 1
    block = int(rng.choice([8, 16, 32])) if align else 16
    budget = max_num_seqs * (1 + k) + int(rng.integers(0, 3)) * int(rng.integers(4, 96))
    preempt = seed % 4 == 3
    n_req = int(rng.integers(2, max(3, min(3 * max_num_seqs, 48)) + 1))
    spread = seed % 2 == 0
    arrivals = (
        np.sort(rng.integers(0, NUM_STEPS // 2, size=n_req))
        if spread
        else np.zeros(n_req, dtype=np.int64)
    )
    probs = np.array([0.8, 0.65, 0.5, 0.4][:k])
    warm = [int(x) for x in rng.integers(8, 120, size=3)]
    stream = []
    for i in range(n_req):
        prompt = int(np.clip(rng.lognormal(np.log(40), 0.8), 1, 240))
        out = int(np.clip(rng.lognormal(np.log(10), 0.9), 1, 60))
        draws = rng.random((out + 1, k)) < probs
        accepted = 1 + np.cumprod(draws, axis=1).sum(axis=1)
        share, prefix = -1, 0
        if rng.random() < 0.35 and not align:  # see the module docstring
            share = int(rng.integers(0, len(warm)))
            prefix = int(rng.integers(1, prompt + 1))
        stream.append(
            StreamRequest(
                f"req-{i:03d}",
                int(arrivals[i]),
                prompt,
                out,
                tuple(int(a) for a in accepted),
                prefix,
                share,
            )
        )
    longest = max(r.prompt_len + r.output_len for r in stream) + k + 1
    per_req = -(-longest // block) + (k + 2 if align else 0)
    blocks = (
        int(rng.integers(per_req + 2, per_req * 3 + 3))
        if preempt
        else per_req * (max_num_seqs + 4) * 4 + 64
    )
    setup = EngineSetup(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        num_speculative_tokens=k,
        async_scheduling=seed % 4 != 2,
        reorder_threshold_is_one=seed % 8 == 5,
        mamba_cache_mode="align" if align else "none",
        block_size=block,
        num_gpu_blocks=blocks,
        kv_limited=preempt,
        enable_prefix_caching=not preempt,  # a small pool would evict the warm-up prefixes
        max_model_len=8192,
    )
    return Case(seed, setup, stream, NUM_STEPS, warm)


def sim_steps(case: Case, hits: dict[str, int]) -> list[StepRecord]:
    """sim's schedule of the stream: scripted, with vLLM's observed prefix hits."""
    engine = case.setup.engine_params()
    # the release's own rule, as sim.resolve records it (make conformance-all re-reads it)
    engine["mamba_split_rule"] = FACTS["mamba_split_rule"][vllm.__version__].value
    engine["pad_new_decode"] = FACTS["pad_new_decode"][vllm.__version__].value
    requests: list[dict[str, Any]] = [
        {
            "req_id": r.req_id,
            "arrival_step": r.arrival_step,
            "prompt_len": r.prompt_len,
            "output_len": r.output_len,
            "accepted": list(r.accepted),
            "prefix_hit_tokens": hits.get(r.req_id, 0),
        }
        for r in case.stream
    ]
    raw = {
        "default_steps": case.num_steps,
        "engine": engine,
        "workload": {
            "arrival": "scripted",
            "requests": requests,
            "acceptance_probs": [0.5] * case.setup.num_speculative_tokens,
        },
    }
    scenario = scenario_from_dict(raw, f"sched-conformance-{case.seed}", case.describe())
    return build_schedule(scenario, case.seed, case.num_steps).steps


def step_differences(ours: StepRecord, vllm: StepRecord) -> list[str]:
    """Every decision of one step where sim's scheduler and vLLM's differ."""
    out = []
    if set(ours.finished) != set(vllm.finished):
        out.append(f"finished: ours {sorted(ours.finished)}, vLLM {sorted(vllm.finished)}")
    if set(ours.unscheduled) != set(vllm.unscheduled):
        out.append(f"unscheduled: ours {sorted(ours.unscheduled)}, vLLM {sorted(vllm.unscheduled)}")
    for name in ("new", "resumed"):
        a, b = getattr(ours, name), getattr(vllm, name)
        if list(a) != list(b):
            out.append(f"{name}: ours {a}, vLLM {b}")

    def per_req(rec: StepRecord, arr: np.ndarray) -> dict[str, int]:
        return {r: int(v) for r, v in zip(rec.req_ids, arr, strict=True)}

    for name in ("num_scheduled", "drafts", "num_computed"):
        a, b = per_req(ours, getattr(ours, name)), per_req(vllm, getattr(vllm, name))
        if a != b:
            out.append(f"{name} per request differs:\n" + keyed_table(a, b))
    ours_ops = [fmt_op(op) for op in canonical_ops(ours.ops)]
    vllm_ops = [fmt_op(op) for op in canonical_ops(vllm.ops)]
    if ours_ops != vllm_ops:
        out.append("row operations differ:\n" + table("#", ours_ops, vllm_ops))
    if ours.req_ids != vllm.req_ids:
        out.append("layout differs:\n" + table("row", ours.req_ids, vllm.req_ids))
    return out


@dataclass
class Outcome:
    case: Case
    vllm: VllmRun
    ours: list[StepRecord]
    differing: list[int]  # steps whose decisions differ
    first: list[str]  # the first differing step's differences

    @property
    def steps(self) -> int:
        return len(self.vllm.steps)


def compare(case: Case) -> Outcome:
    run = run_vllm(case.setup, case.stream, case.num_steps, case.warm)
    ours = sim_steps(case, run.hits)
    differing: list[int] = []
    first: list[str] = []
    for a, b in zip(ours, run.steps, strict=True):
        d = step_differences(a, b)
        if d:
            if not differing:
                first = d
            differing.append(a.step)
    return Outcome(case, run, ours, differing, first)
