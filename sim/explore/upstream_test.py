"""``python -m sim upstream-test``: ``sim check``'s minimal align counterexample as a pytest
file in vLLM's own test style, for vLLM's tree (vllm-project/vllm#51571).

The generated test drives vLLM's real ``InputBatch`` and
``reorder_batch_to_split_decodes_and_prefills`` on CPU through the counterexample's scheduler
outputs, and runs the ``GPUModelRunner`` code that handles the accepted counts, taken from the
runner's source (the runner itself needs a GPU and a model to construct):
``_update_states_after_model_execute`` (where align's D2H copy goes), ``_update_states`` up to
its first row operation, ``_compute_prev_positions`` and ``_prepare_inputs``'s accepted-count
block. Step N's copy "lands" where the test puts it among step N+1's row operations, or at the
first ``num_accepted_tokens_event`` wait, whichever is first. The read step is run at every
landing: unpatched align reads a wrong count where the model says so (before the add:
double-permute; between the add and the swap: ownership) and the right one after the moves; a
fix passes at every landing.

The file imports nothing of specrace. ``tests/conformance/test_conformance_upstream.py`` runs it
against the unpacked wheel three ways (unpatched, and each patch of gpu_check.vllm.patches
applied to the runner's source) and holds the outcome to :func:`predicted_failures`.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from string import Template

import numpy as np

from sim.errors import SpecraceError
from sim.explore.check import Counterexample, Space, check, story
from sim.model.input_batch import RowOp
from sim.model.policies import named
from sim.model.schedule import StepRecord
from sim.model.verdict import at_seen_landing

# The space of ``python -m sim check`` whose minimal align counterexample the test scripts (the
# same schedule and landings as the default check's, data/check/r4-s3-k3.json, at 2 rows).
SPACE = Space(max_rows=2, steps=3, k=3, classes=("p", "h", "L"), sync_classes=("p",))
CHECK_COMMAND = "python -m sim check --max-rows 2 --steps 3 --k 3 --policy align"
POLICY = "align"

# The releases whose source the generated test was run against (make conformance), with the
# ``InputBatch`` constructor of each: 0.33.0 dropped ``kernel_block_sizes`` and requires
# ``max_num_blocks_per_req``.
INPUT_BATCH_KWARGS = {
    "0.24.0": ("kernel_block_sizes=[BLOCK_SIZE],",),
    "0.33.0": ("max_num_blocks_per_req=[MAX_MODEL_LEN // BLOCK_SIZE],",),
}
SUPPORTED = tuple(INPUT_BATCH_KWARGS)


@dataclass(frozen=True)
class Race:
    """The counterexample as the generated test scripts it."""

    records: tuple[StepRecord, ...]
    landings: tuple[int, ...]  # where step n-1's copy lands among step n's ops, steps 1..n-1
    kinds: dict[int, str]  # read-step landing -> the counterexample kind found there
    story: str
    wrong: tuple[tuple[str, int, int], ...]  # the wrong reads: (req_id, read, true)
    prior: tuple[np.ndarray, np.ndarray]  # (pinned, private) buffers before the read step

    @property
    def read(self) -> StepRecord:
        return self.records[-1]


def _same_schedule(a: Counterexample, b: Counterexample) -> bool:
    return [r.ops for r in a.records] == [r.ops for r in b.records] and [
        r.req_ids for r in a.records
    ] == [r.req_ids for r in b.records]


@cache
def minimal_race() -> Race:
    """``sim check``'s minimal align counterexamples over :data:`SPACE`: one schedule, its read
    step wrong at two landings (double-permute and ownership)."""
    found = check(SPACE, [POLICY]).policies[POLICY].minimal
    if not found:
        raise SpecraceError(f"{CHECK_COMMAND} finds no counterexample: nothing to script")
    kinds = sorted(found)
    first = found[kinds[0]]
    if not all(_same_schedule(first, found[k]) for k in kinds):
        raise SpecraceError(f"{CHECK_COMMAND}: the minimal counterexamples differ in schedule")
    for rec in first.records:
        _scriptable(rec)
    if first.prior is None:
        raise SpecraceError(f"{CHECK_COMMAND}: the counterexample keeps no prior buffers")
    prior = (np.asarray(first.prior[0]), np.asarray(first.prior[1]))
    return Race(
        records=tuple(first.records),
        landings=tuple(first.landings[:-1]),
        kinds={found[k].landings[-1]: k for k in kinds},
        story=story(first),
        wrong=tuple((first.records[-1].req_ids[w.row], w.cpu, w.true) for w in first.wrong),
        prior=prior,
    )


def _scriptable(rec: StepRecord) -> None:
    """The generated test scripts finishes, new requests and cached ones; it refuses what it
    does not restate of ``_update_states`` rather than script it wrong."""
    if rec.unscheduled or rec.resumed or bool(np.any(rec.discard)):
        raise SpecraceError(
            f"step {rec.step} of the counterexample has unscheduled, resumed or partial-prefill "
            "requests, which the generated test does not script"
        )
    if any(op.kind == "move" for op in rec.ops):
        raise SpecraceError(
            f"step {rec.step} of the counterexample condenses rows, which the generated test "
            "does not script"
        )


def op_label(op: RowOp) -> str:
    """A row operation as the generated test logs it from the real InputBatch."""
    if op.kind == "add":
        return f"add {op.req_id} into row {op.a}"
    if op.kind == "remove":
        return f"remove {op.req_id} from row {op.a}"
    return f"swap rows {op.a} and {op.b}"


def landing_id(ops: list[RowOp], land: int) -> str:
    """The pytest id of a read-step landing (0..len(ops))."""
    if land == len(ops):
        return "copy-lands-after-the-row-ops"
    return "copy-lands-before-" + op_label(ops[land]).replace(" ", "-")


def read_landings(race: Race) -> list[tuple[int, str]]:
    ops = list(race.read.ops)
    return [(p, landing_id(ops, p)) for p in range(len(ops) + 1)]


def predicted_failures(policy: str, race: Race | None = None) -> set[str]:
    """The ids of the generated test that fail under ``policy`` (a sim policy: ``align`` is the
    unpatched wheel) by :mod:`sim.model.verdict`: a read that is wrong on the CPU."""
    race = race or minimal_race()
    pol = named(policy)
    cur, prev = race.read, race.records[-2]
    out = set()
    for land, name in read_landings(race):
        v = at_seen_landing(pol, np.asarray(prev.accepted), cur, race.prior[0], race.prior[1],
                            land)  # fmt: skip
        if bool(np.any(v.cpu_wrong)):
            out.add(name)
    return out


# -- rendering --------------------------------------------------------------------------------


def _q(text: str) -> str:
    return json.dumps(text)  # double quotes, as vLLM's formatter writes strings


def _dict(pairs: list[tuple[str, int]]) -> str:
    return "{" + ", ".join(f"{_q(k)}: {v}" for k, v in pairs) + "}"


def _tuple(items: list[str]) -> str:
    inner = ", ".join(_q(i) for i in items)
    return f"({inner},)" if len(items) == 1 else f"({inner})"


def _per_req(ids: list[str], values: np.ndarray) -> list[tuple[str, int]]:
    return [(r, int(v)) for r, v in zip(ids, values, strict=True)]


def _step_literal(rec: StepRecord, last: bool) -> str:
    ids = list(rec.req_ids)
    lines = [
        f"    # step {rec.step}",
        "    ScriptedStep(",
        f"        num_scheduled_tokens={_dict(_per_req(ids, rec.num_scheduled))},",
        f"        num_computed_tokens={_dict(_per_req(ids, rec.num_computed))},",
    ]
    if rec.new:
        prompt = dict(zip(ids, rec.num_prompt, strict=True))
        lines.append(f"        new_reqs={_dict([(r, int(prompt[r])) for r in rec.new])},")
    if rec.finished:
        lines.append(f"        finished_req_ids={_tuple(list(rec.finished))},")
    drafts = [(r, d) for r, d in _per_req(ids, rec.drafts) if d > 0]
    if drafts:
        lines.append(f"        num_draft_tokens={_dict(drafts)},")
    if not last:
        lines.append(f"        num_accepted_tokens={_dict(_per_req(ids, rec.accepted))},")
    if rec.ops:
        lines.append(f"        row_ops={_tuple([op_label(op) for op in rec.ops])},")
    lines.append("    ),")
    return "\n".join(lines)


def check_version(vllm: str) -> None:
    if vllm not in INPUT_BATCH_KWARGS:
        raise SpecraceError(
            f"--vllm {vllm}: upstream-test supports vLLM {', '.join(SUPPORTED)} (the releases "
            "its test is run against in make conformance)"
        )


def render(vllm: str) -> str:
    """The test file for vLLM ``vllm`` (one of :data:`SUPPORTED`): same version, same text."""
    check_version(vllm)
    race = minimal_race()
    n = len(race.records)
    steps = "\n".join(_step_literal(rec, i == n - 1) for i, rec in enumerate(race.records))
    wrong = predicted_failures(POLICY, race)
    params = []
    for land, name in read_landings(race):
        kind = race.kinds.get(land)
        if name in wrong:
            note = f"unpatched align reads a wrong count here ({kind or 'wrong'})"
        else:
            note = "right without a fix: the copy landed after every row move"
        params.append(f"        # {note}\n        pytest.param({land}, id={_q(name)}),")
    story_lines = "\n".join(
        textwrap.fill(line, 88, initial_indent="    ", subsequent_indent="        ")
        for line in race.story.splitlines()
    )
    kwargs = "\n".join(f"        {k}" for k in INPUT_BATCH_KWARGS[vllm])
    return Template(template()).substitute(
        VLLM=vllm,
        CHECK=CHECK_COMMAND,
        STORY=story_lines,
        K=SPACE.k,
        MAX_NUM_REQS=max(r.num_reqs for r in race.records),
        THRESHOLD=1 if "threshold 1" in race.story.splitlines()[0] else 1 + SPACE.k,
        STEPS=steps,
        LANDINGS=repr(race.landings),
        PARAMS="\n".join(params),
        INPUT_BATCH_KWARGS=kwargs,
    )


# The program is sim/explore/upstream_program.py, a real module (ruff and mypy read it). Each
# line of it on the left stands for the template line on the right, a value of the
# counterexample: the module must be valid Python where the file holds generated text.
STANDINS = {
    "NUM_SPEC_TOKENS = 3": "NUM_SPEC_TOKENS = $K",
    "MAX_NUM_REQS = 4": "MAX_NUM_REQS = $MAX_NUM_REQS",
    "DECODE_THRESHOLD = 4": "DECODE_THRESHOLD = $THRESHOLD",
    "    # specrace-template: STEPS": "$STEPS",
    "LANDINGS: tuple[int, ...] = ()  # specrace-template: LANDINGS": "LANDINGS = $LANDINGS",
    "        # specrace-template: INPUT_BATCH_KWARGS": "$INPUT_BATCH_KWARGS",
    "        # specrace-template: PARAMS": "$PARAMS",
}
PROGRAM = Path(__file__).with_name("upstream_program.py")


def template() -> str:
    """The file's template (``string.Template``): the program module without its leading
    lines before the licence header, each stand-in line put back to its placeholder."""
    lines = PROGRAM.read_text().split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith("# SPDX-"))
    lines = lines[first:]
    for i, line in enumerate(lines):
        if line in STANDINS:
            lines[i] = STANDINS[line]
    missing = set(STANDINS.values()) - set(lines)
    if missing:  # a stand-in line was edited: the file would keep the stand-in's value
        raise AssertionError(f"{PROGRAM.name}: stand-in lines not found for {sorted(missing)}")
    return "\n".join(lines)
