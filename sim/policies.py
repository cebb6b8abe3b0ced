"""How a vLLM version handles the accepted counts (ARCHITECTURE.md, vllm-mechanics.md §3, §4).

Each policy answers three questions:

- ``wait``: when the worker waits on ``num_accepted_tokens_event`` (step N's D2H done):
  never, in ``_prepare_inputs`` before the gather, or before the first row move.
- ``cpu_counts``: what the CPU puts in ``num_accepted_tokens`` for step N+1:
  ``gather`` (``G[r] = B[prev_positions[r]]``, written back into B, v0.23.0 L2021-2046),
  ``direct`` (``G = B[:n]``, the non-async branch), ``fill1`` (v0.24.0 async non-align),
  ``private`` (gather from a runner-private D2H buffer no row move touches, #51599).
- ``gpu_counts``: what the GDN kernel consumes: ``correction`` (the kernel of §3 overwrites
  rows that had drafts at step N with ``valid_sampled_token_count``) or ``cpu`` (align:
  ``preprocess_mamba`` uses the CPU counts and the re-upload overrides the kernel, §4).

With async scheduling off every policy takes vLLM's synchronous path: the D2H landed before
``_update_states`` (sample_tokens blocks), counts are read directly, the GPU consumes them.

Where the reference is unclear (noted in README): ``unsynced`` is modelled as v0.23.0's
gather without the event wait; ``sync-before-moves`` (#53919) as a wait before the first
row move followed by a direct read (B is then already in step N+1 layout, so a gather
would permute twice); ``private-buffer`` and ``sync-before-moves`` are fixes proposed for
align mode, so they consume CPU counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.errors import SpecraceError


@dataclass(frozen=True)
class Policy:
    name: str
    wait: Literal["never", "gather", "before_moves"]
    cpu_counts: Literal["gather", "direct", "fill1", "private"]
    gpu_counts: Literal["correction", "cpu"]
    vllm: str


POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("unsynced", "never", "gather", "correction", "before #36013: no event wait"),
        Policy("synced-gather", "gather", "gather", "correction", "v0.23.0, before #45100"),
        Policy("device-authoritative", "never", "fill1", "correction", "v0.24.0 (#45100)"),
        Policy("align", "gather", "gather", "cpu", "v0.24.0, mamba_cache_mode=align"),
        Policy("private-buffer", "gather", "private", "cpu", "#51599 (align)"),
        Policy("sync-before-moves", "before_moves", "direct", "cpu", "#53919 (align)"),
    )
}

SYNC_SCHEDULING = Policy("async-off", "gather", "direct", "cpu", "async scheduling off")


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        known = ", ".join(POLICIES)
        raise SpecraceError(f"unknown policy {name!r} (known: {known}, all)") from None
