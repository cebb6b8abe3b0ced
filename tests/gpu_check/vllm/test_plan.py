"""``vllm-plan``: sim's forward prediction of vllm-run arms, before they run (CPU)."""

from __future__ import annotations

import json

from gpu_check.__main__ import main


def test_plan_predicts_each_arm_and_the_patches_read_no_wrong_count(tmp_path, capsys):
    out = tmp_path / "pre"
    arms = "none,private-d2h,sync-before-moves"
    argv = ["vllm-plan", "--vllm", "0.24.0", "--modes", "align", "--configs", "16:0",
            "--patch", arms, "--seeds", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((out / "predictions.json").read_text())
    assert doc["schema"] == "specrace.vllm_predictions"
    assert doc["command"].startswith("python -m gpu_check vllm-plan")
    arms = {c["patch"]: c for c in doc["configs"]}
    assert [c["policy"] for c in doc["configs"]] == ["align", "private-buffer", "sync-before-moves"]
    # unpatched align at delay 0 reads wrong counts (the committed runs: ~2 %); both fixes none
    assert arms["none"]["wrong"] > 0
    assert arms["private-d2h"]["wrong"] == 0 and arms["sync-before-moves"]["wrong"] == 0
    for c in doc["configs"]:
        assert c["reads"] > 1000 and c["transitions"] == 192
        lo, hi = c["rate_ci95"]
        assert lo <= c["rate"] <= hi
        assert abs(sum(c["landing"].values()) - 1) < 1e-3
    assert "private-d2h" in capsys.readouterr().out
    # the calibration it was made on, frozen beside it and signed (vllm-outcome's (iv) reads it)
    from gpu_check.vllm.plan import CALIBRATION
    from sim.runs.signature import JSON_KEY, is_signed

    frozen = json.loads((out / "calibration.json").read_text())
    assert is_signed(out / "calibration.json")
    assert {k: v for k, v in frozen.items() if k != JSON_KEY} == json.loads(CALIBRATION.read_text())


def test_plan_refuses_a_patch_without_align_in_one_line(tmp_path, capsys):
    argv = ["vllm-plan", "--vllm", "0.24.0", "--modes", "none", "--patch", "private-d2h",
            "--out", str(tmp_path / "x")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--patch needs align" in err
    assert not (tmp_path / "x").exists()


def test_plan_grid_predicts_several_runs_with_their_commands(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text(
        '[[run]]\nname = "a-k1"\nvllm = "0.24.0"\nk = 1\nmodes = "align"\n'
        'configs = "24:15000"\nnum_requests = 24\n'
        '[[run]]\nname = "b-k2"\nvllm = "0.33.0"\nk = 2\nmodes = "none"\n'
        'configs = "24:0"\narrivals = "staggered"\narrival_every = 1\nnum_requests = 24\n'
    )
    out = tmp_path / "pre"
    assert main(["vllm-plan", "--grid", str(grid), "--seeds", "1", "--out", str(out)]) == 0
    doc = json.loads((out / "predictions.json").read_text())
    assert [(c["run"], c["vllm"], c["k"], c["config"]) for c in doc["configs"]] == [
        ("a-k1", "0.24.0", 1, "s24_d15ms"),
        ("b-k2", "0.33.0", 2, "s24_d0ms_stag1"),
    ]
    assert all(c["never_run"] for c in doc["configs"])
    assert len(doc["runs"]) == 2 and "--k 2" in doc["runs"][1] and "RUNS/b-k2" in doc["runs"][1]
    for c in doc["configs"]:
        assert c["transitions"] == 24 and abs(sum(c["landing"].values()) - 1) < 1e-3


def test_plan_grid_refuses_bad_files_in_one_line(tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text('[[run]]\nname = "a"\nvllm = "0.24.0"\nk = 1\nmodes = "align"\n')
    assert main(["vllm-plan", "--grid", str(grid), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing ['configs']" in err
    assert not (tmp_path / "x").exists()


def test_plan_grid_repeats_every_configuration_round_after_round(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text(
        '[[run]]\nname = "rep"\nvllm = "0.24.0"\nk = 1\nmodes = "align,none"\n'
        'configs = "24:0,24:15000"\nnum_requests = 24\nrepeats = 3\nbaseline = false\n'
    )
    out = tmp_path / "pre"
    assert main(["vllm-plan", "--grid", str(grid), "--seeds", "1", "--out", str(out)]) == 0
    doc = json.loads((out / "predictions.json").read_text())
    names = [(c["mode"], c["config"]) for c in doc["configs"]]
    # rounds: each configuration once per round, both modes repeated
    rounds = ["s24_d0ms", "s24_d15ms", "s24_d0ms_r1", "s24_d15ms_r1", "s24_d0ms_r2", "s24_d15ms_r2"]
    assert names[:6] == [("align", n) for n in rounds]
    assert len(names) == 12 and len(set(names)) == 12
    assert "--repeats 3" in doc["runs"][0] and "--no-baseline" in doc["runs"][0]
    by = {}
    for c in doc["configs"]:  # a repeat is predicted as its first pass, rep recorded
        by.setdefault((c["mode"], c["config"].split("_r")[0]), []).append(c)
    for group in by.values():
        assert [c["run_config"]["rep"] for c in group] == [0, 1, 2]
        assert len({(c["wrong"], c["step_ms"], json.dumps(c["landing"])) for c in group}) == 1


def test_repeats_cannot_stack_on_arm_repeats():
    import pytest

    from gpu_check.vllm.config import RunConfig
    from gpu_check.vllm.run import with_patches, with_repeats

    plan = with_patches({"align": [RunConfig()]}, ["none", "private-d2h"], repeats=2)
    with pytest.raises(ValueError, match="--repeats and --arm-repeats"):
        with_repeats(plan, 2)
    assert with_repeats(plan, 1) is plan


def test_plan_refuses_a_folder_holding_a_users_calibration_json(tmp_path, capsys):
    """The frozen calibration's name is specrace's only inside a folder vllm-plan made: a
    user's calibration.json there is never replaced (the folder must be new or empty)."""
    out = tmp_path / "pre"
    out.mkdir()
    mine = out / "calibration.json"
    mine.write_text("my own notes\n")
    argv = ["vllm-plan", "--vllm", "0.24.0", "--modes", "align", "--configs", "16:0",
            "--seeds", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an empty folder" in err
    assert mine.read_text() == "my own notes\n" and sorted(out.iterdir()) == [mine]
