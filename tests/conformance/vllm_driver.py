"""vLLM's real ``InputBatch`` driven with a specrace schedule, one step at a time.

:meth:`RealBatch.update_states` plays the worker's part of
``GPUModelRunner._update_states`` (vllm/v1/worker/gpu_model_runner.py, v0.24.0
L1127-1450) in its order: remove finished, remove unscheduled (``cached -
(scheduled - resumed)``), the cached-request loop (``prev_num_draft_tokens``,
``num_computed_tokens_cpu``, ``update_req_spec_token_ids``), ``add_request`` for new then
re-added requests, ``condense``, ``reorder_batch_to_split_decodes_and_prefills``,
``refresh_metadata``. Every row method that runs is vLLM's own: a subclass of
``InputBatch`` only logs around them. Restated here are only that order and the few runner
lines around it (``prev_num_draft_tokens``, and ``prev_req_id_to_index`` as
``_bookkeeping_sync`` sets it); async scheduling with spec decode is assumed throughout.

The log uses :class:`sim.model.input_batch.RowOp`: remove and add from the overridden methods,
swap from ``swap_states``, condense's moves from its ``batch_update_builder.moved``
entries (appended before the move's write to ``num_accepted_tokens_cpu``). Writes to that
buffer are seen through an ndarray subclass, so the log of writes is vLLM's, not ours.
A landing (the D2H copy of the previous step's counts) can be put before any logged
operation or after the last; it writes through a plain view and is not logged.

``import vllm`` must find the unpacked tree (conftest.py puts it on ``sys.path``).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import vllm.utils.torch_utils as _torch_utils

# Without a GPU vLLM believes pinned memory is available and CPU torch then refuses it.
# Only the allocator changes; set before gpu_input_batch reads it.
_torch_utils.PIN_MEMORY = False

import torch  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.attention.backends.utils import (  # noqa: E402
    reorder_batch_to_split_decodes_and_prefills,
)
from vllm.v1.sample.logits_processor import MoveDirectionality  # noqa: E402
from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch  # noqa: E402

from sim.model.input_batch import RowOp  # noqa: E402
from sim.model.schedule import StepRecord  # noqa: E402

BLOCK_SIZE = 16
VOCAB_SIZE = 1024


@dataclass(frozen=True)
class StepInput:
    """What the scheduler output of one step tells the worker (taken from a StepRecord)."""

    finished: list[str]
    num_scheduled: dict[str, int]  # scheduler_output.num_scheduled_tokens
    num_computed: dict[str, int]
    num_prompt: dict[str, int]
    spec_tokens: dict[str, list[int]]  # scheduled_spec_decode_tokens (placeholders)
    new: list[str]  # scheduled_new_reqs, in order
    resumed: list[str]  # cached requests not in the batch, in the scheduler's order
    discard: set[str]  # partial prefills: left out of prev_req_id_to_index

    @staticmethod
    def from_record(rec: StepRecord) -> StepInput:
        ids = rec.req_ids

        def per_req(arr: np.ndarray) -> dict[str, int]:
            return {r: int(v) for r, v in zip(ids, arr, strict=True)}

        return StepInput(
            finished=list(rec.finished),
            num_scheduled=per_req(rec.num_scheduled),
            num_computed=per_req(rec.num_computed),
            num_prompt=per_req(rec.num_prompt),
            spec_tokens={r: [-1] * int(d) for r, d in zip(ids, rec.drafts, strict=True) if d},
            new=list(rec.new),
            resumed=list(rec.resumed),
            discard={r for r, d in zip(ids, rec.discard, strict=True) if d},
        )


class Recorder:
    """One step's log: row operations, writes to the counts buffer, and the landing."""

    def __init__(self, land_before: int | None = None, dma: np.ndarray | None = None) -> None:
        self.ops: list[RowOp] = []
        self.writes: list[tuple[int, int, int]] = []  # (op index, row, value written)
        self.land_before = land_before
        self.dma = dma
        self.landed = False

    def before_op(self, batch: InputBatch) -> None:
        if self.dma is not None and not self.landed and len(self.ops) == self.land_before:
            np.asarray(batch.num_accepted_tokens_cpu)[: len(self.dma)] = self.dma
            self.landed = True


