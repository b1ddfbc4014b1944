"""A runtime session seen from its clients: step timings with a cache and lookahead.

The timing cache lives in the compiled core (``cosim_core``, core/src/timing.rs):
:class:`RuntimeSessionProxy` answers a client's step from its cache keyed by the exact batch
signature; on a miss it sends the step and the predicted batches (the client's forecast, the other
riders' top-ups) in one PredictSteps call through the Python ``RuntimeClient`` and caches every
answer as a :class:`Timing`. :class:`SharedTimings` shares caches across the runs of one process by
session spec. This module names them for the hub, with what a rider and a bucketed backend are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cosim_core import RuntimeSessionProxy, SharedTimings, Timing, TimingCache

from ..sim.scheduling import Signature

__all__ = ["BUCKETED_CACHE_SAFE", "Rider", "RuntimeSessionProxy", "SharedTimings", "Timing", "TimingCache"]

# The capability (BackendInfo.capabilities) of a backend whose timings barely change within a
# bucket of context tokens, so that the hub may round contexts before timing and caching.
BUCKETED_CACHE_SAFE = "bucketed_cache_safe"


class Rider(Protocol):
    """A client timing its steps through a shared session (:meth:`RuntimeSessionProxy.join`)."""

    name: str

    def top_up(self, now_ns: int, depth: int) -> Sequence[Signature]:
        """The batches to predict for this client now that another's miss makes a call anyway:
        none while its predictions reach far enough (``depth``: the proxy's default)."""
        ...
