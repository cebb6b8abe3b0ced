"""Counter-based draws: the vectorized hash equals the Python reference, key by key."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model.rng import (
    StepDraws,
    hash64,
    jittered_ns,
    jittered_ns_array,
    scalar_jitter,
    slow_phases,
    slow_uniforms,
    uniform,
    uniform_py,
    uniforms_py,
)

keys = st.tuples(
    st.integers(-(2**63), 2**64 - 1), st.integers(0, 10**7), st.integers(0, 8), st.integers(0, 500)
)


@settings(max_examples=200, deadline=None)
@given(key=keys)
def test_vectorized_equals_python_reference(key) -> None:
    seed, step, actor, slot = key
    seed_arr = np.array([seed], dtype=np.int64 if seed < 2**63 else np.uint64)
    assert float(uniform(seed_arr, step, actor, slot)[0]) == uniform_py(seed, step, actor, slot)


@settings(max_examples=200, deadline=None)
@given(key=keys, first=st.integers(0, 500), count=st.integers(0, 40))
def test_a_steps_slots_in_python_equal_the_vectorized_ones(key, first, count) -> None:
    seed, step, actor, _ = key
    slots = range(first, first + count)
    seed_arr = np.array([seed], dtype=np.int64 if seed < 2**63 else np.uint64)
    want = uniform(seed_arr, step, actor, np.arange(first, first + count)).tolist()
    assert uniforms_py(seed, step, actor, slots) == want


def test_broadcast_and_range() -> None:
    steps = np.arange(10_000, dtype=np.int64)
    u = uniform(7, steps[:, None], 2, np.arange(4)[None, :])
    assert u.shape == (10_000, 4) and u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01  # 40k draws: the mean is 0.5 to about 0.0015
    # Every key its own number: no two fields alias (step 1 slot 0 vs step 0 slot 1).
    assert len(np.unique(hash64(7, steps[:, None], 2, np.arange(4)[None, :]))) == u.size
    assert uniform_py(7, 1, 2, 0) != uniform_py(7, 0, 2, 1)
    assert uniform_py(7, 0, 2, 0) != uniform_py(8, 0, 2, 0)
    assert [uniform_py(7, int(s), 2, 3) for s in steps[:50]] == u[:50, 3].tolist()


def test_jitter_scalar_equals_array() -> None:
    rng = np.random.default_rng(0)
    means = rng.integers(0, 10**7, size=2000)
    means[:10] = 0
    u = rng.random(2000)
    for frac in (0.0, 0.3, 0.97):
        got = jittered_ns_array(means, u, frac)
        want = [jittered_ns(int(m), float(x), frac) for m, x in zip(means, u, strict=True)]
        assert got.tolist() == want
    assert jittered_ns(1000, 0.5, 0.3) == 1000 and jittered_ns(0, 0.9, 0.3) == 0


def test_step_draws_blocks_match_direct_keys() -> None:
    extra = np.array([0, 3, 1, 0, 5] * 600)  # 3000 steps: three blocks
    d = StepDraws(11, 2, 8, len(extra), extra)
    for step in (0, 1, 1023, 1024, 2999, 1, 2048, 1023):
        row = d.get(step)
        assert len(row) == 8 + extra[step]
        assert row == [uniform_py(11, step, 2, s) for s in range(len(row))]


@settings(max_examples=300, deadline=None)
@given(
    mean=st.one_of(st.integers(-5, 10**9), st.floats(-5.0, 1e9, allow_nan=False)),
    u=st.floats(0.0, 1.0, exclude_max=True),
    frac=st.floats(0.0, 1.0, exclude_max=True),
)
def test_inlined_jitter_is_jittered_ns(mean, u, frac) -> None:
    assert scalar_jitter(frac)(mean, u) == jittered_ns(int(mean), u, frac)


# -- slow phases of the host ----------------------------------------------------------------
def test_slow_phases_at_no_persistence_are_the_independent_draw() -> None:
    """rho = 0 is the rule every timing used before: ``u < prob``, bit for bit."""
    u = slow_uniforms(7, 5_000)
    assert np.array_equal(slow_phases(u, 0.067, 0.0), u < 0.067)
    per_point = slow_phases(u, np.array([0.067, 0.3]), np.array([0.0, 0.0]))
    assert np.array_equal(per_point, np.stack([u < 0.067, u < 0.3], axis=1))


@pytest.mark.parametrize("rho", [0.5, 0.9])
def test_slow_phases_keep_the_share_and_cluster_as_asked(rho: float) -> None:
    """The chain's share of slow steps is prob and its lag-1 autocorrelation rho (200,000
    steps: both within a few standard errors), and its phases are longer than independent
    steps' would be."""
    u = slow_uniforms(3, 200_000)
    f = slow_phases(u, 0.067, rho)
    assert abs(f.mean() - 0.067) < 0.005
    ac = np.corrcoef(f[1:].astype(float), f[:-1].astype(float))[0, 1]
    assert abs(ac - rho) < 0.02
    starts = int((f[1:] & ~f[:-1]).sum()) + int(f[0])
    assert f.sum() / starts == pytest.approx(1 / ((1 - 0.067) * (1 - rho)), rel=0.1)


def test_slow_phases_per_point_equal_one_point_each() -> None:
    u = slow_uniforms(11, 3_000)
    probs, rhos = np.array([0.067, 0.2, 0.0]), np.array([0.9, 0.0, 0.5])
    many = slow_phases(u, probs, rhos)
    for i in range(3):
        assert np.array_equal(many[:, i], slow_phases(u, probs[i], rhos[i]))
    assert not many[:, 2].any()  # prob 0: never slow, whatever rho
