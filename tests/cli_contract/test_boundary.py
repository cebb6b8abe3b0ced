"""The concrete examples of issue #13, one regression test each (those not covered elsewhere:
tests/cli_contract/test_errors.py, tests/project/test_package.py,
tests/gpu_check/replay/test_replay.py).

Every bad input: a non-zero exit, one ``error`` line naming the input, no traceback, nothing
left in ``--out`` (``fuzz_harness.classify``: "clean").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from fuzz_harness import refused, run_cli, run_schedule
from load import limit_s
from repo_root import ROOT

from gpu_check.__main__ import main as gpu_main
from sim.cli.main import main
from sim.runs.outputs import MANIFEST, MARKER, record


# -- scenario, timing and --set ----------------------------------------------------------------
@pytest.mark.parametrize("value", [str(10**30), str(10**14), "1e300", "nan", "-1"])
def test_huge_or_impossible_gpu_prep_ns(tmp_path: Path, value: str) -> None:
    out = tmp_path / "o"
    refused(["run", "--scenario", "minimal-race", "--set", f"timing.gpu_prep_ns={value}",
             "--out", str(out)], "timing.gpu_prep_ns", out)  # fmt: skip


def test_nested_array_500_deep_in_a_scenario(tmp_path: Path) -> None:
    path = tmp_path / "deep.toml"
    path.write_text("[workload]\nacceptance_probs = " + "[" * 500 + "]" * 500 + "\n")
    out = tmp_path / "o"
    refused(["schedule", "--scenario", str(path), "--out", str(out)], str(path), out)


@pytest.mark.parametrize("mean", ["nan", "inf", "-0.0"])
def test_nan_prompt_length_mean(tmp_path: Path, mean: str) -> None:
    path = tmp_path / "nan.toml"
    path.write_text(f"[workload]\nprompt_len = {{dist = 'lognormal', mean = {mean}}}\n")
    out = tmp_path / "o"
    refused(["schedule", "--scenario", str(path), "--out", str(out)], "prompt_len", out)


# -- schedule.json ------------------------------------------------------------------------------
def test_rows_beyond_max_num_seqs(tmp_path: Path, schedule: dict) -> None:
    schedule["scenario"]["engine"]["max_num_seqs"] = 1  # the schedule uses rows 0 and 1
    schedule["scenario"]["engine"]["max_num_batched_tokens"] = 4
    run_schedule(tmp_path, schedule, "step")


def test_an_op_of_unknown_kind(tmp_path: Path, schedule: dict) -> None:
    schedule["steps"][4]["ops"].insert(0, ["jump", 0, 1, "R"])
    run_schedule(tmp_path, schedule, "step 4")


def test_num_scheduled_of_10_to_the_30(tmp_path: Path, schedule: dict) -> None:
    schedule["steps"][3]["num_scheduled"][0] = 10**30
    run_schedule(tmp_path, schedule, "num_scheduled")


def test_prev_positions_out_of_range(tmp_path: Path, schedule: dict) -> None:
    schedule["steps"][4]["prev_positions"][0] = 7
    run_schedule(tmp_path, schedule, "prev_positions")


def test_a_binary_schedule(tmp_path: Path) -> None:
    run_schedule(tmp_path, b"\xff\xfe\x00\x81binary", "binary")


# -- command line -------------------------------------------------------------------------------
def test_seed_minus_one(tmp_path: Path) -> None:
    out = tmp_path / "o"
    for argv, prog in ((["run", "--seed", "-1", "--out", str(out)], main),
                       (["schedule", "--seed", "-1", "--out", str(out)], main),
                       (["replay", "--device", "cpu", "--seed", "-1", "--out", str(out)], gpu_main),
                       (["padding", "--num-reqs", "2", "--k", "1", "--seed", "-1"], gpu_main),
                       (["recall", "--seed", "-1"], gpu_main)):  # fmt: skip
        refused(argv, "--seed", out, prog=prog)


@pytest.mark.parametrize("where", ["under a file", "a file", "empty"])
def test_out_that_cannot_be_a_directory(tmp_path: Path, where: str) -> None:
    (tmp_path / "f").write_text("a file")
    out = {"under a file": str(tmp_path / "f" / "o"), "a file": str(tmp_path / "f"), "empty": ""}[
        where
    ]
    sweep = ["sweep", "--scenario", "minimal-race", "--vary", "timing.dma_land_delay_ns=1,2",
             "--steps", "4", "--workers", "1"]  # fmt: skip
    for argv, prog in ((["run", "--scenario", "minimal-race"], main),
                       (["schedule", "--scenario", "minimal-race"], main), (sweep, main),
                       (["replay", "--device", "cpu", "--steps", "4"], gpu_main)):  # fmt: skip
        refused([*argv, "--out", out], "--out", None, prog=prog, watch=(tmp_path,))
    assert (tmp_path / "f").read_text() == "a file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_vary_with_a_toml_date(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    refused(["sweep", "--scenario", "minimal-race", "--vary",
             "timing.dma_land_delay_ns=1979-05-27", "--steps", "4", "--workers", "1",
             "--out", str(out)], "timing.dma_land_delay_ns", out)  # fmt: skip


def test_vary_values_are_all_checked_before_the_sweep_starts(tmp_path: Path) -> None:
    """A bad value late in the grid is refused before the first point runs (nothing written)."""
    out = tmp_path / "sw"
    refused(["sweep", "--scenario", "minimal-race", "--vary",
             "timing.dma_land_delay_ns=1000,2000,-5", "--steps", "4", "--workers", "1",
             "--out", str(out)], "=-5", out)  # fmt: skip
    refused(["sweep", "--scenario", "minimal-race", "--vary", "engine.max_num_seqs=1,8",
             "--vary", "engine.max_num_batched_tokens=4,64", "--steps", "4", "--workers", "1",
             "--out", str(out)], "max_num_batched_tokens", out)  # fmt: skip


# -- run directories and tables -----------------------------------------------------------------
def test_a_table_of_the_wrong_kind_is_named(tmp_path: Path, run_dir: Path) -> None:
    bad = tmp_path / "bad"
    import shutil

    shutil.copytree(run_dir, bad)
    shutil.copyfile(run_dir / "trace.parquet", bad / "reads.parquet")
    line = "is a trace (trace.parquet), not a reads table (reads.parquet)"
    for argv, prog in ((["plot", str(bad)], main), (["perfetto", str(bad)], main),
                       (["timeline", str(bad)], main),
                       (["replay", "--device", "cpu", "--sim-run", str(bad), "--out",
                         str(tmp_path / "o")], gpu_main)):  # fmt: skip
        refused(argv, line, tmp_path / "o", prog=prog, watch=(bad,))
    refused(
        ["compare", str(run_dir / "reads.parquet")],
        "is a reads table (reads.parquet), not a replay table (observed.parquet)",
    )
    refused(["plot", str(run_dir / "trace.parquet"), "--req", "R", "--step", "4"],
            "is a trace (trace.parquet), not a replay table")  # fmt: skip


def test_tables_that_do_not_belong_to_their_schedule(tmp_path: Path, run_dir: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run_dir, bad)
    reads = pd.read_parquet(run_dir / "reads.parquet")
    reads.loc[0, "step"] = 99
    reads.to_parquet(bad / "reads.parquet", index=False)
    refused(["plot", str(bad)], "does not belong to its schedule.json", watch=(bad,))
    reads = pd.read_parquet(run_dir / "reads.parquet")
    pd.concat([reads, reads.iloc[:1]]).to_parquet(bad / "reads.parquet", index=False)
    refused(["replay", "--device", "cpu", "--sim-run", str(bad), "--out", str(tmp_path / "o")],
            "repeats a read", tmp_path / "o", prog=gpu_main)  # fmt: skip
    shutil.copyfile(run_dir / "reads.parquet", bad / "reads.parquet")
    meta = json.loads((run_dir / "meta.json").read_text())
    (bad / "meta.json").write_text(json.dumps(meta | {"seed": -1}))
    refused(["timeline", str(bad)], "seed -1", watch=(bad,))


def test_an_incomplete_policy_all_run(tmp_path: Path) -> None:
    out = tmp_path / "all"
    assert run_cli(["run", "--scenario", "minimal-race", "--no-trace", "--out", str(out)])[0] == 0
    (out / "unsynced" / "meta.json").unlink()
    refused(["plot", str(out)], "unsynced: no meta.json", watch=(out,))


# -- valid inputs that failed -------------------------------------------------------------------
def test_replay_of_a_sim_run_with_an_empty_batch_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, err = run_cli(["run", "--scenario", "qwen35-mtp3", "--set", "workload.initial_requests=0",
                         "--set", "workload.arrival_rate_per_step=0.3", "--steps", "30",
                         "--policy", "align", "--out", str(run)])  # fmt: skip
    assert code == 0, err
    sched = json.loads((run / "schedule.json").read_text())
    assert any(not s["req_ids"] for s in sched["steps"][1:])  # an empty batch after step 0
    out = tmp_path / "rp"
    code, err = run_cli(["replay", "--device", "cpu", "--sim-run", str(run), "--out", str(out)],
                        gpu_main)  # fmt: skip
    assert code == 0, err
    assert (out / "observed.parquet").is_file() and (out / "replay_summary.json").is_file()
    mode = (out / "observed.parquet").stat().st_mode & 0o777
    assert mode == 0o666 & ~_umask(), oct(mode)  # outputs follow the umask, not mkstemp's 0600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("prog", ["sim", "gpu_check"])
def test_output_into_a_closed_pipe(tmp_path: Path, prog: str) -> None:
    """``... | head -1``: the reader leaves early (here: before the first line, so every write
    meets the closed pipe); exit 141 as a shell pipeline expects, no BrokenPipeError, and the
    run's --out written in full all the same."""
    argv = (["run", "--scenario", "minimal-race"] if prog == "sim"
            else ["replay", "--device", "cpu", "--steps", "6"])  # fmt: skip
    cmd = " ".join([sys.executable, "-m", prog, *argv, "--out", str(tmp_path / "o")])
    r = subprocess.run(f"{cmd} | true; exit ${{PIPESTATUS[0]}}", shell=True, cwd=ROOT,
                       executable="/bin/bash", capture_output=True, text=True,
                       timeout=limit_s(300))  # fmt: skip
    assert r.returncode == 141 and r.stderr == "", r.stderr
    done = "align/reads.parquet" if prog == "sim" else "observed.parquet"
    assert (tmp_path / "o" / done).is_file()


