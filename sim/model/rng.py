"""Counter-based random numbers: every draw of the timing model is a pure function of its key.

A draw is keyed by ``(seed, step, actor, slot)`` and hashed with splitmix64's finalizer into
a float64 uniform in [0, 1). No stream has a state, so the order in which actors draw does
not matter: the SimPy tier (whose engine core draws the output IPC at the moment the output
copy completes, interleaved with its own loop) and the vector tier (which draws a whole step
for many timing points at once) get exactly the same numbers. Like the workload, nothing here
reads a clock or a global generator.

:func:`uniform` is the vectorized form (numpy ``uint64``, wrapping arithmetic); :func:`uniform_py`
is the same hash on Python integers, the readable reference that tests hold it to.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_TO_UNIT = 2.0**-53  # 53 high bits -> [0, 1), exact in float64


class Actor(enum.IntEnum):
    """Who draws (one independent family of streams each)."""

    ENGINE = 1
    WORKER = 2
    GPU = 3
    STALL = 4
    SLOW = 5  # whether the worker's host is in a slow phase at this step (slot 0)


# Slots are plain ints, not IntEnum: the SimPy tier indexes with them on every draw.
class EngineSlot:
    UPDATE = 0  # update_from_output(step - lag), drawn at step
    SCHEDULE = 1
    INPUT_IPC = 2
    OUTPUT_IPC = 3  # get_output(step): output copy -> engine core
    COUNT = 4


class WorkerSlot:
    RPC_DISPATCH = 0
    STALL = 1  # the stall's duration (whether it stalls: Actor.STALL)
    CACHED_LOOP = 2
    REFRESH = 3
    PREPARE_1 = 4  # _prepare_inputs up to the counts read
    PREPARE_2 = 5  # the rest of _prepare_inputs + copy_to_gpu
    LAUNCH = 6
    SAMPLE_TOKENS = 7
    OP_BASE = 8  # row op i of _update_states draws slot OP_BASE + i


class GpuSlot:
    PREP = 0
    FORWARD = 1
    SAMPLE = 2
    COUNTS_D2H = 3
    VALID_COUNT_D2H = 4
    DRAFTER = 5
    OUTPUT_D2H = 6
    COUNT = 7


def _mix(z):
    """splitmix64's finalizer on numpy uint64 (a bijection of 64-bit words)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
    return z ^ (z >> np.uint64(31))


