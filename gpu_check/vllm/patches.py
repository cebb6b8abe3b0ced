"""The open align-mode fixes, written by specrace and applied to a live vLLM V1 runner.

``vllm-run --patch NAME`` runs vLLM's unmodified wheel with one of these installed. A patch is a
list of :class:`Edit`: a run of lines in one ``GPUModelRunner`` method, found by its text
(leading whitespace ignored) exactly once, replaced by new lines at the same indentation. The
edited method is compiled in the runner module's namespace and set on the class; ``uninstall``
puts the original back, so one process can run every arm side by side. An edit that does not
find its lines exactly once refuses to install (:class:`PatchError`), so a release whose source
moved is reported, never half patched. Both patches touch only the async + align path; the text
they edit is the same in 0.24.0 and 0.33.0 (``tests/gpu_check/vllm/test_patches.py`` holds them
to both wheels' sources). What each implements, and its sim policy: docs/vllm-fixes.md.

- ``private-d2h`` (the approach of vLLM PR #51599, sim policy ``private-buffer``): align's D2H
  (``postprocess_mamba_align_gpu``'s ``num_accepted_tokens_cpu_tensor``) lands in a pinned
  buffer the runner owns, which no row move touches; ``_prepare_inputs`` gathers step N's counts
  from it through ``prev_positions`` after the event wait, and writes them back into the
  InputBatch as before.
- ``sync-before-moves`` (the approach of PR #53919, sim policy ``sync-before-moves``):
  ``_update_states`` waits on ``num_accepted_tokens_event`` before its first row operation, so
  the moves carry every landed count with its request; ``_prepare_inputs`` then reads the rows
  as they are (no second permutation through ``prev_positions``), new and partial-prefill rows
  still 1.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from dataclasses import dataclass
from typing import Any


class PatchError(RuntimeError):
    """A patch that does not apply to this vLLM's source (one line for the CLI)."""


@dataclass(frozen=True)
class Edit:
    method: str  # a GPUModelRunner method
    old: str  # lines to find (compared without leading whitespace)
    new: str  # their replacement, indented relative to the first old line


@dataclass(frozen=True)
class Patch:
    name: str
    pr: int
    sim_policy: str
    summary: str
    edits: tuple[Edit, ...]
    private_buffer: bool = False  # allocate the runner-owned pinned counts buffer


GATHER = """\
self.num_accepted_tokens.np[:num_reqs] = (
    self.input_batch.num_accepted_tokens_cpu[
        np.where(new_mask, 0, prev_idx)
    ]
)"""

PATCHES: dict[str, Patch] = {
    p.name: p
    for p in (
        Patch(
            name="private-d2h",
            pr=51599,
            sim_policy="private-buffer",
            summary="align's D2H lands in a runner-owned pinned buffer; the gather reads it",
            private_buffer=True,
            edits=(
                Edit(
                    "_update_states_after_model_execute",
                    old="""\
num_accepted_tokens_cpu_tensor=(
    self.input_batch.num_accepted_tokens_cpu_tensor
),""",
                    new="""\
num_accepted_tokens_cpu_tensor=(
    # specrace private-d2h (#51599's approach): no row move touches this buffer
    self._private_num_accepted_cpu_tensor
    if self.use_async_scheduling
    else self.input_batch.num_accepted_tokens_cpu_tensor
),""",
                ),
                Edit(
                    "_prepare_inputs",
                    old=GATHER,
                    new="""\
# specrace private-d2h: step N's counts in step N's rows, whatever the moves did
self.num_accepted_tokens.np[:num_reqs] = (
    self._private_num_accepted_cpu[
        np.where(new_mask, 0, prev_idx)
    ]
)""",
                ),
            ),
        ),
        Patch(
            name="sync-before-moves",
            pr=53919,
            sim_policy="sync-before-moves",
            summary="wait on the counts' event before the first row move; read rows directly",
            edits=(
                Edit(
                    "_update_states",
                    old="""\
# Remove finished requests from the cached states.
for req_id in scheduler_output.finished_req_ids:""",
                    new="""\
# specrace sync-before-moves (#53919's approach): step N's counts land before any
# row operation, so every move below carries a landed count with its request.
if (
    self.num_accepted_tokens_event is not None
    and self.use_async_scheduling
    and self.cache_config.mamba_cache_mode == "align"
):
    self.num_accepted_tokens_event.synchronize()
# Remove finished requests from the cached states.
for req_id in scheduler_output.finished_req_ids:""",
                ),
                Edit(
                    "_prepare_inputs",
                    old=GATHER,
                    new="""\
# specrace sync-before-moves: the rows already follow their requests (the wait was
# before the moves), so no second permutation through prev_positions
self.num_accepted_tokens.np[:num_reqs] = (
    self.input_batch.num_accepted_tokens_cpu[:num_reqs]
)""",
                ),
            ),
        ),
    )
}

