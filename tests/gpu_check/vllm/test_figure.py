"""One wrong read of real vLLM drawn: every mark in the legend, the title in plain words."""

from __future__ import annotations

import pandas as pd
from repo_root import ROOT

from gpu_check.vllm.figure import load_raw, pick, wrong_read_figure

RUN = ROOT / "data" / "vllm" / "ab" / "v0.23.0" / "none_s64_d20ms"


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


def test_no_op_label_crosses_the_read_line() -> None:
    """The last swaps' labels ran across the dashed read line; they go left of their bar."""
    reads = pd.read_parquet(RUN / "observed_vllm.parquet")
    fig = wrong_read_figure(
        load_raw(RUN.parent / "raw" / f"raw_{RUN.name}.json.gz"), pick(reads, None, None)
    )
    ax = fig.axes[0]
    fig.canvas.draw()
    (read,) = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    x_read = ax.transData.transform((read.get_xdata()[0], 0))[0]
    ops = [t for t in ax.texts if t.get_text().split(" ")[0] in ("remove", "add", "swap", "move")]
    assert ops and any(t.get_horizontalalignment() == "right" for t in ops)
    for t in ops:
        box = t.get_window_extent()
        assert not box.x0 < x_read < box.x1, t.get_text()
