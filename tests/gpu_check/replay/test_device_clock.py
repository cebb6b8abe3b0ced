"""The landing aimed by the GPU clock: the offset fit (CPU), the replay path (scripted), and on
CUDA how far the landing falls from its aim."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_check.replay import ReplayConfig, ScriptedCounts, replay
from gpu_check.replay.device_clock import fit_offset
from sim.hardware.compare import agreement
from sim.model.params import load_scenario
from sim.model.policies import POLICIES
from sim.model.scheduling import build_schedule


def test_the_rounds_bound_the_offset_from_both_sides() -> None:
    # device clock = host + 1_000_000; each stamp taken somewhere inside its round trip
    rounds = [(0, 1_000_030, 100), (500, 1_000_505, 510), (900, 1_000_990, 1_200)]
    m = fit_offset(rounds)
    # lower bounds: stamp - sighting = 999_930, 999_995, 999_790; upper: stamp - launch =
    # 1_000_030, 1_000_005, 1_000_090 -> [999_995, 1_000_005]
    assert m.offset_ns == 999_995 and m.uncertainty_ns == 10 and m.rounds == 3
    assert m.offset_ns <= 1_000_000 <= m.offset_ns + m.uncertainty_ns


def test_a_late_sighting_does_not_move_the_offset() -> None:
    """A round whose stamp the host saw late (descheduled, busy) only loosens its own lower
    bound: the offset comes from the round seen soonest after its stamp."""
    tight = [(1_000 * i, 1_000_000 + 1_000 * i + 40, 1_000 * i + 45) for i in range(8)]
    late = tight + [(9_000, 1_009_040, 9_900)]
    assert fit_offset(late).offset_ns == fit_offset(tight).offset_ns == 999_995


def test_bad_rounds_are_refused() -> None:
    with pytest.raises(ValueError, match="no stamping rounds"):
        fit_offset([])
    with pytest.raises(ValueError, match="ends before it starts"):
        fit_offset([(10, 5, 3)])


class AimRecording(ScriptedCounts):
    def __init__(self, max_num_reqs: int, plan: list[int]) -> None:
        super().__init__(max_num_reqs, plan)
        self.aims: list[int | None] = []

    def fire(self, spin_ns, land_at_ns=None) -> None:
        assert spin_ns == 0 or land_at_ns is None
        self.aims.append(land_at_ns)
        super().fire(spin_ns, land_at_ns)


def test_the_device_clock_path_of_the_replay_still_agrees_everywhere() -> None:
    """The step's t0 set ahead of the launch changes where the host sits, not what the reads
    return: with scripted landings every policy agrees with the write log."""
    sc = load_scenario("qwen35-mtp3")
    sched = build_schedule(sc, 0, 40)
    cfg = ReplayConfig(sc.timing, aim="device-clock", lead_ns=20_000, clock_lag_ns=3_000)
    for policy in POLICIES.values():
        rng = np.random.default_rng(1)
        plan = [int(rng.integers(-1, len(sched.steps[n].ops) + 1)) for n in range(1, 40)]
        dev = AimRecording(sched.max_num_reqs, plan)
        df = replay(sched, policy, dev, cfg)
        assert dev.aims and all(a is not None for a in dev.aims)  # aimed by the clock, no spin
        table = agreement(df)
        assert int(table["disagree"].sum()) == 0, policy.name


@pytest.mark.gpu
def test_device_clock_lands_within_10_us_of_its_aim() -> None:
    import time

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from gpu_check.replay import CudaCounts
    from gpu_check.replay.cli import _device_clock_lag

    dev = CudaCounts(16)
    lag = _device_clock_lag(dev, 200_000)
    errors = []
    for i, ahead in enumerate(np.linspace(50_000, 3_000_000, 40).astype(int)):
        dev.reset(np.ones(16, dtype=np.int32), 30_000 + i)
        dev.stage(np.ones(1, dtype=np.int32), private=False)
        dev.track_clock()
        aim = time.perf_counter_ns() + int(ahead)
        dev.fire(0, land_at_ns=aim - lag)
        while not dev.poll(0):
            pass
        errors.append(time.perf_counter_ns() - aim)
    assert np.percentile(np.abs(errors), 95) <= 10_000, errors
