"""Hostile input on every surface of ``python -m sim`` and ``python -m gpu_check``.

Each case runs the command line in-process (``sim.cli.main.main``, ``gpu_check.__main__.main``)
under an alarm, and is classified: ``ok`` (exit 0, the output whole), ``clean`` (non-zero
exit, one ``error`` line on stderr, nothing left in ``--out`` or in the directory read),
``traceback``, ``hang`` (longer than ``HANG_S``), ``partial`` (a failure that left output),
``accepted_invalid`` (exit 0 on an input known to be invalid) or ``unclear`` (an error that is
not one line). ``make test`` runs a bounded, fixed set of cases and fails on any but the first
two; ``SPECRACE_FUZZ_EXAMPLES=N`` draws N fresh ones per surface; with
``SPECRACE_FUZZ_CAMPAIGN=FILE`` every outcome is appended to FILE instead of failing
(``scripts/fuzz_campaign.py`` runs that and prints the per-surface table).
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fuzz_harness import CAMPAIGN, check_case, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repo_root import ROOT

from gpu_check.__main__ import main as gpu_main
from sim.cli.main import main
from sim.model.params import parameter_keys
from sim.runs.io import table_kinds
from sim.runs.outputs import MANIFEST, MARKER

SCENARIO = (ROOT / "sim/model/scenarios/minimal-race.toml").read_text()
EXAMPLES = int(os.environ.get("SPECRACE_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="SPECRACE_FUZZ_EXAMPLES" not in os.environ,  # make test: the same cases each run
    database=None,  # the campaign counts fresh cases; make test draws fixed ones
    suppress_health_check=list(HealthCheck),
)


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
    invalid = key not in parameter_keys() or None
    check_case("--set", argv, f"--set {key}={value}", out, invalid=invalid)


def _is_assignment(line: str) -> bool:
    """A whole ``key = value`` line (not a line of a multi-line string that holds a '=')."""
    try:
        return "=" in line and bool(tomllib.loads(line))
    except tomllib.TOMLDecodeError:
        return False


def _mutate_toml(text: str, data: st.DataObject) -> tuple[str, bool | None]:
    """A mutated TOML and whether it is certainly invalid (None: it may be valid)."""
    kind = data.draw(st.sampled_from(["truncate", "value", "unknown", "bytes", "deep"]))
    if kind == "truncate":
        return text[: data.draw(st.integers(0, len(text)))], None
    if kind == "bytes":
        return data.draw(st.binary(max_size=200)).decode("latin-1"), None
    if kind == "deep":
        return text + "\n[extra]\nx = " + "[" * 600 + "]" * 600 + "\n", True
    lines = text.splitlines()
    assigns = [i for i, line in enumerate(lines) if _is_assignment(line)]
    i = data.draw(st.sampled_from(assigns))
    key = lines[i].split("=")[0]
    if kind == "unknown":
        lines.insert(i, f"{key.strip()}x = 1")
        return "\n".join(lines), True
    # A valid default_steps stays small: a schedule of 10^6 steps is slow, not a hang.
    steps = st.one_of(st.integers(1, 50).map(str), st.sampled_from(["10000001", "0", "-1"]))
    value = data.draw(steps if key.strip() == "default_steps" else HOSTILE_VALUES)
    lines[i] = f"{key}= {value}"
    return "\n".join(lines), None


@FUZZ
@given(data=st.data())
def test_scenario_files(tmp_path_factory, data: st.DataObject) -> None:
    d = tmp_path_factory.mktemp("scenario")
    path = d / "s.toml"
    text, invalid = _mutate_toml(SCENARIO, data)
    path.write_text(text, errors="surrogateescape")
    out = d / "out"
    argv = ["schedule", "--scenario", str(path), "--out", str(out)]
    check_case("scenario files", argv, f"scenario file {text[-200:]!r}", out, invalid=invalid)


@FUZZ
@given(data=st.data())
def test_timing_files(tmp_path_factory, data: st.DataObject) -> None:
    d = tmp_path_factory.mktemp("timing")
    path = d / "t.toml"
    base = (ROOT / "sim/model/timing/h200.toml").read_text()
    text, invalid = _mutate_toml(base, data)
    path.write_text(text)
    out = d / "out"
    argv = ["run", "--scenario", "minimal-race", "--timing", str(path), "--out", str(out)]
    check_case("timing files", argv, f"timing file {text[-200:]!r}", out, invalid=invalid)


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
    op: list = []
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
    invalid = kind in ("truncate", "bytes") or (kind == "op" and op[0] in ("jump", 3)) or None
    check_case("schedule.json", argv, f"schedule.json ({kind}) {text[:200]!r}", out,
               invalid=invalid)  # fmt: skip


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


# -- run directories and their tables, given to plot / perfetto / timeline / replay / compare ---
@pytest.fixture(scope="module")
def run_tree(tmp_path_factory) -> Path:
    """A one-policy run, a --policy all run, a CPU replay of the first, a small sweep."""
    root = tmp_path_factory.mktemp("tree")
    for argv, prog in (
        (["run", "--scenario", "minimal-race", "--policy", "align", "--out", str(root / "one")],
         main),
        (["run", "--scenario", "minimal-race", "--out", str(root / "all")], main),
        (["replay", "--device", "cpu", "--sim-run", str(root / "one"), "--out",
          str(root / "replay")], gpu_main),
        (["sweep", "--scenario", "minimal-race", "--policy", "align,unsynced", "--steps", "8",
          "--vary", "timing.dma_land_delay_ns=20000,40000", "--workers", "1", "--quiet",
          "--out", str(root / "sweep")], main),
    ):  # fmt: skip
        code, err = run_cli(argv, prog)
        assert code == 0, (argv, err)
    return root


TABLES = ["reads.parquet", "trace.parquet", "observed.parquet", "sweep.parquet"]
# command -> (argv given the copied tree and an --out, the files it needs, the files it writes)
COMMANDS: dict[str, tuple] = {
    "plot run": (lambda t, o: ["plot", str(t / "one")], ["one/meta.json", "one/reads.parquet",
                 "one/schedule.json"], ["one/margins.png"]),
    "plot all": (lambda t, o: ["plot", str(t / "all")], ["all/schedule.json", "all/*/meta.json",
                 "all/*/reads.parquet"], ["all/margins.png"]),
    "perfetto": (lambda t, o: ["perfetto", str(t / "one")], ["one/*"], ["one/trace.perfetto.json"]),
    "perfetto all": (lambda t, o: ["perfetto", str(t / "all")], ["all/schedule.json",
                     "all/*/meta.json", "all/*/reads.parquet", "all/*/trace.parquet"],
                     ["all/trace.perfetto.json"]),
    "timeline": (lambda t, o: ["timeline", str(t / "one")], ["one/*"], ["one/timeline.png"]),
    "timeline step": (lambda t, o: ["timeline", str(t / "all"), "--step", "4", "--policy",
                      "align"], ["all/schedule.json", "all/align/*"], ["all/align/timeline.png"]),
    "replay --sim-run": (lambda t, o: ["replay", "--device", "cpu", "--sim-run", str(t / "one"),
                         "--out", str(o)], ["one/*"], []),
    "run --schedule": (lambda t, o: ["run", "--schedule", str(t / "one/schedule.json"),
                       "--no-trace", "--out", str(o)], ["one/schedule.json"], []),
    "compare": (lambda t, o: ["compare", str(t / "replay")], ["replay/observed.parquet"], []),
    "compare file": (lambda t, o: ["compare", str(t / "replay/observed.parquet"), "--req-id",
                     "R"], ["replay/observed.parquet"], []),
    "plot replay": (lambda t, o: ["plot", str(t / "replay/observed.parquet"), "--req", "R",
                    "--step", "4"], ["replay/observed.parquet"], ["replay/landing_R_4.png"]),
    "shrink": (lambda t, o: ["shrink", str(t / "one"), "--step", "4", "--req", "R"],
               ["one/meta.json", "one/reads.parquet", "one/schedule.json"],
               ["one/shrunk-4-R.toml"]),
    "plot sweep": (lambda t, o: ["plot", str(t / "sweep")], ["sweep/sweep.parquet"],
                   ["sweep/hazard.png"]),
    "report": (lambda t, o: ["report", str(t / "one")], ["one/*"], ["one/report.html"]),
    "report all": (lambda t, o: ["report", str(t / "all")], ["all/schedule.json",
                   "all/*/meta.json", "all/*/reads.parquet", "all/*/trace.parquet"],
                   ["all/report.html"]),
}  # fmt: skip
HOSTILE_INTS = st.sampled_from([-1, -(2**31), 2**31, 10**12, 2**62, 2**63 - 1, 0, 1, 7, 999])
HOSTILE_JSON = st.one_of(
    st.none(), st.booleans(), HOSTILE_INTS, st.floats(allow_nan=False), st.text(max_size=8),
    st.lists(st.integers(-3, 3), max_size=3), st.just({"a": [[[]]]}), st.just("align"),
)  # fmt: skip


def _mutate_table(path: Path, tree: Path, data: st.DataObject) -> tuple[str, bool | None]:
    """Mutate one Parquet file; returns the mutation and whether it makes it certainly invalid."""
    kind = data.draw(st.sampled_from(["delete", "truncate", "garbage", "swap", "drop_column",
                                      "retype", "cell", "duplicate", "cut", "empty"]))  # fmt: skip
    if kind == "delete":
        path.unlink()
        return kind, True
    if kind in ("truncate", "garbage"):
        raw = path.read_bytes()
        path.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1))] if kind == "truncate"
                         else data.draw(st.binary(max_size=400)))  # fmt: skip
        return kind, True
    if kind == "swap":  # a table of another kind in its place
        other = data.draw(st.sampled_from([t for t in TABLES if t != path.name]))
        shutil.copyfile(next(tree.rglob(other)), path)
        return f"swap with {other}", True
    df = pd.read_parquet(path)
    col = data.draw(st.sampled_from(list(df.columns)))
    invalid: bool | None = None
    schema = table_kinds()[path.name][2]
    if kind == "drop_column":
        df = df.drop(columns=col)
        invalid = col in schema or None
    elif kind == "retype":
        to = data.draw(st.sampled_from(["string", "float-nan", "int"]))
        if to == "string":
            df[col] = df[col].astype(str) + "x"
        elif to == "float-nan":
            df[col] = pd.Series([float("nan")] * len(df), dtype="float64")
        else:
            df[col] = pd.Series(range(len(df)), dtype="int64")
        invalid = (to == "string" and schema.get(col, "string") != "string") or None
        kind = f"retype {to}"
    elif kind == "cell" and len(df):
        i = data.draw(st.integers(0, len(df) - 1))
        if pd.api.types.is_bool_dtype(df[col]):
            df.loc[i, col] = not bool(df.loc[i, col])
        elif pd.api.types.is_integer_dtype(df[col]):
            info = pd.Series(dtype=df[col].dtype).dtype
            v = data.draw(HOSTILE_INTS)
            df.loc[i, col] = (
                v if -(2 ** (8 * info.itemsize - 1)) <= v < 2 ** (8 * info.itemsize - 1) else -1
            )  # noqa: E501
        elif pd.api.types.is_float_dtype(df[col]):
            df.loc[i, col] = data.draw(st.sampled_from([float("nan"), float("inf"), -1.0, 1e300]))
        elif isinstance(df[col].iloc[i], (list, np.ndarray)):  # a list column: text is unwritable
            df.at[i, col] = data.draw(st.one_of(st.none(), st.lists(HOSTILE_INTS, max_size=3)))
        else:
            df.loc[i, col] = data.draw(st.one_of(st.none(), st.text(max_size=6)))
    elif kind == "duplicate" and len(df):
        df = pd.concat([df, df.iloc[: data.draw(st.integers(1, len(df)))]], ignore_index=True)
        invalid = path.name == "reads.parquet" or None  # a replay with --reps repeats reads
    elif kind == "cut":
        df = df.iloc[: data.draw(st.integers(0, len(df)))]
    elif kind == "empty":
        df = df.iloc[:0]
    df.to_parquet(path, index=False)
    return f"{kind} {col}", invalid


def _mutate_json(path: Path, data: st.DataObject) -> tuple[str, bool | None]:
    kind = data.draw(st.sampled_from(["delete", "truncate", "garbage", "not_object", "key",
                                      "drop_key", "binary"]))  # fmt: skip
    text = path.read_text()
    if kind == "delete":
        path.unlink()
        return kind, True
    if kind == "truncate":  # at least the last character that is not whitespace
        path.write_text(text[: data.draw(st.integers(0, len(text.rstrip()) - 1))])
        return kind, True
    if kind == "garbage":
        path.write_text(data.draw(st.text(max_size=50)) + "{")
        return kind, True
    if kind == "binary":
        path.write_bytes(b"\xff\xfe\x00" + data.draw(st.binary(max_size=100)))
        return kind, True
    if kind == "not_object":
        path.write_text(json.dumps(data.draw(st.sampled_from([[], 1, "x", None, [{}]]))))
        return kind, True
    obj = json.loads(text)
    if not isinstance(obj, dict) or not obj:
        return "unchanged", None
    key = data.draw(st.sampled_from(sorted(obj)))
    if kind == "drop_key":
        del obj[key]
        path.write_text(json.dumps(obj))
        return f"drop {key}", None
    obj[key] = data.draw(HOSTILE_JSON)
    path.write_text(json.dumps(obj))
    return f"{key}={obj[key]!r}", None


@FUZZ
@given(data=st.data())
def test_run_directories(tmp_path_factory, run_tree: Path, data: st.DataObject) -> None:
    tree = tmp_path_factory.mktemp("rundir") / "t"
    shutil.copytree(run_tree, tree)
    name = data.draw(st.sampled_from(sorted(COMMANDS)))
    argv_of, reads, writes = COMMANDS[name]
    needed = sorted(
        {
            p
            for pattern in reads
            for p in tree.glob(pattern)
            if p.is_file() and p.name not in (MARKER, MANIFEST)
        }
    )  # the marker and the manifest prove ownership to a writer; no reader reads them
    files = sorted(p for p in tree.rglob("*") if p.is_file() and p.suffix in (".json", ".parquet"))
    out = tree.parent / "out"
    argv = argv_of(tree, out)
    # Mostly a file the command reads; sometimes one it does not (must change nothing); or the
    # files as they are and a hostile option.
    choice = data.draw(st.sampled_from(["needed"] * 4 + ["any", "option"]))
    if choice == "option":
        (tree.parent / "f").write_text("a file")
        opt = data.draw(st.sampled_from(["--out", "--step", "--req", "--policy", "--x", "--y",
                                         "--what", "--req-id"]))  # fmt: skip
        value = data.draw(st.one_of(st.sampled_from(
            ["", "-1", "99", "x", "4", "R", "all", "nope", "set.timing.dma_land_delay_ns",
             str(tree.parent / "f" / "o"), str(tree.parent / "f"), str(tree / "one")]),
            st.text(max_size=6)))  # fmt: skip
        argv = [*argv, opt, value]
        how, invalid, writes = f"{opt} {value!r}", None, []  # where it writes depends on it
    else:
        target = data.draw(st.sampled_from(needed if choice == "needed" else files))
        if target.suffix == ".parquet":
            how, invalid = _mutate_table(target, tree, data)
        else:
            how, invalid = _mutate_json(target, data)
        if target not in needed:
            invalid = None
        how = f"{target.relative_to(tree)}: {how}"
    prog = gpu_main if argv[0] == "replay" else main
    watch = tuple(tree / d for d in ("one", "all", "replay", "sweep"))
    given_out: Path | None = out if "--out" in argv else None
    expect = tuple(tree / w for w in writes)
    if argv[-2] == "--out":  # a hostile --out: the output goes there, nothing else may change
        given_out, expect, watch = None, (), (*watch, tree.parent)
    check_case(f"run dirs: {name}", argv, how, given_out, expect=expect, watch=watch,
               invalid=invalid, prog=prog)  # fmt: skip


# -- sweep specs: --vary, --seeds, --swarm, --steps, --policy; and resuming a sweep ----------
# Valid counts stay small (a valid sweep of 10^6 steps is not a bug, only slow); the invalid
# ones include the first value past each range.
SMALL_COUNTS = st.one_of(st.integers(1, 3).map(str), st.integers(1, 3).map(str), st.sampled_from(
    ["0", "-1", "abc", "1e3", "", "2.5", str(10**30), "10000001"]))  # fmt: skip
VARY_VALUES = st.lists(HOSTILE_VALUES, min_size=0, max_size=3).map(",".join)
SWEEP_KEYS = st.one_of(
    st.sampled_from([k for k in parameter_keys() if k.startswith("timing.")]), KEYS
)


@FUZZ
@given(data=st.data())
def test_sweep_specs(tmp_path_factory, run_tree: Path, data: st.DataObject) -> None:
    d = tmp_path_factory.mktemp("sweep")
    out = d / "sw"
    mode = data.draw(st.sampled_from(["fresh", "fresh", "resume", "stale"]))
    invalid: bool | None = None
    if mode == "fresh":  # a valid sweep with one part hostile
        part = data.draw(st.sampled_from(["vary", "vary", "values", "steps", "policy", "swarm",
                                          "seeds", "workers", "out"]))  # fmt: skip
        opts = {"--steps": "6", "--policy": "align", "--seeds": "1", "--workers": "1",
                "--vary": "timing.dma_land_delay_ns=20000,40000"}  # fmt: skip
        if part == "vary":
            key = data.draw(SWEEP_KEYS)
            opts["--vary"] = f"{key}={data.draw(VARY_VALUES)}"
            invalid = key not in parameter_keys() or None
        elif part == "values":
            opts["--vary"] = f"timing.dma_land_delay_ns={data.draw(VARY_VALUES)}"
        elif part == "swarm":
            del opts["--vary"]
            opts["--swarm"] = data.draw(SMALL_COUNTS)
        elif part == "policy":
            opts["--policy"] = data.draw(st.sampled_from(["align,unsynced", "all", "nope",
                                                          "align,align", ",", ""]))  # fmt: skip
        elif part == "workers":
            opts["--workers"] = data.draw(st.sampled_from(["-1", "x", "5000", ""]))
        elif part == "out":  # "." and "" are the scratch working directory of the case
            out = data.draw(st.sampled_from([d / "file" / "sw", d / "file", Path("."), d, None]))
            (d / "file").write_text("a file")
        else:
            extra = ["1000001"] if part in ("seeds", "swarm") else []
            opts[f"--{part}"] = data.draw(st.one_of(SMALL_COUNTS, st.sampled_from(extra or ["0"])))
        argv = ["sweep", "--scenario", "minimal-race", "--quiet"]
        argv += [x for kv in opts.items() for x in kv]
        argv += ["--out", "" if out is None else str(out)]
        given = out if out is not None and out.is_absolute() else None
        check_case("sweep specs", argv, " ".join(argv[4:]), given,
                   expect=(given / "sweep.parquet",) if given else (), invalid=invalid)  # fmt: skip
        return
    shutil.copytree(run_tree / "sweep", out)
    argv = ["sweep", "--scenario", "minimal-race", "--policy", "align,unsynced", "--steps", "8",
            "--vary", "timing.dma_land_delay_ns=20000,40000", "--workers", "1", "--quiet",
            "--out", str(out)]  # fmt: skip
    if mode == "stale":  # what a kill just before a rename leaves (listed first): removed on resume
        from sim.runs.outputs import record

        stale = [out / ".sweep.parquet.k1ll3d_x.tmp", out / "points" / ".0123.json.abcdefgh.tmp"]
        for p in stale:
            record(out, p.relative_to(out).as_posix(), temp=True)
            p.write_text("half")
        keep = [out / ".notes.tmp", out / "points" / ".0124.json.mynotes1.tmp"]  # not listed
        for p in keep:
            p.write_text("mine")
        code, err = run_cli(argv)
        assert code == 0, err
        assert not any(p.exists() for p in stale) and all(p.exists() for p in keep)
        if CAMPAIGN:
            check_case("sweep specs", argv, "resume over stale temporaries", None,
                       expect=(out / "sweep.parquet",))  # fmt: skip
        return
    files = sorted(p for p in out.rglob("*.json"))
    target = data.draw(st.sampled_from(files))
    how, invalid = _mutate_json(target, data)
    if how.startswith(("delete", "unchanged")):
        invalid = None  # a point deleted is run again; without sweep.json the points still fit
    # A sweep to resume is changed in place by design (new points): the check is one line on
    # error and no stale temporary, so no directory is watched here.
    check_case("sweep specs", argv, f"resume with {target.relative_to(out)}: {how}", None,
               expect=(out / "sweep.parquet",), invalid=invalid)  # fmt: skip


# -- gpu_check's command line on the CPU ---------------------------------------------------------
GPU_INTS = st.one_of(st.integers(1, 6).map(str), st.sampled_from(
    ["0", "-1", "x", "", "1.5", "1e3", str(10**30), "65537", "16"]))  # fmt: skip


@FUZZ
@given(data=st.data())
def test_gpu_check_arguments(tmp_path_factory, run_tree: Path, data: st.DataObject) -> None:
    d = tmp_path_factory.mktemp("gpu")
    out = d / "out"
    (d / "file").write_text("not a directory")
    paths = [str(run_tree / p) for p in ("one", "all", "replay", "sweep", "one/schedule.json",
             "one/reads.parquet", "one/meta.json", "replay/observed.parquet")]  # fmt: skip
    paths += [str(d / "file"), str(d / "missing"), "", str(d)]
    cmd = data.draw(st.sampled_from(["replay", "replay", "replay", "padding", "summary",
                                     "vllm-export", "vllm-compare", "recall", "?"]))  # fmt: skip
    given_out: Path | None = None
    expect: tuple[Path, ...] = ()
    if cmd == "replay":
        opts = {"--steps": "6", "--policy": "align"}
        part = data.draw(st.sampled_from(["steps", "reps", "seed", "policy", "scenario",
                                          "schedule", "sim-run", "out"]))  # fmt: skip
        if part in ("schedule", "sim-run", "scenario"):
            opts[f"--{part}"] = data.draw(st.sampled_from(paths + ["minimal-race", "nope"]))
            if part != "scenario":
                del opts["--steps"]
        elif part == "policy":
            opts["--policy"] = data.draw(st.sampled_from(["all", "nope", "align,", "unsynced"]))
        elif part == "out":  # "." and "" are the scratch working directory of the case
            out = data.draw(st.sampled_from([d / "file" / "o", d / "file", Path("."), d, None]))
        else:  # small valid values (a valid replay of 10^5 steps is only slow) or invalid ones
            past = {"steps": "10000001", "reps": "1000001", "seed": str(2**63)}[part]
            opts[f"--{part}"] = data.draw(st.one_of(st.integers(1, 6).map(str), st.sampled_from(
                ["0", "-1", "x", "", "1.5", "1e3", str(10**30), past])))  # fmt: skip
        argv = ["replay", "--device", "cpu", *[x for kv in opts.items() for x in kv],
                "--out", "" if out is None else str(out)]  # fmt: skip
        given_out = out if out is not None and out.is_absolute() else None
        if given_out:
            expect = (given_out / "observed.parquet", given_out / "replay_summary.json")
    elif cmd == "padding":
        argv = ["padding", "--num-reqs", data.draw(GPU_INTS), "--k", data.draw(GPU_INTS),
                "--max-num-seqs", data.draw(GPU_INTS), "--max-num-batched-tokens",
                data.draw(st.one_of(GPU_INTS, st.just("8192")))]  # fmt: skip
        argv += data.draw(st.sampled_from([[], ["--json"], ["--seed", "-1"]]))
    elif cmd == "recall":
        argv = ["recall", "--device", "cpu"]
        argv += data.draw(st.sampled_from([["--num-reqs"], ["--k"], ["--pairs"]]))
        argv += [data.draw(st.one_of(GPU_INTS, st.just("1025")))]  # (1024 is valid, and slow)
        argv += data.draw(st.sampled_from([[], ["--impl", "triton"], ["--impl", "x"],
                                           ["--dtype", "float16"], ["--seed", "-1"]]))  # fmt: skip
    elif cmd == "summary":
        argv = ["summary", "--dir", data.draw(st.sampled_from(paths))]
    elif cmd == "vllm-export":
        argv = ["vllm-export", data.draw(st.sampled_from(paths)), "--out", str(out)]
        given_out = out
    elif cmd == "vllm-compare":
        argv = ["vllm-compare", data.draw(st.sampled_from(paths))]
    else:
        argv = [data.draw(st.text(max_size=8)), data.draw(st.text(max_size=8))]
    watch = (run_tree, d) if given_out is None else (run_tree,)
    check_case("gpu_check arguments", argv, " ".join(argv), given_out, expect=expect,
               watch=watch, prog=gpu_main)  # fmt: skip


# -- issue #24: output paths and --force, --scheduler, bounds, schedule meaning ------------------
DIR_WRITERS: dict[str, tuple[list[str], Callable | None, tuple[str, ...]]] = {
    # name -> (argv before --out, prog, files a success writes into --out)
    "run": (["run", "--scenario", "minimal-race", "--policy", "align", "--no-trace",
             "--steps", "6"], None, ("meta.json", "reads.parquet")),
    "schedule": (["schedule", "--scenario", "minimal-race", "--steps", "6"], None,
                 ("schedule.json",)),
    "replay": (["replay", "--device", "cpu", "--steps", "6", "--policy", "align"], "gpu",
               ("observed.parquet",)),
    "sweep": (["sweep", "--scenario", "minimal-race", "--policy", "align", "--vary",
               "timing.dma_land_delay_ns=1,2", "--steps", "4", "--workers", "1", "--quiet"],
              None, ("sweep.parquet",)),
    "field-reports": (["field-reports", "--only", "vllm#45100", "--seeds", "1"], None,
                      ("summary.md",)),
}  # fmt: skip
FILE_WRITERS = {  # name -> argv given the run and the output file
    "check --out": lambda run, f: ["check", "--max-rows", "1", "--steps", "2", "--out", str(f)],
    "plot --out": lambda run, f: ["plot", str(run), "--out", str(f)],
    "shrink --out": lambda run, f: ["shrink", str(run), "--step", "4", "--req", "R", "--out",
                                    str(f)],
}  # fmt: skip
TARGETS = ["user folder", "user folder --force", "source tree --force", "marked --force",
           "marked", "unmarked run --force", "marked + user file --force", "empty", "new nested",
           "loop", "dangling", "long name", "long path", "under a file"]  # fmt: skip
FILE_TARGETS = ["user file", "own figure", "new", "loop", "dangling", "long name",
                "under a file", "a folder"]  # fmt: skip


def _target(d: Path, kind: str, writer: str) -> tuple[Path, list[str], bool | None]:
    """An --out of ``kind`` under ``d``: (path, extra options, certainly invalid?)."""
    (d / "file").write_text("a file")
    os.symlink(d / "loop", d / "loop")
    os.symlink(d / "nowhere", d / "dangling")
    mine = d / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    replacing = writer in ("run", "schedule", "replay")
    force = ["--force"] if kind.endswith("--force") and replacing else []
    if kind.startswith("user folder"):
        return mine, force, True
    if kind.startswith("source tree"):
        shutil.copytree(ROOT / "sim" / "model" / "timing", d / "src")
        return d / "src", force, True
    if kind.startswith(("marked", "unmarked")):
        out = d / "prev"
        argv, prog, _files = DIR_WRITERS[writer]
        code, err = run_cli([*argv, "--out", str(out)], gpu_main if prog else main)
        assert code == 0, err
        if kind.startswith("unmarked"):
            (out / ".specrace-run.json").unlink()
        if "user file" in kind:
            (out / "notes.txt").write_text("mine")  # kept by a writer that adds its files
            return out, force, True if replacing else None
        # a resumable writer writes into its own kind's folder; a replacing one needs --force
        resumable = writer in ("sweep", "field-reports")
        return out, force, None if (force or resumable) else True
    if kind == "empty":
        (d / "e").mkdir()
        return d / "e", [], None
    return {
        "new nested": (d / "a" / "b" / "o", [], None),
        "loop": (d / "loop" / "o", [], True),
        "dangling": (d / "dangling", [], True),
        "long name": (d / ("n" * 300), [], True),
        "long path": (d.joinpath(*["abcdefghij"] * 500), [], True),
        "under a file": (d / "file" / "o", [], True),
    }[kind]


@FUZZ
@given(data=st.data())
def test_output_paths(tmp_path_factory, run_tree: Path, data: st.DataObject) -> None:
    """Every writer against hostile --out paths: a user's folder or file is never changed."""
    d = tmp_path_factory.mktemp("outpaths")
    if data.draw(st.booleans()):
        writer = data.draw(st.sampled_from(sorted(DIR_WRITERS)))
        kind = data.draw(st.sampled_from(TARGETS))
        out, extra, invalid = _target(d, kind, writer)
        argv, prog, files = DIR_WRITERS[writer]
        argv = [*argv, "--out", str(out), *extra]
        replaced = kind in ("marked --force", "unmarked run --force") or (
            kind == "marked" and writer in ("sweep", "field-reports"))  # fmt: skip
        watch = (d / "mine", d / "file") if replaced else (d / "mine", d / "file", d / "src")
        # (a path the file system refuses has no exists(): nothing to watch there)
        odd = kind.startswith(("loop", "dangling", "long"))
        given_out = None if replaced or odd else out
        check_case("output paths", argv, f"{writer} --out {kind}", given_out,
                   expect=tuple(out / f for f in files), watch=tuple(w for w in watch
                   if w.exists()), invalid=invalid, prog=gpu_main if prog else main)  # fmt: skip
        return
    writer = data.draw(st.sampled_from(sorted(FILE_WRITERS)))
    kind = data.draw(st.sampled_from(FILE_TARGETS))
    u, links = d / "u", d / "l"  # the user's folder; the links (not watched: a loop has no stat)
    u.mkdir()
    links.mkdir()
    (u / "file").write_text("a file")
    os.symlink(links / "loop", links / "loop")
    os.symlink(links / "nowhere", links / "dangling")
    run = d / "run"
    shutil.copytree(run_tree / "one", run)
    suffix = {"check --out": ".json", "plot --out": ".png", "shrink --out": ".toml"}[writer]
    f, invalid = {
        "user file": (u / f"mine{suffix}", True), "new": (u / f"new{suffix}", None),
        "own figure": (run / "margins.png", None), "loop": (links / "loop" / f"o{suffix}", True),
        "dangling": (links / "dangling" / f"o{suffix}", True),
        "long name": (u / ("n" * 300 + suffix), True),
        "under a file": (u / "file" / f"o{suffix}", True), "a folder": (run, True),
    }[kind]  # fmt: skip
    if kind == "user file":
        f.write_text("mine")
    if kind == "a folder" and writer == "plot --out":
        invalid = None  # plot's --out takes its suffix: RUN.png beside the folder
    if kind == "own figure":  # specrace's, so any writer may replace it
        assert run_cli(["plot", str(run)])[0] == 0
    argv = FILE_WRITERS[writer](run, f)
    watch = (u,) if kind == "new" else (u, run)
    check_case("output paths", argv, f"{writer} {kind}", None, expect=() if invalid else (f,),
               watch=watch if invalid else (), invalid=invalid)  # fmt: skip


