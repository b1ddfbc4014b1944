"""``heavy_light``: long prompts to the heavy group of clients, short ones to the rest, least load within."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from ...config.sections import RouterConfig
from ..admission import ClientLimits, Route
from ..records import RequestRecord
from .router import C, Router


class Named(Protocol):
    """A client, or what admission knows of one: its name."""

    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


def group(candidates: Sequence[N], config: RouterConfig, prompt_tokens: int) -> Sequence[N]:
    """The candidates a prompt of ``prompt_tokens`` may go to: of ``heavy_threshold_tokens`` or more
    the heavy group (``heavy_clients``, default the first half), else the others; a group without
    clients falls back to every candidate."""
    named = set(config.heavy_clients)
    heavy = [c for c in candidates if c.name in named] if named else list(candidates[:(len(candidates) + 1) // 2])
    chosen = heavy if prompt_tokens >= config.heavy_threshold_tokens else [c for c in candidates if c not in heavy]
    return chosen or candidates


class HeavyLight(Router):
    """``heavy_light``: the least load by ``router.load_metric`` within the request's group."""

    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        return min(group(candidates, self.config, request.input_tokens), key=lambda c: c.load(self.config.load_metric))

    @classmethod
    def routes(cls, config: RouterConfig) -> Route:
        def route(candidates: Sequence[ClientLimits], prompt: int) -> Sequence[ClientLimits]:
            return group(candidates, config, prompt)
        return route
