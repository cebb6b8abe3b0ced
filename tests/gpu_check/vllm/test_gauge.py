"""The host-speed gauge (gpu_check.vllm.gauge): one definition, in every export, and the
committed evidence that it tracks a pass's step time (data/vllm/gauge)."""

from __future__ import annotations

import json

from repo_root import ROOT

from gpu_check.vllm.calibrate import step_spans
from gpu_check.vllm.export import load_raw
from gpu_check.vllm.gauge import GAUGE_KEYS, host_gauge, sample_tokens_ms
from gpu_check.vllm.gauge_evidence import gauge_evidence, gauge_rows

DATA = ROOT / "data" / "vllm"


def test_the_gauge_is_the_calibrations_decode_only_sample_tokens_span() -> None:
    for name in ("align_s16_d0ms", "none_s16_d20ms"):
        raw = load_raw(DATA / "v0.24.0" / "raw" / f"raw_{name}.json.gz")
        g = host_gauge(raw)
        t = step_spans(raw)
        by_hand = float(t.loc[~t["prefill"], "launch_to_d2h_ns"].median()) / 1e6
        assert g["host_gauge_ms"] == round(by_hand, 3) == sample_tokens_ms(raw)
        assert g["host_gauge_steps"] == int((~t["prefill"]).sum())
        assert g["host_gauge_pure"] == (name != "none_s16_d20ms")  # none at a delay: GPU too
        committed = json.loads((DATA / "v0.24.0" / name / "export.json").read_text())
        assert {k: committed[k] for k in GAUGE_KEYS} == g  # back-filled by vllm-export


def test_the_committed_evidence_is_what_the_command_computes() -> None:
    rows = gauge_rows([DATA / "v0.24.0-repeat", DATA / "v0.24.0"])
    doc = gauge_evidence(rows)
    assert doc["host_only"]["passes"] >= 3
    committed = json.loads((DATA / "gauge" / "summary.json").read_text())
    r = committed["host_only"]
    # The gauge tracks the step: within a configuration and across configurations.
    assert r["r_log_gauge_log_step_within"] > 0.8 and r["r_log_gauge_log_step_across"] > 0.7
    spread = committed["spread"]["pooled"]
    assert spread["min"] < 1 < spread["max"] and spread["passes"] >= 90


def test_the_step_populations_script_reads_the_gauge_as_defined() -> None:
    """scripts/step_populations.py (whose numbers docs/forward-prediction.md quotes) splits a
    record's steps by prefill chunk; its gauge is the pass's host_gauge_ms, and its populations
    cover the step intervals it has."""
    import runpy

    script = runpy.run_path(str(ROOT / "scripts" / "step_populations.py"))
    path = DATA / "v0.24.0" / "raw" / "raw_align_s16_d0ms.json.gz"
    got = script["populations"](path)
    assert round(got["gauge_ms"], 3) == host_gauge(load_raw(path))["host_gauge_ms"]
    assert got["decode_steps"] > 50 and got["prefill_steps"] > 50
    assert got["decode_ms"] < got["all_ms"] < got["prefill_ms"]
    assert got["prefill_span_ms"] > got["gauge_ms"]


def test_the_pooled_calibration_is_each_windows_spans_scaled() -> None:
    """scripts/calibration_windows.py (docs/forward-prediction.md, "A fit per window"): every
    span the calibration fits, as a ratio to the gauge, sits within 5 % of the range of its
    group's passes, whatever window each ran in; and the decode-only step is a steadier
    multiple of the gauge than the median of all steps, #23's statistic, in every group."""
    import runpy

    script = runpy.run_path(str(ROOT / "scripts" / "calibration_windows.py"))
    groups = script["table"](DATA)
    assert ("0.24.0", "align", 16, 3) in groups and len(groups) >= 4
    for group, df in groups.items():
        passes, pooled = df.iloc[:-1], df.iloc[-1]
        for col in script["FITTED"]:
            lo, hi = passes[col].min(), passes[col].max()
            assert 0.95 * lo <= pooled[col] <= 1.05 * hi, (group, col, pooled[col], lo, hi)
        spread = {c: passes[c].max() / passes[c].min() for c in ("decode_step", "step")}
        assert spread["decode_step"] < spread["step"], (group, spread)
    # one definition of a step's duration with scripts/step_populations.py
    first = groups[("0.24.0", "align", 16, 3)].iloc[0]
    pops = runpy.run_path(str(ROOT / "scripts" / "step_populations.py"))["populations"](
        DATA / "v0.24.0" / "raw" / "raw_align_s16_d0ms.json.gz"
    )
    assert abs(first["decode_step"] * first["gauge_ms"] - pops["decode_ms"]) < 0.01


