"""``run --brief`` and ``run --picture``, what ``make demo`` shows a first-time user: a short
header instead of every parameter (``meta.json`` keeps them all), progress per policy on
stderr, a one-line legend per column of the table, and the hazard summary drawn into the run
folder. The run's files are the same with or without them, the picture aside."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sim.model.params import Scenario
from sim.model.verdict import HazardKind

PICTURE = "hazard_summary.png"

# One line per column of sim.cli.main.print_table, in its order.
LEGEND = (
    ("policy", "the vLLM code path simulated (docs/policies.md)"),
    ("reads", "(step, request) consumptions of the previous step's accepted count"),
    ("cpu_wrong", "reads where the count the CPU built differs from the true count"),
    ("gpu_wrong", "reads where the GDN kernel consumed a wrong count (after the correction)"),
    (HazardKind.UNLANDED, "CPU-wrong: read before step N's copy landed"),
    (HazardKind.OWNERSHIP, "CPU-wrong: the copy landed between a row write and the swap (#45100)"),
    (HazardKind.DOUBLE_PERMUTE, "CPU-wrong: the copy landed before the row moves (#53919)"),
    ("prompt_lost", "consumed wrong at a first speculative step: the prompt's state is lost"),
    ("corrupted_reqs", "distinct requests with at least one consumed wrong count"),
    ("step_ms", "mean time between forward starts, ms"),
    ("tok/s", "accepted tokens per second of simulated time"),
)


def print_header(scenario: Scenario, origin: str, seed: int, steps: int, policies: list[str],
                 timing: list[str], sets: list[str]) -> None:  # fmt: skip
    """Four lines: what runs, with which timing, and where every parameter is."""
    print(f"SEED={seed}")
    print(
        f"specrace run: scenario {scenario.name} ({origin}), {steps:,} steps, seed {seed}, "
        f"{len(policies)} polic{'y' if len(policies) == 1 else 'ies'}"
    )
    files = " + ".join(f"timing file {t}" for t in timing)
    own = [s for s in sets if s.startswith("timing.")]
    source = files or "the scenario's (python -m sim params: each value and its source)"
    print(f"timing: {source}" + (f", with --set {' '.join(own)}" if own else ""))
    print("every parameter: meta.json in the run folder (python -m sim params shows the sources)")


class Progress:
    """``[3/9] align 2.1 s`` on stderr as each policy finishes, so a long run shows life."""

    def __init__(self, total: int, on: bool) -> None:
        self.total, self.on, self.done = total, on, 0
        self.t0 = time.perf_counter()

    def start(self, name: str) -> None:
        if self.on:
            print(f"[{self.done + 1}/{self.total}] {name} ...", end="", file=sys.stderr,
                  flush=True)  # fmt: skip
            self.t0 = time.perf_counter()

    def finish(self) -> None:
        self.done += 1
        if self.on:
            print(f" {time.perf_counter() - self.t0:.1f} s", file=sys.stderr, flush=True)


class StreamProgress:
    """``run --stream``'s life sign on a terminal: one line on stderr rewritten as batches are
    written (steps done, steps/s, time left), closed with a newline. Quiet when stderr is not
    a terminal (a log, a pipe, a test) and for runs of a few seconds."""

    def __init__(self, on: bool | None = None, after_s: float = 2.0) -> None:
        self.on = sys.stderr.isatty() if on is None else on
        self.after_s, self.t0, self.shown = after_s, time.perf_counter(), False

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.perf_counter() - self.t0
        if not self.on or elapsed < self.after_s or not done:
            return
        rate = done / elapsed
        left = (total - done) / rate if rate else 0.0
        print(f"\r{done:,} / {total:,} steps, {rate:,.0f} steps/s, {left:.0f} s left  ",
              end="", file=sys.stderr, flush=True)  # fmt: skip
        self.shown = True

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr, flush=True)


def print_legend() -> None:
    width = max(len(k) for k, _ in LEGEND)
    print("columns:")
    for key, text in LEGEND:
        print(f"  {key:<{width}}  {text}")


def write_picture(folder: Path, summaries: list[dict], schedule, title: str) -> Path:
    """The hazard summary of the run's policies as ``folder/hazard_summary.png``."""
    import pandas as pd

    from sim.cli.explore import save_figure
    from sim.explore.plots import hazard_summary
    from sim.explore.report import verdict_rows
    from sim.resolve.rates import generations
    from sim.runs.io import atomic_write

    fig = hazard_summary(pd.DataFrame(verdict_rows(summaries, generations(schedule))), title)
    path = folder / PICTURE
    atomic_write(path, lambda tmp: save_figure(fig, tmp, "png"))
    return path
