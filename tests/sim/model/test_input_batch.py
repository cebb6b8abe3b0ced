"""The row model driven side by side with a plain dict model."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sim.model.input_batch import (
    InputBatchRows,
    region_of,
    reorder_batch_to_split_decodes_and_prefills,
)

MAX_REQS = 12
THRESHOLD = 4


class RowMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.batch = InputBatchRows(MAX_REQS)
        # req_id -> fields that must follow the request, not the row
        self.model: dict[str, dict[str, int]] = {}
        self.next_id = 0
        self.pending_removed = False  # removals not yet condensed (vLLM: condense follows)

    def _fields(self, req_id: str) -> dict[str, int]:
        row = self.batch.req_id_to_index[req_id]
        return {
            "prompt": int(self.batch.num_prompt_tokens[row]),
            "computed": int(self.batch.num_computed_tokens_cpu[row]),
            "count": int(self.batch.num_accepted_tokens_cpu[row]),
        }

    @precondition(lambda self: len(self.model) < MAX_REQS)
    @rule(prompt=st.integers(1, 50), computed=st.integers(0, 60))
    def add(self, prompt: int, computed: int) -> None:
        req_id = f"r{self.next_id}"
        self.next_id += 1
        free_before = sorted(self.batch._removed)
        row = self.batch.add_request(req_id, prompt, computed)
        if free_before:
            assert row == free_before[0], "add must take the lowest freed row"
        self.model[req_id] = {"prompt": prompt, "computed": computed, "count": 1}

    @precondition(lambda self: len(self.model) > 0 and not self.batch._removed_sorted)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        req_id = data.draw(st.sampled_from(sorted(self.model)))
        row = self.batch.req_id_to_index[req_id]
        count_before = int(self.batch.num_accepted_tokens_cpu[row])
        assert self.batch.remove_request(req_id) == row
        assert int(self.batch.num_accepted_tokens_cpu[row]) == count_before, "remove wrote B"
        del self.model[req_id]
        self.pending_removed = True

    @rule()
    def condense(self) -> None:
        self.batch.condense()
        self.batch.end_step()
        self.pending_removed = False
        n = self.batch.num_reqs
        assert len(self.batch._req_ids) == n
        assert all(r is not None for r in self.batch._req_ids)

    @precondition(lambda self: not self.pending_removed and len(self.model) > 0)
    @rule(data=st.data())
    def reorder(self, data: st.DataObject) -> None:
        sched = {r: data.draw(st.integers(1, 8)) for r in sorted(self.model)}
        reorder_batch_to_split_decodes_and_prefills(self.batch, sched, THRESHOLD)
        n = self.batch.num_reqs
        ids = self.batch.req_ids
        regions = region_of(
            np.array([sched[r] for r in ids]),
            self.batch.num_computed_tokens_cpu[:n],
            self.batch.num_prompt_tokens[:n],
            THRESHOLD,
        )
        assert (np.diff(regions) >= 0).all(), f"regions not sorted: {regions}"

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data(), value=st.integers(1, 4))
    def step(self, data: st.DataObject, value: int) -> None:
        """A step's outcome: num_computed grows and the count is set, per request."""
        req_id = data.draw(st.sampled_from(sorted(self.model)))
        row = self.batch.req_id_to_index[req_id]
        self.batch.num_computed_tokens_cpu[row] += value
        self.batch.num_accepted_tokens_cpu[row] = value
        self.model[req_id]["computed"] += value
        self.model[req_id]["count"] = value

    @invariant()
    def fields_follow_the_request(self) -> None:
        for req_id, expected in self.model.items():
            assert self._fields(req_id) == expected, req_id

    @invariant()
    def row_map_is_a_bijection(self) -> None:
        m = self.batch.req_id_to_index
        assert set(m) == set(self.model)
        assert len(set(m.values())) == len(m)
        for req_id, row in m.items():
            assert self.batch._req_ids[row] == req_id


TestRowMachine = RowMachine.TestCase
TestRowMachine.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
