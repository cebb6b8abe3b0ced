"""The details of vLLM's reorder, checked on its real function (attention/backends/utils.py
``reorder_batch_to_split_decodes_and_prefills``), and our model on the same batches."""

from __future__ import annotations

from vllm_driver import RealBatch, new_request_state

from sim.model.input_batch import InputBatchRows, reorder_batch_to_split_decodes_and_prefills

K = 3
Row = tuple[str, int, int]  # req_id, num_prompt, num_computed


def real_batch(rows: list[Row], threshold: int) -> RealBatch:
    real = RealBatch(16, 1024, K, threshold)
    for req_id, prompt, computed in rows:
        real.ib.add_request(new_request_state(req_id, prompt, computed))
    real.ib.refresh_metadata()
    return real


def reorder_both(rows: list[Row], sched: dict[str, int], threshold: int) -> tuple:
    """(changed, layout, swaps) from vLLM; asserts that our model gives the same."""
    real = real_batch(rows, threshold)
    changed = real.reorder(sched)
    got = (changed, real.ib.req_ids, [(op.a, op.b) for op in real.recorder.ops])
    assert {op.kind for op in real.recorder.ops} <= {"swap"}

    ours = InputBatchRows(16)
    for req_id, prompt, computed in rows:
        ours.add_request(req_id, prompt, computed)
    ours.end_step()
    ours.ops = []
    ours_changed = reorder_batch_to_split_decodes_and_prefills(ours, sched, threshold)
    assert (ours_changed, ours.req_ids, [(op.a, op.b) for op in ours.ops]) == got
    return got


# Rows: P prefill (nothing computed), D decode (prompt done, 1 + k tokens), S short extend
# (prompt not done, few tokens), L long extend (prompt not done, many tokens).
P, D, S, L = ("P", 9, 0), ("D", 5, 5), ("S", 50, 10), ("L", 500, 100)
SCHED = {"P": 9, "D": 1 + K, "S": 2, "L": 100}


def test_a_cycle_keeps_its_first_source_as_fixed_pivot() -> None:
    # regions [3, 0, 1, 2], target [0, 1, 2, 3]: src -> dst {1: 0, 2: 1, 3: 2, 0: 3}, one
    # 4-cycle. Every swap has row 1 (the first source) as its first row.
    changed, layout, swaps = reorder_both([P, D, S, L], SCHED, 1 + K)
    assert changed and layout == ["D", "S", "L", "P"]
    assert swaps == [(1, 0), (1, 3), (1, 2)]


def test_order_inside_a_region_is_not_kept() -> None:
    rows = [P, ("D0", 5, 5), ("D1", 5, 5), ("D2", 5, 5)]
    _, layout, swaps = reorder_both(rows, {"P": 9, "D0": 4, "D1": 4, "D2": 4}, 1 + K)
    # Only rows 0 and 3 are in the wrong region: the last decode jumps to the front.
    assert layout == ["D2", "D0", "D1", "P"] and swaps == [(3, 0)]


def test_prefill_means_nothing_computed_whatever_is_scheduled() -> None:
    # N has no context and 1 token scheduled (below any threshold): still a prefill, so it
    # goes behind the extend X and the decode D.
    rows = [("N", 3, 0), ("X", 9, 5), D]
    _, layout, _ = reorder_both(rows, {"N": 1, "X": 4, "D": 1 + K}, 1 + K)
    assert layout == ["D", "X", "N"]


def test_new_request_with_prefix_hit_is_an_extend() -> None:
    # H and T arrive with a prefix-cache hit (num_computed > 0 at add_request): they are
    # extends, in front of the pure prefill P; H (32 tokens) long, T (3 tokens) short.
    rows = [P, ("H", 64, 32), ("T", 8, 5), D]
    _, layout, _ = reorder_both(rows, {"P": 9, "H": 32, "T": 3, "D": 1 + K}, 1 + K)
    assert layout == ["D", "T", "H", "P"]


def test_decode_above_the_threshold_is_a_long_extend() -> None:
    rows = [("H", 64, 32), D]
    sched = {"H": 32, "D": 1 + K}
    # Threshold 1: the drafted decode D (1 + k tokens) is a long extend like H: no move.
    assert reorder_both(rows, sched, 1) == (False, ["H", "D"], [])
    # Threshold 1 + k: D is a decode and goes in front.
    assert reorder_both(rows, sched, 1 + K) == (True, ["D", "H"], [(1, 0)])


def test_threshold_one_moves_a_decode_whenever_its_draft_count_changes() -> None:
    # Threshold 1: a decode with drafts is a long extend, one without (budget cut) a
    # decode; E and F trade places when their token counts trade.
    real = real_batch([("E", 5, 5), ("F", 5, 5)], 1)
    assert real.reorder({"E": 1 + K, "F": 1})
    assert real.ib.req_ids == ["F", "E"]
    assert real.reorder({"E": 1, "F": 1 + K})
    assert real.ib.req_ids == ["E", "F"]
    assert not real.reorder({"E": 1, "F": 1 + K})
