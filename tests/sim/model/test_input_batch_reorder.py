"""The reorder of vLLM v0.24.0 (attention/backends/utils.py L637-714) on hand-checked batches."""

from __future__ import annotations

from sim.model.input_batch import InputBatchRows, reorder_batch_to_split_decodes_and_prefills

K = 3
THR = 1 + K


def make_batch(rows: list[tuple[str, int, int]]) -> InputBatchRows:
    """rows: (req_id, num_prompt, num_computed) in row order."""
    b = InputBatchRows(16)
    for req_id, prompt, computed in rows:
        b.add_request(req_id, prompt, computed)
    b.end_step()
    b.ops = []
    return b


def test_decode_short_long_prefill_order() -> None:
    # P: pure prefill (computed 0); L: long extend (context, 100 tokens); S: short extend
    # (context, 2 tokens, prompt not done); D: decode (prompt done, 1 + k tokens).
    b = make_batch([("P", 50, 0), ("L", 500, 100), ("S", 50, 48), ("D", 20, 20)])
    sched = {"P": 50, "L": 100, "S": 2, "D": 4}
    assert reorder_batch_to_split_decodes_and_prefills(b, sched, THR)
    assert b.req_ids == ["D", "S", "L", "P"]
    # regions [3,2,1,0] -> target [0,1,2,3]; sources by region: 3->0, 2->1, 1->2, 0->3.
    assert [(o.a, o.b) for o in b.ops] == [(3, 0), (2, 1)]


def test_cycle_keeps_a_fixed_pivot() -> None:
    # Decodes at rows 3, 4, 5 must go to rows 0, 1, 2, held by prefills.
    b = make_batch(
        [("P0", 9, 0), ("P1", 9, 0), ("P2", 9, 0), ("D0", 5, 5), ("D1", 5, 5), ("D2", 5, 5)]
    )
    sched = {"P0": 9, "P1": 9, "P2": 9, "D0": 4, "D1": 4, "D2": 4}
    reorder_batch_to_split_decodes_and_prefills(b, sched, THR)
    swaps = [(o.a, o.b) for o in b.ops]
    # src_dest = {3:0, 4:1, 5:2, 0:3, 1:4, 2:5}: each 2-cycle is one swap from its source.
    assert swaps == [(3, 0), (4, 1), (5, 2)]
    assert b.req_ids[:3] == ["D0", "D1", "D2"]


def test_three_cycle_pivots_on_first_source() -> None:
    # regions [3, 0, 1] -> target [0, 1, 3]: row 0 holds a prefill, rows 1-2 a decode and a
    # short extend. src_dest = {1: 0, 2: 1, 0: 2}: one 3-cycle pivoting on row 1.
    b = make_batch([("P", 9, 0), ("D", 5, 5), ("S", 50, 10)])
    sched = {"P": 9, "D": 4, "S": 2}
    reorder_batch_to_split_decodes_and_prefills(b, sched, THR)
    assert [(o.a, o.b) for o in b.ops] == [(1, 0), (1, 2)]
    assert b.req_ids == ["D", "S", "P"]


def test_order_inside_a_region_is_not_kept() -> None:
    b = make_batch([("P", 9, 0), ("D0", 5, 5), ("D1", 5, 5)])
    sched = {"P": 9, "D0": 4, "D1": 4}
    reorder_batch_to_split_decodes_and_prefills(b, sched, THR)
    # regions [3,0,0], target [0,0,3]: only rows 0 and 2 move, src_dest = {2: 0, 0: 2}.
    assert b.req_ids == ["D1", "D0", "P"]


def test_prefill_means_no_context_whatever_is_scheduled() -> None:
    b = make_batch([("X", 9, 5), ("N", 3, 0)])
    # N has no context and only 1 token scheduled: still "prefill", stays behind X (extend).
    assert not reorder_batch_to_split_decodes_and_prefills(b, {"X": 4, "N": 1}, THR)


def test_prefix_hit_is_an_extend_and_long_decode_a_long_extend() -> None:
    b = make_batch([("H", 64, 32), ("D", 10, 10)])
    # Threshold 1: the drafted decode D (4 tokens) is a long extend; H (prefix hit, 32
    # tokens) a long extend too: same region, no move.
    assert not reorder_batch_to_split_decodes_and_prefills(b, {"H": 32, "D": 4}, 1)
    # Threshold 1 + k: D is a decode and moves in front of the extend H.
    assert reorder_batch_to_split_decodes_and_prefills(b, {"H": 32, "D": 4}, THR)
    assert b.req_ids == ["D", "H"]


def test_nothing_to_do_returns_false() -> None:
    b = make_batch([("D", 5, 5), ("P", 9, 0)])
    assert not reorder_batch_to_split_decodes_and_prefills(b, {"D": 4, "P": 9}, THR)
    assert b.ops == []


def _reference_swaps(regions: list[int]) -> list[tuple[int, int]]:
    """vLLM's loop written out plainly: the swaps the reorder makes for these regions."""
    regs = list(regions)
    target = sorted(regs)
    orig = [i for i, (r, t) in enumerate(zip(regs, target, strict=True)) if r != t]
    src_dest = dict(zip(sorted(orig, key=regs.__getitem__), orig, strict=True))
    swaps = []
    for src in list(src_dest):
        dst = src_dest[src]
        while src != dst:
            swaps.append((src, dst))
            nxt = src_dest.get(dst, dst)
            src_dest[dst] = dst
            dst = nxt
    return swaps


def test_random_batches_swap_as_the_plain_loop_does() -> None:
    import random

    rng = random.Random(11)
    # region -> (num_prompt, num_computed, num_scheduled) that classify as it
    kinds = {0: (20, 20, 4), 1: (50, 48, 2), 2: (500, 100, 100), 3: (50, 0, 50)}
    for _ in range(300):
        n = rng.randint(1, 16)
        weights = [rng.random() for _ in range(4)]
        regions = rng.choices(range(4), weights=weights, k=n)
        b = make_batch([(f"r{i}", *kinds[r][:2]) for i, r in enumerate(regions)])
        sched = {f"r{i}": kinds[r][2] for i, r in enumerate(regions)}
        changed = reorder_batch_to_split_decodes_and_prefills(b, sched, THR)
        want = _reference_swaps(regions)
        assert [(o.a, o.b) for o in b.ops] == want
        assert changed == bool(want)
