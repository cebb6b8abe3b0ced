"""Argparse types with ranges, shared by both command lines (sim and gpu_check): a value out
of range is refused before any work starts, in one line naming the option."""

from __future__ import annotations

import argparse

from sim.runs.limits import MAX_STEPS


def int_in(lo: int, hi: int, shown: str):
    """An argparse type: an integer in ``lo..hi`` (``shown`` is how the range reads)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in {shown}, got {value}")
        return value

    return parse


steps_arg = int_in(1, MAX_STEPS, f"1..{MAX_STEPS:,}")  # --steps: engine steps
seed_arg = int_in(0, 2**63 - 1, "0..2^63-1")  # --seed


BUDGET_H_MAX = 10**6


def budget_arg(text: str) -> float:
    """``--budget HOURS``: the CPU hours a search may be estimated to take (0 < h <= 10^6)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    if not 0 < value <= BUDGET_H_MAX:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be in (0, {BUDGET_H_MAX:,}] hours, got {text}")
    return value


step_index_arg = int_in(0, MAX_STEPS - 1, f"0..{MAX_STEPS - 1:,}")  # --step: one engine step


def file_arg(text: str) -> str:
    """An optional output file's path, given: an empty one names nothing (and is not taken for
    the flag's default place)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: name a file")
    return text
