from __future__ import annotations

import os

import pytest
from hypothesis import settings

from sim.model.params import Scenario, load_scenario

# fuzz_harness.refused asserts for the tests of tests/cli_contract/: show the values it compared
pytest.register_assert_rewrite("fuzz_harness")

# CI draws the same examples every run (a property test that fails there fails again when
# rerun); locally each run explores new ones. Explicit per-test settings still apply on top.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def minimal_race() -> Scenario:
    return load_scenario("minimal-race")


@pytest.fixture(scope="session")
def qwen35() -> Scenario:
    return load_scenario("qwen35-mtp3")