SCHEDULER_ADDRESSES = st.one_of(
    st.sampled_from(["", " ", "tcp://", "tcp://:1", "localhost", "http://127.0.0.1:80",
                     "tcp://127.0.0.1:0", "127.0.0.1:99999", "[::1]:1", "tcp://a b:1",
                     "inproc://x", "tcp://127.0.0.1:1", "tls://127.0.0.1:1",
                     "tcp://no-such-host.invalid:8786", "GARBAGE", "GARBAGE", "SILENT"]),
    st.text(max_size=20),
    st.integers(1, 65535).map(lambda p: f"127.0.0.1:{p}"),
)  # fmt: skip


@FUZZ
@given(address=SCHEDULER_ADDRESSES)
def test_scheduler_addresses(tmp_path_factory, address: str) -> None:
    """``sweep --scheduler`` at addresses with no Dask scheduler: one line, nothing written."""
    import socket
    import threading

    pytest.importorskip("distributed")
    d = tmp_path_factory.mktemp("sched")
    server = None
    if address in ("GARBAGE", "SILENT"):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        answer = b"\xff" * 64 if address == "GARBAGE" else b""

        def serve(s=server, answer=answer) -> None:
            held = []
            try:
                while True:
                    c, _ = s.accept()
                    held.append(c)
                    c.sendall(answer)
            except OSError:
                pass

        threading.Thread(target=serve, daemon=True).start()
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    out = d / "sw"
    argv = ["sweep", "--scenario", "minimal-race", "--policy", "align", "--vary",
            "timing.dma_land_delay_ns=1,2", "--steps", "4", "--quiet", "--scheduler", address,
            "--out", str(out)]  # fmt: skip
    try:
        check_case("--scheduler", argv, f"--scheduler {address!r}", out, invalid=True)
    finally:
        if server is not None:
            server.close()


