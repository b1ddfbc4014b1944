"""Routers that read nothing of a request: in turn, at random, fewest stages, least load."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...config.sections import RouterConfig
from ..records import RequestRecord
from .router import C, Router


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

    def plan(self, candidates: Sequence[C], count: int) -> list[C] | None:
        i = self._next.get(tuple(c.name for c in candidates), 0)
        return [candidates[(i + k) % len(candidates)] for k in range(count)]


class Random(Router):
    """``random``: uniformly, from the run's generator."""

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        return candidates[int(self.rng.integers(len(candidates)))]


class LeastOutstanding(Router):
    """``least_outstanding``: the fewest stages in flight."""

    def __init__(self, config: RouterConfig, rng: np.random.Generator,
                 clock: Callable[[], int] = lambda: 0) -> None:
        super().__init__(config, rng, clock)
        # The last plan and what it was made of: a lookahead miss asks once per client sharing the
        # session, with nothing routed in between.
        self._planned: tuple[tuple[Sequence[Any], list[int], int], list[Any]] | None = None

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        return min(candidates, key=lambda c: c.load("stages"))

    def plan(self, candidates: Sequence[C], count: int) -> list[C] | None:
        load = [c.load("stages") for c in candidates]
        made_of = (candidates, load, count)
        if self._planned is not None and self._planned[0] == made_of:
            return self._planned[1]
        load = load.copy()
        chosen = []
        for _ in range(count):
            j = load.index(min(load))  # the first listed among the least loaded, as pick() chooses
            load[j] += 1
            chosen.append(candidates[j])
        self._planned = (made_of, chosen)
        return chosen


class LoadBased(Router):
    """``load_based``: the least load by ``router.load_metric``."""

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        return min(candidates, key=lambda c: c.load(self.config.load_metric))
