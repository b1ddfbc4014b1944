"""A runtime session seen from its clients: step timings with a cache and lookahead.

The timing cache lives in the compiled core (``cosim_core``, core/src/timing.rs):
:class:`RuntimeSessionProxy` answers a client's step from its cache keyed by the exact batch
signature; on a miss it sends the step and the predicted batches (the client's forecast, the other
riders' top-ups) in one PredictSteps call through the Python ``RuntimeClient`` and caches every
answer as a :class:`Timing`. :class:`SharedTimings` shares caches across the runs of one process by
session spec. A rider (a client's ``StepTimer``) tops up a call another rider's miss makes anyway
with the batches it wants predicted: a step timer hands the core its forecast's keys, any other
rider has a ``name`` and ``top_up(now_ns, depth)`` giving signatures. This module names them for
the hub, with the capabilities that shape its keys.
"""

from __future__ import annotations

from cosim_core import RuntimeSessionProxy, SharedTimings, Timing, TimingCache

__all__ = ["BUCKETED_CACHE_SAFE", "POOLED_DECODES", "RuntimeSessionProxy", "SharedTimings", "Timing", "TimingCache"]

# The capability (BackendInfo.capabilities) of a backend whose timings barely change within a
# bucket of context tokens, so that the hub may round contexts before timing and caching.
BUCKETED_CACHE_SAFE = "bucketed_cache_safe"


# The capability (BackendInfo.capabilities, usually of one session: OpenSessionResponse.info) of a
# backend whose step time depends on a batch's decodes only through their number and mean context
# rounded (types.proto says exactly), so that the hub times every batch as its representative one.
POOLED_DECODES = "pooled_decodes"
