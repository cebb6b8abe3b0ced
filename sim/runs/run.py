"""One run: schedule -> simulate under a policy -> reads, trace, summary -> run directory.

Run directory (data/README.md): ``meta.json``, ``schedule.json``, ``trace.parquet``,
``reads.parquet``; with ``--policy all`` one sub-directory per policy beside a shared
``schedule.json`` and ``comparison.json``. Every file is written atomically.
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sim.model import schedule as schedule_mod
from sim.model.params import Scenario
from sim.model.policies import Policy
from sim.model.reads import build_reads, build_trace, summarize
from sim.model.schedule import SCHEMA_VERSION, Schedule
from sim.model.simulate import simulate
from sim.runs.io import atomic_write, atomic_write_text, write_json


@dataclass
class RunResult:
    policy: str
    summary: dict
    reads: pd.DataFrame
    trace: pd.DataFrame | None


def run_policy(
    schedule: Schedule, scenario: Scenario, policy: Policy, seed: int, trace: bool = True
) -> RunResult:
    model = simulate(schedule, scenario.timing, policy, seed, trace=trace)
    reads = build_reads(schedule, model)
    summary = summarize(reads, model, schedule)
    return RunResult(summary["policy"], summary, reads, build_trace(model) if trace else None)


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    table = pa.Table.from_pandas(df, preserve_index=False)
    # No creation metadata that varies between runs: same inputs -> same bytes.
    atomic_write(
        path, lambda tmp: pq.write_table(table, tmp, compression="zstd", write_statistics=False)
    )


def write_run(
    out: Path,
    scenario: Scenario,
    seed: int,
    schedule: Schedule,
    result: RunResult,
    write_schedule: bool = True,
) -> None:
    if write_schedule:
        atomic_write_text(out / "schedule.json", schedule_mod.dumps(schedule))
    write_parquet(out / "reads.parquet", result.reads)
    if result.trace is not None:
        write_parquet(out / "trace.parquet", result.trace)
    write_json(
        out / "meta.json",
        {
            "scenario": scenario.to_dict(),
            "policy": result.policy,
            "seed": seed,
            "schema_version": SCHEMA_VERSION,
            "summary": result.summary,
            "versions": versions(),
            "git_commit": git_commit(),
        },
    )


def versions() -> dict[str, str]:
    import numpy
    import simpy

    return {
        "python": platform.python_version(),
        "simpy": simpy.__version__,
        "numpy": numpy.__version__,
        "pandas": pd.__version__,
        "pyarrow": pa.__version__,
    }


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            timeout=10,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
