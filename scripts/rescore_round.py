"""A pre-registered round's gauge-conditioned score (criterion (iv)) and the interval given the
gauge, on today's calibration.

``vllm-outcome`` scores a round on the calibration frozen beside its predictions, so a model
fix found later never moves the round's outcome. This asks the other question: what would the
fixed model have scored on the same passes? It copies the round's ``predictions.json`` into a
temporary folder with ``data/vllm/forward/summary.json`` as the frozen calibration, runs
``vllm-outcome`` there (the committed round is not touched) and prints, per regime, the passes
that meet #23's three parts given the gauge, then the interval given the gauge
(``forecast.given_gauge_band``) per regime: today's residuals come from the records of
``vllm-forward``, none of them a pre-registered round's pass, so on a round it is held out from
its residuals, though not pre-registered. Criteria (i)-(iii) of the committed intervals do not
change.

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
from typing import Any

from gpu_check.__main__ import main as gpu_check_main
from gpu_check.vllm.forecast import REGIMES as OBSERVED
from gpu_check.vllm.plan import CALIBRATION  # vllm-plan's: the committed vllm-forward

REGIMES = (*OBSERVED, "overall")


def forecast_on(prereg: Path, runs: Path, calibration: Path = CALIBRATION) -> dict[str, Any]:
    """``outcome.json``'s ``forecast`` of the round scored on ``calibration``."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / prereg.name
        work.mkdir()
        shutil.copyfile(prereg / "predictions.json", work / "predictions.json")
        shutil.copyfile(calibration, work / "calibration.json")
        with contextlib.redirect_stdout(io.StringIO()):  # vllm-outcome's own table
            rc = gpu_check_main(["vllm-outcome", str(work), "--runs", str(runs)])
        if rc:
            raise SystemExit(rc)
        return json.loads((work / "outcome.json").read_text())["forecast"]


def meets(forecast: dict[str, Any]) -> dict[str, int]:
    """Per regime, the passes of a round's ``forecast`` meeting (iv) (and ``passes``, overall)."""
    per = forecast["per_regime"]
    out = {r: per[r]["conditional_meets_all"]["meets"] for r in REGIMES}
    return out | {"passes": per["overall"]["passes"]}


def rescore(prereg: Path, runs: Path, calibration: Path = CALIBRATION) -> dict[str, int]:
    """Per regime, the passes meeting (iv) on ``calibration`` (and ``passes``, overall)."""
    return meets(forecast_on(prereg, runs, calibration))


def given_gauge(forecast: dict[str, Any]) -> dict[str, str]:
    """Per regime, the interval given the gauge (forecast.given_gauge_band, on the
    calibration's residuals): passes inside (rate / step / entry) and, at the boundary, those
    above the rate's upper end, and the width over vLLM's spread within a process (ii'')."""
    per = forecast["per_regime_given_gauge"]
    out = {}
    for r in REGIMES:
        cov = " / ".join(str(per[r]["coverage"][p]["covered"]) for p in ("rate", "step", "entry"))
        out[r] = f"{cov} of {per[r]['passes']}"
        if "safety" in per[r]:
            out[r] += f", {per[r]['safety']['above_upper']} above"
        if "sharpness" in per[r]:
            ratio = [per[r]["sharpness"][p]["ratio"] for p in ("rate", "step", "entry")]
            cells = ("-" if x is None else f"{x:.2f}" for x in ratio)
            out[r] += ", width / vLLM's " + " / ".join(cells)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/rescore_round.py PREREG_FOLDER RUNS_FOLDER", file=sys.stderr)
        return 2
    fc = forecast_on(Path(argv[0]), Path(argv[1]))
    got = meets(fc)
    print("(iv): " + " ".join(f"{r}: {got[r]}" for r in REGIMES)
          + f" of {got['passes']} passes")  # fmt: skip
    print("given the gauge, inside rate / step / entry: "
          + "; ".join(f"{r} {v}" for r, v in given_gauge(fc).items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
