"""What a ``schedule.json`` means, checked beyond its shape: one line per violation, naming the
step and the field.

``sim.model.schedule.check_schedule`` replays the row ops and checks each array's range; this
module checks that the file says one consistent thing (rules that every schedule
``sim.model.scheduling`` builds keeps, over scenarios with arrivals, prefix hits, chunked
prefill, preemption, align mode and async scheduling on and off):

- the header: a seed in 0..2^63-1; a scenario that names itself and holds its engine, workload
  and timing tables, with text where text belongs; requests of distinct ids;
- each step's sets against its ops (vLLM's order, ``InputBatch``): a request is removed only if
  it finished or was unscheduled, every finished or unscheduled request in the batch is removed,
  exactly the new and resumed requests are added, each once; a ``new`` request was never
  scheduled before; a finished one never comes back; a row op finds what it moves (the request
  it names in the row it names, an empty row to add or move into); no op doubled;
- ``discard`` flags are 0 or 1 (the reader turns any number into a flag);
- ``engine.async_scheduling`` agrees with the steps: with async scheduling a request stays in
  the batch one step after its last token (its finish is seen a step late), without it the step
  of its last token is its last (``tests/cli_contract/test_nothing_lost.py`` holds both over
  many schedules); a flag that every finished request contradicts is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from sim.errors import SpecraceError

if TYPE_CHECKING:
    from sim.model.schedule import Schedule, StepRecord

SEED_MAX = 2**63 - 1
BEFORE = "\x00before"  # a row's request before the schedule's first step: unknown
SECTIONS = ("engine", "workload", "timing")


def check_header(d: dict[str, Any], origin: str) -> None:
    """The parts of a schedule's JSON that its reader would accept in a meaningless form."""
    seed = d.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed <= SEED_MAX:
        raise SpecraceError(f"{origin}: seed: {_num(seed)} is not in 0..2^63-1")
    sc = d.get("scenario")
    if not isinstance(sc, dict):
        raise SpecraceError(f"{origin}: scenario: must be a table, got {type(sc).__name__}")
    missing = [k for k in ("name", *SECTIONS) if k not in sc]
    if missing:
        raise SpecraceError(f"{origin}: scenario: missing {', '.join(missing)} (a schedule names "
                            "its scenario and holds its engine, workload and timing)")  # fmt: skip
    for key in ("name", "description"):
        if key in sc and not isinstance(sc[key], str):
            raise SpecraceError(f"{origin}: scenario.{key}: must be text, got "
                                f"{type(sc[key]).__name__}")  # fmt: skip
    for key in SECTIONS:
        if not isinstance(sc[key], dict):
            raise SpecraceError(f"{origin}: scenario.{key}: must be a table")
    requests = d.get("requests")  # its shape is the reader's to check: ids of text only here
    ids = [r.get("req_id") for r in requests if isinstance(r, dict)] if isinstance(
        requests, list) else []  # fmt: skip
    ids = [r for r in ids if isinstance(r, str)]
    seen: set = set()
    for i, r in enumerate(ids):
        if r in seen:
            raise SpecraceError(f"{origin}: requests[{i}]: req_id {r!r} appears twice")
        seen.add(r)
    steps = d.get("steps")
    for n, st in enumerate(steps if isinstance(steps, list) else []):
        flags = st.get("discard") if isinstance(st, dict) else None
        if isinstance(flags, list):
            for row, x in enumerate(flags):
                if isinstance(x, int) and x not in (0, 1):
                    raise SpecraceError(f"{origin}: step {n}: discard[{row}]: {_num(x)} is not a "
                                        "flag (0 or 1)")  # fmt: skip


def check_meaning(schedule: Schedule, origin: str) -> None:
    """Every step of ``schedule`` (already shape- and replay-checked) against the rules above."""
    for _ in meaning_checked(schedule, schedule.steps, origin):
        pass


def meaning_checked(head: Schedule, steps: Iterable[StepRecord], origin: str) -> Iterator:
    """:func:`check_meaning` one step at a time (yields each step once checked)."""
    requests = {r["req_id"]: r for r in head.requests}
    output_len = {r: int(v["output_len"]) for r, v in requests.items()}
    max_rows = int(head.scenario["engine"].get("max_num_seqs", 0))
    # Before the first step the rows are not known: an exported vLLM run starts after a warm-up
    # pass whose requests the first step removes.
    layout: list[str | None] = [BEFORE] * max_rows
    scheduled: set[str] = set()
    finished: set[str] = set()
    tokens: dict[str, int] = {}
    reached: dict[str, int] = {}  # request -> the step its tokens reached output_len
    last: dict[str, int] = {}  # request -> the last step it was in the batch
    offsets: list[tuple[int, str, int]] = []  # (finished at, request, last - reached)
    for n, rec in enumerate(steps):

        def bad(field: str, why: str, n: int = n) -> SpecraceError:
            return SpecraceError(f"{origin}: step {n}: {field}: {why}")

        _check_sets(rec, layout, scheduled, finished, requests, bad)
        for i, op in enumerate(rec.ops):
            _apply(op, layout, f"ops[{i}]", bad)
        for row, r in enumerate(rec.req_ids):
            last[r] = n
            if not rec.discard[row]:
                tokens[r] = tokens.get(r, 0) + int(rec.accepted[row])
                if r not in reached and r in output_len and tokens[r] >= output_len[r]:
                    reached[r] = n
        for r in rec.unscheduled:
            # Async scheduling's "avoid scheduling an extra step" (vLLM Scheduler.schedule,
            # sim.model.scheduler_rules): the step after the last token leaves the request out
            # as unscheduled instead of holding it; that is its late step.
            if r in reached:
                last[r] = n
        for r in rec.finished:
            if r in reached and r in last:
                offsets.append((n, r, last[r] - reached[r]))
        layout = [None if r == BEFORE else r for r in layout]
        scheduled.update(rec.req_ids)
        finished.update(rec.finished)
        yield rec
    _check_async(head, offsets, origin)


