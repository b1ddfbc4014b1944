"""Time-synchronized mode: LRU contents and shared bandwidth (DESIGN.md).

Protocol, as the hub sees it:

1. ``Access`` submits accesses, each at ``now_ns``; calls come with
   nondecreasing times (an older ``now_ns`` than any earlier call or Advance
   is FAILED_PRECONDITION). Each result carries a *provisional*
   ``duration_ns``: the finish if nothing else starts, given everything in
   flight after the whole batch.
2. ``Advance(until_ns)`` moves the session clock to ``until_ns`` and returns
   every access finished at or before it (by time, then id), and
   ``next_event_ns``, the earliest provisional finish still pending (-1 if
   none). The hub puts that time in its event queue. A later Access can only
   delay what is already in flight (it takes a share of the bandwidth); its
   own provisional finishes come back in its results.

Contents. Each level is an LRU store keyed by ``MemoryAccess.key`` (a prefix
id). A level with ``shared_by`` is one store and one bandwidth for the
clients it names (others are rejected, naming ``accesses[i].client``); a level
without is one store and one bandwidth per client. A client sees the
hierarchy as its own instances of each level, nearest first; an access with
no ``client`` counts as the session's ``spec.client``.

- LOOKUP finds the nearest level holding the key. A hit at level n streams
  ``size_bytes`` from it and marks the key most recently used there; when
  n > 0 a copy is also placed in level 0 (promotion, as CPU caches fill on a
  hit further out), so the next lookup is fast. A miss everywhere finishes at
  once (``level=-1``, ``recompute_tokens`` = size / kv_bytes_per_token,
  rounded up) and stores nothing: the hub STOREs the KV once recomputed.
- STORE writes the key, as most recently used, into the nearest level large
  enough to hold it; the level's LRU entries it displaces move down one level
  (and further if need be), and those pushed past the last level are dropped.
  ``hit`` says whether the client's levels already held the key.
- EVICT drops the key from every level of every client, finishing at once.

Timing. An access waits the level's ``latency_ns``, then streams its bytes
while all streaming accesses of that level instance share its bandwidth
equally (processor sharing), so a start or finish changes everyone's rate.
Promotions and demotions move data in the background for free: a shortcut
that keeps one access one transfer. Fractions of a nanosecond round up.

Main name: :class:`Hierarchy`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from cosim.adapters.sdk import FailedPrecondition, InvalidArgument
from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import types_pb2 as pb

from .channel import SharedChannel
from .formula import NS_SLACK, to_ns, tokens_for
from .store import LevelStore


@dataclasses.dataclass
class _Instance:
    """One client's (or one sharing group's) copy of a level."""

    store: LevelStore
    channel: SharedChannel


class Hierarchy:
    """State of one time-synchronized session.

    Args:
        spec: the session's hierarchy (validated by the SDK).
    """

    def __init__(self, spec: mem_pb.MemorySessionSpec) -> None:
        self.levels = list(spec.levels)
        self.default_client = spec.client
        self.kv_bytes_per_token = spec.kv_bytes_per_token
        self.clock_ns = 0
        self.instances: dict[tuple[int, str], _Instance] = {}
        self.in_flight: dict[int, _Instance] = {}
        self.finished: dict[int, int] = {}  # access id -> completion_ns, not yet reported

    def access(self, accesses: Sequence[mem_pb.MemoryAccess]) -> list[mem_pb.AccessResult]:
        """Applies accesses in order and returns results with provisional durations."""
        results = []
        for i, access in enumerate(accesses):
            self._move_clock(access.now_ns, field=f"accesses[{i}].now_ns")
            if access.id in self.in_flight or access.id in self.finished:
                raise InvalidArgument(f"accesses[{i}].id", access.id,
                                      "is already in flight; ids must stay unique until Advance reports them")
            if not access.key:
                raise InvalidArgument(f"accesses[{i}].key", "", "must name the KV (e.g. a prefix id)")
            view = self._view(access.client or self.default_client, field=f"accesses[{i}].client")
            if access.op == mem_pb.ACCESS_OP_LOOKUP:
                results.append(self._lookup(view, access))
            elif access.op == mem_pb.ACCESS_OP_STORE:
                results.append(self._store(view, access))
            elif access.op == mem_pb.ACCESS_OP_EVICT:
                results.append(self._evict(access))
            else:
                raise InvalidArgument(f"accesses[{i}].op", access.op, "must be LOOKUP, STORE or EVICT")
        projections: dict[int, dict[int, float]] = {}
        for result, access in zip(results, accesses):
            if access.id in self.in_flight:
                channel = self.in_flight[access.id].channel
                if id(channel) not in projections:
                    projections[id(channel)] = channel.projected()
                finish = projections[id(channel)][access.id]
                result.duration_ns = to_ns(finish) - access.now_ns
            else:
                result.duration_ns = self.finished[access.id] - access.now_ns
        return results

    def advance(self, until_ns: int) -> pb.AdvanceResponse:
        """Reports accesses finished by ``until_ns`` and the next pending finish."""
        self._move_clock(until_ns, field="until_ns")
        done = sorted((completion_ns, access_id) for access_id, completion_ns in self.finished.items())
        self.finished.clear()
        pending = [finish for inst in self.instances.values() if inst.channel
                   for finish in inst.channel.projected().values()]
        return pb.AdvanceResponse(
            completions=[pb.Completion(id=access_id, completion_ns=t) for t, access_id in done],
            next_event_ns=to_ns(min(pending)) if pending else -1)

    def _move_clock(self, now_ns: int, *, field: str) -> None:
        if now_ns < self.clock_ns:
            raise FailedPrecondition(f"{field}={now_ns} is before the session clock {self.clock_ns} ns; "
                                     "calls must come with nondecreasing times")
        self.clock_ns = now_ns
        for inst in self.instances.values():
            # The slack matches to_ns, so a finish reported as now_ns is finished by now_ns.
            for finish, access_id in inst.channel.run_until(now_ns + NS_SLACK):
                self.finished[access_id] = to_ns(finish)
                del self.in_flight[access_id]

    def _view(self, client: str, *, field: str) -> list[_Instance]:
        """The client's instance of each level, nearest first, created on first use."""
        view = []
        for n, level in enumerate(self.levels):
            if level.shared_by and client not in level.shared_by:
                raise InvalidArgument(field, client, f"is not in spec.levels[{n}].shared_by "
                                      f"{list(level.shared_by)}; name the client there or leave shared_by empty")
            group = "" if level.shared_by else client
            inst = self.instances.get((n, group))
            if inst is None:
                inst = _Instance(LevelStore(level.capacity_bytes), SharedChannel(level.bandwidth_gbps, self.clock_ns))
                self.instances[(n, group)] = inst
            view.append(inst)
        return view

    def _lookup(self, view: list[_Instance], access: mem_pb.MemoryAccess) -> mem_pb.AccessResult:
        n = next((n for n, inst in enumerate(view) if access.key in inst.store), -1)
        if n < 0:
            self.finished[access.id] = access.now_ns
            return mem_pb.AccessResult(id=access.id, level=-1, hit=False,
                                       recompute_tokens=tokens_for(access.size_bytes, self.kv_bytes_per_token))
        view[n].store.touch(access.key)
        if n > 0:
            self._place(view, 0, access.key, view[n].store.entries[access.key])
        self._start(view[n], n, access)
        return mem_pb.AccessResult(id=access.id, level=n, hit=True)

    def _store(self, view: list[_Instance], access: mem_pb.MemoryAccess) -> mem_pb.AccessResult:
        held = any(access.key in inst.store for inst in view)
        n = self._place(view, 0, access.key, access.size_bytes)
        if n < 0:  # larger than every level: nothing to write
            self.finished[access.id] = access.now_ns
        else:
            self._start(view[n], n, access)
        return mem_pb.AccessResult(id=access.id, level=n, hit=held)

    def _evict(self, access: mem_pb.MemoryAccess) -> mem_pb.AccessResult:
        held = [n for (n, _group), inst in self.instances.items() if inst.store.remove(access.key)]
        self.finished[access.id] = access.now_ns
        return mem_pb.AccessResult(id=access.id, level=min(held, default=-1), hit=bool(held))

    def _place(self, view: list[_Instance], start: int, key: str, size_bytes: int) -> int:
        """Inserts ``key`` at the first level from ``start`` that can hold it,
        demoting what it displaces; returns that level, or -1 if none can."""
        for n in range(start, len(view)):
            if size_bytes > view[n].store.capacity_bytes:
                continue
            for victim, victim_bytes in view[n].store.insert(key, size_bytes):
                self._place(view, n + 1, victim, victim_bytes)
            return n
        return -1

    def _start(self, inst: _Instance, n: int, access: mem_pb.MemoryAccess) -> None:
        inst.channel.start(access.id, self.levels[n].latency_ns, access.size_bytes)
        self.in_flight[access.id] = inst
