"""Bounded-exhaustive check: every schedule of up to R rows and S steps, every landing.

The schedules come from the project's own scheduler (a stateless model checker re-runs
``build_schedule`` on a scripted workload, the scheduler's comparisons against undecided output
lengths and the capacity answered by :class:`RecordingLimits`); every landing of every step's
copy is judged by :mod:`sim.model.verdict`; the smallest counterexample per policy
and hazard kind is told as a story. docs/check.md explains the choices, roots and reductions.

Modules: :mod:`.space` (what is chosen: recorded limits, roots, requests, the scheduler run),
:mod:`.step` (one step transition at one landing), :mod:`.search` (the tree, the frontiers of
buffer states, the merge, the results), :mod:`.tasks` (subtrees explored over processes),
:mod:`.report` (stories and JSON).
"""

from sim.explore.check.report import counterexample_json, result_json, story
from sim.explore.check.search import (
    Checker,
    CheckResult,
    Counterexample,
    PolicyResult,
    all_policy_names,
    check,
    schedule_key,
)
from sim.explore.check.space import (
    BIG,
    BIG_BUDGET,
    CLASSES,
    RecordingLimits,
    Req,
    Root,
    Space,
    class_prompt,
    req_name,
    scenario_for,
)
from sim.explore.check.step import (
    TAG,
    Outcome,
    State,
    Wrong,
    _read,
    all_counts,
    evaluate,
    landings,
    symbolic_masks,
)

__all__ = [
    "BIG", "BIG_BUDGET", "CLASSES", "TAG", "CheckResult", "Checker", "Counterexample",
    "Outcome", "PolicyResult", "Req", "Root", "Space", "State", "Wrong", "RecordingLimits", "_read",
    "all_counts", "all_policy_names", "check", "class_prompt", "counterexample_json",
    "evaluate", "landings", "req_name", "result_json", "scenario_for", "schedule_key", "story",
    "symbolic_masks",
]  # fmt: skip
