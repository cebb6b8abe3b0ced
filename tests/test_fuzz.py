"""Hostile input on every surface of ``python -m sim``: one clear line, exit 2, nothing left.

Each case runs the command line in-process (``sim.cli.main.main``), so an exception that the
boundary does not turn into an error line fails the test with its traceback. For every case:
exit status 0 (the input was valid: the output is complete) or non-zero with exactly one line
on stderr naming the input and no ``--out`` left behind. Bounded for ``make test``;
``SPECRACE_FUZZ_EXAMPLES=2000 make test-slow`` runs a longer campaign.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli.main import main
from sim.model.params import parameter_keys

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = (ROOT / "sim/model/scenarios/minimal-race.toml").read_text()
EXAMPLES = int(os.environ.get("SPECRACE_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="SPECRACE_FUZZ_EXAMPLES" not in os.environ,  # make test: the same cases each run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's own exit, after our one-line error
            code = int(e.code or 0)
    return code, err.getvalue()


def assert_clean(code: int, err: str, out: Path, what: str) -> None:
    if code == 0:
        assert out.is_dir(), what
        return
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"{what}: {err!r}"
    assert "error" in lines[0] and "Traceback" not in err, f"{what}: {err!r}"
    assert not out.exists(), f"{what}: left {sorted(p.name for p in out.iterdir())}"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], what


# -- values a hostile user types -------------------------------------------------------------
HOSTILE_VALUES = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-0.0", "1e30", "1979-05-27", "[[[[1]]]]", "''",
                     "true", "-1", "0", "{a=1}", "[1, 'x']", str(10**30), "\"x\"", "1.5"]),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)  # fmt: skip
KEYS = st.one_of(
    st.sampled_from(parameter_keys()),
    st.sampled_from(parameter_keys()).map(lambda k: k[:-1]),  # a typo
    st.text(max_size=20),
)


@FUZZ
@given(key=KEYS, value=HOSTILE_VALUES)
def test_set_overrides(tmp_path_factory, key: str, value: str) -> None:
    out = tmp_path_factory.mktemp("set") / "out"
    argv = ["run", "--scenario", "minimal-race", "--steps", "6", "--no-trace", "--out", str(out),
            "--set", f"{key}={value}"]  # fmt: skip
    assert_clean(*run_cli(argv), out, f"--set {key}={value}")


def _mutate_toml(text: str, data: st.DataObject) -> str:
    kind = data.draw(st.sampled_from(["truncate", "value", "unknown", "bytes", "deep"]))
    if kind == "truncate":
        return text[: data.draw(st.integers(0, len(text)))]
    if kind == "bytes":
        return data.draw(st.binary(max_size=200)).decode("latin-1")
    if kind == "deep":
        return text + "\n[extra]\nx = " + "[" * 600 + "]" * 600 + "\n"
    lines = text.splitlines()
    assigns = [i for i, line in enumerate(lines) if "=" in line and not line.startswith("#")]
    i = data.draw(st.sampled_from(assigns))
    key = lines[i].split("=")[0]
    if kind == "unknown":
        lines.insert(i, f"{key.strip()}x = 1")
    else:
        lines[i] = f"{key}= {data.draw(HOSTILE_VALUES)}"
    return "\n".join(lines)


@FUZZ
@given(data=st.data())
def test_scenario_files(tmp_path_factory, data: st.DataObject) -> None:
    d = tmp_path_factory.mktemp("scenario")
    path = d / "s.toml"
    path.write_text(_mutate_toml(SCENARIO, data), errors="surrogateescape")
    out = d / "out"
    assert_clean(*run_cli(["schedule", "--scenario", str(path), "--out", str(out)]), out, "toml")


@FUZZ
@given(data=st.data())
def test_timing_files(tmp_path_factory, data: st.DataObject) -> None:
    d = tmp_path_factory.mktemp("timing")
    path = d / "t.toml"
    base = (ROOT / "sim/model/timing/h200.toml").read_text()
    path.write_text(_mutate_toml(base, data))
    out = d / "out"
    argv = ["run", "--scenario", "minimal-race", "--timing", str(path), "--out", str(out)]
    assert_clean(*run_cli(argv), out, "timing file")


@pytest.fixture(scope="module")
def good_schedule(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("good") / "s"
    code, err = run_cli(["schedule", "--scenario", "minimal-race", "--out", str(out)])
    assert code == 0, err
    return json.loads((out / "schedule.json").read_text())


STEP_FIELDS = ["step", "finished", "new", "ops", "req_ids", "num_scheduled", "num_computed",
               "num_prompt", "drafts", "accepted", "discard", "prev_positions",
               "prev_num_draft_tokens"]  # fmt: skip


@FUZZ
@given(data=st.data())
def test_schedule_files(tmp_path_factory, good_schedule: dict, data: st.DataObject) -> None:
    d = tmp_path_factory.mktemp("schedule")
    sched = json.loads(json.dumps(good_schedule))
    kind = data.draw(st.sampled_from(["field", "op", "truncate", "bytes", "scenario"]))
    steps = sched["steps"]
    n = data.draw(st.integers(0, len(steps) - 1))
    if kind == "field":
        field = data.draw(st.sampled_from(STEP_FIELDS))
        value = data.draw(st.one_of(
            st.integers(-(10**30), 10**30), st.text(max_size=5), st.none(),
            st.lists(st.integers(-5, 10**12), max_size=6), st.just([[1]]),
        ))  # fmt: skip
        steps[n][field] = value
        text = json.dumps(sched)
    elif kind == "op":
        op = [data.draw(st.sampled_from(["remove", "add", "move", "swap", "jump", 3])),
              data.draw(st.integers(-3, 70)), data.draw(st.integers(-3, 70)), "Z"]  # fmt: skip
        steps[n]["ops"].insert(data.draw(st.integers(0, len(steps[n]["ops"]))), op)
        text = json.dumps(sched)
    elif kind == "scenario":
        sched["scenario"]["engine"]["max_num_seqs"] = data.draw(st.integers(-2, 3))
        text = json.dumps(sched)
    elif kind == "truncate":
        full = json.dumps(sched)
        text = full[: data.draw(st.integers(0, len(full) - 1))]
    else:
        text = data.draw(st.binary(max_size=300)).decode("latin-1")
    path = d / "schedule.json"
    path.write_text(text)
    out = d / "out"
    argv = ["run", "--schedule", str(path), "--out", str(out), "--no-trace"]
    assert_clean(*run_cli(argv), out, f"schedule.json ({kind})")


def test_wrong_kind_of_file_is_named(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert (
        run_cli(["run", "--scenario", "minimal-race", "--policy", "align", "--out", str(out)])[0]
        == 0
    )
    for argv in (["run", "--schedule", str(out / "reads.parquet"), "--out", str(tmp_path / "o")],
                 ["run", "--scenario", str(out / "meta.json"), "--out", str(tmp_path / "o")],
                 ["compare", str(out / "trace.parquet")],
                 ["compare", str(out)]):  # fmt: skip
        code, err = run_cli(argv)
        assert code != 0 and len(err.strip().splitlines()) == 1, (argv, err)
        assert "Traceback" not in err and not (tmp_path / "o").exists(), argv


def test_valid_inputs_are_unchanged_by_the_checks(tmp_path: Path, good_schedule: dict) -> None:
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(good_schedule))
    code, err = run_cli(["run", "--schedule", str(path), "--out", str(tmp_path / "o")])
    assert code == 0, err
    meta = json.loads((tmp_path / "o" / "comparison.json").read_text())
    assert {m["policy"] for m in meta} >= {"align", "device-authoritative"}
    assert tomllib.loads(SCENARIO)["name"] == "minimal-race"
