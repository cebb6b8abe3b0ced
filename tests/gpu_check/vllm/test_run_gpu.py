"""The real thing (GPU machine only): vllm-run on a short workload, exported and compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from repo_root import ROOT

CARRY = Path(os.environ.get("SPECRACE_VLLM_CARRY", ROOT / ".vllmcarry"))


@pytest.mark.gpu
def test_vllm_run_align_agrees_with_sim(tmp_path: Path) -> None:
    if not CARRY.is_dir():
        pytest.skip(f"no carried vLLM at {CARRY} (scripts/vllm_inputs.sh builds it)")
    run = [sys.executable, "-m", "gpu_check", "vllm-run", "--carry", str(CARRY),
           "--modes", "align", "--configs", "16:0", "--num-requests", "48",
           "--out", str(tmp_path)]  # fmt: skip
    res = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = tmp_path / "align_s16_d0ms"
    cli = [sys.executable, "-m", "gpu_check"]
    subprocess.run([*cli, "vllm-export", str(tmp_path / "raw_align_s16_d0ms.json"), "--out",
                    str(out)], cwd=ROOT, check=True, capture_output=True)  # fmt: skip
    subprocess.run([*cli, "vllm-compare", str(out)], cwd=ROOT, check=True, capture_output=True)
    rep = json.loads((out / "agreement.json").read_text())
    assert rep["reads"] > 0 and rep["agree"] == rep["scored"]
