"""A runtime session seen from a client: step timings with a cache.

The client hands over the per-sequence token arrays of a step; the proxy
answers from its cache keyed by the exact batch signature, or asks the
backend. :meth:`RuntimeSessionProxy.prefetch` sends several future batches in
one PredictSteps call (exact lookahead) and caches the answers, so the
step-by-step simulation is unchanged while RPCs are batched.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

from cosim.v1 import types_pb2 as pb

from .clients import RuntimeClient


@dataclass(frozen=True, slots=True)
class Timing:
    """The parts of a StepTiming the hub uses."""

    duration_ns: int
    energy_j: float = 0.0
    out_of_range: bool = False


Signature = tuple[tuple[int, ...], tuple[int, ...]]


class RuntimeSessionProxy:
    """Times steps of one client's session, caching by batch signature.

    Args:
        client: the backend's gRPC client.
        session_id: the open session.
        cache: whether to cache timings (a backend is deterministic per session).
        max_cache_entries: LRU bound, so long runs keep bounded memory.
    """

    def __init__(self, client: RuntimeClient, session_id: str, *, cache: bool = True,
                 max_cache_entries: int = 200_000) -> None:
        self.client, self.session_id = client, session_id
        self.use_cache, self.max_cache_entries = cache, max_cache_entries
        self._cache: OrderedDict[Signature, Timing] = OrderedDict()
        self.num_lookups = 0
        self.num_hits = 0
        self.num_out_of_range = 0

    def _store(self, key: Signature, timing: Timing) -> None:
        self._cache[key] = timing
        if len(self._cache) > self.max_cache_entries:
            self._cache.popitem(last=False)

    def step_time(self, new_tokens: Sequence[int], context_tokens: Sequence[int], *, now_ns: int) -> Timing:
        """Timing of one step."""
        key = (tuple(new_tokens), tuple(context_tokens))
        self.num_lookups += 1
        if self.use_cache:
            hit = self._cache.get(key)
            if hit is not None:
                self.num_hits += 1
                return hit
        batch = pb.StepBatch(new_tokens=key[0], context_tokens=key[1])
        timing = self._convert(self.client.predict_steps(self.session_id, [batch], sim_time_ns=now_ns)[0])
        if self.use_cache:
            self._store(key, timing)
        return timing

    def prefetch(self, batches: Sequence[Signature], *, now_ns: int) -> None:
        """Times future batches in one call and caches them (only those not cached yet)."""
        if not self.use_cache:
            return
        missing = [key for key in dict.fromkeys(batches) if key not in self._cache]
        if not missing:
            return
        request = [pb.StepBatch(new_tokens=new, context_tokens=ctx) for new, ctx in missing]
        for key, timing in zip(missing, self.client.predict_steps(self.session_id, request, sim_time_ns=now_ns)):
            self._store(key, self._convert(timing))

    def _convert(self, timing: pb.StepTiming) -> Timing:
        if timing.out_of_range:
            self.num_out_of_range += 1
        return Timing(duration_ns=timing.duration_ns, energy_j=timing.energy_j, out_of_range=timing.out_of_range)

    @property
    def hit_rate(self) -> float:
        return self.num_hits / self.num_lookups if self.num_lookups else 0.0
