"""The bounded check's search space: recorded limits, roots, scripted requests, the run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.errors import SpecraceError
from sim.model.limits import Limits
from sim.model.params import (
    EngineParams,
    Scenario,
    ScriptedRequest,
    TimingParams,
    WorkloadParams,
)
from sim.model.schedule import StepRecord
from sim.model.scheduling import EngineRun
from sim.model.workload import Request

BIG = 10**7  # "never": an output length or a KV capacity no run reaches (MAX_TOKENS)
# Prompt classes: (prompt_len, prefix_hit_tokens) as a function of the token budget.
CLASSES = ("p", "h", "L")
CLASS_WORD = {"p": "whole prompt", "h": "prefix hit", "L": "chunked prompt"}


def class_prompt(cls: str, budget: int) -> tuple[int, int]:
    if cls == "p":
        return 2, 0
    if cls == "h":
        return 2, 1
    return budget + 2, 0


class RecordingLimits(Limits):
    """The check's answers to the scheduler's two comparisons (:mod:`sim.model.limits`): plain
    comparisons that also record each value asked, against an undecided output length (per
    request: ``out_logs[j]``, None where the length is decided) and against the KV capacity
    (``cap_log``). The search branches on every outcome another value would have given."""

    def __init__(self, out_logs: list[list[int] | None], cap_log: list[int]) -> None:
        self.out_logs, self.cap_log = out_logs, cap_log

    def reached(self, rows: np.ndarray, values: np.ndarray, max_tokens: np.ndarray) -> np.ndarray:
        logs = self.out_logs
        for j, v in zip(rows.tolist(), values.tolist(), strict=True):
            log = logs[j] if j < len(logs) else None
            if log is not None:
                log.append(v)
        return values >= max_tokens

    def exceeds(self, tokens: int, capacity: int) -> bool:
        self.cap_log.append(int(tokens))
        return tokens > capacity


# -- the search space -------------------------------------------------------------------------


@dataclass(frozen=True)
class Space:
    max_rows: int
    steps: int
    k: int
    classes: tuple[str, ...] = CLASSES
    # Async off reads right whatever the schedule (the copy landed before the moves and the
    # read is direct): its family is a check of that claim over whole prefills only, unless
    # asked for more (it is the larger tree: finishes are seen a step earlier).
    sync_classes: tuple[str, ...] = ("p",)

    def check(self) -> None:
        if not 1 <= self.max_rows <= 8:
            raise SpecraceError(f"--max-rows {self.max_rows}: must be in 1..8")
        if not 2 <= self.steps <= 8:
            raise SpecraceError(f"--steps {self.steps}: must be in 2..8 (a read needs 2 steps)")
        if not 1 <= self.k <= 7:
            raise SpecraceError(f"--k {self.k}: must be in 1..7")
        if (self.k + 1) ** self.max_rows > 1 << 20:
            raise SpecraceError(
                f"--k {self.k} --max-rows {self.max_rows}: (k+1)^rows count tuples is too many"
            )
        bad = [c for c in (*self.classes, *self.sync_classes) if c not in CLASSES]
        if bad or not self.classes or not self.sync_classes:
            raise SpecraceError(f"--classes {','.join(self.classes)}: known {','.join(CLASSES)}")


BIG_BUDGET = 1 << 20


@dataclass(frozen=True)
class Root:
    """The engine configuration of a subtree. ``mode``: the token budget only matters once a
    prompt longer than ``1 + k`` tokens is scheduled (a chunked prompt, or a preempted
    request's recompute): until then every row takes at most ``1 + k`` tokens and ``R`` rows
    fit the small budget ``R * (1 + k)``, so the small and the unlimited budget give the same
    records. A "plain" subtree (small budget, no such event yet) stands for both; at the first
    such event it forks into a "fixed" small-budget child and, from the same node, a "relevant"
    unlimited-budget search that keeps only the children with such an event."""

    async_scheduling: bool
    threshold_is_one: bool
    budget: int
    mode: str = "fixed"  # fixed | plain | relevant
    # Every request stops on EOS (unforeseen) instead of at max_tokens (the async scheduler's
    # skip of scheduler_rules.sure_to_finish); only async roots differ.
    eos: bool = False


@dataclass(frozen=True)
class Req:
    """One scripted request as decided so far. ``output_len`` None: not finished yet (undecided)."""

    cls: str
    arrival: int
    output_len: int | None = None
    accepted: tuple[int, ...] = ()


def req_name(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"R{i}"


def scenario_for(
    space: Space, root: Root, reqs: tuple[Req, ...], cap: int, steps: int, timing=None
) -> Scenario:
    """The scripted scenario of a decision set (every length decided)."""
    k = space.k
    scripted = []
    for i, r in enumerate(reqs):
        prompt, hit = class_prompt(r.cls, root.budget)
        scripted.append(
            ScriptedRequest(
                req_id=req_name(i),
                arrival_step=r.arrival,
                prompt_len=prompt,
                output_len=r.output_len if r.output_len is not None else BIG,
                accepted=r.accepted,
                prefix_hit_tokens=hit,
                eos=root.eos,
            )
        )
    return Scenario(
        name="check",
        description="",
        default_steps=steps,
        engine=EngineParams(
            max_num_seqs=space.max_rows,
            max_num_batched_tokens=root.budget,
            num_speculative_tokens=k,
            async_scheduling=root.async_scheduling,
            reorder_threshold_is_one=root.threshold_is_one,
            kv_cache_capacity_tokens=0 if cap >= BIG else cap,
        ),
        workload=WorkloadParams(
            arrival="scripted", acceptance_probs=(0.5,) * k, requests=tuple(scripted)
        ),
        timing=timing or TimingParams(),
    )


@dataclass
class _Run:
    record: StepRecord  # the last step's
    out_logs: list[list[int]]  # per request: generated values compared with output_len
    cap_log: list[int]  # sums compared with the KV capacity
    engine: EngineRun  # the state after the last step (the next step resumes from it)


def _run(
    space: Space,
    root: Root,
    reqs: tuple[Req, ...],
    cap: int,
    steps: int,
    cache: dict | None = None,
    resume: _Run | None = None,
) -> _Run:
    """Steps ``0..steps-1`` of the scheduler, the undecided output lengths and the capacity
    answered by :class:`RecordingLimits`; the last step's record. ``resume``: a run that
    reached step ``steps - 1`` with inputs that agree with these on every comparison made so
    far (the search's parent): only the last step is run, from a copy of its state, and the
    logs start from its logs. ``cache`` keeps the frozen parameter objects between runs (a
    fork sees an unchanged request by identity)."""
    cache = {} if cache is None else cache
    requests = []
    logs: list[list[int] | None] = []
    before = resume.out_logs if resume is not None else []
    for i, r in enumerate(reqs):
        key = (i, r, root.budget, root.eos)
        hit = cache.get(key)
        if hit is None:
            prompt, prefix = class_prompt(r.cls, root.budget)
            out = BIG if r.output_len is None else r.output_len  # undecided: never reached
            # one array per count tuple: a fork sees unchanged counts by identity
            acc = cache.get(("accepted", r.accepted))
            if acc is None:
                acc = cache[("accepted", r.accepted)] = np.asarray(r.accepted, dtype=np.int8)
            hit = cache[key] = Request(req_name(i), r.arrival, prompt, out, prefix, acc, root.eos)
        requests.append(hit)
        # an undecided length's comparisons so far: the parent's (none if it is new)
        undecided = r.output_len is None
        logs.append((list(before[i]) if i < len(before) else []) if undecided else None)
    ekey = ("engine", root.budget, root.async_scheduling, root.threshold_is_one, cap)
    if ekey not in cache:
        cache[ekey] = EngineParams(
            max_num_seqs=space.max_rows,
            max_num_batched_tokens=root.budget,
            num_speculative_tokens=space.k,
            async_scheduling=root.async_scheduling,
            reorder_threshold_is_one=root.threshold_is_one,
            kv_cache_capacity_tokens=cap,
        )
    eng = cache[ekey]
    cap_log = list(resume.cap_log) if resume is not None else []
    limits = RecordingLimits(logs, cap_log)
    if resume is not None:
        if resume.engine.step_no != steps - 1:
            raise ValueError(f"resume at step {resume.engine.step_no}, not {steps - 1}")
        engine = resume.engine.fork(eng, requests, limits)
        record = _model_step(engine, resume.record.req_ids)
    else:
        engine = EngineRun(eng, requests, limits=limits)
        record = None
        for _ in range(steps):
            record = _model_step(engine, record.req_ids if record is not None else [])
    assert record is not None
    return _Run(record, [list(x) if x is not None else [] for x in logs], list(cap_log), engine)


def _model_step(engine: EngineRun, prev_req_ids: list[str]) -> StepRecord:
    """One step of the model, whose row ops must turn the previous rows into this step's.

    A model that cannot run a schedule (it raises, or its ops and rows disagree: a broken row
    order) is reported as such, never judged: every verdict of the check rests on the ops.
    """
    n = engine.step_no
    try:
        rec = engine.step()
    except (IndexError, KeyError, ValueError, AssertionError, RuntimeError) as e:
        raise SpecraceError(
            f"the model failed at step {n} ({type(e).__name__}: {e}): a bug in the model "
            "(its row order?), not a verdict on a policy"
        ) from e
    rows: list[str | None] = [*prev_req_ids, *[None] * engine.eng.max_num_seqs]
    for op in rec.ops:
        op.apply_to_rows(rows)
    if rows[: rec.num_reqs] != rec.req_ids or any(rows[rec.num_reqs :]):
        raise SpecraceError(
            f"the model's step {n}: its row ops do not turn the previous rows into its rows "
            f"({rec.req_ids}): a broken row order in the model, not a verdict on a policy"
        )
    return rec
