"""Hand-derived outcomes of every policy, shared by the tests of every consumer of a policy.

Each case is one step N+1: the buffer B as step N's read left it, step N's true counts (the
DMA), step N+1's row operations and ``prev_positions``, and per policy and landing position the
value the CPU builds and the value the GDN kernel consumes for the request under test. The
expected values are worked out by hand from docs/mechanism.md §2 and §9 (comments), not by
running the code under test.

Landing positions: ``0..len(ops)`` = the DMA lands right before ``ops[pos]`` (``len(ops)``:
after the last op); ``-1`` = not landed at the read (only possible for a policy that does not
wait).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.model.input_batch import RowOp


@dataclass(frozen=True)
class Case:
    name: str
    prior: list[int]  # B (and the private buffer) before step N+1
    dma: list[int]  # step N's true counts, by step-N row
    ops: list[RowOp]
    prev_positions: list[int]  # step N+1 row -> step N row
    prev_num_draft_tokens: list[int]  # by step N row
    row: int  # the step N+1 row of the request under test
    # policy -> landing position -> (cpu value, consumed value)
    expect: dict[str, dict[int, tuple[int, int]]]

    @property
    def true(self) -> int:
        return self.dma[self.prev_positions[self.row]]


def _same(outcomes: dict[int, tuple[int, int]], *names: str) -> dict[str, dict]:
    return {n: outcomes for n in names}


# §9 at minimal-race step 4: F (row 0, count 4) finished; Q is added into row 0 (B[0] = 1);
# R (prefill at step N in row 1, count 1, no drafts) is swapped from row 1 to row 0.
# B before: [4, 1] (step 3's gather: F's 4, R new -> 1). DMA: [4, 1].
#   land 0 (before remove) or 1 (before add): [4,1] -> add [1,1] -> swap [1,1]: R reads B[1]=1
#   land 2 (after add, before swap): [1,1] -> DMA [4,1] -> swap [1,4]: R reads F's 4
#   land 3 (after swap): [1,1] -> DMA [4,1]: R reads its own 1
#   not landed: [4,1] -> add [1,1] -> swap [1,1]: R reads 1 (by accident)
# R had no drafts, so the correction kernel does not repair it: consumed = CPU value,
# except under #45100 (fill 1), #51599 (private buffer holds step-N layout) and #53919 (the
# wait before the moves puts the landing at 0 and the direct read takes row 0 = 1).
MINIMAL_RACE = Case(
    name="minimal-race step 4",
    prior=[4, 1],
    dma=[4, 1],
    ops=[RowOp("remove", 0, -1, "F"), RowOp("add", 0, -1, "Q"), RowOp("swap", 1, 0, "R")],
    prev_positions=[1, -1],
    prev_num_draft_tokens=[0, 0],
    row=0,
    expect={
        "unsynced": {0: (1, 1), 1: (1, 1), 2: (4, 4), 3: (1, 1), -1: (1, 1)},
        **_same({0: (1, 1), 1: (1, 1), 2: (4, 4), 3: (1, 1)}, "synced-gather", "align"),
        "device-authoritative": {p: (1, 1) for p in (-1, 0, 1, 2, 3)},
        "private-buffer": {p: (1, 1) for p in (0, 1, 2, 3)},
        "sync-before-moves": {0: (1, 1)},
        # MRv2: no CPU counts (placeholder 1), the GPU gathers R's own slot: 1, at any landing.
        "mrv2": {p: (1, 1) for p in (-1, 0, 1, 2, 3)},
        # vllm-ascend main does what v0.23.0 did (wait, gather from B, kernel repair).
        "ascend-main": {0: (1, 1), 1: (1, 1), 2: (4, 4), 3: (1, 1)},
        # #13865: the runner's own buffer holds step N's [4, 1]; R gathers its own row 1 -> 1.
        "ascend-13865": {p: (1, 1) for p in (0, 1, 2, 3)},
    },
)

# Double permute (#53919): D (decode, 3 accepted of 3 drafts, row 1) is swapped to row 0 in
# front of P (prefill at step N, row 0, count 1). B before: [1, 1]. DMA: [1, 3].
#   land 0 (before the swap): [1,3] -> swap [3,1]: the gather reads B[1] = 1 for D (wrong)
#   land 1 (after the swap): [1,1] -> DMA [1,3]: D reads B[1] = 3
#   not landed: [1,1] -> swap [1,1]: D reads 1 (wrong, unlanded)
# D had drafts, so the correction kernel repairs it (consumed 3) except where align-like
# consumption takes the CPU value. sync-before-moves reads directly after the moves: B[0]=3.
DOUBLE_PERMUTE = Case(
    name="double permute of a drafted row",
    prior=[1, 1],
    dma=[1, 3],
    ops=[RowOp("swap", 1, 0, "D")],
    prev_positions=[1, 0],
    prev_num_draft_tokens=[0, 3],
    row=0,
    expect={
        "unsynced": {0: (1, 3), 1: (3, 3), -1: (1, 3)},
        "synced-gather": {0: (1, 3), 1: (3, 3)},
        "align": {0: (1, 1), 1: (3, 3)},
        "device-authoritative": {p: (1, 3) for p in (-1, 0, 1)},
        "private-buffer": {p: (3, 3) for p in (0, 1)},
        "sync-before-moves": {0: (3, 3)},
        # MRv2: placeholder 1 on the CPU (no read, so not CPU-wrong); D's slot holds its 3.
        "mrv2": {p: (1, 3) for p in (-1, 0, 1)},
        "ascend-main": {0: (1, 3), 1: (3, 3)},
        # #13865: the runner's buffer holds [1, 3]; D (prev row 1) gathers 3, consumed as is.
        "ascend-13865": {p: (3, 3) for p in (0, 1)},
    },
)

CASES = (MINIMAL_RACE, DOUBLE_PERMUTE)


def arrays(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.asarray(case.prior, dtype=np.int64),
        np.asarray(case.dma, dtype=np.int64),
        np.asarray(case.prev_positions, dtype=np.int64),
        np.asarray(case.prev_num_draft_tokens, dtype=np.int64),
    )
