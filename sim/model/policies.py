"""What a vLLM code path does with step N's accepted counts: the one home of a policy's meaning.

A :class:`Policy` answers three questions for every consumer (the SimPy tier, the verdicts,
the hardware replay, and whatever comes next), as plain functions over numpy arrays; no
consumer branches on a policy's name:

1. **When the worker waits** on ``num_accepted_tokens_event`` (step N's D2H done):
   :attr:`Policy.wait` is a point in step N+1's operation sequence (:class:`WaitPoint`).
2. **What the CPU builds** into ``num_accepted_tokens`` for step N+1 from the pinned buffer
   ``input_batch.num_accepted_tokens_cpu`` (or a runner-private buffer) and
   ``prev_positions``, including any write-back into the pinned buffer:
   :meth:`Policy.cpu_read`. :attr:`Policy.reads_buffer` says whether that value is a read that
   can be wrong (a fill of 1 is not).
3. **What the GDN kernel consumes**, given the CPU value, the true counts and which rows the
   correction kernel repairs: :meth:`Policy.gpu_consumed`.

Line numbers are vLLM v0.24.0 unless marked (docs/versions.md gives the later releases'; the
accepted-count block is identical 0.24.0-0.33.0). Where the reference is unclear:
``unsynced`` is modelled as v0.23.0's gather without the event wait; ``sync-before-moves``
(#53919) as a wait before the first row move followed by a direct read (B is then already in
step N+1 layout, so a gather would permute twice); ``private-buffer`` and
``sync-before-moves`` are fixes proposed for align mode, so they consume CPU counts.

``mrv2`` is model runner V2, where no CPU buffer holds the counts; ``ascend-main`` and
``ascend-13865`` are vllm-ascend's NPU runner without and with its own fix (#13865).

Where the tiers simplify: the SimPy and vector tiers land step N's counts in both the pinned
buffer and the private one whatever the policy (#51599 writes only the private one); no policy
reads the buffer it does not own, so no verdict depends on it, but the trace's logged values of
the pinned buffer under ``private-buffer`` show a DMA vLLM would not do. The hardware replay
copies into the policy's own target (:attr:`Policy.dma_into_private`).

With async scheduling off every policy takes vLLM's synchronous path (:data:`SYNC_SCHEDULING`):
``sample_tokens`` blocks, so the D2H landed before ``_update_states``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.errors import SpecraceError, did_you_mean
from sim.model.counts_buffer import gather


class WaitPoint(enum.Enum):
    """Where in step N+1 the worker calls ``num_accepted_tokens_event.synchronize()``."""

    NEVER = "never"
    BEFORE_MOVES = "before_moves"  # before the first row op of _update_states (#53919)
    BEFORE_READ = "before_read"  # in _prepare_inputs, right before the counts are read


# -- 2. what the CPU builds ------------------------------------------------------------------
# Each builder: (buf, private, prev_positions, num_reqs) -> the values the CPU puts into
# num_accepted_tokens for step N+1's rows. ``buf`` is the pinned InputBatch buffer; a builder
# that writes back updates it in place, as vLLM does.
CpuBuilder = Callable[[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]


def _gather_from(src: np.ndarray, prev_positions: np.ndarray, num_reqs: int) -> np.ndarray:
    """``G[r] = src[prev_positions[r]]``, 1 for a new row (prev < 0); with an empty
    ``prev_req_id_to_index`` (no row has a previous position) vLLM takes the values directly
    (v0.23.0 L2021-2046; v0.24.0 L2043-2065)."""
    pp = prev_positions[:num_reqs]
    if not (pp >= 0).any():
        return src[:num_reqs].copy()
    return gather(src, pp)  # in src's dtype: the vector tier's int8 buffer is not widened


def gather_write_back(buf, private, prev_positions, num_reqs):
    """The synchronised CPU path: gather through ``prev_positions`` from the pinned buffer,
    then ``B[:n] = G`` and ``copy_to_gpu`` (v0.24.0 L2043-2065, 0.33.0 L2074-2096)."""
    g = _gather_from(buf, prev_positions, num_reqs)
    buf[:num_reqs] = g
    return g


def direct(buf, private, prev_positions, num_reqs):
    """The buffer's first ``n`` rows as they are (the non-async branch; #53919's read after a
    wait before the moves, when B is already in step N+1 layout)."""
    return buf[:num_reqs].astype(np.int64)


def fill_one(buf, private, prev_positions, num_reqs):
    """#45100's async non-align path: ``num_accepted_tokens.np.fill(1)`` and ``gpu.fill_(1)``
    (v0.24.0 L2066-2070, 0.33.0 L2097-2101); the buffer is not read."""
    return np.ones(num_reqs, dtype=np.int64)


def gather_private(buf, private, prev_positions, num_reqs):
    """#51599: gather from a runner-private D2H target that no row move touches; no
    write-back into the InputBatch buffer."""
    return _gather_from(private, prev_positions, num_reqs)


def gather_private_write_back(buf, private, prev_positions, num_reqs):
    """vllm-ascend #13865 (releases/v0.23.0, 17ac75217f): the D2H lands in the runner's own
    ``num_accepted_tokens.cpu``, which no row move touches; ``_remap_num_accepted_tokens``
    gathers it in place through ``prev_positions`` (new rows 1) and writes the result back
    into the InputBatch buffer; with no previous mapping every row is 1
    (``_sync_num_accepted_tokens``)."""
    g = gather(private, prev_positions[:num_reqs])  # rows, or (rows, points)
    private[:num_reqs] = g
    buf[:num_reqs] = g
    return g


def no_cpu_counts(buf, private, prev_positions, num_reqs):
    """Model runner V2 builds no CPU counts at all: ``num_accepted_tokens_gpu`` lives on the GPU
    only (model_states/mamba_hybrid.py, 0.33.0 L86). The ones returned are a placeholder that
    no consumer of this policy reads (:func:`from_request_slot` ignores them)."""
    return np.ones(num_reqs, dtype=np.int64)


# -- 3. what the GDN kernel consumes ---------------------------------------------------------
# Each consumer: (cpu_values, true_counts, participating) -> the count the GDN kernel uses.
# ``participating``: rows the correction kernel repairs (prev_pos >= 0 and
# prev_num_draft_tokens[prev_pos] > 0, spec_decode/utils.py L565-595).
GpuConsumer = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def corrected(cpu, true, participating):
    """``update_num_computed_tokens_for_batch_change`` takes ``valid_sampled_token_count`` for
    every row that had drafts at step N; other rows keep the CPU value (docs/mechanism.md §3)."""
    return np.where(participating, true, cpu)


def cpu_value(cpu, true, participating):
    """Align: ``preprocess_mamba`` uses the CPU counts and the runner re-uploads them after the
    correction kernel, overriding its repair (mamba_utils.py L678-741, GMR L4229-4236)."""
    return np.asarray(cpu)


def from_request_slot(cpu, true, participating):
    """MRv2: ``postprocess_state`` scatters ``max(num_sampled, 1)`` into
    ``num_accepted_tokens_gpu[idx_mapping[i]]`` (a stable per-request slot) and the next step's
    ``prepare_attn`` gathers it through the same ``idx_mapping``, both on the default stream
    (mamba_hybrid.py, 0.33.0 L350-383, L275-279). Stream order puts the scatter of step N
    before the gather of step N+1, and the slot follows the request, not the batch row: so the
    value consumed is step N's true count whatever the CPU did, by construction."""
    return np.asarray(true)


