"""The scheduler conformance suite over many streams of one release, as a JSON summary.

    .cache/vllm-env/bin/python tests/conformance/scheduler_conformance.py TREE [--streams N]

TREE is an unpacked release (.cache/vllm-<V>, fetch_release.sh). Runs streams 0..N-1 of
scheduler_cases.py and prints (or writes to ``--out``) ``{"version", "streams", "steps",
"differing_steps", "rules", "first_failures"}``; all_releases.sh (``make conformance-all``)
gathers one per release into data/conformance/scheduler.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The scheduler rules sim.model.scheduling models, each checked by every stream (file and line
# in v0.24.0; sim.resolve.release_facts holds the per-release line of those that are facts).
RULES = (
    "avoid_extra_step",  # scheduler.py L435-449: skip a running request sure to hit max_tokens
    "async_placeholders",  # async_scheduler.py L19-44: 1 + k tokens right after the prefill
    "fcfs_running_then_waiting",  # scheduler.py L430-580, L582-960
    "chunked_prefill_budget",  # scheduler.py L463-470, L795-808
    "mamba_block_aligned_split",  # scheduler.py L330-391
    "kv_block_preemption",  # scheduler.py L516-560, kv_cache_manager.py allocate_slots
    "full_sequence_must_fit",  # kv_cache_manager.py L372-387 (scheduler_reserve_full_isl)
    "preempted_output_kept",  # scheduler.py L1562-1568, L1713-1715
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tree", type=Path)
    ap.add_argument("--streams", type=int, default=500)
    ap.add_argument("--out", type=Path, help="write the JSON here (vLLM logs to stdout)")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    for p in (HERE, HERE.parents[1], args.tree.resolve()):
        sys.path.insert(0, str(p))
    import vllm
    import vllm.utils.torch_utils as torch_utils

    torch_utils.PIN_MEMORY = False
    from scheduler_cases import case_for, compare

    steps = differing = 0
    failures: list[str] = []
    for seed in range(args.streams):
        out = compare(case_for(seed))
        steps += out.steps
        differing += len(out.differing)
        if out.differing and len(failures) < 5:
            failures.append(f"{out.case.describe()}: first at step {out.differing[0]}")
    text = json.dumps(
        {
            "version": vllm.__version__,
            "streams": args.streams,
            "steps": steps,
            "differing_steps": differing,
            "rules": list(RULES),
            "first_failures": failures,
        },
        indent=1,
    )
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
