"""``vllm_dp``: vLLM's internal data-parallel load balancer.

``DPLBAsyncMPClient`` in ``vllm/v1/engine/core_client.py``: the fewest 4 x waiting + running requests,
by counts its DP coordinator publishes at most every 100 ms; between publications each choice counts
one more waiting request where it went.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...config.sections import RouterConfig
from ..clients.llm import DP_WAITING_WEIGHT
from ..records import RequestRecord
from .router import C, Router

# vLLM's DPCoordinator publishes the engines' request counts every stats_update_interval_ms (100).
DP_STATS_INTERVAL_NS = 100_000_000


class VllmDp(Router):
    """The least score among the published counts, which the choice then raises by one waiting
    request until the next publication. Publications are taken lazily: the first choice 100 ms or
    more after the last one reads the clients' counts (``dp_score``)."""

    def __init__(self, config: RouterConfig, rng: np.random.Generator,
                 clock: Callable[[], int] = lambda: 0) -> None:
        super().__init__(config, rng, clock)
        self._published: dict[tuple[str, ...], tuple[int, list[int]]] = {}  # per group: when, and the scores

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        key = tuple(c.name for c in candidates)
        now = self.clock()
        published = self._published.get(key)
        if published is None or now - published[0] >= DP_STATS_INTERVAL_NS:
            published = self._published[key] = (now, [c.load("dp_score") for c in candidates])
        scores = published[1]
        i = scores.index(min(scores))  # ties to the first listed, as vLLM starts from engine 0
        scores[i] += DP_WAITING_WEIGHT
        return candidates[i]