def test_ctrl_c_in_gpu_check_replay(tmp_path: Path, monkeypatch) -> None:
    import gpu_check.replay.cli

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu_check.replay.cli, "replay", interrupted)
    out = tmp_path / "o"
    code, err = run_cli(["replay", "--device", "cpu", "--steps", "6", "--out", str(out)],
                        gpu_main)  # fmt: skip
    assert code == 130 and err.strip() == "gpu_check: error: interrupted", err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written


def test_ctrl_c_of_a_real_sim_process(tmp_path: Path) -> None:
    """SIGINT to a running ``python -m sim run``: one line, exit 130, no output directory.

    The signal goes once the run is under way (its first line, ``SEED=``, is printed inside
    the output's temporary), not after a fixed sleep: on a loaded machine the interpreter may
    still be importing after any fixed time. The wait after it is scaled (tests/load.py). The
    line comes once the schedule is built (3 s here for 20,000 steps); the run after it takes
    seconds more, and the signal follows the line within milliseconds.

    The child starts with SIGINT at its default, as a terminal's foreground command has it: a
    suite started as a shell's background job (``make test &``) inherits SIGINT ignored, and so
    would every process it starts, which then runs to its end (exit 0) whatever it is sent."""
    out = tmp_path / "o"

    def default_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    p = subprocess.Popen([sys.executable, "-m", "sim", "run", "--scenario", "qwen35-mtp3",
                          "--steps", "20000", "--out", str(out)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=default_sigint)  # fmt: skip
    assert p.stdout is not None
    assert p.stdout.readline().startswith("SEED="), p.stderr
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=limit_s(60))
    assert p.returncode == 130 and err.strip() == "error: interrupted", err
    assert sorted(q.name for q in tmp_path.iterdir()) == []