BOUND_COUNTS = st.one_of(st.integers(1, 3).map(str), st.sampled_from(
    ["0", "-1", "x", "", "1e3", str(10**6), str(10**9), str(10**12), "9" * 5000]))  # fmt: skip


# A valid count may still be a long run: each case's --budget (CPU hours) lets it run 1.8 s by
# its estimate. (0.002, 7 s, made field-reports --seeds 2 and 3 a quarter of the test's time.)
BUDGET_H = "0.0005"


@FUZZ
@given(data=st.data())
def test_bounds(tmp_path_factory, data: st.DataObject) -> None:
    """Counts and searches past their bounds, and integers of any length: refused up front."""
    d = tmp_path_factory.mktemp("bounds")
    what = data.draw(st.sampled_from(["risk", "field-reports", "check", "bench", "--set",
                                      "--vary", "step"]))  # fmt: skip
    n = data.draw(BOUND_COUNTS)
    out: Path | None = None
    if what == "risk":
        opt = data.draw(st.sampled_from(["--seeds", "--steps", "--max-num-seqs",
                                         "--max-num-batched-tokens"]))  # fmt: skip
        argv = ["risk", "--no-mitigations", "--seeds", "1", "--steps", "20", opt, n]
        argv += ["--budget", BUDGET_H]
    elif what == "field-reports":
        out = d / "fr"
        argv = ["field-reports", "--only", "vllm#45100", "--seeds", n, "--budget", BUDGET_H,
                "--out", str(out)]  # fmt: skip
    elif what == "check":
        argv = ["check", "--max-rows", data.draw(st.sampled_from(["1", "2", "8", "9", n])),
                "--steps", data.draw(st.sampled_from(["2", "3", "8", n])), "--k",
                data.draw(st.sampled_from(["1", "3", n])), "--budget", BUDGET_H]  # fmt: skip
    elif what == "bench":
        argv = ["bench", "--steps", "50", "--vector-steps", "50", "--points", "10",
                "--long-steps", "0", "--budget", BUDGET_H,
                data.draw(st.sampled_from(["--points", "--long-steps", "--sweep"])), n]  # fmt: skip
    elif what in ("--set", "--vary"):
        key = data.draw(st.sampled_from(["engine.max_num_seqs", "timing.gpu_prep_ns",
                                         "workload.initial_requests"]))  # fmt: skip
        sign = data.draw(st.sampled_from(["", "-", "+"]))
        big = sign + "9" * data.draw(st.integers(31, 6000))
        out = d / "o"
        argv = (["run", "--scenario", "minimal-race", "--set", f"{key}={big}", "--out", str(out)]
                if what == "--set" else
                ["sweep", "--scenario", "minimal-race", "--vary", f"{key}=1,{big}", "--out",
                 str(out)])  # fmt: skip
    else:
        cmd = data.draw(st.sampled_from(["plot", "timeline", "compare"]))
        argv = [cmd, str(d), "--step", data.draw(st.sampled_from(["-1", str(10**7), n]))]
        if cmd == "compare":
            argv += ["--req-id", "R"]
    check_case(
        "bounds",
        argv,
        " ".join(a[:40] for a in argv),
        out,
        invalid=True if what not in ("risk", "check", "field-reports", "bench") else None,
    )


