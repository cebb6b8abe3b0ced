"""The align fixes of ``vllm-run --patch``: found exactly once, applied, undone (CPU, no vLLM).

A stand-in runner carries, verbatim, the lines of vLLM 0.24.0's ``GPUModelRunner`` that the
patches edit (the real sources are checked in tests/conformance/test_conformance_patches.py);
its methods act on numpy rows the way vLLM's do, so each patch's effect on the counts a request
reads can be asserted.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_check.vllm import patches
from gpu_check.vllm.patches import PATCHES, Edit, PatchError, apply_edit, patch_names


class _Buf:
    def __init__(self, n: int) -> None:
        self.np = np.ones(n, dtype=np.int32)


class _IB:
    def __init__(self, n: int) -> None:
        self.num_accepted_tokens_cpu = np.ones(n, dtype=np.int32)
        self.num_accepted_tokens_cpu_tensor = self.num_accepted_tokens_cpu  # "pinned": same memory


class _Event:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def synchronize(self) -> None:
        self.log.append("sync")


class _Cache:
    mamba_cache_mode = "align"


# fmt: off
class FakeRunner:
    """The edited lines as vLLM 0.24.0 writes them; the D2H is a plain copy (it 'lands' when
    ``land`` is called), a row move is a swap of two rows."""

    def __init__(self, n: int = 4) -> None:
        self.max_num_reqs = n
        self.use_async_scheduling = True
        self.cache_config = _Cache()
        self.input_batch = _IB(n)
        self.num_accepted_tokens = _Buf(n)
        self.prev_positions = _Buf(n)
        self.log: list[str] = []
        self.num_accepted_tokens_event = _Event(self.log)
        self.d2h_target = None

    def _update_states_after_model_execute(self, counts):
        self.pending = np.asarray(counts, dtype=np.int32)
        self.postprocess(
            num_accepted_tokens_cpu_tensor=(
                self.input_batch.num_accepted_tokens_cpu_tensor
            ),
        )

    def postprocess(self, *, num_accepted_tokens_cpu_tensor):
        self.d2h_target = num_accepted_tokens_cpu_tensor

    def land(self):
        t = self.d2h_target  # the patch's buffer is a torch tensor: write through its numpy view
        (t if isinstance(t, np.ndarray) else t.numpy())[: len(self.pending)] = self.pending

    def _update_states(self, scheduler_output):
        """The row moves: ``scheduler_output`` is a list of (i, j) swaps."""
        # Remove finished requests from the cached states.
        for req_id in scheduler_output.finished_req_ids:
            self.log.append(f"finish {req_id}")
        for i, j in scheduler_output.swaps:
            b = self.input_batch.num_accepted_tokens_cpu
            b[i], b[j] = b[j], b[i]
            self.log.append(f"swap {i} {j}")

    def _prepare_inputs(self, num_reqs, prev_idx):
        self.num_accepted_tokens_event.synchronize()
        new_mask = prev_idx < 0
        self.num_accepted_tokens.np[:num_reqs] = (
            self.input_batch.num_accepted_tokens_cpu[
                np.where(new_mask, 0, prev_idx)
            ]
        )
        self.num_accepted_tokens.np[:num_reqs][new_mask] = 1
        return self.num_accepted_tokens.np[:num_reqs].copy()
# fmt: on


class _SO:
    def __init__(self, swaps, finished=()):
        self.swaps, self.finished_req_ids = swaps, finished


def _step(runner: FakeRunner, land_before_moves: bool) -> np.ndarray:
    """Step N: rows 0, 1 accept 4 and 1. Step N+1 swaps them; each request's count must follow
    it: row 0 now holds the request of old row 1 (true count 1), row 1 the other (4)."""
    runner._update_states_after_model_execute([4, 1])
    if land_before_moves:
        runner.land()
    runner._update_states(_SO([(0, 1)]))
    if not land_before_moves:
        runner.land()
    return runner._prepare_inputs(2, np.array([1, 0]))


def test_the_unpatched_double_permute_is_what_the_patches_remove():
    # unpatched, a landing before the moves is permuted twice: both requests read wrong
    assert _step(FakeRunner(), land_before_moves=True).tolist() == [4, 1]
    assert _step(FakeRunner(), land_before_moves=False).tolist() == [1, 4]


@pytest.mark.parametrize("name", list(PATCHES))
@pytest.mark.parametrize("land_before_moves", [True, False])
def test_each_patch_gives_every_request_its_own_count(name, land_before_moves):
    runner = FakeRunner()
    fix = patches.install(runner, name)
    try:
        if name == "sync-before-moves" and not land_before_moves:
            # its wait makes "landed after the moves" impossible: the sync comes first
            runner._update_states_after_model_execute([4, 1])
            runner.land()
            runner._update_states(_SO([(0, 1)]))
            got = runner._prepare_inputs(2, np.array([1, 0]))
            assert runner.log[0] == "sync"
        else:
            got = _step(runner, land_before_moves)
    finally:
        fix.uninstall()
    assert got.tolist() == [1, 4]
    # uninstalled: the wheel's own behaviour again
    assert _step(FakeRunner(), land_before_moves=True).tolist() == [4, 1]


def test_sync_before_moves_waits_before_the_first_row_operation():
    runner = FakeRunner()
    fix = patches.install(runner, "sync-before-moves")
    try:
        runner._update_states(_SO([(0, 1)], finished=("a",)))
    finally:
        fix.uninstall()
    assert runner.log == ["sync", "finish a", "swap 0 1"]


def test_private_d2h_leaves_the_input_batch_out_of_the_copy():
    runner = FakeRunner()
    fix = patches.install(runner, "private-d2h")
    try:
        runner._update_states_after_model_execute([4, 1])
        assert runner.d2h_target is runner._private_num_accepted_cpu_tensor
        assert runner.d2h_target is not runner.input_batch.num_accepted_tokens_cpu_tensor
        runner.use_async_scheduling = False  # sync scheduling keeps the wheel's target
        runner._update_states_after_model_execute([4, 1])
        assert runner.d2h_target is runner.input_batch.num_accepted_tokens_cpu_tensor
    finally:
        fix.uninstall()
    assert FakeRunner._prepare_inputs.__code__.co_filename.endswith(".py")


def test_an_edit_that_does_not_match_exactly_once_refuses_to_install():
    src = "def f(self):\n    a = 1\n    a = 1\n"
    with pytest.raises(PatchError, match="occur 2 times"):
        apply_edit(src, Edit("f", old="a = 1", new="a = 2"))
    with pytest.raises(PatchError, match="occur 0 times"):
        apply_edit(src, Edit("f", old="b = 1", new="b = 2"))

    class Other:
        def _prepare_inputs(self):
            return 0

        _update_states_after_model_execute = _prepare_inputs

    with pytest.raises(PatchError):
        patches.install(Other(), "private-d2h")
    assert Other._prepare_inputs(Other()) == 0  # nothing was set


def test_edits_keep_the_indentation_of_the_lines_they_replace():
    src = "def f(self):\n    if x:\n        a = 1\n        b = 2\n"
    out = apply_edit(src, Edit("f", old="a = 1\nb = 2", new="c = 3\nif y:\n    d = 4"))
    assert out == "def f(self):\n    if x:\n        c = 3\n        if y:\n            d = 4\n"


def test_patch_names():
    assert patch_names("none,private-d2h,sync-before-moves") == [
        "none", "private-d2h", "sync-before-moves"
    ]  # fmt: skip
    for bad in ("", "typo", "none,none", "private-d2h,,x"):
        with pytest.raises(ValueError, match="--patch"):
            patch_names(bad)


def test_arm_repeats_rotate_so_no_arm_always_runs_first():
    from gpu_check.vllm.config import RunConfig
    from gpu_check.vllm.run import with_patches

    names = ["none", "private-d2h", "sync-before-moves"]
    plan = with_patches({"align": [RunConfig()], "none": [RunConfig()]}, names, repeats=3)
    arms = plan["align"]
    assert [(a.rep, a.patch) for a in arms[:3]] == [(0, n) for n in names]
    assert [a.patch for a in arms[3:6]] == names[1:] + names[:1]
    assert {a.patch for a in arms[::3]} == set(names)  # each arm leads one round
    assert len({a.name for a in arms}) == 9  # one raw record each
    assert plan["none"] == [RunConfig()]  # none-mode configurations run unpatched
    with pytest.raises(ValueError, match="needs align"):
        with_patches({"none": [RunConfig()]}, names)
