"""What crosses between the bounded check's processes: a task (a subtree of step 0), the leaves
an explorer keeps and the part it returns for a task. The checker that splits the search,
explores the tasks and merges the parts in order is :class:`sim.explore.check.search.Checker`
(docs/check.md, "Over several processes")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.explore.check.space import Req, Root, _Run
from sim.model.policies import Policy
from sim.model.schedule import StepRecord


@dataclass
class Task:
    """A child of step 0: the arguments of its subtree's ``_expand``."""

    root: Root
    reqs: tuple[Req, ...]
    cap_iv: tuple[int, int]
    records: list[StepRecord]
    frontiers: dict
    out_lens: list[int]
    cap_len: int
    run: _Run

    def args(self, pols: list[Policy]) -> tuple:
        """``_expand``'s arguments, with the root's policies (an explorer's own objects)."""
        return (self.root, pols, self.reqs, self.cap_iv, self.records, self.frontiers,
                self.out_lens, self.cap_len, self.run)  # fmt: skip


@dataclass
class Leaf:
    """A schedule of every step that an explorer kept (not seen in its earlier tasks)."""

    key: tuple
    root: Root
    reqs: tuple[Req, ...]
    cap_iv: tuple[int, int]
    records: list[StepRecord]
    frontiers: dict  # per policy: the buffer states before the last step
    free: bool  # the previous step's counts are read at this step only (every tuple at once)
    trans: tuple  # the last step's transition (memo key)


@dataclass
class Part:
    """What an explorer found in one task's subtree, for the merge."""

    runs: int = 0
    nodes: int = 0
    verified: int = 0
    evaluated: list[tuple[tuple, int]] = field(default_factory=list)  # memo key, evaluations
    counted: list[tuple] = field(default_factory=list)  # prefix key, policy, repaired, failing
    offers: list[tuple[str, Any]] = field(default_factory=list)  # policy, Counterexample
    leaves: list[Leaf] = field(default_factory=list)
    # (memo key, its _Agg or None where the policy is not a pure copy, evaluations)
    shipped: list[tuple[tuple, Any, int]] = field(default_factory=list)