def _check_sets(rec, layout, scheduled, finished, requests, bad) -> None:
    fin, uns = set(rec.finished), set(rec.unscheduled)
    added = [op.req_id for op in rec.ops if op.kind == "add"]
    removed = [op.req_id for op in rec.ops if op.kind == "remove"]
    for field in ("finished", "unscheduled", "new", "resumed"):
        ids = getattr(rec, field)
        if len(set(ids)) != len(ids):
            raise bad(field, "names a request twice")
    # (vLLM's finished and unscheduled sets may name requests of no row: not checked here)
    for field in ("req_ids", "new", "resumed"):
        unknown = [r for r in getattr(rec, field) if r not in requests]
        if unknown:
            raise bad(field, f"request {unknown[0]!r} is not in the schedule's requests")
    again = [r for r in rec.new if r in scheduled]
    if again:
        raise bad("new", f"{again[0]!r} was scheduled before (a resumed request, not a new one)")
    early = [r for r in rec.new if requests[r]["arrival_step"] > rec.step]
    if early:
        raise bad("new", f"{early[0]!r} arrives at step {requests[early[0]]['arrival_step']}")
    both = set(rec.new) & set(rec.resumed)
    if both:
        raise bad("resumed", f"{sorted(both)[0]!r} is also new")
    back = [r for r in (*rec.req_ids, *rec.new, *rec.resumed) if r in finished]
    if back:
        raise bad("req_ids", f"{back[0]!r} finished at an earlier step")
    twice = {r for r in removed if removed.count(r) > 1} | {r for r in added if added.count(r) > 1}
    if twice:
        raise bad("ops", f"{sorted(twice)[0]!r} is removed or added twice")
    stray = [r for r in removed if r not in fin | uns]
    if stray:
        raise bad("ops", f"removes {stray[0]!r}, which is neither finished nor unscheduled")
    held = {r for r in layout if r not in (None, BEFORE)}
    kept = sorted(((fin | uns) & held) - set(removed))
    if kept:
        raise bad("ops", f"{kept[0]!r} is finished or unscheduled but not removed")
    if set(added) != set(rec.new) | set(rec.resumed):
        diff = sorted(set(added) ^ (set(rec.new) | set(rec.resumed)))
        raise bad("new", f"the adds and new + resumed differ ({diff[0]!r})")
    ops = [tuple(op.to_json()) for op in rec.ops]
    if len(set(ops)) != len(ops):
        raise bad("ops", "an op appears twice")


def _apply(op, layout: list[str | None], field: str, bad) -> None:
    """One row op on the layout, checking that it finds what it names."""
    a, b = op.a, op.b
    if op.kind == "remove":
        if layout[a] not in (op.req_id, BEFORE):
            raise bad(field, f"removes {op.req_id!r} from row {a}, which holds {layout[a]!r}")
        layout[a] = None
    elif op.kind == "add":
        if layout[a] not in (None, BEFORE):
            raise bad(field, f"adds {op.req_id!r} into row {a}, which holds {layout[a]!r}")
        layout[a] = op.req_id
    elif op.kind == "move":
        if layout[a] not in (op.req_id, BEFORE) or layout[b] not in (None, BEFORE):
            raise bad(field, f"moves {op.req_id!r} from row {a} (holds {layout[a]!r}) to row "
                      f"{b} (holds {layout[b]!r})")  # fmt: skip
        layout[b], layout[a] = layout[a], None
    else:
        if layout[a] not in (op.req_id, BEFORE) or layout[b] is None:
            raise bad(field, f"swaps {op.req_id!r} at row {a} (holds {layout[a]!r}) with row "
                      f"{b} (holds {layout[b]!r})")  # fmt: skip
        layout[a], layout[b] = layout[b], layout[a]


def _check_async(head: Schedule, offsets: list[tuple[int, str, int]], origin: str) -> None:
    """With async scheduling every finished request stays one step past its last token; a flag
    that every finish contradicts (all late without it, none late with it) is refused."""
    if not offsets:
        return
    on = bool(head.scenario["engine"].get("async_scheduling", True))
    late = [o for o in offsets if o[2] >= 1]
    if on and not late:
        n, r, _ = offsets[0]
        raise SpecraceError(
            f"{origin}: scenario.engine.async_scheduling: true, but no request stays in the batch "
            f"after its last token (e.g. {r!r}, finished at step {n}): the steps are of async "
            "scheduling off"
        )
    if not on and len(late) == len(offsets):
        n, r, _ = offsets[0]
        raise SpecraceError(
            f"{origin}: scenario.engine.async_scheduling: false, but every request stays in the "
            f"batch a step after its last token (e.g. {r!r}, finished at step {n}): the steps "
            "are of async scheduling on"
        )


def _num(x: int) -> str:
    text = str(x)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"