NONE = "none"


def patch_names(text: str) -> list[str]:
    """``"none,private-d2h"`` -> the named arms, in order; ``none`` is the unpatched wheel."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    known = (NONE, *PATCHES)
    bad = [n for n in names if n not in known]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(
            f"--patch takes a comma list of distinct names from {', '.join(known)}; got {text!r}"
        )
    return names


def apply_edit(source: str, edit: Edit) -> str:
    """``source`` (a method, dedented) with ``edit.old``'s lines replaced by ``edit.new``'s."""
    lines = source.splitlines()
    old = [ln.strip() for ln in edit.old.splitlines()]
    hits = [
        i
        for i in range(len(lines) - len(old) + 1)
        if [ln.strip() for ln in lines[i : i + len(old)]] == old
    ]
    if len(hits) != 1:
        raise PatchError(
            f"{edit.method}: the lines to replace occur {len(hits)} times (expected once); "
            f"first: {old[0]!r}"
        )
    i = hits[0]
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    new = [indent + ln if ln.strip() else "" for ln in edit.new.splitlines()]
    return "\n".join(lines[:i] + new + lines[i + len(old) :]) + "\n"


def patched_source_text(methods: dict[str, str], patch: Patch) -> dict[str, str]:
    """Every method the patch edits (``methods``: name -> dedented source), edited."""
    out: dict[str, str] = {}
    for edit in patch.edits:
        if edit.method not in out:
            if edit.method not in methods:
                raise PatchError(f"the runner has no method {edit.method}")
            out[edit.method] = methods[edit.method]
        out[edit.method] = apply_edit(out[edit.method], edit)
    return out


def patched_source(cls: type, patch: Patch) -> dict[str, str]:
    """Every method of ``cls`` the patch edits, as its edited, dedented source."""
    names = {e.method for e in patch.edits}
    methods = {
        n: textwrap.dedent(inspect.getsource(getattr(cls, n))) for n in names if hasattr(cls, n)
    }
    return patched_source_text(methods, patch)


def compile_patch(cls: type, patch: Patch) -> dict[str, Any]:
    """The edited methods of ``cls``, compiled in its module's namespace; changes nothing
    (:class:`PatchError` if an edit does not find its lines). The plugin sets them itself."""
    module = sys.modules[cls.__module__]
    compiled = {}
    for name, src in patched_source(cls, patch).items():
        scope: dict[str, Any] = {}
        code = compile(src, f"<specrace patch {patch.name}: {name}>", "exec")
        exec(code, module.__dict__, scope)  # noqa: S102 - our own edit of vLLM's source
        compiled[name] = scope[name]
    return compiled


def allocate_private(runner: Any) -> None:
    """``private-d2h``'s runner-owned counts buffer (pinned as vLLM's own is, where a GPU is)."""
    import torch

    pin = torch.cuda.is_available()
    t = torch.ones(int(runner.max_num_reqs), dtype=torch.int32, pin_memory=pin)
    runner._private_num_accepted_cpu_tensor = t
    runner._private_num_accepted_cpu = t.numpy()


class Installed:
    """One patch on one runner's class; ``uninstall`` restores the original methods."""

    def __init__(self, runner: Any, patch: Patch) -> None:
        self.runner, self.patch = runner, patch
        self.cls = type(runner)
        self._saved: dict[str, Any] = {}

    def install(self) -> Installed:
        compiled = compile_patch(self.cls, self.patch)  # every edit found before any is set
        if self.patch.private_buffer:
            allocate_private(self.runner)
        for name, fn in compiled.items():
            self._saved[name] = self.cls.__dict__[name]
            setattr(self.cls, name, fn)
        return self

    def uninstall(self) -> None:
        for name, fn in self._saved.items():
            setattr(self.cls, name, fn)
        self._saved.clear()


def install(runner: Any, name: str) -> Installed | None:
    """Install patch ``name`` on ``runner``'s class (``none``: nothing, returns None)."""
    if name == NONE:
        return None
    return Installed(runner, PATCHES[name]).install()
