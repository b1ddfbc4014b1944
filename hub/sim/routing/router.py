"""What every router is: a choice among candidate clients, and what it may tell ahead of time."""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from ...config.choices import ROUTERS
from ...config.sections import RouterConfig
from ..admission import Route, every_client
from ..records import RequestRecord
from ..registry import chosen


class Routable(Protocol):
    """A client a router can choose: its name and its load by a metric (``LLMClient.load``)."""

    name: str

    def load(self, metric: str) -> int: ...


C = TypeVar("C", bound=Routable)

# :meth:`Router.stages_before` of a client that is no candidate: no stage goes to it.
NEVER = sys.maxsize


class Router(ABC):
    """Chooses a client for each stage.

    Args:
        config: the router section of the scenario.
        rng: the run's generator (for ``random``).
        clock: the simulation's time, ns (for ``vllm_dp``'s count publications).
    """

    def __init__(self, config: RouterConfig, rng: np.random.Generator,
                 clock: Callable[[], int] = lambda: 0) -> None:
        self.config, self.rng, self.clock = config, rng, clock

    def choose(self, candidates: Sequence[C], request: RequestRecord) -> C:
        """Picks one of ``candidates`` (non-empty, in config order) for ``request``: a lone
        candidate without asking the policy."""
        return candidates[0] if len(candidates) == 1 else self.pick(candidates, request)

    @abstractmethod
    def pick(self, candidates: Sequence[C], request: RequestRecord) -> C:
        """The policy's choice among two or more ``candidates``."""

    def stages_before(self, candidates: Sequence[C], client: C) -> int | None:
        """How many of the next stages among ``candidates`` go to others before one goes to ``client``
        if none finishes meanwhile (:data:`NEVER` where ``client`` is none of them), or None where the
        policy cannot tell. A lookahead hint; routing itself is :meth:`choose`."""
        if len(candidates) == 1:
            return 0 if candidates[0] is client else NEVER
        return self.turns_before(candidates, client)

    def turns_before(self, candidates: Sequence[C], client: C) -> int | None:
        """:meth:`stages_before` among two or more candidates; None: the policy cannot tell (the default)."""
        return None

    def end_session(self, session: int) -> None:
        """A session ended (a router that remembers sessions forgets it)."""

    @classmethod
    def routes(cls, config: RouterConfig) -> Route:
        """The clients this router may pick for a prompt, for admission's checks: any candidate."""
        return every_client


def router_class(policy: str) -> type[Router]:
    """The router of ``router.policy`` (:data:`cosim.hub.config.choices.ROUTERS`)."""
    return chosen(ROUTERS, policy, Router)


def make_router(config: RouterConfig, rng: np.random.Generator, clock: Callable[[], int] = lambda: 0) -> Router:
    """The router ``config.policy`` names."""
    return router_class(config.policy)(config, rng, clock)


def routes(config: RouterConfig) -> Route:
    """The clients the configured router may pick for a prompt (admission's checks)."""
    return router_class(config.policy).routes(config)