class WatchedCounts(np.ndarray):
    """``num_accepted_tokens_cpu`` that reports every item write to the recorder."""

    recorder: Recorder | None

    def __array_finalize__(self, obj: object) -> None:
        self.recorder = getattr(obj, "recorder", None)

    def __setitem__(self, index, value) -> None:
        super().__setitem__(index, value)
        if self.recorder is not None:
            row = int(index) if np.ndim(index) == 0 else -1  # -1: a slice write (unexpected)
            val = int(self[index]) if row >= 0 else -1
            self.recorder.writes.append((len(self.recorder.ops) - 1, row, val))


class MovedLog(list):
    """``batch_update_builder.moved``: condense's moves are logged when appended."""

    def __init__(self, batch: LoggedInputBatch) -> None:
        super().__init__()
        self.batch = batch

    def append(self, item) -> None:
        src, dst, direction = item
        if direction == MoveDirectionality.UNIDIRECTIONAL:
            rec = self.batch.recorder
            rec.before_op(self.batch)
            rec.ops.append(RowOp("move", src, dst, self.batch._req_ids[dst]))
        super().append(item)


class LoggedInputBatch(InputBatch):
    """vLLM's InputBatch; the row methods log themselves and otherwise run unchanged."""

    recorder: Recorder

    def remove_request(self, req_id: str) -> int | None:
        row = self.req_id_to_index.get(req_id)
        if row is not None:
            self.recorder.before_op(self)
            self.recorder.ops.append(RowOp("remove", row, -1, req_id))
        return super().remove_request(req_id)

    def add_request(self, request: CachedRequestState) -> int:
        self.recorder.before_op(self)
        at = len(self.recorder.ops)
        self.recorder.ops.append(RowOp("add", -1, -1, request.req_id))  # row known after
        row = super().add_request(request)
        self.recorder.ops[at] = RowOp("add", row, -1, request.req_id)
        return row

    def swap_states(self, i1: int, i2: int) -> None:
        self.recorder.before_op(self)
        self.recorder.ops.append(RowOp("swap", i1, i2, self._req_ids[i1]))
        super().swap_states(i1, i2)


