"""The scheduler's two comparisons against a limit, as an object the engine is given.

vLLM's scheduler asks two questions of a limit it does not own: has a request reached its
``max_tokens`` (a finish, and the async scheduler's "sure to finish" skip), and does a KV need
exceed the cache's capacity (preemption, admission). :class:`Limits` answers them by plain
comparison, over arrays where the scheduler asks for many requests at once. A caller that must
see each value compared (sim.explore.check, which branches on every outcome an undecided output
length or capacity could give) passes its own :class:`Limits`; the scheduler asks the same
questions either way, in the same order, and never needs to know who answers.
"""

from __future__ import annotations

import numpy as np


class Limits:
    """Plain comparisons: what every run but the bounded check uses."""

    def reached(self, rows: np.ndarray, values: np.ndarray, max_tokens: np.ndarray) -> np.ndarray:
        """Whether each request ``rows[i]`` (its index in the run) reached its ``max_tokens``:
        ``values[i] >= max_tokens[i]``, asked in ``rows``' order."""
        return values >= max_tokens

    def exceeds(self, tokens: int, capacity: int) -> bool:
        """Whether ``tokens`` KV slots exceed the capacity: ``tokens > capacity``."""
        return tokens > capacity


PLAIN = Limits()