# -- kills before a rename: resume and --force remove what they left, and only that ----------------
def test_stale_temporaries_are_removed_only_if_they_carry_the_marker(tmp_path: Path) -> None:
    """What a kill leaves is removed when its marker proves it: a run folder being written
    whose every file is listed (a temporary, a finished file), an old output a replace moved
    aside whose marker names that very aside. A user's folder of the same name form is kept:
    unmarked, marked but not named an aside (their ``mv run .run.20241206.old``), or holding a
    file nobody listed (their notes put into a killed run's folder)."""
    from sim.runs.outputs import _name_aside, record, write_marker

    out = tmp_path / "run"
    stale = [tmp_path / ".run.k1ll3d_x.tmp", tmp_path / ".run.abcdefgh.old"]
    for d in stale:  # a run folder killed while written; one a replace had moved aside
        d.mkdir()
    write_marker(stale[0], "run", writing=True)
    record(stale[0], ".reads.parquet.0a1b2c3d.tmp", temp=True)
    (stale[0] / ".reads.parquet.0a1b2c3d.tmp").write_text("half")
    write_marker(stale[1], "run")
    _name_aside(stale[1], stale[1].name)
    users = [tmp_path / ".run.20241205.old", tmp_path / ".run.abcdefgh.tmp"]  # named like ours
    for d in users:
        d.mkdir()
        (d / "thesis.txt").write_text("mine")
    backup, notes = tmp_path / ".run.20241206.old", tmp_path / ".run.n0tes_xx.tmp"
    for d in (backup, notes):
        d.mkdir()
    write_marker(backup, "run")  # a marked output the user moved there: no aside recorded
    write_marker(notes, "run", writing=True)
    (notes / "thesis.txt").write_text("mine")  # the user's, in a killed run's folder
    others = [tmp_path / ".run.notes", tmp_path / ".other.abcdefgh.tmp", tmp_path / "keep.tmp"]
    for p in others:
        p.write_text("not ours")
    os.symlink(tmp_path / "keep.tmp", tmp_path / ".run.symlink.tmp")
    argv = ["run", "--scenario", "minimal-race", "--policy", "align", "--no-trace"]
    assert run_cli([*argv, "--out", str(out)])[0] == 0
    assert not any(p.exists() for p in stale) and all(p.exists() for p in others)
    assert all((d / "thesis.txt").read_text() == "mine" for d in (*users, notes))
    assert backup.is_dir() and (backup / ".specrace-run.json").is_file()
    assert (tmp_path / ".run.symlink.tmp").is_symlink()
    stale[0].mkdir()
    write_marker(stale[0], "run", writing=True)
    assert run_cli([*argv, "--out", str(out), "--force"])[0] == 0
    assert not stale[0].exists() and (out / "reads.parquet").is_file()
    assert all((d / "thesis.txt").read_text() == "mine" for d in users)


