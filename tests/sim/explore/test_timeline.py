"""The timeline of one step: the buffer rebuilt from the trace, the race window, the figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from load import limit_s
from repo_root import ROOT

from sim.errors import SpecraceError
from sim.explore.timeline import build_timeline, replay_buffer, timeline_figure
from sim.model.params import load_scenario
from sim.model.policies import POLICIES
from sim.model.scheduling import build_schedule
from sim.runs.run import run_policy


def minimal(policy: str = "synced-gather", **timing: int):
    sc = load_scenario("minimal-race", {f"timing.{k}": v for k, v in timing.items()})
    sched = build_schedule(sc, 0, sc.default_steps)
    return sched, run_policy(sched, sc, POLICIES[policy], 0)


@pytest.mark.parametrize("policy", list(POLICIES))
def test_buffer_replay_gives_every_read_of_the_run(policy: str) -> None:
    sc = load_scenario("qwen35-mtp3")
    sched = build_schedule(sc, 0, 60)
    res = run_policy(sched, sc, POLICIES[policy], 0)
    rep = replay_buffer(res.trace, sched, POLICIES[policy])
    got = np.array([rep.reads[s][r] for s, r in zip(res.reads.step, res.reads.row, strict=True)])
    assert (got == res.reads.cpu_value.to_numpy()).all()


def _span(fig, gid: str):
    ax = fig.axes[0]
    return [c for c in ax.collections if c.get_gid() == gid]


def test_minimal_race_step4_lands_between_the_add_and_the_swap() -> None:
    sched, res = minimal()
    tl = build_timeline(res.trace, res.reads, sched, "synced-gather")
    assert (tl.step, tl.req_id) == (4, "R")  # default: the first consumed wrong count
    fig = timeline_figure(tl)
    ax = fig.axes[0]
    (land,) = [ln for ln in ax.lines if ln.get_gid() == "landing"]
    land_x = land.get_xdata()[0]

    def extent(gid: str) -> tuple[float, float]:
        (bars,) = _span(fig, gid)
        (path,) = bars.get_paths()
        xs = path.vertices[:, 0]
        return xs.min(), xs.max()

    add, swap = extent("span:add"), extent("span:swap")
    assert add[1] < land_x < swap[1]  # after the add wrote B[0] = 1, before the swap ended
    (window,) = [p for p in ax.patches if p.get_gid() == "window"]
    wx = window.get_x() if hasattr(window, "get_x") else window.get_xy()[0][0]
    assert wx == pytest.approx(add[1]) and window.get_width() == pytest.approx(swap[1] - add[1])
    texts = " ".join([*(t.get_text() for t in ax.texts), ax.get_title(loc="left")]).replace(
        "\n", " "
    )
    assert "margin 9.0 µs" in texts
    assert "read 4, true 1, GDN consumed 4 -> WRONG (ownership)" in texts
    # What each landing place would have done: only before the swap hands R F's 4.
    assert [(o.position, o.gpu_value) for o in tl.outcomes] == [(0, 1), (1, 1), (2, 4), (3, 1)]


def test_every_write_tick_is_drawn_above_the_landing_and_read_lines() -> None:
    """synced-gather writes its gather back at the read: those ticks sat under the black read
    line, so B's values changed there with no mark. Each writer's tick is its own colour and
    above both lines."""
    from matplotlib.colors import to_hex

    from sim.explore.timeline import WRITE_COLORS

    sched, res = minimal()
    fig = timeline_figure(build_timeline(res.trace, res.reads, sched, "synced-gather"))
    ax = fig.axes[0]
    (read,) = [ln for ln in ax.lines if ln.get_gid() == "read"]
    ticks = [ln for ln in ax.lines if str(ln.get_gid()).startswith("write:")]
    gathers = [t for t in ticks if t.get_gid() == "write:gather"]
    assert gathers and all(t.get_xdata()[0] == pytest.approx(read.get_xdata()[0]) for t in gathers)
    assert all(t.get_zorder() > read.get_zorder() for t in ticks)
    assert {to_hex(t.get_color()) for t in gathers} == {WRITE_COLORS["gather"]}
    assert to_hex(read.get_color()) not in {to_hex(t.get_color()) for t in gathers}


def test_landing_after_the_swap_is_right_and_shows_the_same_window() -> None:
    sched, res = minimal(dma_land_delay_ns=60_000)
    tl = build_timeline(res.trace, res.reads, sched, "synced-gather", step=4, req_id="R")
    assert not tl.verdict["gpu_wrong"] and tl.verdict_text().endswith("-> right")
    assert len(tl.wrong_windows) == 1  # the window is there, the landing missed it
    lo, hi = tl.wrong_windows[0]
    assert not lo < tl.land_ns <= hi


def test_fixes_have_no_window_and_unsynced_has_a_stale_one() -> None:
    sched, res = minimal("device-authoritative")
    tl = build_timeline(res.trace, res.reads, sched, "device-authoritative", step=4, req_id="R")
    assert tl.wrong_windows == []
    sched, res = minimal("unsynced")
    tl = build_timeline(res.trace, res.reads, sched, "unsynced", step=4, req_id="R")
    assert tl.outcomes[-1].position == -1  # a landing after the read is possible without a wait


def test_bad_choices_are_one_clear_error() -> None:
    sched, res = minimal("device-authoritative")
    with pytest.raises(SpecraceError, match="no wrong read"):
        build_timeline(res.trace, res.reads, sched, "device-authoritative")
    with pytest.raises(SpecraceError, match="--req 'Z'"):
        build_timeline(res.trace, res.reads, sched, "device-authoritative", step=4, req_id="Z")
    with pytest.raises(SpecraceError, match="step 0"):
        build_timeline(res.trace, res.reads, sched, "device-authoritative", step=0)


def test_timeline_cli_on_a_policy_all_run(tmp_path: Path) -> None:
    out = tmp_path / "mr"
    run = [sys.executable, "-m", "sim"]
    r = subprocess.run(
        [*run, "run", "--scenario", "minimal-race", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [*run, "timeline", str(out), "--policy", "align"],
        cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "R at step 4" in r.stdout
    assert (out / "align" / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "align" / "timeline.svg").read_text().lstrip().startswith("<?xml")
    r = subprocess.run(
        [*run, "timeline", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300)
    )
    assert r.returncode == 0, r.stderr
    assert (out / "timeline.png").is_file()  # all policies side by side
    r = subprocess.run(
        [*run, "perfetto", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300)
    )
    assert r.returncode == 0, r.stderr
    events = json.loads((out / "trace.perfetto.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {f"minimal-race · {p}" for p in POLICIES}
    r = subprocess.run(
        [*run, "plot", str(out), "--policy", "align"],
        cwd=ROOT, capture_output=True, text=True, timeout=limit_s(300),
    )  # fmt: skip
    assert r.returncode == 0 and (out / "align" / "margins.png").is_file(), r.stderr
    r = subprocess.run(
        [*run, "timeline", str(out), "--policy", "nope"],
        cwd=ROOT, capture_output=True, text=True, timeout=limit_s(60),
    )  # fmt: skip
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_reads_table_is_unchanged_by_drawing() -> None:
    sched, res = minimal()
    before = res.reads.copy()
    build_timeline(res.trace, res.reads, sched, "synced-gather")
    pd.testing.assert_frame_equal(before, res.reads)


def test_perfetto_has_processes_flows_wrong_reads_and_buffer_counters(tmp_path: Path) -> None:
    from sim.explore.perfetto import dumps

    sched, res = minimal()
    _, ok = minimal("device-authoritative")
    events = json.loads(
        dumps(
            [
                ("synced-gather", "minimal-race", res.trace, res.reads),
                ("device-authoritative", "minimal-race", ok.trace, ok.reads),
            ],
            sched,
        )
    )["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert procs == {1: "minimal-race · synced-gather", 2: "minimal-race · device-authoritative"}
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == 1}
    assert {"worker_cpu", "default_stream", "wrong reads"} <= tracks
    mine = [e for e in events if e.get("pid") == 1]
    land3 = next(e for e in mine if e["name"] == "counts_d2h_land [3]")["ts"]
    read4 = next(e for e in mine if e["name"].startswith("read_counts") and e["args"]["step"] == 4)
    starts = {e["id"]: e for e in mine if e.get("ph") == "s"}
    ends = {e["id"]: e for e in mine if e.get("ph") == "f"}
    assert starts.keys() == ends.keys() and starts
    flow = next(i for i, e in starts.items() if abs(e["ts"] - land3) < 0.01)
    assert read4["ts"] <= ends[flow]["ts"] <= read4["ts"] + read4["dur"]
    (wrong,) = [e for e in mine if e.get("cat") == "wrong"]
    assert wrong["name"] == "consumed wrong: R read 4 (true 1)" and wrong["ts"] == read4["ts"]
    b1 = [(e["ts"], e["args"]["value"]) for e in mine if e.get("ph") == "C" and e["name"] == "B[1]"]
    assert b1 and 4 in [v for _t, v in b1]  # the swap carried F's 4 into row 1
    assert not [e for e in events if e.get("pid") == 2 and e.get("cat") == "wrong"]


def test_a_busy_step_numbers_its_ops_and_lists_them() -> None:
    sc = load_scenario("qwen35-mtp3")
    sched = build_schedule(sc, 0, 150)
    step = max(range(1, 150), key=lambda i: len(sched.steps[i].ops))
    res = run_policy(sched, sc, POLICIES["unsynced"], 0)
    tl = build_timeline(res.trace, res.reads, sched, "unsynced", step=step)
    ax = timeline_figure(tl).axes[0]
    n = len(sched.steps[step].ops)
    assert n >= 6
    listed = ax.get_xlabel().split("row ops: ", 1)[1]
    assert listed.startswith("1 ") and f"{n} " in listed
    assert {t.get_text() for t in ax.texts} >= {str(i) for i in range(1, n + 1)}
