"""The workload: every random decision of a run, drawn up front from one seed.

Nothing later in the pipeline draws random numbers for the *schedule*: arrivals, prompt
and output lengths, prefix-cache hits and the accepted count of every speculative step
of every request are fixed here (no global RNG; the workload is drawn before the run).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.model.params import LengthParams, Scenario

ROWS_PER_DRAW = 1 << 20  # speculative steps drawn per call (k doubles each)


@dataclass(frozen=True)
class Request:
    req_id: str
    arrival_step: int
    prompt_len: int
    output_len: int
    prefix_hit_tokens: int
    # accepted[i]: true count (1 + leading accepted drafts) of the request's i-th
    # speculative step when it carries k drafts; a step past the end accepts 1.
    accepted: np.ndarray
    eos: bool = False  # stops on EOS at output_len (else at max_tokens = output_len)

    def accepted_at(self, spec_step: int, num_drafts: int) -> int:
        """True accepted count of the ``spec_step``-th drafted step with ``num_drafts`` drafts."""
        if num_drafts == 0:
            return 1
        if spec_step >= len(self.accepted):
            return 1
        return int(min(self.accepted[spec_step], 1 + num_drafts))


def draw_workload(scenario: Scenario, seed: int, num_steps: int) -> list[Request]:
    """All requests that can arrive within ``num_steps``, in arrival order."""
    w = scenario.workload
    k = scenario.engine.num_speculative_tokens
    if w.arrival == "scripted":
        return [
            Request(
                req_id=r.req_id,
                arrival_step=r.arrival_step,
                prompt_len=r.prompt_len,
                output_len=r.output_len,
                prefix_hit_tokens=r.prefix_hit_tokens,
                accepted=np.asarray(r.accepted, dtype=np.int8),
                eos=r.eos,
            )
            for r in sorted(w.requests, key=lambda r: r.arrival_step)
        ]
    rng = np.random.default_rng(seed)
    initial = np.zeros(w.initial_requests, dtype=np.int64)
    per_step = rng.poisson(w.arrival_rate_per_step, size=max(num_steps - 1, 0))
    later = np.repeat(np.arange(1, num_steps, dtype=np.int64), per_step)
    arrivals = np.concatenate([initial, later])[: w.max_requests]
    n = len(arrivals)
    prompt = _draw_lengths(rng, w.prompt_len, n)
    output = _draw_lengths(rng, w.output_len, n)
    hit = rng.random(n) < w.prefix_hit_prob
    hit_tokens = np.where(hit, np.floor(prompt * w.prefix_hit_fraction), 0).astype(np.int64)
    hit_tokens = np.minimum(hit_tokens, prompt - 1)
    probs = np.asarray(w.acceptance_probs[:k], dtype=np.float64)
    # One row of k uniforms per possible speculative step (each emits >= 1 token), request
    # after request, drawn a block of requests at a time (the same stream of numbers as one
    # request at a time, in bounded memory).
    # Every request's counts lie back to back in one array, each request's a view of it (the
    # scheduler's state takes the array itself: sim.model.scheduler_rules.ReqStates).
    ends = np.cumsum(output)
    flat = np.empty(int(ends[-1]) if n else 0, dtype=np.int8)
    lo = 0
    while lo < n:
        start = int(ends[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(ends, start + ROWS_PER_DRAW, side="right")), lo + 1)
        stop = int(ends[hi - 1])
        flat[start:stop] = _accepted_counts(rng.random((stop - start, k)) < probs)
        lo = hi
    bounds = ends.tolist()
    starts = [0, *bounds[:-1]][: len(bounds)]  # none without requests
    accepted = [flat[a:b] for a, b in zip(starts, bounds, strict=True)]
    # Drawn last, and only when asked for: every earlier draw is the same with or without.
    eos = (rng.random(n) < w.eos_fraction).tolist() if w.eos_fraction > 0 else [False] * n
    return [
        Request(f"req-{i:06d}", a, p, o, h, acc, e)
        for i, (a, p, o, h, acc, e) in enumerate(
            zip(
                arrivals.tolist(),
                prompt.tolist(),
                output.tolist(),
                hit_tokens.tolist(),
                accepted,
                eos,
                strict=True,
            )
        )
    ]


def _accepted_counts(draws: np.ndarray) -> np.ndarray:
    """1 + the leading run of accepted drafts of each row: a running AND over the k columns
    (a cumprod along a short axis is twenty times slower)."""
    accepted = np.ones(len(draws), dtype=np.int8)
    run = np.ones(len(draws), dtype=bool)
    for j in range(draws.shape[1]):
        run &= draws[:, j]
        accepted += run
    return accepted


def _draw_lengths(rng: np.random.Generator, p: LengthParams, n: int) -> np.ndarray:
    if p.dist == "fixed":
        raw = np.full(n, p.mean)
    elif p.dist == "uniform":
        raw = rng.uniform(p.min, p.max + 1, size=n)
    else:  # lognormal with the given mean
        mu = np.log(p.mean) - p.sigma**2 / 2
        raw = rng.lognormal(mu, p.sigma, size=n)
    return np.clip(np.floor(raw), p.min, p.max).astype(np.int64)