@dataclass(frozen=True)
class Policy:
    name: str
    vllm: str  # the vLLM state it models
    wait: WaitPoint
    build: CpuBuilder
    consume: GpuConsumer
    dma_into_private: bool = False  # #51599: the D2H targets the runner-private buffer
    # A fix, documented safe for every interleaving (docs/check.md):
    # ``sim check`` exits non-zero where one fails.
    documented_safe: bool = False

    @property
    def waits_before_moves(self) -> bool:
        return self.wait is WaitPoint.BEFORE_MOVES

    @property
    def waits_before_read(self) -> bool:
        return self.wait is WaitPoint.BEFORE_READ

    @property
    def waits(self) -> bool:
        """Whether the read can only happen after step N's D2H landed."""
        return self.wait is not WaitPoint.NEVER

    @property
    def reads_buffer(self) -> bool:
        """Whether the CPU value is a read of a buffer the DMA writes (so can be wrong)."""
        return self.build not in _NOT_READS

    @property
    def read_mode(self) -> str:
        """A short name of the CPU build, for traces and tables."""
        return _BUILD_NAMES[self.build]

    def cpu_read(
        self, buf: np.ndarray, private: np.ndarray, prev_positions: np.ndarray, num_reqs: int
    ) -> np.ndarray:
        """What the CPU puts into ``num_accepted_tokens`` (int64); may write back into ``buf``."""
        return self.build(buf, private, prev_positions, num_reqs)

    def gpu_consumed(
        self, cpu: np.ndarray, true: np.ndarray, participating: np.ndarray
    ) -> np.ndarray:
        """The count the GDN kernel restores its state from, per read."""
        return self.consume(cpu, true, participating)

    @property
    def consumes_cpu_value(self) -> bool:
        """Whether the GDN kernel restores its state from the CPU value itself (align's family),
        so a wrong CPU read is a wrong consumed count; otherwise the correction kernel or the
        request slot decides what is consumed (:meth:`gpu_consumed`)."""
        return self.consume is cpu_value

    def cpu_wrong(self, cpu: np.ndarray, true: np.ndarray) -> np.ndarray:
        """A CPU read that differs from the truth (never for a policy that reads no buffer)."""
        if not self.reads_buffer:
            return np.zeros(len(true), dtype=bool)
        return np.asarray(cpu) != np.asarray(true)


