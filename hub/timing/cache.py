"""A runtime session seen from its clients: step timings with a cache and lookahead.

A client's step timer (:class:`cosim.hub.timing.step_timer.StepTimer`) hands
over the per-sequence token arrays of a step, and a way to predict the
batches that will follow (its scheduler's policy run on a copy). The proxy
answers from its cache keyed by the exact batch signature; on a miss it
sends the step and the predicted batches in one PredictSteps call and caches
every answer. Because each step is still looked up by its exact signature,
results are byte-identical to asking step by step; a wrong prediction only
costs backend work. How far to look ahead adapts to how many of a client's
predictions were used since its last miss, so bursty arrivals do not waste
backend time.

Clients whose sessions would be identical share one (and its cache). Each
joins as a :class:`Rider`: when one misses, the others' predictions that no
longer reach far enough ride along in the same call, so their own misses,
which would each cost a round trip, mostly never happen.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cosim.v1 import types_pb2 as pb

from ..backends.rpc import RuntimeClient
from ..sim.scheduling import Signature


@dataclass(frozen=True, slots=True)
class Timing:
    """The parts of a StepTiming the hub uses (``energy_j`` None: the backend reported none)."""

    duration_ns: int
    energy_j: float | None = None
    out_of_range: bool = False
    communication_ns: int = 0
    compute_ns: int = 0
    memory_ns: int = 0
    dispatch_ns: int = 0


# The capability (BackendInfo.capabilities) of a backend whose timings barely change within a
# bucket of context tokens, so that the hub may round contexts before timing and caching.
BUCKETED_CACHE_SAFE = "bucketed_cache_safe"


def bucketed(key: Signature, bucket_tokens: int) -> Signature:
    """``key`` with each context rounded up to a multiple of ``bucket_tokens``."""
    rounded = tuple(-(-c // bucket_tokens) * bucket_tokens for c in key[1])
    return (key[0], rounded, *key[2:])  # the StepBatch fields beyond the two stay as they are


def _convert(timing: pb.StepTiming) -> Timing:
    return Timing(duration_ns=timing.duration_ns,
                  energy_j=timing.energy_j if timing.HasField("energy_j") else None,
                  out_of_range=timing.out_of_range, communication_ns=timing.communication_ns,
                  compute_ns=timing.compute_ns, memory_ns=timing.memory_ns, dispatch_ns=timing.dispatch_ns)


def scaled(timing: Timing, scale: float) -> Timing:
    """``timing`` with its duration and the duration's parts times ``scale`` (a prediction
    interval's edge, :mod:`cosim.hub.studies.intervals`); a reported energy stays the backend's."""
    return Timing(duration_ns=round(timing.duration_ns * scale), energy_j=timing.energy_j,
                  out_of_range=timing.out_of_range, communication_ns=round(timing.communication_ns * scale),
                  compute_ns=round(timing.compute_ns * scale), memory_ns=round(timing.memory_ns * scale),
                  dispatch_ns=round(timing.dispatch_ns * scale))


class SharedTimings:
    """Step timings kept across the runs of one process, by backend and session spec.

    A backend's timings are a function of its session's spec and the batch (what the cache of a
    single run relies on already), so runs that open equal sessions, such as the replications and
    rates of a goodput search, can share one cache: a run then asks the backend only for the
    batches no earlier run timed. Results are the same; only the backend work differs.

    Args:
        max_sessions: the sessions' caches kept, the least recently used dropped first.
    """

    def __init__(self, max_sessions: int = 16) -> None:
        self.max_sessions = max_sessions
        self._caches: OrderedDict[Hashable, OrderedDict[Signature, Timing]] = OrderedDict()

    def cache(self, key: Hashable) -> OrderedDict[Signature, Timing]:
        """The cache of the sessions identified by ``key`` (backend and spec), empty at first."""
        cache = self._caches.get(key)
        if cache is None:
            cache = self._caches[key] = OrderedDict()
            if len(self._caches) > self.max_sessions:
                self._caches.popitem(last=False)
        self._caches.move_to_end(key)
        return cache


class Rider(Protocol):
    """A client timing its steps through a shared session (:meth:`RuntimeSessionProxy.join`)."""

    name: str

    def top_up(self, now_ns: int, depth: int) -> Sequence[Signature]:
        """The batches to predict for this client now that another's miss makes a call anyway:
        none while its predictions reach far enough (``depth``: the proxy's default)."""
        ...


class RuntimeSessionProxy:
    """Times the steps of the clients sharing one session, caching by batch signature.

    Args:
        client: the backend's gRPC client.
        session_id: the open session.
        client_name: the hub client the session was opened for (named in errors of calls
            made for no rider).
        cache: whether to cache timings (a backend is deterministic per session).
        max_cache_entries: LRU bound, so long runs keep bounded memory.
        bucket_tokens: time every batch with its contexts rounded up to a multiple of this
            (0: exact); the caller checked the backend declares BUCKETED_CACHE_SAFE.
        shared_cache: the cache to use, shared with earlier runs' proxies of an equal session
            (:class:`SharedTimings`); None: its own. It holds the timings as scaled, so a
            scaled session's cache is never an unscaled one's.
        scale: every step's duration is the backend's times this (1: as the backend answers;
            a prediction interval's edge otherwise, :func:`scaled`).
    """

    # At least 8: an RPC costs about as much as a dozen predicted batches (docs/performance.md).
    MIN_LOOKAHEAD = 8
    MAX_LOOKAHEAD = 256

    def __init__(self, client: RuntimeClient, session_id: str, *, client_name: str = "", cache: bool = True,
                 lookahead: bool = True, max_cache_entries: int = 20_000, bucket_tokens: int = 0,
                 shared_cache: OrderedDict[Signature, Timing] | None = None, scale: float = 1.0) -> None:
        self.client, self.session_id, self.client_name = client, session_id, client_name
        self.scale = scale
        self.use_cache, self.max_cache_entries = cache, max_cache_entries
        self.bucket_tokens = bucket_tokens
        self.lookahead = lookahead and cache
        self._cache: OrderedDict[Signature, Timing] = shared_cache if shared_cache is not None else OrderedDict()
        self._hits_since_miss: Counter[Rider | None] = Counter()  # per rider: its own predictions used
        self.num_lookups = 0
        self.num_hits = 0
        self.num_out_of_range = 0
        self._riders: list[Rider] = []

    def _store(self, key: Signature, timing: Timing) -> None:
        self._cache[key] = timing
        if len(self._cache) > self.max_cache_entries:
            self._cache.popitem(last=False)

    def join(self, rider: Rider) -> None:
        """Adds a client whose top-ups ride along when another client's step misses."""
        self._riders.append(rider)

    def step_time(self, new_tokens: Sequence[int], context_tokens: Sequence[int], *, now_ns: int,
                  ahead: Callable[[int], Sequence[Signature]] | None = None, rider: Rider | None = None,
                  dp_rank_tokens: Sequence[int] = (), fields: Sequence[tuple[str, tuple[int, ...]]] = ()) -> Timing:
        """Timing of one step of ``rider``. On a miss, ``ahead(n)`` (up to n predicted next
        batches) and the other riders' top-ups ride along in the same call. ``dp_rank_tokens``:
        the tokens of every rank of a data-parallel lock-step group; ``fields``: the batch's
        further StepBatch fields, (name, values) pairs (``ScheduledBatch.fields``: speculative
        drafts, LoRA adapters)."""
        key = self.key(new_tokens, context_tokens, dp_rank_tokens, fields)
        if self.use_cache and (hit := self._cache.get(key)) is not None:
            self.count_hit(hit, rider)
            return hit
        self.num_lookups += 1  # a miss: the backend is asked
        bucket = self.bucket_tokens
        keys = [key]
        if self.lookahead:
            depth = min(self.MAX_LOOKAHEAD, max(self.MIN_LOOKAHEAD, 2 * self._hits_since_miss.pop(rider, 0)))
            predicted = list(ahead(depth)) if ahead is not None else []
            for other in self._riders:
                if other is not rider:
                    predicted += other.top_up(now_ns, self.MIN_LOOKAHEAD)
            if bucket:
                predicted = [bucketed(k, bucket) for k in predicted]
            keys += [k for k in dict.fromkeys(predicted) if k != key and k not in self._cache]
        make = self.client.step_batch  # StepBatch messages, or plain tuples for a backend in this process
        # Most keys are the two token arrays alone: built without a dict of further fields each.
        batches = [make(new_tokens=k[0], context_tokens=k[1]) if len(k) == 2 else
                   make(new_tokens=k[0], context_tokens=k[1], **dict(k[2:])) for k in keys]
        # The hub reads no breakdown; leaving it out saves encoding it per predicted step.
        timings = [_convert(t) for t in self.client.predict_steps(
            self.session_id, batches, sim_time_ns=now_ns, client=rider.name if rider else self.client_name,
            omit_breakdown=True)]
        if self.scale != 1.0:
            timings = [scaled(t, self.scale) for t in timings]
        if self.use_cache:
            for k, timing in zip(keys, timings):
                self._store(k, timing)
        self.num_out_of_range += timings[0].out_of_range  # the steps run, not the batches predicted
        return timings[0]

    def key(self, new_tokens: Sequence[int], context_tokens: Sequence[int], dp_rank_tokens: Sequence[int] = (),
             fields: Sequence[tuple[str, tuple[int, ...]]] = ()) -> Signature:
        """A batch's cache key: its signature (as ScheduledBatch.signature), bucketed where asked."""
        key: Signature = (tuple(new_tokens), tuple(context_tokens), *fields)
        if dp_rank_tokens:
            key += (("dp_rank_tokens", tuple(dp_rank_tokens)),)
        return bucketed(key, self.bucket_tokens) if self.bucket_tokens else key

    def peek(self, key: Signature) -> Timing | None:
        """The cached timing of the batch keyed ``key``, if any, not counted as a lookup."""
        return self._cache.get(key) if self.use_cache else None

    def count_hit(self, hit: Timing, rider: Rider | None) -> None:
        """Counts a lookup that found ``hit``: :meth:`step_time`'s, or a step taken in bulk after a
        :meth:`peek` (:meth:`cosim.hub.timing.step_timer.StepTimer.run_ahead`)."""
        self.num_lookups += 1
        self.num_hits += 1
        self._hits_since_miss[rider] += 1
        self.num_out_of_range += hit.out_of_range

    @property
    def hit_rate(self) -> float:
        return self.num_hits / self.num_lookups if self.num_lookups else 0.0