def _u64(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype == np.uint64:
        return a
    if a.dtype.kind not in "iu":
        raise TypeError(f"rng keys are integers, got {a.dtype}")
    # Two's complement, like Python's `x & MASK64`, so negative seeds hash as in uniform_py.
    return a.astype(np.int64).view(np.uint64) if a.dtype.kind == "i" else a.astype(np.uint64)


def hash64(seed, step, actor, slot) -> np.ndarray:
    """The 64-bit hash of a key; every argument an integer or an integer array (broadcast)."""
    with np.errstate(over="ignore"):
        h = _mix(_u64(seed) + np.uint64(GOLDEN))
        for field in (step, actor, slot):
            h = _mix(h + _u64(field) + np.uint64(GOLDEN))
    return h


def uniform(seed, step, actor, slot) -> np.ndarray:
    """float64 in [0, 1) for each key (arrays broadcast)."""
    return (hash64(seed, step, actor, slot) >> np.uint64(11)).astype(np.float64) * _TO_UNIT


def _mix_py(z: int) -> int:
    z = ((z ^ (z >> 30)) * _M1) & MASK64
    z = ((z ^ (z >> 27)) * _M2) & MASK64
    return z ^ (z >> 31)


def uniform_py(seed: int, step: int, actor: int, slot: int) -> float:
    """:func:`uniform` on Python integers: the reference the vectorized hash must equal."""
    return uniforms_py(seed, step, actor, range(slot, slot + 1))[0]


def uniforms_py(seed: int, step: int, actor: int, slots: range) -> list[float]:
    """``[uniform_py(seed, step, actor, s) for s in slots]``, the hash of the key's first three
    fields computed once: one mix a slot. For a few slots (a step's row ops) this is several
    times faster than :func:`uniform`, whose numpy calls cost about 35 us whatever the size."""
    h = _mix_py((seed + GOLDEN) & MASK64)
    for field in (step, actor):
        h = _mix_py((h + (field & MASK64) + GOLDEN) & MASK64)
    return [(_mix_py((h + (s & MASK64) + GOLDEN) & MASK64) >> 11) * _TO_UNIT for s in slots]


def slow_uniforms(seed: int, n_steps: int) -> np.ndarray:
    """Per step the uniform that says whether the worker is slow (``u < worker_slow_prob``)."""
    return uniform(seed, np.arange(n_steps, dtype=np.int64), Actor.SLOW, 0)


def slow_phases(u: np.ndarray, prob, persistence) -> np.ndarray:
    """Whether the host is in a slow phase at each step: a two-state chain over the steps'
    uniforms ``u`` (:func:`slow_uniforms`). Its share of slow steps is ``prob`` and its lag-1
    autocorrelation ``persistence`` (rho): step N is slow when ``u[N] < prob + rho (1 - prob)``
    after a slow step and ``u[N] < prob (1 - rho)`` after another, so a phase lasts ``1 / ((1 -
    prob)(1 - rho))`` steps on average. At rho = 0 both thresholds are ``prob`` and this is
    ``u < prob`` bit for bit (independent steps). ``prob`` and ``persistence`` are numbers or
    arrays over timing points; the result is ``(steps,)`` or ``(steps, points)``."""
    u = np.asarray(u, dtype=np.float64)
    p = np.asarray(prob, dtype=np.float64)
    rho = np.asarray(persistence, dtype=np.float64)
    shape = np.broadcast(p, rho).shape
    if not np.any(rho):  # independent steps, vectorized
        flags = u.reshape(-1, *(1,) * len(shape)) < p
        return np.broadcast_to(flags, (len(u), *shape)).copy()
    stay, enter = p + rho * (1.0 - p), p * (1.0 - rho)
    if not shape:  # one point: a plain loop over Python floats
        s, e, prev, chain = float(stay), float(enter), False, []
        for un in u.tolist():
            prev = un < (s if prev else e)
            chain.append(prev)
        return np.asarray(chain, dtype=bool)
    out = np.zeros((len(u), *shape), dtype=bool)
    at = np.zeros(shape, dtype=bool)
    for n, un in enumerate(u):
        at = un < np.where(at, stay, enter)
        out[n] = at
    return out


def slow_steps(seed: int, n_steps: int, prob, persistence) -> np.ndarray:
    """:func:`slow_phases` over the run's own uniforms: what both tiers draw."""
    return slow_phases(slow_uniforms(seed, n_steps), prob, persistence)


def slowed_ns(mean_ns, scale):
    """A worker mean in a step of host speed ``scale`` (1.0: as calibrated): ``int(mean *
    scale)``, the same float ops in both tiers (``astype`` truncates as ``int`` does)."""
    if isinstance(mean_ns, np.ndarray) or isinstance(scale, np.ndarray):
        return (np.asarray(mean_ns, dtype=np.int64) * scale).astype(np.int64)
    return int(mean_ns * scale)


def jitter_factor(u, frac: float):
    """Multiplicative jitter uniform in [1 - frac, 1 + frac); same float ops in both tiers."""
    return 1.0 + frac * (2.0 * u - 1.0)


def jittered_ns(mean_ns: int, u: float, frac: float) -> int:
    """One jittered duration (the SimPy tier): ``int(mean * factor)``, 0 for a mean <= 0."""
    if mean_ns <= 0:
        return 0
    return int(mean_ns * jitter_factor(u, frac))


def scalar_jitter(frac: float) -> Callable[[Any, float], int]:
    """``lambda mean, u: jittered_ns(int(mean), u, frac)`` with the calls inlined: the same
    float operations, for a loop that makes a score of these a step at one timing point."""

    def jit(mean: Any, u: float) -> int:
        m = int(mean)
        return int(m * (1.0 + frac * (2.0 * u - 1.0))) if m > 0 else 0

    return jit


def jittered_ns_array(mean_ns, u, frac) -> np.ndarray:
    """:func:`jittered_ns` over arrays of means (>= 0, as params validate) and uniforms (the
    vector tier): ``astype`` truncates toward zero as ``int`` does, and a mean of 0 gives 0."""
    return (np.asarray(mean_ns, dtype=np.int64) * jitter_factor(u, frac)).astype(np.int64)


class StepDraws:
    """One actor's uniforms, ``get(step)[slot]``, computed vectorized a block of steps at a time.

    ``extra_slots[step]`` more slots follow the ``n_slots`` fixed ones in that step (the
    worker's row ops). Two blocks are cached: the engine core draws a step's output IPC while
    its own loop is two steps ahead, so a block boundary must not thrash.
    """

    BLOCK = 1024

    def __init__(
        self,
        seed: int,
        actor: int,
        n_slots: int,
        n_steps: int,
        extra_slots: np.ndarray | None = None,
    ) -> None:
        self.seed = int(seed)
        self.actor = int(actor)
        self.n_slots = n_slots
        self.n_steps = n_steps
        self.extra = None if extra_slots is None else np.asarray(extra_slots, dtype=np.int64)
        self._blocks: dict[int, list[list[float]]] = {}
        self._lo = -self.BLOCK
        self._cur: list[list[float]] = []

    def get(self, step: int) -> list[float]:
        i = step - self._lo
        if 0 <= i < self.BLOCK:  # the block of the last call: most calls
            return self._cur[i]
        b = step // self.BLOCK
        block = self._blocks.get(b)
        if block is None:
            if len(self._blocks) >= 2:
                del self._blocks[next(iter(self._blocks))]  # the older of the two
            block = self._blocks[b] = self._compute(b)
        self._lo, self._cur = b * self.BLOCK, block
        return block[step - self._lo]

    def _compute(self, b: int) -> list[list[float]]:
        lo = b * self.BLOCK
        hi = min(lo + self.BLOCK, self.n_steps)
        steps = np.arange(lo, hi, dtype=np.int64)
        per = np.full(len(steps), self.n_slots, dtype=np.int64)
        if self.extra is not None:
            per += self.extra[lo:hi]
        starts = np.cumsum(per) - per
        keys_step = np.repeat(steps, per)
        slots = np.arange(int(per.sum()), dtype=np.int64) - np.repeat(starts, per)
        flat = uniform(self.seed, keys_step, self.actor, slots).tolist()
        return [flat[s : s + n] for s, n in zip(starts.tolist(), per.tolist(), strict=True)]