def new_input_batch(max_num_reqs: int, max_model_len: int, num_spec_tokens: int) -> InputBatch:
    """The constructor of the installed vLLM (v0.23.0 still takes ``pin_memory``)."""
    wanted = dict(
        max_num_reqs=max_num_reqs,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_model_len,
        device=torch.device("cpu"),
        pin_memory=False,
        vocab_size=VOCAB_SIZE,
        block_sizes=[BLOCK_SIZE],
        kernel_block_sizes=[BLOCK_SIZE],
        max_num_blocks_per_req=[-(-max_model_len // BLOCK_SIZE)],  # from 0.28.0 on
        num_spec_tokens=num_spec_tokens,
    )
    params = inspect.signature(InputBatch.__init__).parameters
    return LoggedInputBatch(**{k: v for k, v in wanted.items() if k in params})


class RealBatch:
    """The worker's view: the real batch, its CachedRequestStates, prev_num_draft_tokens."""

    def __init__(
        self, max_num_reqs: int, max_model_len: int, num_spec_tokens: int, threshold: int
    ) -> None:
        self.max_num_reqs = max_num_reqs
        self.threshold = threshold
        self.ib = new_input_batch(max_num_reqs, max_model_len, num_spec_tokens)
        self.requests: dict[str, CachedRequestState] = {}
        self.prev_num_draft_tokens = np.zeros(max_num_reqs, dtype=np.int64)
        self._install(Recorder())

    def _install(self, recorder: Recorder) -> None:
        ib = self.ib
        ib.recorder = recorder
        counts = np.asarray(ib.num_accepted_tokens_cpu).view(WatchedCounts)
        counts.recorder = recorder
        ib.num_accepted_tokens_cpu = counts
        ib.batch_update_builder.moved = MovedLog(ib)

    @property
    def recorder(self) -> Recorder:
        return self.ib.recorder

    @property
    def counts(self) -> np.ndarray:
        return np.asarray(self.ib.num_accepted_tokens_cpu)

    def clone(self) -> RealBatch:
        """A deep copy to run one step on without touching this one."""
        other = copy.copy(self)
        # Prompts are never written after add_request: share them instead of copying.
        shared = {id(s.prompt_token_ids): s.prompt_token_ids for s in self.requests.values()}
        other.ib, other.requests, other.prev_num_draft_tokens = copy.deepcopy(
            (self.ib, self.requests, self.prev_num_draft_tokens), shared
        )
        other._install(Recorder())
        return other

    def update_states(self, step: StepInput, recorder: Recorder | None = None) -> None:
        ib = self.ib
        self._install(recorder or Recorder())
        for req_id in step.finished:
            self.requests.pop(req_id, None)
            ib.remove_request(req_id)
        scheduled = step.num_scheduled.keys()
        for req_id in ib.req_id_to_index.keys() - (scheduled - set(step.resumed)):
            ib.remove_request(req_id)

        reqs_to_add = [self._new_request(step, r) for r in step.new]
        self.prev_num_draft_tokens.fill(0)  # use_async_spec_decode
        prev_map = ib.prev_req_id_to_index
        cached = [r for r in scheduled if r not in set(step.new) | set(step.resumed)]
        for req_id in cached + step.resumed:
            state = self.requests[req_id]
            row = ib.req_id_to_index.get(req_id)
            if state.prev_num_draft_len:  # and use_async_scheduling
                if row is None:
                    state.prev_num_draft_len = 0
                elif prev_map and (prev_row := prev_map.get(req_id)) is not None:
                    self.prev_num_draft_tokens[prev_row] = state.prev_num_draft_len
            state.num_computed_tokens = step.num_computed[req_id]
            if row is None:
                reqs_to_add.append(state)
                continue
            ib.num_computed_tokens_cpu[row] = step.num_computed[req_id]
            ib.update_req_spec_token_ids(state, step.spec_tokens)
        for state in reqs_to_add:
            ib.add_request(state)
            ib.update_req_spec_token_ids(state, step.spec_tokens)
        ib.condense()
        scheduler_output = SimpleNamespace(num_scheduled_tokens=step.num_scheduled)
        reorder_batch_to_split_decodes_and_prefills(ib, scheduler_output, self.threshold)
        self.recorder.before_op(ib)  # a landing after the last operation
        ib.refresh_metadata()

    def prev_positions(self) -> np.ndarray:
        """``_compute_prev_positions``: this step's row -> previous step's row, -1 if none."""
        prev_map = self.ib.prev_req_id_to_index or {}
        return np.array([prev_map.get(r, -1) for r in self.ib.req_ids], dtype=np.int64)

    def finish_step(self, step: StepInput) -> None:
        """``prev_req_id_to_index`` as ``_bookkeeping_sync`` leaves it (async scheduling)."""
        self.ib.prev_req_id_to_index = {
            r: i for i, r in enumerate(self.ib.req_ids) if r not in step.discard
        }

    def _new_request(self, step: StepInput, req_id: str) -> CachedRequestState:
        state = new_request_state(req_id, step.num_prompt[req_id], step.num_computed[req_id])
        self.requests[req_id] = state
        return state

    def reorder(self, num_scheduled: dict[str, int]) -> bool:
        """vLLM's reorder alone, on a fresh log (for hand-made batches)."""
        self._install(Recorder())
        scheduler_output = SimpleNamespace(num_scheduled_tokens=num_scheduled)
        return reorder_batch_to_split_decodes_and_prefills(
            self.ib, scheduler_output, self.threshold
        )


def new_request_state(req_id: str, num_prompt: int, num_computed: int) -> CachedRequestState:
    """A text request as ``_update_states`` makes it from ``scheduled_new_reqs``."""
    return CachedRequestState(
        req_id=req_id,
        prompt_token_ids=[0] * num_prompt,
        mm_features=[],
        sampling_params=SamplingParams(),
        generator=None,
        block_ids=([],),
        num_computed_tokens=num_computed,
        output_token_ids=[],
    )
