"""Every parameter's source says what it is, and a "measured" one is its file's value."""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import pytest

from sim.model.param_docs import DOCS, TIMING_FILES, Source, measured, timing_file_sources
from sim.model.params import builtin_timing_files, parameter_defaults

FORMS = (
    r"measured \((?P<file>[^,]+\.toml), (?P<date>\d{4}-\d\d-\d\d), (?P<machine>.+)\)",
    r"vLLM source \(.*\w+\.py:\d+.*\)",
    r"prior \(.+\)",
)


def _timing_toml(name: str) -> tuple[str, dict]:
    text = (resources.files("sim.model") / "timing" / f"{name}.toml").read_text()
    return text, tomllib.loads(text)["timing"]


def test_every_source_is_one_of_the_three_kinds() -> None:
    bad = [f"{k}: {d.source}" for k, d in DOCS.items()
           if not any(re.fullmatch(f, str(d.source)) for f in FORMS)]  # fmt: skip
    assert not bad, bad


def test_a_measured_default_is_its_files_value() -> None:
    defaults = parameter_defaults()
    for key, doc in DOCS.items():
        if doc.source.kind != "measured":
            continue
        name = doc.source.ref.removeprefix("sim/model/timing/").removesuffix(".toml")
        _text, table = _timing_toml(name)
        assert table[key.removeprefix("timing.")] == defaults[key], key


@pytest.mark.parametrize("name", builtin_timing_files())
def test_each_timing_file_is_labelled_with_its_date_and_machine(name: str) -> None:
    text, table = _timing_toml(name)
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    src = measured(name)
    assert str(src) == f"measured (sim/model/timing/{name}.toml, {src.date}, {src.machine})"
    assert TIMING_FILES[name].date in header and TIMING_FILES[name].machine in header
    assert set(timing_file_sources([name])) == {f"timing.{k}" for k in table}


def test_params_with_timing_files_shows_their_values_as_measured() -> None:
    import json
    import subprocess
    import sys

    files = builtin_timing_files()
    argv = [sys.executable, "-m", "sim", "params", "--json"]
    for name in files:
        argv += ["--timing", name]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = {row["key"]: row for row in json.loads(r.stdout)}
    seen = 0
    for name in files:
        _text, table = _timing_toml(name)
        for key, value in table.items():
            row = rows[f"timing.{key}"]
            m = re.fullmatch(FORMS[0], row["source"])
            assert m and m["file"] == f"sim/model/timing/{name}.toml", row
            assert row["value"] == str(value), row
            seen += 1
    assert seen == sum(r["source"].startswith("measured") for r in rows.values())


def test_a_prior_that_has_a_measurement_names_it() -> None:
    """The defaults a timing file measures differently say so, with the file's value."""
    defaults = parameter_defaults()
    for name in builtin_timing_files():
        _text, table = _timing_toml(name)
        for key, value in table.items():
            doc = DOCS[f"timing.{key}"]
            if defaults[f"timing.{key}"] != value:
                assert doc.source.kind == "prior", key
                assert f"--timing {name} measures {value:,}" in doc.source.ref, key


def test_source_forms() -> None:
    assert str(Source("vllm", "config/vllm.py:964")) == "vLLM source (config/vllm.py:964)"
    assert str(Source("prior", "why")) == "prior (why)"
