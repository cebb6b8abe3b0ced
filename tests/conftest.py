from __future__ import annotations

import pytest

from sim.model.params import Scenario, load_scenario


@pytest.fixture(scope="session")
def minimal_race() -> Scenario:
    return load_scenario("minimal-race")


@pytest.fixture(scope="session")
def qwen35() -> Scenario:
    return load_scenario("qwen35-mtp3")
