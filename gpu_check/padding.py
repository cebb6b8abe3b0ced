"""FULL-cudagraph padding of GDN spec metadata, before and after PR #45100 (docs/mechanism.md §7).

Pure Python (no torch), so `python -m gpu_check padding` runs anywhere. `padding_graph.py` runs
the same plan through a real CUDA graph.

Model, following vLLM v0.24.0 (config/vllm.py, compilation.py, cudagraph_dispatcher.py,
gdn_attn.py as paraphrased in §7):

* capture sizes: `[1, 2, 4] + 8..248 step 8 + 256..max step 16` with
  `max = min(max_num_seqs*(1+k)*2, 512, max_num_batched_tokens)`; each size rounded up to a
  multiple of 1+k, sizes above max dropped, duplicates merged (`[1+k]` if none is left);
* a uniform spec batch of R requests has R*(1+k) tokens, padded to the next capture size;
  FULL decode keys cover sizes in [1+k, (1+k)*max_num_seqs]; beyond the largest size it runs eager;
* `num_reqs_padded = num_tokens_padded // (1+k)`;
* GDN persistent buffers hold `decode_cudagraph_max_bs = min(max_num_seqs*(1+k), max size)` rows;
* the FULL path views them as `[:batch_size]` (`[:batch_size+1]` for query starts) and fills the
  tail past the real requests with NULL_BLOCK_ID / False / total tokens / 1;
* `batch_size = m.num_actual_tokens` (the padded token count) before #45100,
  `batch_size = m.num_reqs` (the padded request count) after.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = [
    "GdnFullMetadata",
    "PaddingPlan",
    "capture_sizes",
    "gdn_full_metadata",
    "plan_padding",
]

RULES = ("num_actual_tokens", "num_reqs")  # before / after PR #45100
NULL_BLOCK_ID = 0


def capture_sizes(max_num_seqs: int, num_spec: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default cudagraph capture sizes after the spec-decode rounding."""
    q = 1 + num_spec
    max_size = min(max_num_seqs * q * 2, 512, max_num_batched_tokens)
    raw = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    raw = [s for s in raw if s <= max_size]
    rounded = sorted({_round_up(s, q) for s in raw if _round_up(s, q) <= max_size})
    if not rounded and q <= max_size:
        rounded = [q]
    if not rounded:
        raise ValueError(f"no cudagraph size is a multiple of 1+k={q} within {max_size}")
    return rounded


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class PaddingPlan:
    """How one uniform spec batch is padded for a FULL graph (None fields: it runs eager)."""

    num_reqs: int
    num_spec: int
    num_tokens: int
    capture_sizes: list[int]
    decode_cudagraph_max_bs: int
    full_cudagraph: bool
    num_tokens_padded: int
    num_reqs_padded: int


def plan_padding(
    num_reqs: int,
    num_spec: int,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
) -> PaddingPlan:
    """Padding of a batch of `num_reqs` spec decodes with k = `num_spec` drafts each."""
    if num_spec < 1:
        raise ValueError(f"k must be >= 1 (a spec batch); got {num_spec}")
    if not 1 <= num_reqs <= max_num_seqs:
        raise ValueError(f"num-reqs must be in [1, max-num-seqs={max_num_seqs}]; got {num_reqs}")
    q = 1 + num_spec
    if max_num_batched_tokens < q:
        raise ValueError(f"max-num-batched-tokens={max_num_batched_tokens} < 1+k={q}")
    sizes = capture_sizes(max_num_seqs, num_spec, max_num_batched_tokens)
    num_tokens = num_reqs * q
    fit = next((s for s in sizes if s >= num_tokens), None)
    full = fit is not None and q <= fit <= q * max_num_seqs
    padded = fit if fit is not None and full else num_tokens
    return PaddingPlan(
        num_reqs=num_reqs,
        num_spec=num_spec,
        num_tokens=num_tokens,
        capture_sizes=sizes,
        decode_cudagraph_max_bs=min(max_num_seqs * q, sizes[-1]),
        full_cudagraph=full,
        num_tokens_padded=padded,
        num_reqs_padded=padded // q if full else num_reqs,
    )


@dataclass(frozen=True)
class GdnFullMetadata:
    """The request-indexed views the GDN builder hands the kernels on the FULL path.

    Lists rather than tensors; `padding_graph` turns them into device buffers.
    """

    rule: str
    batch_size: int
    spec_state_indices: list[list[int]]  # [batch_size, 1+k]
    spec_sequence_masks: list[bool]  # [batch_size]
    spec_query_start_loc: list[int]  # [batch_size + 1]
    num_accepted_tokens: list[int]  # [batch_size]

    def shapes(self) -> dict[str, list[int]]:
        return {
            "spec_state_indices": [self.batch_size, len(self.spec_state_indices[0])],
            "spec_sequence_masks": [self.batch_size],
            "spec_query_start_loc": [len(self.spec_query_start_loc)],
            "num_accepted_tokens": [self.batch_size],
        }


def gdn_full_metadata(
    plan: PaddingPlan,
    rule: str,
    block_table: list[list[int]],
    num_accepted: list[int],
) -> GdnFullMetadata:
    """Build the FULL-path views for `rule` from the real requests' rows.

    block_table: [num_reqs][1+k] blocks; num_accepted: [num_reqs] counts.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    if not plan.full_cudagraph:
        raise ValueError("batch is not FULL-cudagraph eligible; there is no padding to model")
    R, q = plan.num_reqs, plan.num_spec + 1
    if len(block_table) != R or len(num_accepted) != R or any(len(r) != q for r in block_table):
        raise ValueError(f"need {R} block-table rows of {q} and {R} counts")
    bs = plan.num_tokens_padded if rule == "num_actual_tokens" else plan.num_reqs_padded
    if bs > plan.decode_cudagraph_max_bs:
        raise ValueError(
            f"batch_size {bs} exceeds the persistent buffers' {plan.decode_cudagraph_max_bs}"
        )
    pad = bs - R
    qsl = [i * q for i in range(R + 1)] + [R * q] * pad  # tail: zero-length sequences
    return GdnFullMetadata(
        rule=rule,
        batch_size=bs,
        spec_state_indices=[list(r) for r in block_table] + [[NULL_BLOCK_ID] * q] * pad,
        spec_sequence_masks=[True] * R + [False] * pad,
        spec_query_start_loc=qsl,
        num_accepted_tokens=list(num_accepted) + [1] * pad,
    )


def padding_report(plan: PaddingPlan) -> dict:
    """JSON-ready comparison of the two rules for `plan` (shapes only)."""
    report = asdict(plan)
    if not plan.full_cudagraph:
        report["note"] = "more tokens than the largest capture size: runs eager, no padding"
        return report
    q = plan.num_spec + 1
    dummy_rows = [[0] * q] * plan.num_reqs
    for key, rule in (("before", "num_actual_tokens"), ("after", "num_reqs")):
        meta = gdn_full_metadata(plan, rule, dummy_rows, [1] * plan.num_reqs)
        report[key] = {
            "batch_size_rule": rule,
            "batch_size": meta.batch_size,
            "shapes": meta.shapes(),
            "tail_rows": meta.batch_size - plan.num_reqs,
            "rows_past_num_reqs_padded": meta.batch_size - plan.num_reqs_padded,
        }
    report["fake_rows"] = report["before"]["batch_size"] - report["after"]["batch_size"]
    return report
