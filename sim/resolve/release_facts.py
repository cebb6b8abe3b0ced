"""What each vLLM release's own source says, fact by fact, with the file and line it was read from.

The facts are data, in ``release_facts.json`` beside this file; this module reads them
into :class:`Fact` objects. Read from the Python files of the PyPI wheels 0.23.0 ... 0.34.0 by
``tests/conformance/release_rules.py`` (one finder per fact, same names) and checked against
those sources again by ``tests/conformance/test_release_rules.py`` and
``tests/conformance/all_releases.sh`` (data/conformance/releases.json): a fact here that the
release's code no longer supports fails that check. Lines are 1-based, in the release named.
A line of 0 means the construct is absent from that release (value ``None`` or ``False``).

0.34.0 removed the V1 model runner: its absence is itself a set of checked facts
(``v1_runner_present``, ``v1_input_batch_present``, ``v1_preprocess_mamba_present``,
``v1_postprocess_align_present`` are False there; ``v1_env_raises`` and
``model_runner_validation_raises`` hold only there), and the V1 facts read absent.

Where this differs from earlier notes (docs/versions.md says so) the source won:
the prefix-caching default for hybrid models is off through 0.27.1 and on from 0.28.0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Fact:
    value: Any
    file: str  # path inside the wheel
    line: int  # 1-based; 0 when absent

    def cite(self, version: str) -> str:
        if self.line:
            return f"vllm {version} {self.file}:{self.line}"
        return f"vllm {version} {self.file}: absent"


RELEASES = (
    "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1",
    "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0",
)  # fmt: skip


def _load_facts() -> dict[str, dict[str, Fact]]:
    """``release_facts.json``: fact -> release -> ``[value, file, line]`` (a list value is a
    tuple here). The meaning of each fact: the finder of the same name in
    tests/conformance/release_rules.py."""
    raw = json.loads(resources.files(__package__).joinpath("release_facts.json").read_text("utf-8"))
    facts = {
        name: {
            rel: Fact(tuple(v) if isinstance(v, list) else v, file, line)
            for rel, (v, file, line) in per.items()
        }
        for name, per in raw.items()
    }
    for name, per in facts.items():
        if tuple(per) != RELEASES:
            raise RuntimeError(f"release_facts.json: {name} does not list every release in order")
    return facts


# fact -> release -> Fact
FACTS: dict[str, dict[str, Fact]] = _load_facts()


def has_v1_runner(version: str) -> bool:
    """Whether ``version`` still ships the V1 ``GPUModelRunner`` (every release before 0.34.0)."""
    return bool(FACTS["v1_runner_present"][version].value)


# The last release with the V1 runner: where a V1-only path (or vllm-ascend) can still run.
LAST_V1_RELEASE = [v for v in RELEASES if has_v1_runner(v)][-1]


@dataclass(frozen=True)
class AscendFact:
    value: Any
    ref: str  # a PyPI release of vllm-project/vllm-ascend, or branch@commit
    file: str
    lines: str
    # where it was read: "sdist" (the PyPI sdist, re-read by tests/conformance/ascend_rules.py
    # --sdist), "git" (a clone at ``ref``, ascend_rules.py GIT_DIR) or "reference" (stated in
    # the project's reference notes, docs/versions.md §4; main is not on PyPI)
    source: str = "git"

    def cite(self) -> str:
        where = {"sdist": " (PyPI sdist)", "reference": " (as last seen 2026-08-22)"}.get(
            self.source, ""
        )
        return f"vllm-ascend {self.ref}{where} {self.file}:{self.lines}"


ASCEND_RUNNER = "vllm_ascend/worker/model_runner_v1.py"
# vllm-ascend by what a user installs. ``main`` is not on PyPI: its facts are the reference's
# (main as last seen, 182b75ea84, 2026-08-22), earlier checked against a clone at that commit
# (data/conformance/ascend.json ``facts``). ``0.23.0.post1`` is read from the PyPI sdist
# vllm_ascend-0.23.0.post1.tar.gz (commit g1cdb8c4db, 2026-12-05; ascend.json ``releases``).
# ``v0.23.0`` is the branch releases/v0.23.0 where #13865 was merged (17ac75217f); its head
# 50e87d6305 has #13865 at the lines 0.23.0.post1 ships.
ASCEND_MAIN = "main@182b75ea84"
ASCEND_RELEASE = "0.23.0.post1"
ASCEND: dict[str, AscendFact] = {
    # main: _prepare_inputs waits on the event and gathers from the moved InputBatch buffer
    # through prev_positions with write-back, whatever the mode: no #45100 guard.
    "main_gather": AscendFact(True, ASCEND_MAIN, ASCEND_RUNNER, "1068-1093", "reference"),
    # main: update_num_computed_tokens_for_batch_change repairs drafted rows on the device.
    "main_correction_kernel": AscendFact(True, ASCEND_MAIN, ASCEND_RUNNER, "1105-1120",
                                         "reference"),
    # main, align: preprocess_mamba, then the CPU counts are re-synced to the device, overriding
    # the kernel's repair.
    "main_align_resync": AscendFact(True, ASCEND_MAIN, ASCEND_RUNNER, "1993-2000", "reference"),
    # main: NPUModelRunner subclasses vLLM's V1 GPUModelRunner (import L106, class L291).
    "main_subclasses_v1_runner": AscendFact(True, ASCEND_MAIN, ASCEND_RUNNER, "106, 291",
                                            "reference"),
    # #13865 (17ac75217f, 2026-08-09; lines at the branch head 50e87d6305), on releases/v0.23.0
    # only, not on main: the async D2H goes into the
    # runner's own buffer, remapped through prev_positions (_remap_num_accepted_tokens).
    "pr13865": AscendFact(True, "releases/v0.23.0@50e87d6305", ASCEND_RUNNER, "746-812, 1153"),
    # 0.23.0.post1 (PyPI sdist): _update_states_after_model_execute is overridden (L746-787);
    # with async scheduling the align D2H lands in the runner's own num_accepted_tokens.cpu
    # (L766), not the InputBatch's; with async off the base class keeps InputBatch ownership
    # (L750-753).
    "post1_private_buffer": AscendFact(True, ASCEND_RELEASE, ASCEND_RUNNER, "746-787", "sdist"),
    # 0.23.0.post1: after event.synchronize() (L1152), _sync_num_accepted_tokens (L1153, def
    # L798-811) remaps the private counts through prev_positions (_remap_num_accepted_tokens
    # L789-796) and only then writes the InputBatch rows.
    "post1_remap": AscendFact(True, ASCEND_RELEASE, ASCEND_RUNNER, "789-811, 1151-1159",
                              "sdist"),
    # 0.23.0.post1: no gather from input_batch.num_accepted_tokens_cpu through prev_positions
    # (main's racy read) anywhere in _prepare_inputs.
    "post1_no_input_batch_gather": AscendFact(True, ASCEND_RELEASE, ASCEND_RUNNER,
                                              "1151-1159", "sdist"),
    # 0.23.0.post1 is built against vLLM v0.23.0 (Dockerfile ARG VLLM_TAG=v0.23.0).
    "post1_vllm": AscendFact("0.23.0", ASCEND_RELEASE, "Dockerfile", "42", "sdist"),
    # 0.23.0.post1: NPUModelRunner subclasses vLLM's V1 GPUModelRunner (import L97, class L268).
    "post1_subclasses_v1_runner": AscendFact(True, ASCEND_RELEASE, ASCEND_RUNNER, "97, 268",
                                             "sdist"),
}  # fmt: skip
