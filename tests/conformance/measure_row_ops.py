# ruff: noqa: I001  (vllm_driver must come first: it turns off pinned memory)
"""Time vLLM's real InputBatch row operations while it replays a specrace schedule.

Runs in the conformance environment (``make calibrate-row-ops``). Writes
``data/params/vllm-<V>-row-ops.toml`` (a ``[timing]`` table of medians that
``python -m sim run --timing FILE`` applies) and the raw samples beside it as CSV.
The real methods run unchanged; only ``perf_counter_ns`` brackets them. A condense move is
the whole ``condense()`` divided by the moves it made.
"""

from __future__ import annotations

import csv
import datetime as dt
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VERSION = (HERE / "VLLM_VERSION").read_text().strip()
sys.path[:0] = [str(HERE), str(REPO), str(REPO / ".cache" / f"vllm-{VERSION}")]

import numpy as np  # noqa: E402
from vllm_driver import StepInput, new_request_state  # noqa: E402  (sets PIN_MEMORY first)
from vllm.v1.attention.backends.utils import (  # noqa: E402
    reorder_batch_to_split_decodes_and_prefills,
)
from vllm.v1.worker.gpu_input_batch import InputBatch  # noqa: E402

from gpu_check.environment import cpu_model  # noqa: E402
from sim.model.params import load_scenario  # noqa: E402
from sim.model.scheduling import build_schedule  # noqa: E402

SAMPLES: dict[str, list[int]] = {"remove": [], "add": [], "move": [], "swap": []}


class TimedInputBatch(InputBatch):
    def remove_request(self, req_id):
        t0 = time.perf_counter_ns()
        out = super().remove_request(req_id)
        if out is not None:
            SAMPLES["remove"].append(time.perf_counter_ns() - t0)
        return out

    def add_request(self, request):
        t0 = time.perf_counter_ns()
        out = super().add_request(request)
        SAMPLES["add"].append(time.perf_counter_ns() - t0)
        return out

    def swap_states(self, i1, i2):
        t0 = time.perf_counter_ns()
        super().swap_states(i1, i2)
        SAMPLES["swap"].append(time.perf_counter_ns() - t0)

    def condense(self):
        before = len(self.batch_update_builder.moved)
        t0 = time.perf_counter_ns()
        super().condense()
        moves = len(self.batch_update_builder.moved) - before
        if moves:
            SAMPLES["move"].extend([(time.perf_counter_ns() - t0) // moves] * moves)


def replay(steps: int, seed: int) -> None:
    import inspect

    import torch

    sc = load_scenario("qwen35-mtp3")
    sched = build_schedule(sc, seed, steps)
    max_len = sc.workload.prompt_len.max + sc.workload.output_len.max + 16
    wanted = dict(max_num_reqs=sc.engine.max_num_seqs, max_model_len=max_len,
                  max_num_batched_tokens=sc.engine.max_num_batched_tokens,
                  device=torch.device("cpu"), pin_memory=False, vocab_size=151_936,
                  block_sizes=[16], kernel_block_sizes=[16],
                  num_spec_tokens=sc.engine.num_speculative_tokens)  # fmt: skip
    params = inspect.signature(InputBatch.__init__).parameters
    ib = TimedInputBatch(**{k: v for k, v in wanted.items() if k in params})
    requests = {}
    for rec in sched.steps:
        step = StepInput.from_record(rec)
        for req_id in step.finished:
            requests.pop(req_id, None)
            ib.remove_request(req_id)
        for req_id in ib.req_id_to_index.keys() - (step.num_scheduled.keys() - set(step.resumed)):
            ib.remove_request(req_id)
        to_add = []
        for req_id in step.new:
            requests[req_id] = new_request_state(
                req_id, step.num_prompt[req_id], step.num_computed[req_id]
            )
            to_add.append(requests[req_id])
        for req_id in step.num_scheduled:
            row = ib.req_id_to_index.get(req_id)
            if req_id in step.new:
                continue
            requests[req_id].num_computed_tokens = step.num_computed[req_id]
            if row is None:
                to_add.append(requests[req_id])
            else:
                ib.num_computed_tokens_cpu[row] = step.num_computed[req_id]
        for state in to_add:
            ib.add_request(state)
        ib.condense()
        out = type("SchedulerOutput", (), {"num_scheduled_tokens": step.num_scheduled})
        reorder_batch_to_split_decodes_and_prefills(ib, out, 1 + sc.engine.num_speculative_tokens)
        ib.refresh_metadata()


def main() -> int:
    steps, seed = 600, 0
    replay(steps, seed)
    out_dir = REPO / "data" / "params"
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"vllm-{VERSION}-row-ops"
    with open(f"{stem}.csv.tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["op", "ns"])
        for op, xs in SAMPLES.items():
            w.writerows([op, x] for x in xs)
    Path(f"{stem}.csv.tmp").replace(f"{stem}.csv")
    med = {op: int(np.median(xs)) for op, xs in SAMPLES.items() if xs}
    keys = {"remove": "worker_remove_ns", "add": "worker_add_ns",
            "move": "worker_condense_move_ns", "swap": "worker_swap_ns"}  # fmt: skip
    commit = (
        subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO
        ).stdout.strip()
        or "unknown"
    )
    lines = [
        f"# vLLM {VERSION}'s real InputBatch row operations, medians (ns) over a replay of",
        f"# qwen35-mtp3 (seed {seed}, {steps} steps), measured by tests/conformance/"
        "measure_row_ops.py",
        f"# on {cpu_model()}, Python {platform.python_version()},"
        f" {dt.date.today()}, commit {commit}.",
        "# Samples: "
        + ", ".join(f"{op} {len(xs)}" for op, xs in SAMPLES.items())
        + f". Raw: {stem.name}.csv",
        "[timing]",
        *(f"{keys[op]} = {v}" for op, v in med.items()),
    ]
    Path(f"{stem}.toml.tmp").write_text("\n".join(lines) + "\n")
    Path(f"{stem}.toml.tmp").replace(f"{stem}.toml")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
