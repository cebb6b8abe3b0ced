"""From a wrong read to a minimal scenario anyone can rerun, and timing that lands the copy
where a counterexample needs it.

- :func:`realize`: deterministic timing (no jitter, no stalls) under which the SimPy model
  lands step n-1's copy at a chosen position among step n's row operations (or after the
  read), found by iterating ``timing.dma_land_delay_ns`` on the model's own times, then a grid
  over the delay and the forward's per-token cost.
- :func:`shrink_run`: a run directory and one wrong read (step, request) -> the run's
  schedule as scripted requests, then delta debugging (drop requests, truncate steps, fewer
  rows, plainer prompts, counts and lengths) while some interleaving still gives a wrong read
  of the same hazard kind (searched with :mod:`sim.explore.check`'s evaluator over the
  candidate's schedule), then :func:`realize` and a SimPy run that must show it, and a
  built-in-style scenario TOML.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from sim.errors import SpecraceError
from sim.explore.check import Counterexample, Req, Root, evaluate, landings, story
from sim.model.params import (
    EngineParams,
    Scenario,
    ScriptedRequest,
    TimingParams,
    WorkloadParams,
    scenario_from_dict,
)
from sim.model.policies import SYNC_SCHEDULING, Policy, named
from sim.model.reads import build_reads
from sim.model.schedule import Schedule
from sim.model.schedule_io import read_schedule
from sim.model.scheduling import build_schedule
from sim.model.simulate import Model, simulate
from sim.runs.io import atomic_write_text, check_run_tables, read_meta, read_table

# Wide, deterministic row operations so that every landing position is a window of tens of us.
REALIZE_TIMING = {
    "jitter_frac": 0.0,
    "worker_stall_prob": 0.0,
    "worker_remove_ns": 40_000,
    "worker_add_ns": 40_000,
    "worker_condense_move_ns": 40_000,
    "worker_swap_ns": 40_000,
    "gpu_forward_ns_base": 100_000,
    "gpu_forward_ns_per_token": 0,
    "gpu_sample_ns": 75_000,
    "dma_land_delay_ns": 20_000,
}


def _accept_one_at(j: int, r: ScriptedRequest) -> ScriptedRequest:
    """The request with its j-th speculative step accepting nothing (count 1)."""
    if j >= len(r.accepted):
        return r
    return replace(r, accepted=r.accepted[:j] + (1,) + r.accepted[j + 1 :])


def deterministic(timing: TimingParams) -> TimingParams:
    return replace(timing, **REALIZE_TIMING)  # type: ignore[arg-type]  # floats and ints by key


def model_landing(model: Model, step: int) -> int:
    """Where step-1's copy landed among ``step``'s row ops in a SimPy run (-1: after the read,
    -2: a tie with an op, ambiguous)."""
    tim, prev = model.timing[step], model.timing[step - 1]
    land, read = prev.land_ns, tim.read_ns
    if land < 0 or land > read:
        return -1
    if land in tim.op_write_ns:
        return -2
    return sum(1 for t in tim.op_write_ns if t < land)


def realize(
    schedule: Schedule,
    policy: Policy,
    step: int,
    landing: int,
    base: TimingParams,
    accept=None,
) -> tuple[TimingParams, Model] | None:
    """Timing under which the model lands step-1's copy at ``landing`` in ``step`` (and for
    which ``accept(model)`` holds, when given)."""

    def ok(m: Model) -> bool:
        return model_landing(m, step) == landing and (accept is None or accept(m))

    d = base.dma_land_delay_ns
    seen: set[int] = set()
    for _ in range(40):
        t = replace(base, dma_land_delay_ns=d)
        m = simulate(schedule, t, policy, seed=0, trace=False)
        if ok(m):
            return t, m
        tim, prev = m.timing[step], m.timing[step - 1]
        ops, land, read = tim.op_write_ns, prev.land_ns, tim.read_ns
        if land < 0:
            break
        if landing == -1:
            target = read + 20_000
        else:
            lo = ops[landing - 1] if landing > 0 else (ops[0] - 30_000 if ops else read - 30_000)
            hi = ops[landing] if landing < len(ops) else read
            target = (lo + hi) // 2
        d = max(0, d + target - land)
        if d in seen:
            break
        seen.add(d)
    for per_token in (0, 20_000, 100_000):
        for d in range(0, 4_000_000, 5_000):
            t = replace(base, dma_land_delay_ns=d, gpu_forward_ns_per_token=per_token)
            m = simulate(schedule, t, policy, seed=0, trace=False)
            if ok(m):
                return t, m
    return None


def read_of(model: Model, schedule: Schedule, step: int, req_id: str):
    reads = build_reads(schedule, model)
    row = reads[(reads["step"] == step) & (reads["req_id"] == req_id)]
    return None if row.empty else row.iloc[0]


# -- hazard search on one schedule ------------------------------------------------------------


@dataclass
class Hazard:
    step: int
    req_id: str
    kind: str
    landings: list[int]  # per step 1..step
    prior: tuple
    cpu: int
    gpu: int
    true: int


def find_hazard(
    schedule: Schedule, policy: Policy, kind: str, gpu: bool, max_states: int = 64
) -> Hazard | None:
    """The first step at which some interleaving reads wrong with ``kind`` (GPU-consumed wrong
    if ``gpu``, else CPU-wrong), carrying buffer states like :mod:`sim.explore.check`."""
    pol = policy if schedule.async_scheduling else SYNC_SCHEDULING
    n_rows = schedule.max_num_reqs
    init = (tuple([1] * n_rows), tuple([1] * n_rows))
    frontier: dict[tuple, list[int]] = {init: []}
    steps = schedule.steps
    for s, cur in enumerate(steps):
        nxt: dict[tuple, list[int]] = {}
        if s == 0:
            for state, wit in frontier.items():
                o = evaluate(pol, state, cur.ops, None, cur.prev_positions,
                             cur.prev_num_draft_tokens, cur.num_reqs, 0)  # fmt: skip
                assert o.state is not None
                nxt.setdefault(o.state, wit)
            frontier = nxt
            continue
        dma = steps[s - 1].accepted.astype(np.int64)
        for state, wit in frontier.items():
            for land, _mult in landings(pol, schedule.async_scheduling, cur.ops):
                o = evaluate(pol, state, cur.ops, dma, cur.prev_positions,
                             cur.prev_num_draft_tokens, cur.num_reqs, land)  # fmt: skip
                if o.kind == kind:
                    hit = _hit(pol, o, state, cur, dma, land, gpu)
                    if hit is not None:
                        row, cpu_v, gpu_v, true_v = hit
                        return Hazard(s, cur.req_ids[row], kind, [*wit, land], state,
                                      cpu_v, gpu_v, true_v)  # fmt: skip
                if o.state is not None and len(nxt) < max_states:
                    nxt.setdefault(o.state, [*wit, land])
                elif o.state is None and len(nxt) < max_states:
                    # a wrong read of another kind: keep going from its buffers
                    st = _state_after(pol, state, cur, dma, land)
                    nxt.setdefault(st, [*wit, land])
        frontier = nxt
        if not frontier:
            return None
    return None


def _hit(pol, o, state, cur, dma, land, gpu):
    if o.wrong:
        w = o.wrong[0]
        return w.row, w.cpu, w.gpu, w.true
    if gpu or not o.repaired:
        return None
    # a repaired CPU-wrong read: find its row
    from sim.explore.check import _read

    _b, _p, r = _read(pol, state, cur.ops, dma, cur.prev_positions,
                      cur.prev_num_draft_tokens, cur.num_reqs, land)  # fmt: skip
    rows, _src, true, cpu_r, gpu_v, cpu_wrong = r
    i = int(np.flatnonzero(cpu_wrong & (cpu_r != true))[0])
    return int(rows[i]), int(cpu_r[i]), int(gpu_v[i]), int(true[i])


def _state_after(pol, state, cur, dma, land):
    from sim.explore.check import _read

    buf, priv, _r = _read(pol, state, cur.ops, dma, cur.prev_positions,
                          cur.prev_num_draft_tokens, cur.num_reqs, land)  # fmt: skip
    return tuple(int(x) for x in buf), tuple(int(x) for x in priv)


# -- candidates -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    engine: EngineParams
    requests: tuple[ScriptedRequest, ...]
    steps: int

    def scenario(
        self, timing: TimingParams, name: str = "shrunk", description: str = ""
    ) -> Scenario:
        k = self.engine.num_speculative_tokens
        return Scenario(
            name=name,
            description=description,
            default_steps=self.steps,
            engine=self.engine,
            workload=WorkloadParams(
                arrival="scripted", acceptance_probs=(0.5,) * max(k, 1), requests=self.requests
            ),
            timing=timing,
        )

    def size(self) -> tuple:
        return (
            self.engine.max_num_seqs,
            self.steps,
            len(self.requests),
            sum(r.prompt_len + r.output_len + sum(r.accepted) for r in self.requests),
        )


def scripted_from_schedule(schedule: Schedule, upto: int) -> tuple[ScriptedRequest, ...]:
    """The schedule's requests (arrived by ``upto``) with the accepted count of each drafted
    step as the schedule recorded it (clipped to its drafts, as ``accepted_at`` does)."""
    acc: dict[str, list[int]] = {}
    for rec in schedule.steps[: upto + 1]:
        for i, rid in enumerate(rec.req_ids):
            if rec.drafts[i] > 0:
                acc.setdefault(rid, []).append(int(rec.accepted[i]))
    out = []
    for r in schedule.requests:
        if r["arrival_step"] > upto:
            continue
        out.append(
            ScriptedRequest(
                req_id=str(r["req_id"]),
                arrival_step=int(r["arrival_step"]),
                prompt_len=int(r["prompt_len"]),
                output_len=int(r["output_len"]),
                accepted=tuple(acc.get(str(r["req_id"]), ())),
                prefix_hit_tokens=int(r.get("prefix_hit_tokens", 0)),
                eos=bool(r.get("eos", False)),
            )
        )
    return tuple(out)


def _valid(c: Candidate) -> bool:
    try:
        c.scenario(TimingParams()).check()
    except ValueError:
        return False
    return bool(c.requests)


@dataclass
class ShrinkResult:
    policy: str
    kind: str
    original: tuple
    candidate: Candidate
    hazard: Hazard
    timing: TimingParams
    story: str
    checks: int

    def summary(self) -> str:
        c = self.candidate
        return (
            f"policy={self.policy} kind={self.kind}: {self.original[2]} requests, "
            f"{self.original[1]} steps, {self.original[0]} rows -> {len(c.requests)} requests, "
            f"{c.steps} steps, {c.engine.max_num_seqs} rows ({self.checks} candidates tried)\n"
            f"read at step {self.hazard.step}: {self.hazard.req_id} reads {self.hazard.cpu} "
            f"(consumed {self.hazard.gpu}), true {self.hazard.true}; copy landing "
            f"{self.hazard.landings[-1]}; dma_land_delay_ns={self.timing.dma_land_delay_ns}\n"
            + self.story
        )


class Shrinker:
    def __init__(self, policy: Policy, kind: str, gpu: bool, budget: int = 400) -> None:
        self.policy, self.kind, self.gpu = policy, kind, gpu
        self.checks = 0
        self.budget = budget

    def hazard(self, c: Candidate) -> Hazard | None:
        if not _valid(c):
            return None
        self.checks += 1
        sched = build_schedule(c.scenario(TimingParams()), 0, c.steps)
        return find_hazard(sched, self.policy, self.kind, self.gpu)

    def shrink(self, c: Candidate) -> Candidate:
        h = self.hazard(c)
        if h is None:
            raise SpecraceError("no interleaving of the run's schedule gives that hazard kind")
        changed = True
        while changed and self.checks < self.budget:
            changed = False
            for step in (
                self._truncate,
                self._drop_requests,
                self._compress,
                self._rows,
                self._simplify,
            ):
                nc = step(c)
                if nc is not None and nc != c:
                    c, changed = nc, True
        return c

    def _truncate(self, c: Candidate) -> Candidate | None:
        h = self.hazard(c)
        if h is None or h.step + 1 >= c.steps:
            return None
        reqs = tuple(r for r in c.requests if r.arrival_step <= h.step)
        nc = replace(c, steps=h.step + 1, requests=reqs)
        return nc if self.hazard(nc) else None

    def _drop_requests(self, c: Candidate) -> Candidate | None:
        """ddmin over the requests."""
        reqs = list(c.requests)
        n = 2
        improved = False
        while len(reqs) >= 2 and self.checks < self.budget:
            chunk = max(1, len(reqs) // n)
            done = False
            for i in range(0, len(reqs), chunk):
                rest = reqs[:i] + reqs[i + chunk :]
                if rest and self.hazard(replace(c, requests=tuple(rest))):
                    reqs, n, done, improved = rest, max(n - 1, 2), True, True
                    break
            if not done:
                if chunk == 1:
                    break
                n = min(len(reqs), n * 2)
        return replace(c, requests=tuple(reqs)) if improved else None

    def _compress(self, c: Candidate) -> Candidate | None:
        """One step fewer: request i loses its first drafted step (its output shrinks by that
        step's tokens) and every later arrival comes a step earlier."""
        if c.steps <= 2:
            return None
        for i, r in enumerate(c.requests):
            if not r.accepted:
                continue
            reqs = []
            for j, q in enumerate(c.requests):
                if j == i:
                    reqs.append(replace(q, output_len=max(1, q.output_len - q.accepted[0]),
                                        accepted=q.accepted[1:]))  # fmt: skip
                elif q.arrival_step > r.arrival_step:
                    reqs.append(replace(q, arrival_step=q.arrival_step - 1))
                else:
                    reqs.append(q)
            nc = replace(c, requests=tuple(reqs), steps=c.steps - 1)
            if self.hazard(nc):
                return nc
        return None

    def _rows(self, c: Candidate) -> Candidate | None:
        sched = build_schedule(c.scenario(TimingParams()), 0, c.steps)
        need = max(s.num_reqs for s in sched.steps)
        k = c.engine.num_speculative_tokens
        for rows in range(max(need, 1), c.engine.max_num_seqs):
            eng = replace(c.engine, max_num_seqs=rows)
            nc = replace(c, engine=eng)
            if self.hazard(nc):
                c = nc
                break
        for budget in sorted({c.engine.max_num_seqs * (1 + k), c.engine.max_num_batched_tokens}):
            if budget < c.engine.max_num_batched_tokens:
                nc = replace(c, engine=replace(c.engine, max_num_batched_tokens=budget))
                if self.hazard(nc):
                    return nc
        if c.engine.kv_cache_capacity_tokens:
            nc = replace(c, engine=replace(c.engine, kv_cache_capacity_tokens=0))
            if self.hazard(nc):
                return nc
        return c

    def _simplify(self, c: Candidate) -> Candidate | None:
        """Plainer requests, one field at a time: EOS stops, shorter prompts and outputs, no
        prefix hit, counts of 1, earlier arrivals."""
        reqs = list(c.requests)
        improved = False
        steps = c.steps
        edits = [
            # an EOS stop is unannounced: the scheduler keeps the request a step longer than a
            # max_tokens stop (scheduler_rules.sure_to_finish), which can shorten the race
            lambda r: replace(r, eos=True),
            lambda r: replace(r, prompt_len=2, prefix_hit_tokens=min(r.prefix_hit_tokens, 1)),
            lambda r: replace(r, prefix_hit_tokens=0),
            lambda r: replace(r, output_len=max(1, min(r.output_len, steps * 8))),
            lambda r: replace(r, output_len=1),
            lambda r: replace(r, accepted=r.accepted[:steps]),
            lambda r: replace(r, accepted=()),
            lambda r: replace(r, arrival_step=0),
            lambda r: replace(r, arrival_step=max(0, r.arrival_step - 1)),
        ]
        edits += [
            partial(_accept_one_at, j)
            for j in range(max((len(r.accepted) for r in reqs), default=0))
        ]
        for i in range(len(reqs)):
            for edit in edits:
                t = edit(reqs[i])
                if t == reqs[i] or self.checks >= self.budget:
                    continue
                trial = [*reqs[:i], t, *reqs[i + 1 :]]
                if self.hazard(replace(c, requests=tuple(trial))):
                    reqs, improved = trial, True
        return replace(c, requests=tuple(reqs)) if improved else None


def shrink_run(run: Path, step: int, req: str, out: Path) -> ShrinkResult:
    if not (run / "meta.json").is_file():
        raise SpecraceError(
            f"{run}: meta.json of a one-policy run needed (python -m sim run --policy P)"
        )
    meta = read_meta(run / "meta.json")
    policy = named(meta["policy"])
    scenario = scenario_from_dict(meta["scenario"], meta["scenario"].get("name", "run"), str(run))
    reads = read_table(run / "reads.parquet", "reads.parquet")
    sched = read_schedule(run / "schedule.json")
    check_run_tables(sched, reads, None, str(run))
    row = reads[(reads["step"] == step) & (reads["req_id"] == req)]
    if row.empty:
        raise SpecraceError(f"{run}: no read of request {req!r} at step {step}")
    row = row.iloc[0]
    if not (row["cpu_wrong"] or row["gpu_wrong"]):
        raise SpecraceError(f"{run}: {req} read right at step {step} (nothing to shrink)")
    kind, gpu = str(row["kind"]), bool(row["gpu_wrong"])
    start = Candidate(scenario.engine, scripted_from_schedule(sched, step), step + 1)
    shr = Shrinker(policy, kind, gpu)
    c = shr.shrink(start)
    h = shr.hazard(c)
    assert h is not None
    base = deterministic(scenario.timing)
    small = build_schedule(c.scenario(base), 0, c.steps)

    def shows(m: Model) -> bool:
        r = read_of(m, small, h.step, h.req_id)
        return (
            r is not None and r["kind"] == kind and bool(r["gpu_wrong"] if gpu else r["cpu_wrong"])
        )

    found = realize(small, policy, h.step, h.landings[-1], base, shows)
    if found is None:
        raise SpecraceError(
            f"shrunk to {len(c.requests)} requests, but no deterministic timing lands the copy "
            f"at position {h.landings[-1]} of step {h.step}"
        )
    timing, _model = found
    cx = Counterexample(
        policy.name, kind, Root(small.async_scheduling, False, 0), tuple(Req("p", 0) for _ in ()),
        0, small.steps[: h.step + 1], h.landings, (), (), h.prior,
    )  # fmt: skip
    eng = c.engine
    head = (
        f"(reorder threshold {1 if eng.reorder_threshold_is_one else '1+k'}, token budget "
        f"{eng.max_num_batched_tokens}"
        + (f", KV capacity {eng.kv_cache_capacity_tokens} tokens" if eng.kv_cache_capacity_tokens
           else "")
        + "; " + ", ".join(f"{r.req_id} prompt {r.prompt_len}" for r in c.requests) + ")"
    )  # fmt: skip
    text = _story(cx, h, head)
    desc = (
        f"Shrunk by `python -m sim shrink {run} --step {step} --req {req}` from a "
        f"{meta['policy']} run of {scenario.name}: a read of kind {kind} "
        f"({'consumed' if gpu else 'CPU'} wrong).\n{text}"
    )
    scn = c.scenario(timing, name=out.stem, description=desc)
    atomic_write_text(out, scenario_toml(scn), sign=".toml")
    return ShrinkResult(policy.name, kind, start.size(), c, h, timing, text, shr.checks)


def _story(cx: Counterexample, h: Hazard, header: str) -> str:
    from sim.explore.check import Wrong

    cur = cx.records[-1]
    row = cur.req_ids.index(h.req_id)
    w = Wrong(row, int(cur.prev_positions[row]), h.true, h.cpu, h.gpu)
    return story(replace(cx, wrong=(w,)), header)


def scenario_toml(scn: Scenario) -> str:
    """A built-in-style scenario file (data/scenarios/*.toml)."""
    d = scn.to_dict()
    lines = [f"name = {json.dumps(scn.name)}", f'description = """{scn.description}"""',
             f"default_steps = {scn.default_steps}", "", "[engine]"]  # fmt: skip
    lines += [f"{k} = {_toml(v)}" for k, v in d["engine"].items()]
    lines += ["", "[workload]", 'arrival = "scripted"']
    lines.append(f"acceptance_probs = {_toml(list(d['workload']['acceptance_probs']))}")
    for r in d["workload"]["requests"]:
        lines += ["", "[[workload.requests]]"]
        lines += [f"{k} = {_toml(list(v) if isinstance(v, tuple) else v)}" for k, v in r.items()]
    lines += [
        "",
        "# Deterministic timing found by `sim shrink` (no jitter, no stalls).",
        "[timing]",
    ]
    lines += [f"{k} = {_toml(v)}" for k, v in d["timing"].items()]
    return "\n".join(lines) + "\n"


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")
