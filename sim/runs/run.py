"""One run: schedule -> simulate under a policy -> reads, trace, summary -> run directory.

Run directory (data/README.md): ``meta.json``, ``schedule.json``, ``trace.parquet``,
``reads.parquet``; with ``--policy all`` one sub-directory per policy beside a shared
``schedule.json`` and ``comparison.json``. Every file is written atomically.

:func:`run_streaming` is the long-run form (``python -m sim run --stream``): the schedule is
generated (or read), written and simulated one step at a time (the vector tier, exact to the
SimPy tier read by read) and the reads go to Parquet in row groups, so memory stays bounded
whatever the step count (no trace).
"""

from __future__ import annotations

import contextlib
import functools
import platform
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim.model import schedule as schedule_mod
from sim.model.params import Scenario
from sim.model.policies import Policy
from sim.model.reads import READ_COLUMNS, build_reads, build_trace, summarize
from sim.model.schedule import SCHEMA_VERSION, Schedule, StepRecord
from sim.model.simulate import simulate
from sim.model.vector import simulate_points
from sim.runs.io import atomic_write, atomic_write_text, write_json
from sim.runs.processes import workers_can_start
from sim.runs.step_source import (
    OpenSource,
    StepsFromProcess,
    generated,
    stream_workers,
    writing_schedule,
)


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


def run_policy_vector(
    schedule: Schedule, scenario: Scenario, policy: Policy, seed: int
) -> RunResult:
    """:func:`run_policy` on the vector tier (``run --engine vector``): the same summary and
    reads (tests/sim/runs/test_run.py holds them to the same bytes), no trace."""
    res = simulate_points(
        schedule, [scenario.timing], policy, seed, keep_reads=True, keep_timing=False
    )
    assert res.reads is not None
    reads = res.reads.drop(columns="point").reset_index(drop=True).astype(READ_COLUMNS)
    return RunResult(res.summaries[0]["policy"], res.summaries[0], reads, None)


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
    """A run's files into ``out``: the run folder a command is writing (marked), or, from the
    Python API, a folder of its own that this call marks as a run, so writing it again
    replaces only what specrace wrote there."""
    from sim.runs.outputs import claim_dir, home

    if home(out) is None:
        claim_dir(out, "run")
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
            "trace": result.trace is not None,  # report tells a --no-trace run from a lost file
            "versions": versions(),
            "git_commit": git_commit(),
        },
    )


def run_streaming(
    out: Path,
    scenario: Scenario,
    policy: Policy,
    seed: int,
    steps: int,
    batch_steps: int = 1024,
    schedule_format: str = "json",
    source: OpenSource | None = None,
    workers: int = 1,
    stats: dict | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """One policy over ``steps`` steps in bounded memory: the schedule (``schedule.json``,
    the same bytes as :func:`sim.model.schedule.dumps`, or with ``schedule_format``
    "parquet" its compact form ``schedule.parquet``), ``reads.parquet`` (one row group per
    ``batch_steps`` steps; the same rows as :func:`run_policy`'s) and ``meta.json``. The
    steps are generated from the scenario, or come from ``source``, a function that opens
    them (header, steps, count: :func:`sim.model.schedule_io.open_schedule` of a path, say).
    ``workers``: 1 builds (or reads) and writes the schedule in this process; 2 in a second
    one, beside the simulation (:mod:`sim.runs.step_source`); 0 decides from the step count
    and the cores. The same bytes whichever. ``stats``, if given, gets the second process's
    peak RSS (``schedule_process_peak_rss_kib``). ``progress(done, total)``, if given, is
    called as each batch of reads is written. Returns the summary (that of
    :func:`sim.model.reads.summarize`)."""
    if schedule_format not in ("json", "parquet"):
        raise ValueError(f"schedule_format {schedule_format!r}")
    open_source = source or functools.partial(generated, scenario, seed, steps)
    apart = stream_workers(workers, steps) > 1 and workers_can_start()
    summary: dict = {}

    def simulate(head: Schedule, steps_in: Iterable[StepRecord], n: int, reads_tmp: Path) -> None:
        with _ParquetSink(reads_tmp) as sink:

            def on_reads(table: pa.Table) -> None:
                sink(table)
                if progress is not None and table.num_rows:
                    progress(int(pc.max(table["step"]).as_py()) + 1, n)

            res = simulate_points(
                head,
                [scenario.timing],
                policy,
                seed,
                keep_reads=False,
                keep_timing=False,
                steps=steps_in,
                n_steps=n,
                on_reads=on_reads,
                batch_steps=batch_steps,
            )
        summary.update(res.summaries[0])

    def write_reads(reads_tmp: Path) -> None:
        def write_schedule(sched_tmp: Path) -> None:
            with contextlib.ExitStack() as stack:
                if apart:
                    pipe = StepsFromProcess(open_source)
                    head, steps_in, n = stack.enter_context(pipe)
                else:
                    head, steps_in, n = open_source()
                teed = stack.enter_context(
                    writing_schedule(schedule_format, sched_tmp, head, steps_in)
                )
                simulate(head, teed, n, reads_tmp)
            if apart and stats is not None:
                stats["schedule_process_peak_rss_kib"] = pipe.child_peak_rss_kib

        atomic_write(out / f"schedule.{schedule_format}", write_schedule)

    atomic_write(out / "reads.parquet", write_reads)
    write_json(
        out / "meta.json",
        {
            "scenario": scenario.to_dict(),
            "policy": summary["policy"],
            "seed": seed,
            "schema_version": SCHEMA_VERSION,
            "summary": summary,
            "tier": "vector, streamed",
            "trace": False,
            "versions": versions(),
            "git_commit": git_commit(),
        },
    )
    return summary


class _ParquetSink:
    """Reads tables (Arrow, from :func:`simulate_points`) appended as row groups of one
    Parquet file: READ_COLUMNS (no point), with the pandas metadata of a reads.parquet that
    :func:`write_parquet` writes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.writer: pq.ParquetWriter | None = None

    def __call__(self, table: pa.Table) -> None:
        if self.writer is None:
            # No creation metadata that varies between runs (write_parquet's settings).
            self.writer = pq.ParquetWriter(
                self.path, _READS_SCHEMA, compression="zstd", write_statistics=False
            )
        self.writer.write_table(table.drop_columns("point").cast(_READS_SCHEMA))

    def __enter__(self) -> _ParquetSink:
        return self

    def __exit__(self, *exc) -> None:
        if self.writer is not None:
            self.writer.close()
        elif exc[0] is None:  # no read at all: still a valid, empty table
            pq.write_table(
                _READS_SCHEMA.empty_table(),
                self.path,
                compression="zstd",
                write_statistics=False,
            )


# reads.parquet's schema: READ_COLUMNS as pandas converts them, with its metadata
_READS_SCHEMA = pa.Table.from_pandas(
    pd.DataFrame({c: pd.Series(dtype=t) for c, t in READ_COLUMNS.items()}), preserve_index=False
).schema


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
    """The commit of the code that ran (sim.version: the build's stamp, or git)."""
    from sim.version import commit

    return commit()