SEM_KINDS = ["double op", "drop new", "new again", "finish unremoved", "op req", "async",
             "discard", "seed", "scenario {}", "name", "description", "request twice",
             "remove row"]  # fmt: skip


def _sem_mutation(sched: dict, data: st.DataObject) -> str:
    """One change of meaning (every one makes the schedule certainly invalid)."""
    steps = sched["steps"]
    with_ops = [i for i, s in enumerate(steps) if s["ops"]]
    n = data.draw(st.sampled_from(with_ops))
    st_ = steps[n]
    kind = data.draw(st.sampled_from(SEM_KINDS))
    if kind == "double op":
        i = data.draw(st.integers(0, len(st_["ops"]) - 1))
        st_["ops"].insert(i, list(st_["ops"][i]))
    elif kind == "drop new" and st_["new"]:
        st_["new"].pop()
    elif kind == "new again" and n > 0 and steps[n - 1]["req_ids"]:
        st_["new"].append(steps[n - 1]["req_ids"][0])
    elif kind == "finish unremoved" and n + 1 < len(steps) and st_["req_ids"]:
        nxt = steps[n + 1]
        kept = [r for r in st_["req_ids"] if r not in nxt["finished"]]
        if not kept:
            return _sem_mutation(sched, data)
        nxt["finished"].append(kept[0])
    elif kind == "op req":
        i = data.draw(st.integers(0, len(st_["ops"]) - 1))
        st_["ops"][i][3] = st_["ops"][i][3] + "x"
    elif kind == "async":
        sched["scenario"]["engine"]["async_scheduling"] = not sched["scenario"]["engine"][
            "async_scheduling"]  # fmt: skip
    elif kind == "discard" and st_["discard"]:
        st_["discard"][0] = data.draw(st.integers(2, 10**6))
    elif kind == "seed":
        sched["seed"] = data.draw(st.sampled_from([2**63, 10**30, 2**64 + 1]))
    elif kind == "scenario {}":
        sched["scenario"] = {}
    elif kind in ("name", "description"):
        sched["scenario"][kind] = data.draw(st.sampled_from([5, [1], {"a": 1}, None, 1.5, True]))
    elif kind == "request twice":
        sched["requests"].append(dict(sched["requests"][0]))
    elif kind == "remove row":
        rem = [op for op in st_["ops"] if op[0] == "remove"]
        if not rem:
            return _sem_mutation(sched, data)
        rem[0][1] = (rem[0][1] + 1) % sched["scenario"]["engine"]["max_num_seqs"]
    else:
        return _sem_mutation(sched, data)
    return kind


