"""Routing a stage to one of the clients that can serve it (MIST §III).

Policies: ``round_robin``, ``random``, ``least_outstanding`` (fewest stages
in flight), ``load_based`` (least load) and ``heavy_light`` (long prompts to
the heavy group, short ones to the rest, least load within a group). Load is
``input_tokens`` (prompt tokens in flight), ``kv_tokens`` (tokens held in KV
blocks) or ``remaining_tokens`` (prefill and decode tokens still to compute).
Ties go to the client listed first in the config, so routing is deterministic.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .clients.llm import LLMClient
from .config import RouterConfig
from .records import RequestRecord


def client_load(client: LLMClient, metric: str) -> int:
    """A client's load by the configured metric (stages in flight for non-LLM clients)."""
    scheduler = getattr(client, "scheduler", None)
    if scheduler is None:
        return client.outstanding
    if metric == "input_tokens":
        return client.outstanding_input_tokens
    if metric == "kv_tokens":
        return scheduler.kv.num_used * scheduler.kv.block_size
    client.settle()  # a decode run's pending steps count
    return sum(seq.remaining_work for seq in scheduler.running) + \
        sum(seq.remaining_work for seq in scheduler.waiting)


class Router:
    """Chooses a client for each stage.

    Args:
        config: the router section of the scenario.
        rng: the run's generator (for ``random``).
    """

    def __init__(self, config: RouterConfig, rng: np.random.Generator) -> None:
        self.config, self.rng = config, rng
        self._next: dict[tuple[str, ...], int] = {}

    def choose(self, candidates: Sequence[LLMClient], request: RequestRecord) -> LLMClient:
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
            return min(candidates, key=lambda c: c.outstanding)
        if policy == "heavy_light":
            candidates = self._group(candidates, request)
        return min(candidates, key=lambda c: client_load(c, self.config.load_metric))

    def forecast(self, candidates: Sequence[LLMClient], count: int) -> list[LLMClient] | None:
        """Where the next ``count`` stages among ``candidates`` would go if none finished
        meanwhile, or None where the policy cannot tell (random, load-based). A lookahead hint;
        routing itself is :meth:`choose`."""
        if len(candidates) == 1:
            return [candidates[0]] * count
        if self.config.policy == "round_robin":
            i = self._next.get(tuple(c.name for c in candidates), 0)
            return [candidates[(i + k) % len(candidates)] for k in range(count)]
        if self.config.policy == "least_outstanding":
            load = [c.outstanding for c in candidates]
            chosen = []
            for _ in range(count):
                j = load.index(min(load))  # the first listed among the least loaded, as choose() picks
                load[j] += 1
                chosen.append(candidates[j])
            return chosen
        return None

    def _group(self, candidates: Sequence[LLMClient], request: RequestRecord) -> Sequence[LLMClient]:
        named = set(self.config.heavy_clients)
        heavy = [c for c in candidates if c.name in named] if named else \
            list(candidates[:(len(candidates) + 1) // 2])
        light = [c for c in candidates if c not in heavy]
        is_heavy = request.input_tokens >= self.config.heavy_threshold_tokens
        group = heavy if is_heavy else light
        return group or candidates
