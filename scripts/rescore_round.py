"""A pre-registered round's gauge-conditioned score (criterion (iv)) on today's calibration.

``vllm-outcome`` scores a round on the calibration frozen beside its predictions, so a model
fix found later never moves the round's outcome. This asks the other question: what would the
fixed model have scored on the same passes? It copies the round's ``predictions.json`` into a
temporary folder with ``data/vllm/forward/summary.json`` as the frozen calibration, runs
``vllm-outcome`` there (the committed round is not touched) and prints, per regime, the passes
that meet #23's three parts given the gauge. Criteria (i)-(iii) judge the committed intervals
and do not change.

    python scripts/rescore_round.py data/vllm/preregistered/forward-26 data/vllm/forward-26

docs/forward-prediction.md ("forward-26") quotes it.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

from gpu_check.__main__ import main as gpu_check_main
from gpu_check.vllm.forecast import REGIMES as OBSERVED
from gpu_check.vllm.plan import CALIBRATION  # vllm-plan's: the committed vllm-forward

REGIMES = (*OBSERVED, "overall")


def rescore(prereg: Path, runs: Path, calibration: Path = CALIBRATION) -> dict[str, int]:
    """Per regime, the passes meeting (iv) on ``calibration`` (and ``passes``, overall)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / prereg.name
        work.mkdir()
        shutil.copyfile(prereg / "predictions.json", work / "predictions.json")
        shutil.copyfile(calibration, work / "calibration.json")
        with contextlib.redirect_stdout(io.StringIO()):  # vllm-outcome's own table
            rc = gpu_check_main(["vllm-outcome", str(work), "--runs", str(runs)])
        if rc:
            raise SystemExit(rc)
        per = json.loads((work / "outcome.json").read_text())["forecast"]["per_regime"]
    out = {r: per[r]["conditional_meets_all"]["meets"] for r in REGIMES}
    return out | {"passes": per["overall"]["passes"]}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/rescore_round.py PREREG_FOLDER RUNS_FOLDER", file=sys.stderr)
        return 2
    got = rescore(Path(argv[0]), Path(argv[1]))
    print(" ".join(f"{r}: {got[r]}" for r in REGIMES) + f" of {got['passes']} passes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