@FUZZ
@given(data=st.data())
def test_schedule_meaning(tmp_path_factory, good_schedule: dict, data: st.DataObject) -> None:
    """schedule.json changed in meaning, its shape kept: refused with the step and field."""
    d = tmp_path_factory.mktemp("meaning")
    sched = json.loads(json.dumps(good_schedule))
    kind = _sem_mutation(sched, data)
    path = d / "schedule.json"
    path.write_text(json.dumps(sched))
    out = d / "out"
    prog = data.draw(st.sampled_from([main, gpu_main]))
    argv = ["run", "--schedule", str(path), "--no-trace", "--out", str(out)]
    if prog is gpu_main:
        argv = ["replay", "--device", "cpu", "--schedule", str(path), "--out", str(out)]
    check_case("schedule meaning", argv, kind, out, invalid=True, prog=prog)


@pytest.mark.slow
def test_campaign_is_clean() -> None:
    """``make test-slow``: a larger campaign of fresh cases on every surface, all clean."""
    import subprocess
    import sys

    n = os.environ.get("SPECRACE_FUZZ_EXAMPLES", "300")
    r = subprocess.run([sys.executable, str(ROOT / "scripts/fuzz_campaign.py"), "--examples", n],
                       cwd=ROOT, capture_output=True, text=True, timeout=3600)  # fmt: skip
    assert r.returncode == 0, r.stdout[-5000:]
