"""Where a GPU result came from: device, driver, library versions, date, commit."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path


def environment(device: str = "cuda") -> dict:
    """The summary header of every committed GPU table (data/bench, data/replay)."""
    env = {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        # The device machine gets a copy of the tree without .git: the caller passes it.
        "git_commit": os.environ.get("SPECRACE_COMMIT") or _cmd(["git", "rev-parse", "HEAD"]),
    }
    if device != "cuda":
        return {"device": device, **env}
    import torch
    import triton

    try:
        import fla

        fla_version = fla.__version__
    except ImportError:
        fla_version = "not installed"
    return {
        "device": torch.cuda.get_device_name(),
        "driver": _cmd(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "fla_core": fla_version,
        **env,
    }


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cmd(argv: list[str]) -> str:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return "uncommitted" if argv[0] == "git" else "unknown"
    return res.stdout.strip().splitlines()[0] if res.stdout.strip() else "unknown"
