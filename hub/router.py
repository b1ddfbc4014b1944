"""Routing a stage to one of the clients that can serve it (MIST §III).

Policies: ``round_robin``, ``random``, ``least_outstanding`` (fewest stages
in flight), ``load_based`` (least load) and ``heavy_light`` (long prompts to
the heavy group, short ones to the rest, least load within a group). Load is
each client's own figure (``LLMClient.load``): ``input_tokens`` (prompt tokens
of the requests it holds), ``kv_tokens`` (tokens held in KV blocks) or
``remaining_tokens`` (prefill and decode tokens still to compute); stage
clients count the stages they hold, whatever the metric.
Ties go to the client listed first in the config, so routing is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import numpy as np

from .config import RouterConfig
from .records import RequestRecord


class Routable(Protocol):
    """A client the router can choose: its name and its load by a metric (``LLMClient.load``)."""

    name: str

    def load(self, metric: str) -> int: ...


C = TypeVar("C", bound=Routable)


class Router:
    """Chooses a client for each stage.

    Args:
        config: the router section of the scenario.
        rng: the run's generator (for ``random``).
    """

    def __init__(self, config: RouterConfig, rng: np.random.Generator) -> None:
        self.config, self.rng = config, rng
        self._next: dict[tuple[str, ...], int] = {}

    def choose(self, candidates: Sequence[C], request: RequestRecord) -> C:
        """Picks one of ``candidates`` (non-empty, in config order) for ``request``."""
        if len(candidates) == 1:
            return candidates[0]
        policy = self.config.policy
        if policy == "round_robin":
            key = tuple(c.name for c in candidates)
            i = self._next.get(key, 0)
            self._next[key] = (i + 1) % len(candidates)
            return candidates[i]
        if policy == "random":
            return candidates[int(self.rng.integers(len(candidates)))]
        if policy == "least_outstanding":
            return min(candidates, key=lambda c: c.load("stages"))
        if policy == "heavy_light":
            candidates = self._group(candidates, request)
        return min(candidates, key=lambda c: c.load(self.config.load_metric))

    def forecast(self, candidates: Sequence[C], count: int) -> list[C] | None:
        """Where the next ``count`` stages among ``candidates`` would go if none finished
        meanwhile, or None where the policy cannot tell (random, load-based). A lookahead hint;
        routing itself is :meth:`choose`."""
        if len(candidates) == 1:
            return [candidates[0]] * count
        if self.config.policy == "round_robin":
            i = self._next.get(tuple(c.name for c in candidates), 0)
            return [candidates[(i + k) % len(candidates)] for k in range(count)]
        if self.config.policy == "least_outstanding":
            load = [c.load("stages") for c in candidates]
            chosen = []
            for _ in range(count):
                j = load.index(min(load))  # the first listed among the least loaded, as choose() picks
                load[j] += 1
                chosen.append(candidates[j])
            return chosen
        return None

    def _group(self, candidates: Sequence[C], request: RequestRecord) -> Sequence[C]:
        named = set(self.config.heavy_clients)
        heavy = [c for c in candidates if c.name in named] if named else \
            list(candidates[:(len(candidates) + 1) // 2])
        light = [c for c in candidates if c not in heavy]
        is_heavy = request.input_tokens >= self.config.heavy_threshold_tokens
        group = heavy if is_heavy else light
        return group or candidates
