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
from string import Template

import numpy as np

from sim.errors import SpecraceError
from sim.explore.check import Counterexample, Space, check, story
from sim.model.input_batch import RowOp
from sim.model.policies import named
from sim.model.schedule import StepRecord
from sim.model.verdict import at_landing, seen_landing

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
        seen = seen_landing(pol, land, len(cur.ops))
        v = at_landing(pol, np.asarray(prev.accepted), cur, race.prior[0], race.prior[1], seen)
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
    return Template(_TEMPLATE).substitute(
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


_TEMPLATE = '''\
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Async scheduling + MTP + mamba_cache_mode="align": every request must read its own
accepted-token count after the persistent batch moves rows (vllm-project/vllm#51571;
fixes proposed in #51599 and #53919).

Step N's accepted counts reach ``InputBatch.num_accepted_tokens_cpu_tensor`` through a
non-blocking D2H copy (``postprocess_mamba_align_gpu``) while the CPU of step N+1
already moves rows in ``_update_states``. ``_prepare_inputs`` waits on
``num_accepted_tokens_event`` and gathers the counts through ``prev_positions``, which
is right only if the copy landed after every row move. Where it lands before the moves
(the moves then permute step N's values and the gather permutes them again), or between
a write into a row and the swap that carries it to another request, a request reads
another row's count; align consumes it in ``preprocess_mamba`` and re-uploads it after
the GPU correction kernel, so the GDN state is restored from the wrong speculative slot.

The scheduler outputs below are the minimal align counterexample of specrace's bounded
check,

    $CHECK

from which ``python -m sim upstream-test`` generated this file for vLLM $VLLM:

$STORY

The test runs on CPU: vLLM's own InputBatch and reorder, and the GPUModelRunner code
that handles the counts, taken from the runner's source (constructing the runner needs a
GPU and a model): ``_update_states_after_model_execute``, ``_update_states`` up to its
first row operation, ``_compute_prev_positions``, and ``_prepare_inputs``'s
accepted-count block, run on a stand-in that holds the attributes they read. The copy
lands where the test puts it among the row operations, or at the first
``num_accepted_tokens_event.synchronize()``, whichever comes first. A fix to the
runner's source is picked up as it is.
"""

import ast
import importlib.util
import textwrap
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from vllm.sampling_params import SamplingParams
from vllm.v1.attention.backends.utils import reorder_batch_to_split_decodes_and_prefills
from vllm.v1 import utils as v1_utils
from vllm.v1.utils import CpuGpuBuffer
from vllm.v1.worker import gpu_input_batch
from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch

NUM_SPEC_TOKENS = $K
MAX_NUM_REQS = $MAX_NUM_REQS
MAX_MODEL_LEN = 1024
BLOCK_SIZE = 16
VOCAB_SIZE = 1024
# The runner's reorder threshold: 1 + k with GDN and FA3 alone; a builder that sets 1
# (e.g. FlashInfer without TRT-LLM) makes a spec decode "long extend" and a 1-token
# prefill "decode".
DECODE_THRESHOLD = $THRESHOLD
DEVICE = torch.device("cpu")


@dataclass(frozen=True)
class ScriptedStep:
    """One engine step as the worker sees it."""

    num_scheduled_tokens: dict[str, int]  # scheduler_output.num_scheduled_tokens
    # before the step (optimistic under async scheduling)
    num_computed_tokens: dict[str, int]
    # scheduled_new_reqs: req_id -> num_prompt_tokens
    new_reqs: dict[str, int] = field(default_factory=dict)
    finished_req_ids: tuple[str, ...] = ()
    # scheduled_spec_decode_tokens: req_id -> number of draft tokens
    num_draft_tokens: dict[str, int] = field(default_factory=dict)
    # the rejection sampler's result: 1 + accepted drafts, per request
    num_accepted_tokens: dict[str, int] = field(default_factory=dict)
    # the persistent batch's row operations in this step, in order (checked, so that a
    # landing names the same point in every vLLM version)
    row_ops: tuple[str, ...] = ()


STEPS = (
$STEPS
)
# Where step N-1's copy lands among step N's row operations, for steps 1 .. N-1 (the
# index of the operation it precedes; len(row_ops): after the last). The last step is
# parametrized.
LANDINGS = $LANDINGS


class InFlightCopy:
    """The non-blocking D2H copy of the accepted counts: issued by the runner's code,
    landed by the test (or by a wait on the event recorded after it)."""

    def __init__(self) -> None:
        self.values: torch.Tensor | None = None
        self.dst: torch.Tensor | None = None

    def issue(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.values, self.dst = src.clone(), dst

    def land(self) -> None:
        if self.dst is not None and self.values is not None:
            self.dst.copy_(self.values)
        self.values = self.dst = None


class CopyEvent:
    """``num_accepted_tokens_event``: a wait on it lands the copy recorded before."""

    def __init__(self, copy: InFlightCopy) -> None:
        self.copy = copy

    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        self.copy.land()


class AlignPostprocess:
    """``mamba_utils`` in the runner's namespace: ``postprocess_mamba_align_gpu`` issues
    its D2H of the counts into the tensor the runner passes. (The fused kernel also
    copies states and sets a count to 1 where source and destination block agree; no
    block does here.)"""

    def __init__(self, copy: InFlightCopy) -> None:
        self.copy = copy

    def postprocess_mamba_align_gpu(
        self, *, num_reqs, num_accepted_tokens_gpu, num_accepted_tokens_cpu_tensor, **_
    ) -> None:
        self.copy.issue(
            num_accepted_tokens_gpu[:num_reqs],
            num_accepted_tokens_cpu_tensor[:num_reqs],
        )


class LandingInputBatch(InputBatch):
    """vLLM's InputBatch; its row operations are logged, and the in-flight copy may land
    just before one of them."""

    copy: InFlightCopy | None = None
    land_before = -1
    row_ops: list[str] = []

    def start_step(self, copy: InFlightCopy, land_before: int) -> None:
        self.copy, self.land_before, self.row_ops = copy, land_before, []

    def _row_op(self) -> None:
        if self.copy is not None and len(self.row_ops) == self.land_before:
            self.copy.land()

    def remove_request(self, req_id: str) -> int | None:
        self._row_op()
        row = super().remove_request(req_id)
        self.row_ops.append(f"remove {req_id} from row {row}")
        return row

    def add_request(self, request: CachedRequestState) -> int:
        self._row_op()
        row = super().add_request(request)
        self.row_ops.append(f"add {request.req_id} into row {row}")
        return row

    def swap_states(self, i1: int, i2: int) -> None:
        self._row_op()
        self.row_ops.append(f"swap rows {i1} and {i2}")
        super().swap_states(i1, i2)

    def end_row_ops(self) -> None:
        self._row_op()


class RunnerStandIn:
    """The attributes of GPUModelRunner that its count-handling code reads: async
    scheduling, MTP, a hybrid model, mamba_cache_mode="align"."""

    def _get_mamba_bufs(self):
        return None

    def _get_mamba_state_copy_funcs(self):
        return ()


def _runner_source() -> tuple[str, str]:
    spec = importlib.util.find_spec("vllm.v1.worker.gpu_model_runner")
    assert spec is not None and spec.origin is not None
    return spec.origin, Path(spec.origin).read_text()


def _segment(lines: list[str], node: ast.AST) -> str:
    return textwrap.dedent("\\n".join(lines[node.lineno - 1 : node.end_lineno]))


def _runner_code(source: str) -> dict[str, str]:
    """The GPUModelRunner code the test runs, by name, as function definitions."""
    lines = source.splitlines()
    tree = ast.parse(source)
    runner = next(
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "GPUModelRunner"
    )
    methods = {n.name: n for n in runner.body if isinstance(n, ast.FunctionDef)}
    code = {
        name: _segment(lines, methods[name])
        for name in ("_update_states_after_model_execute", "_compute_prev_positions")
    }

    # _update_states: what runs before its first row operation (finished requests are
    # dropped first)
    before = []
    for stmt in methods["_update_states"].body:
        if isinstance(stmt, ast.For) and (
            ast.unparse(stmt.iter) == "scheduler_output.finished_req_ids"
        ):
            break
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            before.append(_segment(lines, stmt))
    code["update_states_before_row_ops"] = _function(
        "update_states_before_row_ops", "self, scheduler_output", before
    )

    # _prepare_inputs: prev_positions, then the accepted-count block
    def wanted(stmt: ast.stmt) -> bool:
        text = ast.unparse(stmt)
        return (
            text.startswith("prev_req_id_to_index = ")
            or text.startswith("self._compute_prev_positions(")
            or text.startswith("needs_cpu_accepted_counts = ")
            or (
                isinstance(stmt, ast.If)
                and ast.unparse(stmt.test) == "needs_cpu_accepted_counts"
            )
        )

    block = [_segment(lines, s) for s in methods["_prepare_inputs"].body if wanted(s)]
    assert len(block) == 4, (
        "GPUModelRunner._prepare_inputs no longer has its accepted-count block "
        "(prev_req_id_to_index, _compute_prev_positions, needs_cpu_accepted_counts): "
        "update this test"
    )
    code["prepare_accepted_counts"] = _function(
        "prepare_accepted_counts", "self, num_reqs", block
    )
    return code


def _function(name: str, args: str, body: list[str]) -> str:
    text = "\\n".join(body) or "pass"
    return f"def {name}({args}):\\n" + textwrap.indent(text, "    ")


def make_runner() -> RunnerStandIn:
    runner = RunnerStandIn()
    runner.use_async_scheduling = True
    runner.speculative_config = types.SimpleNamespace(
        num_speculative_tokens=NUM_SPEC_TOKENS
    )
    runner.model_config = types.SimpleNamespace(is_hybrid=True)
    runner.cache_config = types.SimpleNamespace(mamba_cache_mode="align")
    runner.model = types.SimpleNamespace(get_mamba_state_copy_func=lambda: ())
    runner.kv_cache_config = None
    runner.compilation_config = types.SimpleNamespace(static_forward_context={})
    runner.max_num_reqs = MAX_NUM_REQS
    runner.input_batch = LandingInputBatch(
        max_num_reqs=MAX_NUM_REQS,
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=MAX_MODEL_LEN,
        device=DEVICE,
        vocab_size=VOCAB_SIZE,
        block_sizes=[BLOCK_SIZE],
$INPUT_BATCH_KWARGS
        num_spec_tokens=NUM_SPEC_TOKENS,
    )
    runner.num_accepted_tokens = CpuGpuBuffer(
        MAX_NUM_REQS, dtype=torch.int32, device=DEVICE, pin_memory=False
    )
    runner.prev_positions = CpuGpuBuffer(
        MAX_NUM_REQS, dtype=torch.int64, device=DEVICE, pin_memory=False
    )
    runner.requests = {}
    runner.d2h_copy = InFlightCopy()
    runner.num_accepted_tokens_event = CopyEvent(runner.d2h_copy)

    path, source = _runner_source()
    namespace = {
        "np": np,
        "torch": torch,
        "mamba_utils": AlignPostprocess(runner.d2h_copy),
    }
    for name, text in _runner_code(source).items():
        exec(compile(text, f"{path} (GPUModelRunner, {name})", "exec"), namespace)
        setattr(runner, name, types.MethodType(namespace[name], runner))
    return runner


def _request(req_id: str, num_prompt_tokens: int, num_computed_tokens: int):
    return CachedRequestState(
        req_id=req_id,
        prompt_token_ids=[0] * num_prompt_tokens,
        mm_features=[],
        sampling_params=SamplingParams(),
        pooling_params=None,
        generator=None,
        block_ids=([],),
        num_computed_tokens=num_computed_tokens,
        output_token_ids=[],
    )


def _execute_step(
    runner, step: ScriptedStep, landing: int
) -> dict[str, tuple[int, int, int]]:
    """One step of the worker (the order of GPUModelRunner._update_states, then the
    runner's own count code); returns req_id -> (row, num_accepted_tokens.np,
    num_accepted_tokens_cpu) as _prepare_inputs leaves them."""
    batch = runner.input_batch
    spec_tokens = {r: [-1] * n for r, n in step.num_draft_tokens.items()}
    scheduler_output = types.SimpleNamespace(
        finished_req_ids=set(step.finished_req_ids),
        num_scheduled_tokens=dict(step.num_scheduled_tokens),
        scheduled_spec_decode_tokens=spec_tokens,
    )
    runner.update_states_before_row_ops(scheduler_output)
    batch.start_step(runner.d2h_copy, landing)
    for req_id in step.finished_req_ids:
        runner.requests.pop(req_id, None)
        batch.remove_request(req_id)
    for req_id in batch.req_ids:  # cached requests
        state = runner.requests[req_id]
        state.num_computed_tokens = step.num_computed_tokens[req_id]
        batch.num_computed_tokens_cpu[batch.req_id_to_index[req_id]] = (
            state.num_computed_tokens
        )
        batch.update_req_spec_token_ids(state, spec_tokens)
    for req_id, num_prompt_tokens in step.new_reqs.items():
        state = _request(req_id, num_prompt_tokens, step.num_computed_tokens[req_id])
        runner.requests[req_id] = state
        batch.add_request(state)
        batch.update_req_spec_token_ids(state, spec_tokens)
    batch.condense()
    reorder_batch_to_split_decodes_and_prefills(
        batch, scheduler_output, DECODE_THRESHOLD
    )
    batch.end_row_ops()
    batch.refresh_metadata()
    assert batch.row_ops == list(step.row_ops), (
        f"the row operations differ from the scripted {step.row_ops}: {batch.row_ops}"
    )

    num_reqs = batch.num_reqs
    runner.prepare_accepted_counts(num_reqs)
    read = {
        req_id: (
            row,
            int(runner.num_accepted_tokens.np[row]),
            int(batch.num_accepted_tokens_cpu[row]),
        )
        for row, req_id in enumerate(batch.req_ids)
    }

    # the model ran: the rejection sampler's output, then the runner's postprocess
    output_token_ids = torch.full(
        (num_reqs, 1 + NUM_SPEC_TOKENS), -1, dtype=torch.int64
    )
    for row, req_id in enumerate(batch.req_ids):
        output_token_ids[row, : step.num_accepted_tokens.get(req_id, 1)] = 0
    runner._update_states_after_model_execute(output_token_ids, scheduler_output)
    # _bookkeeping_sync (async scheduling): this step's row of every request
    batch.prev_req_id_to_index = {r: i for i, r in enumerate(batch.req_ids)}
    return read


@pytest.fixture(autouse=True)
def _pinned_memory_only_with_a_gpu(monkeypatch):
    # vLLM pins its CPU buffers wherever it believes it can; CPU-only torch refuses
    if not torch.cuda.is_available():
        for module in (gpu_input_batch, v1_utils):
            monkeypatch.setattr(module, "PIN_MEMORY", False, raising=False)


@pytest.mark.parametrize(
    "landing",
    [
$PARAMS
    ],
)
def test_accepted_counts_follow_requests_across_row_moves(landing: int):
    """Every request must read the count its own previous step accepted (1 if it is
    new), wherever the previous step's copy lands among the row operations: in
    ``num_accepted_tokens`` (uploaded to the GDN kernel) and in the InputBatch's
    ``num_accepted_tokens_cpu`` (what align's ``preprocess_mamba`` consumes)."""
    runner = make_runner()
    landings = (-1, *LANDINGS, landing)
    prev: ScriptedStep | None = None
    prev_rows: dict[str, int] = {}
    for n, step in enumerate(STEPS):
        read = _execute_step(runner, step, landings[n])
        for req_id, (row, uploaded, in_batch) in read.items():
            new = prev is None or req_id not in prev_rows
            want = 1 if new else prev.num_accepted_tokens[req_id]
            where = "new" if new else f"row {prev_rows[req_id]} at step {n - 1}"
            assert (uploaded, in_batch) == (want, want), (
                f"step {n}, copy of step {n - 1} landed before row op {landings[n]} of "
                f"{list(step.row_ops)}: request {req_id} (row {row}, {where}) reads "
                f"{uploaded} accepted tokens (InputBatch: {in_batch}), expected {want}"
            )
        prev, prev_rows = step, {r: row for r, (row, _, _) in read.items()}
'''