def test_a_killed_sweep_resumes_without_its_temporaries(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    argv = ["sweep", "--scenario", "minimal-race", "--policy", "align", "--vary",
            "timing.dma_land_delay_ns=1000,2000", "--steps", "4", "--workers", "1", "--quiet",
            "--out", str(out)]  # fmt: skip
    assert run_cli(argv)[0] == 0
    first = sorted((out / "points").iterdir())[0]
    first.unlink()  # the point whose write was killed: its temporary listed, as writes list it
    killed = [out / "points" / f".{first.name}.abcdefgh.tmp", out / ".sweep.parquet.abcdefgh.tmp"]
    for t in killed:
        record(out, t.relative_to(out).as_posix(), temp=True)
        t.write_text("half")
    mine = out / "points" / f".{first.name}.mynotes1.tmp"  # named like ours, never listed
    mine.write_text("mine")
    code, err = run_cli(argv)
    assert code == 0, err
    assert first.is_file() and not any(t.exists() for t in killed) and mine.read_text() == "mine"
    assert sorted(p.name for p in out.rglob(".*")) == sorted([MARKER, MANIFEST, mine.name])


# -- the resource guard -------------------------------------------------------------------------
def test_inputs_beyond_the_machine_are_refused_up_front(tmp_path: Path) -> None:
    out = tmp_path / "o"
    refused(["run", "--steps", str(10**12), "--out", str(out)], "--steps", out)
    big = tmp_path / "big.toml"
    big.write_text("[workload]\nprompt_len = {dist = 'fixed', mean = 1e9, max = 1000000000}\n")
    refused(["schedule", "--scenario", str(big), "--out", str(out)], "tokens of one request", out)
    long = tmp_path / "long.toml"
    long.write_text(f"default_steps = {10**12}\n")
    refused(["schedule", "--scenario", str(long), "--out", str(out)], "default_steps", out)
    wide = tmp_path / "wide.toml"  # 10^7 steps x 65,536 rows: ~400 TiB
    wide.write_text("default_steps = 10000000\n[engine]\nmax_num_seqs = 65536\n"
                    "max_num_batched_tokens = 1000000\n")  # fmt: skip
    refused(["schedule", "--scenario", str(wide), "--out", str(out)], "GiB of memory", out)
    refused(
        [
            "sweep",
            "--scenario",
            "minimal-race",
            "--vary",
            "timing.dma_land_delay_ns=1,2",
            "--seeds",
            "1000000",
            "--steps",
            "10000000",
            "--out",
            str(out),
        ],
        "CPU days",
        out,
    )
    refused(["replay", "--device", "cpu", "--reps", "1000000", "--steps",
             "1000", "--out", str(out)], "replayed steps", out, prog=gpu_main)  # fmt: skip
    refused(["recall", "--num-reqs", "1024", "--k", "15", "--pairs", "32"], "min", prog=gpu_main)
    slow = tmp_path / "slow.toml"
    slow.write_text("[timing]\nworker_swap_ns = 10000000000000\n")
    refused(["replay", "--device", "cpu", "--scenario", str(slow), "--out", str(out)],
            "h in real time", out, prog=gpu_main)  # fmt: skip


def test_a_plot_removes_what_a_killed_plot_left(tmp_path: Path, run_dir: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    stale = run / ".margins.png.abcdefgh.tmp"
    record(run, stale.name, temp=True)  # a plot's write lists its temporary before making it
    stale.write_text("half a png")
    unlisted = run / ".margins.png.12345678.tmp"
    unlisted.write_text("named like ours, never listed")
    assert run_cli(["plot", str(run)])[0] == 0
    assert (run / "margins.png").is_file() and not stale.exists() and unlisted.exists()


def test_out_that_is_the_working_directory() -> None:
    """``--out .`` (found by the fuzz): the rename of the working directory failed with a
    traceback and left ``..XXXXXXXX.old`` behind; now one line before any work."""
    for argv, prog in ((["run", "--scenario", "minimal-race"], main),
                       (["replay", "--device", "cpu", "--steps", "4"], gpu_main)):  # fmt: skip
        for out in (".", "..", "./"):
            refused([*argv, "--out", out], "is the working directory", prog=prog)


def test_a_replay_summary_that_is_not_one(tmp_path: Path, run_dir: Path) -> None:
    """Found by a 21,000-case campaign: a replay_summary.json holding a bare number gave an
    AttributeError in ``plot``; the summary is optional, but one of another shape is named."""
    rp = tmp_path / "rp"
    code, err = run_cli(["replay", "--device", "cpu", "--sim-run", str(run_dir), "--out",
                         str(rp)], gpu_main)  # fmt: skip
    assert code == 0, err
    argv = ["plot", str(rp / "observed.parquet"), "--req", "R", "--step", "4"]
    for bad in ("5", "[]", '{"scenario": 3}', '{"scenario": "minimal-race", "seed": -1}'):
        (rp / "replay_summary.json").write_text(bad)
        refused(argv, "not a replay summary", watch=(rp,))
    (rp / "replay_summary.json").unlink()
    assert run_cli(argv)[0] == 0 and (rp / "landing_R_4.png").is_file()


def test_schedule_requests_of_another_shape(tmp_path: Path, schedule: dict) -> None:
    """Found by the same campaign: ``requests`` of bare numbers passed the schedule check and
    gave a TypeError in ``shrink``; now the schedule is refused with the request named."""
    schedule["requests"] = [1, 0]
    run_schedule(tmp_path, schedule, "requests[0]")


def test_compare_refuses_to_pool_tables_of_different_kinds() -> None:
    """A drawn replay and a --sim-run replay pooled would leave holes (a ValueError deep in
    pandas before): one line naming the odd table, exit 2."""
    root = ROOT / "data" / "replay"
    drawn = str(root / "observed_minimal-race.parquet")
    simrun = str(root / "heldout" / "observed_spin_fwd4500000_seed7.parquet")
    code, err = run_cli(["compare", drawn, simrun])
    assert code == 2 and err.count("\n") == 1, err
    assert "observed_spin_fwd4500000_seed7.parquet: not the same kind of replay table" in err
    code, err = run_cli(["compare", simrun, simrun])  # the same kind twice: pooled
    assert code == 0, err


@pytest.fixture(scope="module")
def replay_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("replay") / "rp"
    code, err = run_cli(["replay", "--device", "cpu", "--out", str(out)], gpu_main)
    assert code == 0, err
    assert run_cli(["compare", str(out)])[0] == 0  # as written, compare reads it
    return out


@pytest.mark.parametrize(
    "column, edit",
    [("op_errs_ns", "cell None"), ("op_errs_ns", "int"), ("op_errs_ns", "string"),
     ("op_errs_ns", "float-nan"), ("read_err_ns", "string"), ("land_margin_ns", "float-nan"),
     ("land_predicted_pos", "string")],
)  # fmt: skip
def test_compare_refuses_a_replay_table_with_an_optional_column_garbled(
    tmp_path: Path, replay_dir: Path, column: str, edit: str
) -> None:
    """Found by the fuzz campaign (make test-slow): compare checked the columns every replay
    table has, not those a newer replay adds, and an edited one was a ValueError or TypeError
    deep in numpy or pandas. Now one line naming the table and the column, exit 2."""
    df = pd.read_parquet(replay_dir / "observed.parquet")
    assert column in df.columns
    if edit == "cell None":
        df.loc[len(df) // 2, column] = None
    elif edit == "string":
        df[column] = df[column].astype(str) + "x"
    elif edit == "float-nan":
        df[column] = float("nan")
    else:
        df[column] = pd.Series(range(len(df)), dtype="int64")
    path = tmp_path / "observed.parquet"
    df.to_parquet(path)
    code, err = run_cli(["compare", str(path)])
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: not a whole replay table") and column in err, err


def test_every_optional_replay_column_compare_reads_has_a_kind() -> None:
    """compare reads TIMING_COLUMNS and VERDICT_COLUMNS where a table has them: each must be
    in OPTIONAL, whose kinds read_observed checks (else an edited one reaches numpy)."""
    from sim.hardware.compare import OPTIONAL, TIMING_COLUMNS, VERDICT_COLUMNS

    assert {*TIMING_COLUMNS, *VERDICT_COLUMNS} <= set(OPTIONAL)
