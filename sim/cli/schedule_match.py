"""``python -m sim.cli.schedule_match data/vllm``: sim's scheduler against every recorded vLLM
run under a folder (each run's release facts from sim.resolve) -> ``schedule_match.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from sim.hardware.schedule_match import match
from sim.model.schedule_io import read_schedule
from sim.resolve.release_facts import FACTS
from sim.runs.io import write_json


def match_all(root: Path) -> dict[str, Any]:
    """Every V1 configuration under ``root`` (``*/<mode>_<config>/schedule.json``)."""
    configs: dict[str, Any] = {}
    for path in sorted(root.glob("*/*/schedule.json")):
        meta = json.loads((path.parent / "export.json").read_text())
        version = str(meta["vllm_version"])
        engine = {
            "max_num_seqs": int(meta["max_num_seqs"]),
            "mamba_split_rule": FACTS["mamba_split_rule"][version].value,
            "pad_new_decode": FACTS["pad_new_decode"][version].value,
        }
        configs[f"{path.parent.parent.name}/{path.parent.name}"] = {
            "vllm": version,
            **match(read_schedule(path), engine),
        }
    rows = list(configs.values())
    return {
        "generated_by": "python -m sim.cli.schedule_match data/vllm",
        "configs": configs,
        "identical_everywhere": all(r["identical_steps_fraction"] == 1.0 for r in rows),
    }


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "data/vllm")
    out = root / "schedule_match.json"
    result = match_all(root)
    write_json(out, result, sign=True)
    fr = [r["identical_steps_fraction"] for r in result["configs"].values()]
    print(f"wrote {out}: {len(fr)} configurations, identical steps {min(fr):.4f}-{max(fr):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
