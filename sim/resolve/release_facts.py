"""What each vLLM release's own source says, fact by fact, with the file and line it was read from.

The facts are data, in ``release_facts.json`` beside this file; this module reads them
into :class:`Fact` objects. Read from the Python files of the PyPI wheels 0.23.0 ... 0.33.0 by
``tests/conformance/release_rules.py`` (one finder per fact, same names) and checked against
those sources again by ``tests/conformance/test_release_rules.py``: a fact here that the
release's code no longer supports fails that test. Lines are 1-based, in the release named.
A ``value`` of ``None`` (line 0) means the construct is absent from that release.

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
        return f"vllm {version} {self.file}:{self.line}" if self.line else f"vllm {version}"


RELEASES = (
    "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1",
    "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
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


@dataclass(frozen=True)
class AscendFact:
    value: Any
    ref: str  # branch or commit of vllm-project/vllm-ascend
    file: str
    lines: str

    def cite(self) -> str:
        return f"vllm-ascend {self.ref} {self.file}:{self.lines}"


# vllm-ascend, read from its git history (main at 182b75ea84, 2026-08-22; releases/v0.23.0).
ASCEND: dict[str, AscendFact] = {
    # main: _prepare_inputs waits on the event and gathers from the moved InputBatch buffer
    # through prev_positions with write-back, whatever the mode: no #45100 guard.
    "main_gather": AscendFact(True, "main@182b75ea84", "vllm_ascend/worker/model_runner_v1.py",
                              "1068-1093"),
    # main: update_num_computed_tokens_for_batch_change repairs drafted rows on the device.
    "main_correction_kernel": AscendFact(True, "main@182b75ea84",
                                         "vllm_ascend/worker/model_runner_v1.py", "1105-1120"),
    # main, align: preprocess_mamba, then the CPU counts are re-synced to the device, overriding
    # the kernel's repair.
    "main_align_resync": AscendFact(True, "main@182b75ea84",
                                    "vllm_ascend/worker/model_runner_v1.py", "1993-2000"),
    # #13865 (17ac75217f, 2026-08-09; lines at the branch head 50e87d6305), on releases/v0.23.0
    # only, not on main: the async D2H goes into the
    # runner's own buffer, remapped through prev_positions (_remap_num_accepted_tokens).
    "pr13865": AscendFact(True, "releases/v0.23.0@50e87d6305",
                          "vllm_ascend/worker/model_runner_v1.py", "746-812, 1153"),
}  # fmt: skip
