"""A fake ``vllm`` 0.33.0 whose V1 runner module is a real file on disk.

The plugin's guard reads the runner's methods' source (``inspect.getsource``) before it edits
them, so the fake runner must be an importable file, not a class made in a test. The source
below carries the lines both fixes look for; ``install`` writes it under ``tmp_path`` as
``module_name`` and puts ``vllm``, ``vllm.v1``, ``vllm.v1.worker`` and
``vllm.v1.worker.gpu_model_runner`` into ``sys.modules`` (undone by ``monkeypatch``).
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

RUNNER_SRC = """
import numpy as np


class GPUModelRunner:
    def __init__(self):
        self.max_num_reqs = 4
        self.inits = getattr(self, "inits", 0) + 1
        self.input_batch = InputBatch()

    def execute_model(self, scheduler_output):
        return "ran"

    def _update_states(self, scheduler_output):
        # Remove finished requests from the cached states.
        for req_id in scheduler_output.finished_req_ids:
            pass

    def _update_states_after_model_execute(self, output_token_ids, scheduler_output):
        postprocess(
            num_accepted_tokens_cpu_tensor=(
                self.input_batch.num_accepted_tokens_cpu_tensor
            ),
        )

    def _prepare_inputs(self, num_reqs, new_mask, prev_idx):
        self.num_accepted_tokens.np[:num_reqs] = (
            self.input_batch.num_accepted_tokens_cpu[
                np.where(new_mask, 0, prev_idx)
            ]
        )


class InputBatch:
    def condense(self):
        pass
"""


def install(
    tmp_path: Path, monkeypatch, module_name: str
) -> tuple[types.ModuleType, types.ModuleType]:
    """Write the runner as ``module_name``, import it, and register a ``vllm`` 0.33.0 around
    it. Returns (the ``vllm`` module, the runner module)."""
    (tmp_path / f"{module_name}.py").write_text(RUNNER_SRC)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(module_name, None)
    runner_mod = importlib.import_module(module_name)
    vllm = types.ModuleType("vllm")
    vllm.__version__ = "0.33.0"
    worker = types.ModuleType("vllm.v1.worker")
    worker.gpu_model_runner = runner_mod  # type: ignore[attr-defined]
    mods = {"vllm": vllm, "vllm.v1": types.ModuleType("vllm.v1"), "vllm.v1.worker": worker,
            "vllm.v1.worker.gpu_model_runner": runner_mod}  # fmt: skip
    for k, v in mods.items():
        monkeypatch.setitem(sys.modules, k, v)
    return vllm, runner_mod