def test_a_steps_duration_is_its_own_entry_to_the_next_split_by_its_prefill_chunk() -> None:
    from gpu_check.vllm.gauge import step_populations

    def step(t_enter, prefill):
        return {"req_ids": ["a"], "t_enter": t_enter, "num_computed": [0 if prefill else 9],
                "num_prompt": [5]}  # fmt: skip

    raw = {"steps": [step(0, True), step(10e6, True), step(30e6, False), step(35e6, True),
                     step(60e6, False), step(64e6, False)]}  # fmt: skip
    got = step_populations(raw)  # step 0 is left out, as the calibration leaves it
    assert got == {"decode_ms": 4.5, "decode_steps": 2, "prefill_ms": 22.5, "prefill_steps": 2,
                   "all_ms": 12.5}  # fmt: skip
    assert step_populations({"steps": []})["decode_ms"] is None


def test_gpu_bound_landings_at_entry_follow_prefill_steps_and_the_host_path() -> None:
    """scripts/host_path.py (docs/forward-prediction.md, "GPU-bound landing at entry"): in
    every GPU-bound align pass of the records, vLLM and sim land at entry after a decode-only
    step hardly ever; the largest miss is a pass whose prefill steps' host path ran shorter
    than its 0 ms pass's, and the numbers the section quotes are the script's."""
    import runpy

    script = runpy.run_path(str(ROOT / "scripts" / "host_path.py"))
    t = script["table"](DATA).set_index("pass")
    assert len(t) == 15
    # sim: hardly ever; a seed that catches a long slow phase of the host is CPU-bound in it
    assert (t["entry_decode"] == 0).all() and (t["sim_entry_decode"] <= 0.06).all()
    ratio_pre = t["path_prefill_ms"] / t["path_decode_ms"]
    assert (ratio_pre > 1.3).sum() == 14
    k1 = t.loc["forward-23/v0.24.0-k1/align_s24_d22ms"]
    assert k1["path_prefill_ms"] < 0.9 * k1["sim_path_prefill_ms"]
    assert k1["sim_entry_prefill"] > 5 * k1["entry_prefill"]
    more = int((t["sim_entry_prefill"] > t["entry_prefill"]).sum())
    less = int((t["sim_entry_prefill"] < t["entry_prefill"]).sum())
    ratio = t["path_vs_0ms"].dropna()
    text = (ROOT / "docs" / "forward-prediction.md").read_text()
    section = text[text.index("### GPU-bound landing at entry") :]
    section = " ".join(section[: section.index("\n### ")].split())
    quoted = [
        f"{k1['path_prefill_ms']:.1f} ms where the same process's 0 ms pass had",
        f"has {k1['sim_path_prefill_ms']:.1f} ms",
        f"after {k1['sim_entry_prefill']:.2f} of the prefill steps where vLLM did after "
        f"{k1['entry_prefill']:.2f}",
        f"in {more} of the 15 passes, less often in {less}, and neither does in {15 - more - less}",
        f"{ratio.min():.2f}-{ratio.max():.2f} x",
        f"at most {t['sim_entry_decode'].max():.3f} after decode-only steps",
        f"{ratio_pre[ratio_pre > 1.3].min():.2f}-{ratio_pre.max():.2f} x a decode-only step's in "
        f"14 of the passes ({ratio_pre.min():.2f} x in the fifteenth)",
    ]
    for q in quoted:
        assert q in section, q
