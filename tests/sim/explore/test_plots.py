"""The pictures say what they claim: titles, counts, intervals, axes; refusals are clear."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from repo_root import ROOT

from sim.errors import SpecraceError
from sim.explore.analysis import hazard_rates, param_axis, wilson
from sim.explore.plots import (
    hazard_plot,
    landing_labels,
    landing_outcome_plot,
    margin_histogram,
    phase_diagram,
)
from sim.model.params import load_scenario
from sim.model.scheduling import build_schedule


def grid(second: bool = False) -> pd.DataFrame:
    """A synthetic sweep: two policies with identical zero series, one racy."""
    rows = []
    launch = (500_000, 1_500_000) if second else (1_500_000,)
    for fwd in (3_000_000, 6_000_000, 9_000_000):
        for lau in launch:
            for seed in (0, 1):
                for policy, k in (("unsynced", fwd // 1_000_000), ("device-authoritative", 0),
                                  ("private-buffer", 0)):  # fmt: skip
                    row = {
                        "set.timing.gpu_forward_ns_base": fwd,
                        "seed": seed,
                        "scenario": "qwen35-mtp3",
                        "policy": policy,
                        "steps": 500,
                        "reads": 30_000,
                        "cpu_wrong": 10 * k,
                        "gpu_wrong": k,
                        "corrupted_requests": k,
                        "mean_step_ns": 9e6,
                    }
                    if second:
                        row["set.timing.worker_launch_ns"] = lau
                    rows.append(row)
    return pd.DataFrame(rows)


def test_wilson_interval_known_values() -> None:
    lo, hi = wilson(np.array([0, 5, 50]), np.array([100, 100, 100]))
    assert lo[0] == 0 and hi[0] == pytest.approx(0.0370, abs=1e-4)
    assert (lo[1], hi[1]) == (pytest.approx(0.0215, abs=1e-4), pytest.approx(0.1118, abs=1e-4))
    assert lo[2] < 0.5 < hi[2]


def test_axis_names_and_units() -> None:
    assert param_axis("set.timing.gpu_forward_ns_base", [3e6, 9e6]) == (
        "GPU forward time (ms)",
        1e-6,
    )
    assert param_axis("set.timing.dma_land_delay_ns", [5e3, 45e3])[0] == (
        "counts D2H landing delay (µs)"
    )
    assert param_axis("set.timing.jitter_frac", [0.1])[1] == 1.0


def test_hazard_plot_has_title_counts_intervals_and_visible_duplicates() -> None:
    fig = hazard_plot(grid())
    title = fig.get_suptitle()
    assert "qwen35-mtp3" in title and "500 steps x 2 seeds" in title
    ax_cpu, ax_gpu = fig.axes[:2]
    assert ax_gpu.get_xlabel() == "GPU forward time (ms)" and ax_gpu.get_yscale() == "log"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]  # below the panels
    assert "unsynced: 36 consumed wrong" in legend  # (3 + 6 + 9) x 2 seeds
    assert "device-authoritative: 0 consumed wrong" in legend
    # The two zero series are drawn at distinct x (dodged), at their 95 % upper bound.
    zeros = [ln for ln in ax_gpu.lines if ln.get_marker() == "v" and len(ln.get_xdata())]
    assert len(zeros) == 2
    assert not np.allclose(zeros[0].get_xdata(), zeros[1].get_xdata())
    assert zeros[0].get_ydata()[0] == pytest.approx(wilson(0, 60_000)[1] * 10_000)
    assert {t.get_text() for t in ax_gpu.texts} >= {"6", "12", "18"}  # counts per point


def test_hazard_plot_refuses_to_pool_a_second_parameter() -> None:
    with pytest.raises(SpecraceError, match="also varies set.timing.worker_launch_ns"):
        hazard_plot(grid(second=True), "set.timing.gpu_forward_ns_base")
    with pytest.raises(SpecraceError, match="would pool"):
        hazard_rates(grid(second=True), "set.timing.gpu_forward_ns_base")


def test_swarm_is_a_scatter() -> None:
    df = grid().rename(columns={"set.timing.gpu_forward_ns_base": "timing.gpu_forward_ns_base"})
    df["set.swarm"] = np.arange(len(df)) // 6
    fig = hazard_plot(df)
    data_lines = [ln for ln in fig.axes[1].lines if len(ln.get_xdata()) > 1]
    assert data_lines and all(ln.get_linestyle() == "None" for ln in data_lines)


def test_phase_diagram_draws_the_policies_that_have_one_and_names_the_others() -> None:
    fig = phase_diagram(
        grid(second=True), "set.timing.gpu_forward_ns_base", "set.timing.worker_launch_ns"
    )
    panels = [ax for ax in fig.axes if ax.get_title()]
    # only unsynced consumed a wrong count: one panel, the two others named under the title
    assert [ax.get_title().split(":")[0] for ax in panels] == ["unsynced"]
    assert "none in any cell: device-authoritative, private-buffer" in fig.get_suptitle()
    # every cell has the same reads: they are said once, in the title, not in each cell
    assert "60,000 reads per cell" in fig.get_suptitle()
    # a grey cell still has its interval: 0 of 60,000 reads is at most 0.64 per 10,000
    assert "grey: none seen (at most 0.64, 95 %)" in fig.get_suptitle()
    cells = [t.get_text() for t in panels[0].texts]
    assert len(cells) == 3 * 2
    assert "18\n3 [1.9, 4.7]" in cells  # 9 ms: 9 per seed, per 10,000 reads
    assert panels[0].get_xlabel() == "GPU forward time (ms)"
    assert panels[0].get_ylabel() == "worker launch (ms)"


def test_phase_diagram_with_none_anywhere_still_draws_one_panel() -> None:
    df = grid(second=True)
    df = df[df["policy"] != "unsynced"]
    fig = phase_diagram(df, "set.timing.gpu_forward_ns_base", "set.timing.worker_launch_ns")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split(":")[0] for ax in panels] == ["device-authoritative"]
    assert "none in any cell: private-buffer" in fig.get_suptitle()


def test_margin_histogram_log_axis_integer_counts_and_consumed_apart() -> None:
    reads = pd.DataFrame(
        {
            "cpu_wrong": [True, True, True, False],
            "gpu_wrong": [True, False, False, False],
            "kind": ["ownership", "double-permute", "double-permute", ""],
            "margin_ns": [2_000, 300_000, 0, 5],
        }
    )
    fig = margin_histogram(reads)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and "µs" in ax.get_xlabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == "GDN consumed the wrong count: 1 (ownership 1)"
    assert legend[1] == "CPU wrong, repaired on the GPU: 2 (double-permute 2)"
    ticks = ax.get_yticks()
    assert np.allclose(ticks, np.round(ticks))


def test_landing_outcome_axis_names_the_operations() -> None:
    sc = load_scenario("minimal-race")
    ops = build_schedule(sc, 0, sc.default_steps).steps[4].ops
    labels = landing_labels(ops)
    assert [labels[i] for i in range(4)] == [
        "before remove F", "before add Q", "before swap 1↔0", "after swap 1↔0"
    ]  # fmt: skip
    table = pd.DataFrame(
        {"policy": ["align"] * 3, "land_pos": [0, 2, 3], "gpu_consumed": [1, 4, 1],
         "replays": [5, 3, 2]}
    )  # fmt: skip
    fig = landing_outcome_plot(table, "R by landing", labels)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert ticks == ["before remove F", "before swap 1↔0", "after swap 1↔0"]
    assert fig.axes[0].get_title() == "align: 3 of 10 replays wrong"


def test_importing_the_pictures_forces_no_backend() -> None:
    code = (
        "import sys, matplotlib; import sim.explore.plots, sim.explore.timeline, "
        "sim.explore.perfetto, sim.cli.main; "
        "assert 'matplotlib.pyplot' not in sys.modules; "
        "assert matplotlib.rcParams._get_backend_or_none() is None; print('ok')"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT)},
    )  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_plot_cli_draws_a_replay_table_by_named_landings(tmp_path: Path) -> None:
    out = tmp_path / "landing.png"
    args = [
        sys.executable,
        "-m",
        "sim",
        "plot",
        str(ROOT / "data/replay/observed_minimal-race.parquet"),
    ]
    r = subprocess.run(
        [*args, "--req", "R", "--step", "4", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr == (
        "error: a replay table: give --req R --step N (e.g. --req R --step 4)\n"
    )


def test_a_count_policies_share_at_one_point_is_labelled_once() -> None:
    df = grid()
    twin = df[df["policy"] == "unsynced"].assign(policy="align")
    fig = hazard_plot(pd.concat([df, twin]))
    labels = [t.get_text() for t in fig.axes[1].texts]
    # unsynced and align both consumed 6 and 12 and 18 at the three points: one label each
    assert sorted(labels) == ["12", "18", "6"]
    assert all(t.get_color() == "black" for t in fig.axes[1].texts)


def test_hazard_summary_names_each_policys_vllm_and_draws_no_zero_as_a_bar() -> None:
    """The run's summary (make demo's picture): each policy with the vLLM it stands for, and a
    policy with no wrong read drawn as a dotted bound with its value, not a capped whisker
    that reads as a short bar."""
    import pandas as pd

    from sim.explore.plots import hazard_summary
    from sim.model.policies import POLICIES

    rows = pd.DataFrame([
        {"policy": "align", "reads": 1000, "cpu_wrong": 5, "gpu_wrong": 5, "ownership": 5},
        {"policy": "private-buffer", "reads": 1000, "cpu_wrong": 0, "gpu_wrong": 0},
    ]).fillna(0)  # fmt: skip
    fig = hazard_summary(rows)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == [f"{p}\n{POLICIES[p].vllm}" for p in ("align", "private-buffer")]
    for ax in fig.axes[:2]:
        (bound,) = [c for c in ax.collections if c.get_gid() == "zero-bound"]
        assert len(bound.get_segments()) == 1  # private-buffer's only
        caps = [ln for ln in ax.lines if ln.get_marker() == "|"]
        assert len(caps) == 2  # align's interval: two caps; none for the zero row
        texts = [t.get_text() for t in ax.texts]
        assert any(t.startswith("0 of 1,000 (at most ") for t in texts)
