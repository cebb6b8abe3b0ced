"""The pre-registered outcomes, #45100's A/B and the align fixes, held to the committed runs."""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from repo_root import ROOT

from gpu_check.vllm.outcome import ab_summary, judge, outcome

REPO = ROOT
PREREG = Path("data/vllm/preregistered")
RUNS = {"ab-45100": Path("data/vllm/ab"), "align-fixes": Path("data/vllm/fixes")}


@pytest.mark.parametrize("name", list(RUNS))
def test_outcome_is_regenerated_from_the_committed_runs(name, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    dest = tmp_path / name
    dest.mkdir()
    shutil.copy(PREREG / name / "predictions.json", dest)
    doc = outcome(dest, [RUNS[name]])
    assert (dest / "outcome.json").read_text() == (PREREG / name / "outcome.json").read_text()
    assert doc["configs"] == len(json.loads((dest / "predictions.json").read_text())["configs"])


def test_ab_summary_is_regenerated_and_shows_the_failure_and_the_fixes(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    doc = ab_summary([RUNS["ab-45100"], RUNS["align-fixes"]], tmp_path / "summary.json")
    assert (tmp_path / "summary.json").read_text() == Path("data/vllm/ab/summary.json").read_text()
    arms = {(a["vllm"], a["mode"], a["patch"]): a for a in doc["arms"]}
    before, after = arms[("0.23.0", "none", "none")], arms[("0.24.0", "none", "none")]
    # the seed's failure in vLLM itself: GDN-consumed wrong counts at the PR's scale, gone in 0.24.0
    assert before["transitions"] >= 20_480 and after["transitions"] >= 20_480
    assert before["wrong_gdn_at_transitions"] >= 10 and after["wrong_gdn"] == 0
    unpatched = [a for k, a in arms.items() if k[1] == "align" and k[2] == "none"]
    assert sum(a["wrong_gdn"] for a in unpatched) >= 1000
    for (v, mode, patch), a in arms.items():
        if mode == "align" and patch != "none":
            assert a["wrong_gdn"] == 0 and a["reads"] >= arms[(v, "align", "none")]["reads"]
    tp = doc["throughput"][0]
    assert set(tp["arms"]) == {"none", "private-d2h", "sync-before-moves"} and tp["rounds"] >= 3


def test_judge_applies_each_part_of_the_criterion():
    obs = {"rate": 0.01, "rate_ci95": [0.008, 0.012], "wrong": 100, "step_ms": 30.0,
           "landing": {"entry": 0.5, "between": 0.2, "after": 0.1, "waited": 0.2}}  # fmt: skip
    good = {"rate": 0.011, "step_ms": 32.0, "landing": dict(obs["landing"])}
    assert judge(good, obs)["meets_all"]
    assert not judge({**good, "rate": 0.0125}, obs)["rate_ok"]  # outside the observed interval
    wide = {**obs, "rate_ci95": [0.005, 0.02]}
    assert not judge({**good, "rate": 0.0130}, wide)["rate_ok"]  # inside, but 30 % off
    assert judge({**good, "rate": 0.0130}, {**wide, "wrong": 19})["rate_ok"]  # < 20 wrong
    assert not judge({**good, "step_ms": 33.5}, obs)["step_ok"]
    moved = {"entry": 0.4, "between": 0.2, "after": 0.1, "waited": 0.3}
    r = judge({**good, "landing": moved}, obs)
    assert r["landing_tv"] == pytest.approx(0.1) and r["landing_ok"]
    assert not judge({**good, "landing": {**moved, "entry": 0.35, "waited": 0.35}}, obs)[
        "landing_ok"
    ]


@pytest.mark.parametrize("name", list(RUNS))
def test_predictions_were_committed_before_their_outcome(name):
    def added(path: Path) -> str:
        out = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%H", "--", str(path)],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        return out.stdout.split()[-1] if out.returncode == 0 and out.stdout.split() else ""

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an installed copy has no history)")
    pred, outc = added(PREREG / name / "predictions.json"), added(PREREG / name / "outcome.json")
    assert pred and outc and pred != outc
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", pred, outc], cwd=REPO)
    assert ancestor.returncode == 0
    pred_file = str(PREREG / name / "predictions.json")
    changed = subprocess.run(
        ["git", "log", "--format=%H", f"{outc}..HEAD", "--", pred_file],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert changed == []  # never edited after the outcome


def test_the_write_up_carries_the_committed_arms_table():
    from gpu_check.vllm.outcome import ab_markdown

    doc = json.loads((REPO / "data/vllm/ab/summary.json").read_text())
    assert ab_markdown(doc) in (REPO / "docs/vllm-fixes.md").read_text()


def test_the_reference_states_the_committed_ab_numbers():
    doc = json.loads((REPO / "data/vllm/ab/summary.json").read_text())
    arms = {(a["vllm"], a["mode"], a["patch"]): a for a in doc["arms"]}
    readme = " ".join((REPO / "docs" / "reference.md").read_text().split())
    before, after = arms[("0.23.0", "none", "none")], arms[("0.24.0", "none", "none")]
    assert f"**{before['wrong_gdn_at_transitions']:,} of {before['transitions']:,}**" in readme
    lo, hi = before["ci95"]
    assert f"({before['rate_per_10k']:.1f} per 10,000 transitions [{lo:.1f}, {hi:.1f}]" in readme
    assert (
        f"**{after['wrong_gdn']} of {after['transitions']:,}** [0, {after['ci95'][1]:.1f}]"
        in readme
    )
    unpatched = [a for k, a in arms.items() if k[1] == "align" and k[2] == "none"]
    wrong, reads = sum(a["wrong_gdn"] for a in unpatched), sum(a["reads"] for a in unpatched)
    assert f"**{wrong:,}** wrong counts in {reads:,} reads" in readme
    patched = {a["reads"] for k, a in arms.items() if k[1] == "align" and k[2] != "none"}
    assert all(a["wrong_gdn"] == 0 for k, a in arms.items() if k[2] != "none")
    assert f"**0 in {patched.pop():,}**" in readme and not patched
    for name in ("ab-45100", "align-fixes"):
        assert (REPO / "data/vllm/preregistered" / name / "outcome.json").is_file()
    met = [
        json.loads((REPO / "data/vllm/preregistered" / n / "outcome.json").read_text())
        for n in ("ab-45100", "align-fixes")
    ]
    n_met = sum(sum(r["meets_all"] for r in d["results"]) for d in met)
    assert f"{n_met} of {sum(d['configs'] for d in met)} configurations meets" in readme


def test_the_figure_draws_a_wrong_read_of_the_ab_run(tmp_path):
    from gpu_check.vllm.figure import figure_for_run

    out = tmp_path / "wrong.png"
    read = figure_for_run(REPO / "data/vllm/ab/v0.23.0/none_s64_d20ms", out)
    assert read["wrong"] and read["prev_drafts"] == 0 and read["gpu_value"] == 4
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    assert (REPO / "docs/images/vllm-wrong-read.png").is_file()
    assert f"step {int(read['step'])}" in (REPO / "docs/vllm-fixes.md").read_text()


def test_a_grid_prediction_finds_its_own_run(tmp_path) -> None:
    """vllm-plan --grid names each configuration's run: vllm-outcome looks there first, so two
    runs may hold the same configuration name (RUNS/<run>/<mode>_<config>/, exported in place)."""
    from gpu_check.vllm.outcome import run_folder

    for run in ("a-k1", "b-k2"):
        (tmp_path / run / "align_s24_d0ms").mkdir(parents=True)
        (tmp_path / run / "align_s24_d0ms" / "export.json").write_text("{}")
    got = run_folder([tmp_path], "0.24.0", "align", "s24_d0ms", "b-k2")
    assert got == tmp_path / "b-k2" / "align_s24_d0ms"
    assert (
        run_folder([tmp_path / "a-k1"], "0.24.0", "align", "s24_d0ms", "a-k1").parent.name == "a-k1"
    )


def test_outcome_partial_lists_the_predictions_whose_run_is_missing(tmp_path, monkeypatch):
    """A device call cut short leaves some predictions without a run: by default the outcome
    stops naming the first; with partial it judges the rest and lists the missing."""
    monkeypatch.chdir(REPO)
    dest = tmp_path / "pre"
    dest.mkdir()
    shutil.copy(PREREG / "align-fixes" / "predictions.json", dest)
    runs = tmp_path / "runs"
    shutil.copytree(RUNS["align-fixes"], runs, ignore=shutil.ignore_patterns("*0.33.0*"))
    from sim.errors import SpecraceError

    with pytest.raises(SpecraceError, match="no exported run v0.33.0"):
        outcome(dest, [runs])
    doc = outcome(dest, [runs], partial=True)
    n = len(json.loads((dest / "predictions.json").read_text())["configs"])
    assert doc["configs"] + len(doc["not_run"]) == n and doc["not_run"]
    assert all("0.33.0" in x for x in doc["not_run"])
    assert all(r["vllm"] == "0.24.0" for r in doc["results"])


def test_a_forecast_round_is_scored_per_regime_on_its_committed_intervals(tmp_path, monkeypatch):
    """Issue 44's outcome on predictions that carry the forecast (vllm-plan's intervals, as
    committed), against two processes of the same configurations (v0.24.0 and v0.24.0-repeat):
    coverage counted from the committed intervals, the spread between processes, and the
    gauge of each process's pure pass conditioning its passes."""
    from gpu_check.vllm.config import RunConfig
    from gpu_check.vllm.plan import CALIBRATION, predict_config
    from gpu_check.vllm.prereg_forecast import outcome_with_forecast

    monkeypatch.chdir(REPO)
    committed = json.loads(CALIBRATION.read_text())
    configs = []
    for delay in (0, 12000):
        cfg = RunConfig(max_num_seqs=16, gpu_delay_us=delay, baseline=False)
        pred = predict_config("0.24.0", "align", cfg, committed["calibration"], 3, 1, "",
                              committed["forecast"])  # fmt: skip
        configs += [pred | {"run": run} for run in ("v0.24.0", "v0.24.0-repeat")]
    dest = tmp_path / "round"
    dest.mkdir()
    doc = {"schema": "specrace.vllm_predictions", "command": "test", "made_at_commit": "test",
           "calibration": str(CALIBRATION), "configs": configs}  # fmt: skip
    (dest / "predictions.json").write_text(json.dumps(doc))
    out = outcome_with_forecast(dest, [Path("data/vllm")])
    fc = out["forecast"]
    rows = fc["passes_table"]
    assert fc["passes"] == len(rows) == 4 and out["configs"] == 4
    assert {r["gauge_from"] for r in rows} == {"the process's pure pass of its mode"}
    # the d0 pass of each process is its gauge: conditioned at its own factor
    for run in ("v0.24.0", "v0.24.0-repeat"):
        f = {r["config"]: r["cond_factor"] for r in rows if r["run"] == run}
        assert len(set(f.values())) == 1  # one factor per process
    covered = sum(r["rate_pi_lo"] <= r["rate_observed"] <= r["rate_pi_hi"] for r in rows)
    assert fc["per_regime"]["overall"]["coverage"]["rate"]["covered"] == covered
    # each pass says which of the three parts the gauge-conditioned forecast missed
    for r in rows:
        parts = (r["cond_rate_ok"], r["cond_step_ok"], r["cond_landing_ok"])
        assert r["cond_meets_all"] == all(parts)
        assert r["cond_step_ok"] == (abs(r["cond_step_ms"] / r["step_ms_observed"] - 1) <= 0.10)
    by_regime = {name: e["passes"] for name, e in fc["per_regime"].items() if name != "overall"}
    assert sum(by_regime.values()) == 4
    # each pass has one pass of its configuration in the other process: a between-window width
    between = [e["sharpness_between_windows"]["passes"] for name, e in fc["per_regime"].items()
               if name != "overall"]  # fmt: skip
    assert sum(between) == 4
    assert json.loads((dest / "outcome.json").read_text())["forecast"]["passes"] == 4
    # the step gauge: one factor per process, at which sim's step of its pure pass is vLLM's
    for run in ("v0.24.0", "v0.24.0-repeat"):
        mine = [r for r in rows if r["run"] == run]
        assert len({r["sg_factor"] for r in mine}) == 1
        d0 = next(r for r in mine if r["config"].startswith("s16_d0ms"))
        assert abs(d0["sg_step_ms"] / d0["step_ms_observed"] - 1) <= 0.01
    for r in rows:
        parts = (r["sg_rate_ok"], r["sg_step_ok"], r["sg_landing_ok"])
        assert r["sg_meets_all"] == all(parts)
    sg = fc["step_gauge"]["overall"]
    assert sg["passes"] == 4 and sg["step_gauge_meets_all"] == sum(r["sg_meets_all"] for r in rows)
    assert sg["gauge_meets_all"] == fc["per_regime"]["overall"]["conditional_meets_all"]["meets"]
    from gpu_check.vllm.outcome import outcome_text

    text = outcome_text(out)
    assert f"forecast, overall: 4 passes; inside the 90 % interval: rate {covered}/4" in text
    assert f"step gauge, overall: meets all {sg['step_gauge_meets_all']}/4" in text


def _outcome_section(name: str) -> str:
    """A round's outcome section of data/vllm/preregistered/README.md, to the next heading (so
    that a later round's table cannot stand in for this one's)."""
    readme = (REPO / PREREG / "README.md").read_text()
    section = readme[readme.index(f"### {name}: the outcome") :]
    end = section.find("\n## ", 4), section.find("\n### ", 4)
    cut = min((e for e in end if e > 0), default=len(section))
    return section[:cut]


def _agreement_totals(name: str) -> dict[str, int]:
    """A round's exports' agreement.json counts, summed over its passes."""
    tot = {"scored": 0, "agree": 0, "ambiguous": 0, "wrong_observed": 0, "wrong_predicted": 0}
    for path in sorted((REPO / "data" / "vllm" / name).glob("*/*/agreement.json")):
        one = json.loads(path.read_text())
        for k in tot:
            tot[k] += one[k]
    return tot


def _read_for_read(tot: dict[str, int]) -> str:
    """How an outcome section quotes its read-for-read counts."""
    return (f"{tot['agree']:,} of {tot['scored']:,} scored reads ({tot['ambiguous']} ambiguous, "
            f"{tot['wrong_observed']:,} wrong counts observed, {tot['wrong_predicted']:,} "
            "predicted)")  # fmt: skip


def _assert_regime_table(section: str, doc: dict) -> None:
    """The rows every round's outcome table shares: passes, (i), (iii), (iv), the point
    prediction, per regime, as outcome.json has them."""
    fc = doc["forecast"]["per_regime"]
    regimes = ("CPU-bound", "boundary", "GPU-bound", "overall")
    passes = " | ".join(str(fc[r]["passes"]) for r in regimes)
    assert f"| passes (regime by the observed entry share) | {passes} |" in section
    cover = [" / ".join(str(fc[r]["coverage"][p]["covered"]) for p in ("rate", "step", "entry"))
             for r in regimes]  # fmt: skip
    share = fc["overall"]["coverage"]["rate"]["fraction"]
    assert f"| {cover[0]} | {cover[1]} | {cover[2]} | {cover[3]} ({share:.2f}) |" in section
    cond = [str(fc[r]["conditional_meets_all"]["meets"]) for r in regimes]
    frac = fc["overall"]["conditional_meets_all"]["fraction"]
    assert f"| {cond[0]} | {cond[1]} | {cond[2]} | {cond[3]} ({frac:.2f}) |" in section
    safety = fc["boundary"]["safety"]
    assert f"| {safety['above_upper']} of {safety['passes']} |" in section
    point = sum(r["meets_all"] for r in doc["results"])
    assert f"| {point} ({doc['meets_all_fraction']:.2f}) |" in section


def test_the_forward_25_outcome_is_the_one_its_readme_states():
    """data/vllm/preregistered/README.md's forward-25 table is outcome.json's counts, per
    regime; the runs it judged are the committed ones, and the missing ones are listed."""
    doc = json.loads((REPO / PREREG / "forward-25" / "outcome.json").read_text())
    section = _outcome_section("forward-25")
    fc = doc["forecast"]["per_regime"]
    regimes = ("CPU-bound", "boundary", "GPU-bound", "overall")
    _assert_regime_table(section, doc)
    import hashlib

    cal = REPO / doc["forecast"]["calibration"]  # the calibration that scored (iv), as it was
    assert doc["forecast"]["calibration_sha256"] == hashlib.sha256(cal.read_bytes()).hexdigest()
    assert cal == REPO / PREREG / "forward-25" / "calibration.json"  # the frozen copy
    assert len(doc["results"]) == 48 and "not_run" not in doc  # all four processes ran
    assert {r["run"] for r in doc["forecast"]["passes_table"]} == {
        "v0.24.0-w1", "v0.24.0-w2", "v0.33.0-w1", "v0.33.0-w2"}  # fmt: skip
    misses = [r for r in doc["forecast"]["passes_table"] if not r["cond_meets_all"]]
    assert "The nineteen misses" in section and len(misses) == 19
    held_out = [r for r in doc["forecast"]["passes_table"] if r["run"].endswith("-w2")]
    sg, gauge = (sum(r[k] for r in held_out) for k in ("sg_meets_all", "cond_meets_all"))
    flat = " ".join(section.split())
    assert f"in {sg} of the 16 second-process passes, the gauge in {gauge}" in flat
    for key, label in (
        ("sharpness", "(ii) width / vLLM's spread within a process"),
        ("sharpness_between_windows", "(ii') width / vLLM's spread between"),
    ):
        cells = [" / ".join(f"{fc[r][key][p]['ratio']:.2f}" for p in ("rate", "step", "entry"))
                 for r in regimes[:3]]  # fmt: skip
        row = next(line for line in section.splitlines() if line.startswith(f"| {label}"))
        assert row.replace("**", "").endswith(" | ".join(cells) + " | - |"), row


def test_forward_25s_frozen_calibration_is_the_one_its_predictions_were_made_on():
    """Planned before vllm-plan froze its calibration, forward-25 got its copy afterwards: the
    file its predictions.json names, as it was at the predictions' commit (git history)."""
    import subprocess

    from sim.runs.signature import JSON_KEY, is_signed

    folder = REPO / PREREG / "forward-25"
    preds = json.loads((folder / "predictions.json").read_text())
    frozen = json.loads((folder / "calibration.json").read_text())
    assert is_signed(folder / "calibration.json")
    then = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{preds['made_at_commit']}:{preds['calibration']}"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert {k: v for k, v in frozen.items() if k != JSON_KEY} == json.loads(then)


@pytest.mark.parametrize("name,disagree", [("forward-26", 2), ("forward-27", 0), ("forward-28", 1)])
def test_a_one_process_rounds_outcome_is_the_one_its_readme_states(name, disagree):
    """forward-26's, forward-27's and forward-28's tables in data/vllm/preregistered/README.md
    are their outcome.json's, per regime, with (ii) within a process only (one process per
    release), and the read-for-read counts each quotes are its exports' agreement.json."""
    doc = json.loads((REPO / PREREG / name / "outcome.json").read_text())
    section = _outcome_section(name)
    fc = doc["forecast"]["per_regime"]
    regimes = ("CPU-bound", "boundary", "GPU-bound", "overall")
    _assert_regime_table(section, doc)
    assert not fc["overall"]["coverage"]["entry"]["met"]  # "(i) missed overall" (over 0.96)

    def ratio(r: str, p: str) -> str:
        v = fc[r]["sharpness"][p]["ratio"]
        return "-" if v is None else f"{v:.2f}"

    cells = [" / ".join(ratio(r, p) for p in ("rate", "step", "entry")) for r in regimes[:3]]
    row = next(ln for ln in section.splitlines() if ln.startswith("| (ii) width"))
    assert row.replace("**", "").endswith(" | ".join(cells) + " | - |"), row
    assert doc["forecast"]["calibration"] == str(PREREG / name / "calibration.json")
    assert len(doc["results"]) == 48 and "not_run" not in doc
    misses = [r for r in doc["forecast"]["passes_table"] if not r["cond_meets_all"]]
    assert len(misses) == 48 - fc["overall"]["conditional_meets_all"]["meets"]
    sg = doc["forecast"]["step_gauge"]["overall"]["step_gauge_meets_all"]
    assert f"met {sg} of 48" in " ".join(section.split())
    tot = _agreement_totals(name)
    flat = " ".join(section.split())
    assert _read_for_read(tot) in flat
    assert tot["scored"] - tot["agree"] == disagree


@functools.cache
def _rescored(name: str, rule: str) -> dict:
    """A round's ``forecast`` re-scored on today's calibration under one of
    scripts/gauge_rules.py's rules (each computed once per test session)."""
    import runpy
    import tempfile

    rules = runpy.run_path(str(REPO / "scripts" / "gauge_rules.py"))
    rescore = runpy.run_path(str(REPO / "scripts" / "rescore_round.py"))
    with tempfile.TemporaryDirectory() as tmp:
        cal = Path(tmp) / "calibration.json"
        cal.write_text(json.dumps(rules["calibration"](rule)))
        return rescore["forecast_on"](REPO / PREREG / name, REPO / "data" / "vllm" / name, cal)


def _meets(name: str, rule: str) -> dict:
    per = _rescored(name, rule)["per_regime"]
    regimes = ("CPU-bound", "boundary", "GPU-bound", "overall")
    return {r: per[r]["conditional_meets_all"]["meets"] for r in regimes} | {
        "passes": per["overall"]["passes"]}  # fmt: skip


@pytest.mark.slow
def test_the_rescored_rounds_are_the_ones_the_docs_state():
    """scripts/rescore_round.py (docs/forward-prediction.md, "forward-26"): (iv) of both H100
    rounds on today's calibration, per regime, one gauge per process (the rule of the time)
    and gauged by mode (today's rule), as the table's last two columns state them."""
    doc = (REPO / "docs" / "forward-prediction.md").read_text()
    doc = doc[doc.index("### forward-26:") :]  # its section: other tables have such rows too
    doc = doc[: doc.index("\n### ", 4)]

    def cell(got: dict) -> str:
        return (f"{got['overall']} / {got['passes']} (CPU-bound {got['CPU-bound']}, boundary "
                f"{got['boundary']}, GPU-bound {got['GPU-bound']})")  # fmt: skip

    for name in ("forward-25", "forward-26"):
        row = next(ln for ln in doc.splitlines() if ln.startswith(f"| {name} |"))
        want = f"| {cell(_meets(name, 'process'))} | {cell(_meets(name, 'by mode'))} |"
        assert row.endswith(want), row
    # "Slow host phases come in runs": (iv) per round, one gauge per process, all four rounds
    full = (REPO / "docs" / "forward-prediction.md").read_text()
    section = full[full.index("### Slow host phases come in runs") :]
    section = " ".join(section[: section.index("\n### ")].split())
    for name in ("forward-25", "forward-26", "forward-27", "forward-28"):
        got = _meets(name, "process")
        assert re.search(rf"{name} \d+ -> {got['overall']}\b", section), name


@pytest.mark.slow
def test_the_gauge_rules_table_is_the_one_the_docs_state():
    """docs/forward-prediction.md, "Gauged by mode": scripts/gauge_rules.py's table, every
    rule and round, and the sums."""
    full = (REPO / "docs" / "forward-prediction.md").read_text()
    section = full[full.index("### Gauged by mode") :]
    section = section[: section.index("\n### ")]
    rounds = [f"forward-{n}" for n in range(25, 30)]
    rules = ("process", "by mode")
    for name in rounds:
        cells = [_meets(name, rule) for rule in rules]
        want = " | ".join(f"{c['CPU-bound']} / {c['boundary']} / {c['GPU-bound']} / "
                          f"{c['overall']} of {c['passes']}" for c in cells)  # fmt: skip
        assert f"| {name} | {want} |" in section, name
    flat = " ".join(section.split())
    for rule in rules:
        n = sum(_meets(r, rule)["overall"] for r in rounds)
        assert f"{n} of {sum(_meets(r, rule)['passes'] for r in rounds)}" in flat, rule
    # the slow gauge on top of the rule: forward-28 and forward-29, as the text quotes them
    mode, slow = _meets("forward-28", "by mode"), _meets("forward-28", "by mode + slow")
    assert (f"On forward-28 it loses {mode['overall'] - slow['overall']}, {mode['overall']} -> "
            f"{slow['overall']} (boundary {mode['boundary']} -> {slow['boundary']}, GPU-bound "
            f"{mode['GPU-bound']} -> {slow['GPU-bound']})") in flat  # fmt: skip
    mode, slow = _meets("forward-29", "by mode"), _meets("forward-29", "by mode + slow")
    assert mode["overall"] == slow["overall"] and f"{slow['overall']} of 48 either way" in flat


@pytest.mark.slow
def test_the_given_gauge_interval_on_the_h100_rounds_is_the_one_the_docs_state():
    """scripts/rescore_round.py on forward-25 to forward-27 (one gauge per process, the rule
    of the time) and forward-28's outcome.json: docs/forward-prediction.md's table of the
    interval given the gauge and the four-round sums."""
    doc = (REPO / "docs" / "forward-prediction.md").read_text()
    parts = ("rate", "step", "entry")
    inside, above, passes, bpasses = [0, 0, 0], 0, 0, 0
    for name in ("forward-25", "forward-26", "forward-27", "forward-28"):
        if name == "forward-28":  # pre-registered: its own outcome
            fc = json.loads((REPO / PREREG / name / "outcome.json").read_text())["forecast"]
        else:
            fc = _rescored(name, "process")
        per = fc["per_regime_given_gauge"]
        cov = [per["overall"]["coverage"][p]["covered"] for p in parts]
        n, safe = per["overall"]["passes"], per["boundary"]["safety"]
        cells = f"{' / '.join(map(str, cov))} of {n}"
        if name == "forward-28":
            assert f"{cells} inside" in " ".join(doc.split())
        else:
            assert f"| {name} | {cells} | {safe['above_upper']} of {safe['passes']} |" in doc
        inside = [a + b for a, b in zip(inside, cov, strict=True)]
        above, passes, bpasses = above + safe["above_upper"], passes + n, bpasses + safe["passes"]
    flat = " ".join(doc.split())
    assert f"{' / '.join(map(str, inside))} of {passes}" in flat
    assert f"{above} of {bpasses} boundary passes above" in flat


def test_the_docs_quote_forward_27s_outcome():
    """docs/forward-prediction.md's forward-27 section: (iv), the point prediction, the boundary
    passes that ran at the boundary and (iii), as outcome.json has them."""
    doc = json.loads((REPO / PREREG / "forward-27" / "outcome.json").read_text())
    fc = doc["forecast"]
    text = (REPO / "docs" / "forward-prediction.md").read_text()
    section = text[text.index("### forward-27:") :]
    section = " ".join(section[: section.index("\n### ")].split())
    iv = fc["per_regime"]["overall"]["conditional_meets_all"]
    point = sum(r["meets_all"] for r in doc["results"])
    kept = fc["regime_predicted_vs_observed"]["boundary -> boundary"]
    predicted = sum(v for k, v in fc["regime_predicted_vs_observed"].items()
                    if k.startswith("boundary ->"))  # fmt: skip
    safety = fc["per_regime"]["boundary"]["safety"]
    for quoted in (
        f"(iv) {iv['meets']} of {iv['passes']} = {iv['fraction']:.2f}",
        f"[{iv['wilson95'][0]:.2f}, {iv['wilson95'][1]:.2f}]",
        f"the point prediction {point} of 48",
        f"{kept} of the {predicted} passes predicted at the boundary",
        f"{safety['above_upper']} of {safety['passes']} boundary passes",
    ):
        assert quoted in section, quoted


def test_forward_27s_intervals_split_into_host_spread_and_model_error():
    """scripts/interval_parts.py: its "full" interval is the committed one of every
    configuration (same samples, residuals and seed), and the coverage of each variant is the
    one docs/forward-prediction.md's forward-27 table states."""
    import runpy

    script = runpy.run_path(str(REPO / "scripts" / "interval_parts.py"))
    t = script["table"](REPO / PREREG / "forward-27")
    preds = json.loads((REPO / PREREG / "forward-27" / "predictions.json").read_text())
    frozen = json.loads((REPO / PREREG / "forward-27" / "calibration.json").read_text())
    first = next(c for c in preds["configs"] if c["run_config"]["rep"] == 0)
    full = script["_bands"](first, frozen["calibration"], frozen["forecast"])["full"]
    for part in ("rate", "step", "entry"):
        assert [full[part]["lo"], full[part]["hi"]] == first["forecast"][f"{part}_pi90"]
    text = (REPO / "docs" / "forward-prediction.md").read_text()
    section = text[text.index("### forward-27:") :]
    share = t.groupby("variant")[["rate_in", "step_in", "entry_in"]].mean()
    assert (share.loc["full"] == 1.0).all()
    for variant in ("full", "host_only", "resid_only"):
        cells = " / ".join(f"{v:.3f}" for v in share.loc[variant])
        assert f"| {cells} |" in section, (variant, cells)


def test_a_calibration_that_is_no_mapping_is_one_clear_error(tmp_path):
    """vllm-outcome's frozen calibration.json holding a JSON list, not an object: a
    SpecraceError naming the file (one line at the CLI), not a TypeError's traceback."""
    from gpu_check.vllm.prereg_forecast import score_forecast
    from sim.errors import SpecraceError

    (tmp_path / "calibration.json").write_text("[1, 2]")
    with pytest.raises(SpecraceError, match="calibration.json: no calibration"):
        score_forecast([({"forecast": {}}, {}, tmp_path)], {}, tmp_path)


def test_forward_30s_outcome_is_the_one_its_readme_states():
    """forward-30's table and quoted counts in data/vllm/preregistered/README.md are its
    outcome.json's and its exports' agreement.json's: a window so slow that every pass ran
    CPU-bound, (iv) met given the gauge, the unconditional rate interval under 17.5 ms's."""
    doc = json.loads((REPO / PREREG / "forward-30" / "outcome.json").read_text())
    fc = doc["forecast"]
    per, given = fc["per_regime"], fc["per_regime_given_gauge"]
    section = _outcome_section("forward-30")
    flat = " ".join(section.replace("**", "").split())
    assert per["overall"]["passes"] == per["CPU-bound"]["passes"] == 48
    cov = [per["overall"]["coverage"][p] for p in ("rate", "step", "entry")]
    cells = " / ".join(str(c["covered"]) for c in cov)
    fracs = " / ".join(f"{c['fraction']:.2f}" for c in cov)
    assert f"| {cells} | - | - | {cells} ({fracs}) |" in flat
    sharp = " / ".join(f"{per['CPU-bound']['sharpness'][p]['ratio']:.2f}"
                       for p in ("rate", "step", "entry"))  # fmt: skip
    assert f"| {sharp} | - | - | - |" in flat
    iv = per["overall"]["conditional_meets_all"]
    lo, hi = iv["wilson95"]
    assert f"| {iv['meets']} | - | - | {iv['meets']} ({iv['fraction']:.2f}) |" in flat
    assert f"{iv['meets']} of 48 = {iv['fraction']:.2f} (Wilson 95 % [{lo:.2f}, {hi:.2f}])" in flat
    g = " / ".join(
        str(given["overall"]["coverage"][p]["covered"]) for p in ("rate", "step", "entry")
    )
    assert f"| {g} | - | - | {g} (" in flat
    point = sum(r["meets_all"] for r in doc["results"])
    assert f"| {point} ({doc['meets_all_fraction']:.2f}) |" in flat
    assert f"The step gauge met {fc['step_gauge']['overall']['step_gauge_meets_all']}" in flat
    rows = fc["passes_table"]
    factors = [r["cond_factor"] for r in rows]
    assert f"ran {min(factors):.2f}-{max(factors):.2f} x the calibration's" in flat
    # the unsafe direction: at 17.5 ms every pass over the rate interval's top
    late = [r for r in rows if r["config"].startswith("s16_d17.5ms")]
    assert len(late) == 6 and all(r["rate_observed"] > r["rate_pi_hi"] for r in late)
    up = per["overall"]["rate_above_upper"]  # reported beside (iii), which sees none of them
    assert up["above_upper"] == 6 and up["by_regime"]["CPU-bound"] == 6
    assert per["boundary"]["safety"]["passes"] == 0
    # on the records, as docs/forward-prediction.md's first table's text quotes them
    rec = json.loads((REPO / "data" / "vllm" / "forward" / "summary.json").read_text())["forecast"]
    plain = rec["per_regime"]["overall"]["rate_above_upper"]
    given = rec["per_regime_given_gauge"]["overall"]["rate_above_upper"]
    text = " ".join((REPO / "docs" / "forward-prediction.md").read_text().split())
    assert (f"in any regime, {plain['above_upper']} of {plain['passes']} lie above it (the "
            f"interval given the gauge: {given['above_upper']}, "
            f"{given['by_regime']['CPU-bound']} of them CPU-bound") in text  # fmt: skip
    misses = [r for r in rows if not r["cond_meets_all"]]
    assert len(misses) == 48 - iv["meets"] and all(not r["cond_step_ok"] for r in misses)
    tot = _agreement_totals("forward-30")
    assert tot["scored"] == tot["agree"] > 190_000
    doc_md = (REPO / "docs" / "forward-prediction.md").read_text()
    doc_md = " ".join(doc_md[doc_md.index("### forward-30:") :].split())
    assert f"{iv['meets']} of 48 meet all three parts ({iv['fraction']:.2f})" in doc_md
    assert f"the interval given the gauge held {g}" in doc_md
    none = [r for r in rows if r["pass_group"].split("/")[1] == "none"]
    assert f"met all in {sum(r['cond_meets_all'] for r in none)} of {len(none)}" in doc_md
    assert _read_for_read(tot) in flat


def test_forward_31s_outcome_is_the_one_its_readme_states():
    """forward-31's table and quoted counts in data/vllm/preregistered/README.md are its
    outcome.json's and its exports' agreement.json's: every pass inside the unconditional
    interval (too wide overall), no boundary pass above the rate's top, (iv) missed."""
    doc = json.loads((REPO / PREREG / "forward-31" / "outcome.json").read_text())
    fc = doc["forecast"]
    per, given = fc["per_regime"], fc["per_regime_given_gauge"]
    flat = " ".join(_outcome_section("forward-31").replace("**", "").split())
    regimes = ("CPU-bound", "boundary", "GPU-bound", "overall")
    parts = ("rate", "step", "entry")
    passes = " | ".join(str(per[r]["passes"]) for r in regimes)
    assert f"| passes (regime by the observed entry share) | {passes} |" in flat

    def cells(block: dict, key: str) -> list[str]:
        return [" / ".join(str(block[r]["coverage"][p][key]) for p in parts) for r in regimes]

    cov = cells(per, "covered")
    fracs = " / ".join(f"{per['overall']['coverage'][p]['fraction']:.2f}" for p in parts)
    assert f"| {' | '.join(cov)} ({fracs}) |" in flat
    assert not per["overall"]["coverage"]["rate"]["met"]  # "(i) missed by being too wide"
    assert all(per[r]["coverage"][p]["met"] for r in regimes[:3] for p in parts)
    sharp = " | ".join(" / ".join(f"{per[r]['sharpness'][p]['ratio']:.2f}" for p in parts)
                       for r in regimes[:3])  # fmt: skip
    assert f"| {sharp} | - |" in flat
    safety = per["boundary"]["safety"]
    assert safety["above_upper"] == 0 and f"| 0 of {safety['passes']} |" in flat
    assert per["overall"]["rate_above_upper"]["above_upper"] == 0
    iv = [str(per[r]["conditional_meets_all"]["meets"]) for r in regimes]
    frac = per["overall"]["conditional_meets_all"]["fraction"]
    assert f"| {' | '.join(iv)} ({frac:.2f}) |" in flat
    lo, hi = per["overall"]["conditional_meets_all"]["wilson95"]
    assert f"{iv[3]} of 48 = {frac:.2f} (Wilson [{lo:.2f}, {hi:.2f}])" in flat
    point = sum(r["meets_all"] for r in doc["results"])
    assert f"| {point} ({doc['meets_all_fraction']:.2f}) |" in flat
    g = cells(given, "covered")
    gf = " / ".join(f"{given['overall']['coverage'][p]['fraction']:.2f}" for p in parts)
    assert f"| {' | '.join(g)} ({gf}) |" in flat
    above = given["overall"]["rate_above_upper"]
    by = above["by_regime"]
    gs = given["boundary"]["safety"]
    assert (f"| {by['CPU-bound']} | {gs['above_upper']} of {gs['passes']} | {by['GPU-bound']} "
            f"| {above['above_upper']} |") in flat  # fmt: skip
    rows = fc["passes_table"]
    moved = fc["regime_predicted_vs_observed"]
    assert f"28 of 48 passes ran there (the model put {moved['boundary -> boundary']}" in flat
    misses = [r for r in rows if not r["cond_meets_all"]]
    landing = [r for r in misses if not r["cond_landing_ok"]]
    assert f"{len(landing)} of the {len(misses)} misses of (iv) miss the landing" in flat
    assert f"The step gauge met {fc['step_gauge']['overall']['step_gauge_meets_all']}" in flat
    tot = _agreement_totals("forward-31")
    assert tot["scored"] == tot["agree"] > 190_000
    assert _read_for_read(tot) in flat
