"""Routers that read nothing of a request: in turn, at random, fewest stages, least load."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import methodcaller

import numpy as np

from ...config.sections import RouterConfig
from ..records import RequestRecord
from .router import NEVER, C, Router


class RoundRobin(Router):
    """``round_robin``: each group of candidates in turn."""

    def __init__(self, config: RouterConfig, rng: np.random.Generator,
                 clock: Callable[[], int] = lambda: 0) -> None:
        super().__init__(config, rng, clock)
        self._next: dict[tuple[str, ...], int] = {}  # per group of candidates: the next one's index

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        key = tuple(c.name for c in candidates)
        i = self._next.get(key, 0)
        self._next[key] = (i + 1) % len(candidates)
        return candidates[i]

    def turns_before(self, candidates: Sequence[C], client: C) -> int | None:
        if client not in candidates:
            return NEVER
        i = self._next.get(tuple(c.name for c in candidates), 0)
        return (candidates.index(client) - i) % len(candidates)


class Random(Router):
    """``random``: uniformly, from the run's generator."""

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        return candidates[int(self.rng.integers(len(candidates)))]


class LeastOutstanding(Router):
    """``least_outstanding``: the fewest stages in flight."""

    _stages = methodcaller("load", "stages")  # a candidate's load (no Python frame per candidate, as a lambda's)

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        return min(candidates, key=self._stages)

    def turns_before(self, candidates: Sequence[C], client: C) -> int | None:
        if client not in candidates:
            return NEVER
        # pick() fills level by level, the first listed first among equals: before the client's next
        # stage, each other candidate takes one per level below the client's load, and one at that
        # level too if listed before it.
        j, mine = candidates.index(client), client.load("stages")
        ahead = 0
        for i, other in enumerate(candidates):
            levels = mine - other.load("stages") + (i < j)
            if levels > 0:
                ahead += levels
        return ahead


class LoadBased(Router):
    """``load_based``: the least load by ``router.load_metric``."""

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        return min(candidates, key=lambda c: c.load(self.config.load_metric))
