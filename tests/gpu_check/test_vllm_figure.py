"""One wrong read of real vLLM drawn: every mark in the legend, the title in plain words."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gpu_check.vllm.figure import load_raw, pick, wrong_read_figure

RUN = Path(__file__).resolve().parents[2] / "data" / "vllm" / "ab" / "v0.23.0" / "none_s64_d20ms"


def test_the_read_line_the_landing_band_and_the_ops_are_in_the_legend() -> None:
    reads = pd.read_parquet(RUN / "observed_vllm.parquet")
    fig = wrong_read_figure(
        load_raw(RUN.parent / "raw" / f"raw_{RUN.name}.json.gz"), pick(reads, None, None)
    )
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "the runner reads the counts (_prepare_inputs)" in labels  # the dashed line
    assert "step N's copy lands (between polls)" in labels
    assert {"remove", "add", "swap"} <= set(labels)
    assert "mamba_cache_mode=none" in ax.get_title() and "request " in ax.get_title()
