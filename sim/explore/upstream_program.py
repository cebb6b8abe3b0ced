# specrace-template: the test file `python -m sim upstream-test` writes for vLLM's tree
# specrace-template: (sim/explore/upstream_test.py renders it). A real module so that ruff
# specrace-template: and mypy read it; never imported. Lines marked like this one are
# specrace-template: left out of the file, the `$NAME`s in its docstring are filled in, and
# specrace-template: each line ending in `specrace-template: NAME` stands for a value of the
# specrace-template: counterexample (upstream_test.STANDINS).
# specrace-template: the next two lines are left out of the file too. The import order is
# specrace-template: the file's own; mypy is spared the stand-in runner, built attribute by
# specrace-template: attribute, and the file's unannotated vLLM-style code.
# ruff: noqa: I001
# mypy: disable-error-code="attr-defined,arg-type,var-annotated,union-attr"
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

NUM_SPEC_TOKENS = 3
MAX_NUM_REQS = 4
MAX_MODEL_LEN = 1024
BLOCK_SIZE = 16
VOCAB_SIZE = 1024
# The runner's reorder threshold: 1 + k with GDN and FA3 alone; a builder that sets 1
# (e.g. FlashInfer without TRT-LLM) makes a spec decode "long extend" and a 1-token
# prefill "decode".
DECODE_THRESHOLD = 4
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
    # specrace-template: STEPS
)
# Where step N-1's copy lands among step N's row operations, for steps 1 .. N-1 (the
# index of the operation it precedes; len(row_ops): after the last). The last step is
# parametrized.
LANDINGS: tuple[int, ...] = ()  # specrace-template: LANDINGS


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
    return textwrap.dedent("\n".join(lines[node.lineno - 1 : node.end_lineno]))


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
    text = "\n".join(body) or "pass"
    return f"def {name}({args}):\n" + textwrap.indent(text, "    ")


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
        # specrace-template: INPUT_BATCH_KWARGS
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
        # specrace-template: PARAMS
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
