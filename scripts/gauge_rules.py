"""The H100 rounds' gauge-conditioned score (criterion (iv)) under three rules for the gauge,
on today's calibration (``data/vllm/forward/summary.json``, as ``scripts/rescore_round.py``):

- ``process``: every configuration of a process gauged by its one pure pass (align at 0 ms),
  the rule the rounds up to forward-29 were scored by;
- ``by mode``: each configuration by its process's pure pass of its own mode (none at 0 ms
  for none), today's rule (``forecast.gauge_by_mode``);
- ``by mode + slow``: and sim's share of slow host steps from the gauge pass's own share,
  through the records' median line (:mod:`gpu_check.vllm.slow_gauge`), not adopted.

Per round and rule it prints the passes meeting #23's three parts given the gauge (CPU-bound /
boundary / GPU-bound / overall, of 48). Nothing is written. Fifteen re-scorings, one to
two minutes each.

    python scripts/gauge_rules.py [forward-25 ...]

docs/forward-prediction.md ("Gauged by mode") quotes it.
"""

from __future__ import annotations

import json
import runpy
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "vllm"
ROUNDS = ("forward-25", "forward-26", "forward-27", "forward-28", "forward-29")
RULES = ("process", "by mode", "by mode + slow")


def calibration(rule: str) -> dict[str, Any]:
    """Today's calibration with the rule's keys set."""
    from gpu_check.vllm.slow_gauge import fit_records

    cal = json.loads((DATA / "forward" / "summary.json").read_text())
    cal["forecast"]["gauge_by_mode"] = rule != "process"
    if rule == "by mode + slow":
        cal["forecast"]["slow_given_gauge"] = fit_records(DATA)
    return cal


def scores(rounds: list[str]) -> dict[str, dict[str, dict[str, int]]]:
    """Per rule and round, ``rescore_round.meets``: passes meeting (iv) per regime."""
    rescore = runpy.run_path(str(ROOT / "scripts" / "rescore_round.py"))
    out: dict[str, dict[str, dict[str, int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rule in RULES:
            path = Path(tmp) / f"{rule.replace(' ', '-').replace('+', 'slow')}.json"
            path.write_text(json.dumps(calibration(rule)))
            out[rule] = {r: rescore["rescore"](DATA / "preregistered" / r, DATA / r, path)
                         for r in rounds}  # fmt: skip
    return out


def main(argv: list[str]) -> int:
    rounds = argv or list(ROUNDS)
    got = scores(rounds)
    print("(iv) given the gauge, CPU-bound / boundary / GPU-bound / overall of passes")
    for r in rounds:
        cells = []
        for rule in RULES:
            m = got[rule][r]
            cells.append(f"{rule}: {m['CPU-bound']} / {m['boundary']} / {m['GPU-bound']} / "
                         f"{m['overall']} of {m['passes']}")  # fmt: skip
        print(f"{r}: " + "; ".join(cells))
    for rule in RULES:
        n = sum(got[rule][r]["overall"] for r in rounds)
        print(f"{rule}: {n} of {sum(got[rule][r]['passes'] for r in rounds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