_BUILD_NAMES: dict[CpuBuilder, str] = {
    gather_write_back: "gather",
    direct: "direct",
    fill_one: "fill1",
    gather_private: "private",
    gather_private_write_back: "private+remap",
    no_cpu_counts: "none",
}
# Builders whose value is no read of a buffer the DMA writes, so it can never be CPU-wrong.
_NOT_READS = frozenset({fill_one, no_cpu_counts})

W = WaitPoint
POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("unsynced", "before #36013: no event wait", W.NEVER, gather_write_back, corrected),
        Policy("synced-gather", "v0.23.0, before #45100", W.BEFORE_READ, gather_write_back,
               corrected),
        Policy("device-authoritative", "v0.24.0 (#45100)", W.NEVER, fill_one, corrected,
               documented_safe=True),
        Policy("align", "v0.24.0, mamba_cache_mode=align", W.BEFORE_READ, gather_write_back,
               cpu_value),
        Policy("private-buffer", "#51599 (align)", W.BEFORE_READ, gather_private, cpu_value,
               dma_into_private=True, documented_safe=True),
        Policy("sync-before-moves", "#53919 (align)", W.BEFORE_MOVES, direct, cpu_value,
               documented_safe=True),
        # Model runner V2 (default for Qwen hybrids from 0.29.0): counts on the GPU by slot.
        Policy("mrv2", "model runner V2 (vllm/v1/worker/gpu/)", W.NEVER, no_cpu_counts,
               from_request_slot, documented_safe=True),
        # vllm-ascend main (2026-08-22) model_runner_v1.py L1068-1093: the event wait and the
        # gather from the moved InputBatch buffer with write-back, no #45100 guard; then
        # update_num_computed_tokens_for_batch_change (L1105-1120) repairs drafted rows.
        Policy("ascend-main", "vllm-ascend main, no #45100 guard", W.BEFORE_READ,
               gather_write_back, corrected),
        # vllm-ascend #13865, validated with prefix caching on (align): the CPU value is
        # consumed (preprocess_mamba, then the re-sync at L1993-2000 of main).
        Policy("ascend-13865", "vllm-ascend #13865 (releases/v0.23.0)", W.BEFORE_READ,
               gather_private_write_back, cpu_value, dma_into_private=True,
               documented_safe=True),
    )
}  # fmt: skip

SYNC_SCHEDULING = Policy(
    "async-off", "async scheduling off", W.BEFORE_READ, direct, cpu_value, documented_safe=True
)


def get_policy(name: str) -> Policy:
    """One of :data:`POLICIES` by name (``async-off`` is no choice of a vLLM version)."""
    return named(name, async_off=False)


# -- naming a policy on a command line ------------------------------------------------------
ALL = "all"  # every policy of POLICIES (and async-off where a command takes it)
ASYNC_OFF = SYNC_SCHEDULING.name
NO_SPEC = "no-spec"  # sim.resolve's answer for a configuration without speculative decoding


def named(name: str, async_off: bool = True) -> Policy:
    """The policy called ``name``; ``async-off`` is vLLM's synchronous path, where allowed."""
    if async_off and name == ASYNC_OFF:
        return SYNC_SCHEDULING
    try:
        return POLICIES[name]
    except KeyError:
        known = ", ".join([*POLICIES, *([ASYNC_OFF] if async_off else [])])
        hint = did_you_mean(name, [*POLICIES, *([ASYNC_OFF] if async_off else []), "all"])
        raise SpecraceError(f"unknown policy {name!r}{hint} (known: {known}, all)") from None


def select(text: str, async_off: bool = False, many: bool = True) -> tuple[Policy, ...]:
    """The policies a ``--policy`` argument names: ``all``, one name or (``many``) a comma
    list; ``async-off`` only where the command runs it (``all`` then ends with it). Usable as
    an argparse ``type=`` (``functools.partial`` for the options); raises
    :class:`SpecraceError` with the line the CLI prints."""
    if text == ALL:
        return (*POLICIES.values(), *([SYNC_SCHEDULING] if async_off else []))
    names = text.split(",") if many else [text]
    chosen = tuple(named(n, async_off) for n in names)
    if len(set(names)) != len(names):
        raise SpecraceError(f"--policy {text}: a policy appears twice")
    return chosen
