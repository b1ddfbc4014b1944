"""Congestion-aware mode: store-and-forward links with FIFO queues.

:class:`LinkSimulator` generalizes ASTRA-sim's 1-D congestion-aware
analytical backend to several dimensions. Every directed link (Ring neighbour
links both ways, a FullyConnected link per ordered pair, Switch up- and
down-links per NPU) has its dimension's bandwidth and latency. A message is
routed dimension by dimension (ascending; Ring the shorter way) and is
store-and-forward on each hop: the link is busy ⌊size/bw⌋, the message
reaches the next device ⌊latency + size/bw⌋ after it started on the link,
and messages that find the link busy wait their turn (FIFO).

Work is a *job* (a transfer or a collective, named by the hub's id) made of
*chains* (a transfer's one; a collective's one per chunk) of *stages*: a
stage sends its messages at once, waits for all of them to arrive, then
waits its delay (endpoint delay, reduction). Chains of one job start
together and contend with each other and with every other job.

:class:`SynchronizedNetwork` runs the time-synchronized protocol on top; see
the package docstring for the rules.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Iterable, Sequence

from .topology import Link, Topology

Message = tuple[int, int, int]  # (src NPU, dst NPU, bytes)


@dataclasses.dataclass(frozen=True)
class Stage:
    """Messages sent together, and the delay after the last one arrives."""

    messages: tuple[Message, ...]
    delay_ns: int


# Heap entries: (time_ns, seq, kind, job, chain, route_or_None, hop, size).
_STAGE, _HOP = 0, 1


class LinkSimulator:
    """Deterministic discrete-event simulation of messages on links.

    NOTE: events are processed in (time, insertion) order and a link's queue
    is FIFO, so a link's next free time is known when a message is enqueued:
    ``start = max(arrival, busy_until)``. Completion times, once recorded, never
    change: a job's chains have no messages left that later work could delay.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.now_ns = 0
        self._heap: list[tuple[int, int, int, int, int, tuple[Link, ...] | None, int, int]] = []
        self._seq = itertools.count()
        self._busy: dict[Link, int] = {}
        self._chains: dict[tuple[int, int], tuple[Stage, ...]] = {}
        self._progress: dict[tuple[int, int], list[int]] = {}  # [stage index, messages in flight]
        self._open_chains: dict[int, int] = {}
        self._latest: dict[int, int] = {}
        self.completions: dict[int, int] = {}  # job -> completion ns
        self._routes: dict[tuple[int, int], tuple[Link, ...]] = {}

    def clone(self) -> LinkSimulator:
        """A copy that can run ahead without touching this one."""
        other = LinkSimulator.__new__(LinkSimulator)
        other.__dict__.update(self.__dict__)
        other._heap = list(self._heap)
        other._seq = itertools.count(next(self._seq))  # both stay increasing
        other._busy = dict(self._busy)
        other._chains = dict(self._chains)
        other._progress = {k: list(v) for k, v in self._progress.items()}
        other._open_chains = dict(self._open_chains)
        other._latest = dict(self._latest)
        other.completions = dict(self.completions)
        return other

    def submit(self, job: int, start_ns: int, chains: Sequence[Sequence[Stage]]) -> None:
        """Adds a job whose chains all start at ``start_ns`` (>= now_ns)."""
        chains = [tuple(c) for c in chains if c]
        if not chains:
            self.completions[job] = start_ns
            return
        self._open_chains[job] = len(chains)
        self._latest[job] = start_ns
        for index, stages in enumerate(chains):
            self._chains[(job, index)] = stages
            self._progress[(job, index)] = [0, 0]
            self._push(start_ns, _STAGE, job, index, None, 0, 0)

    def run_until(self, until_ns: int | None = None) -> None:
        """Processes every event at or before ``until_ns`` (all if None)."""
        while self._heap and (until_ns is None or self._heap[0][0] <= until_ns):
            t, _, kind, job, chain, route, hop, size = heapq.heappop(self._heap)
            self.now_ns = max(self.now_ns, t)
            if kind == _STAGE:
                self._start_stage(t, job, chain)
            else:
                assert route is not None
                self._arrive(t, job, chain, route, hop, size)
        if until_ns is not None:
            self.now_ns = max(self.now_ns, until_ns)

    def _push(self, t: int, kind: int, job: int, chain: int, route: tuple[Link, ...] | None,
              hop: int, size: int) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), kind, job, chain, route, hop, size))

    def _route(self, src: int, dst: int) -> tuple[Link, ...]:
        key = (src, dst)
        if key not in self._routes:
            self._routes[key] = tuple(self.topology.route(src, dst))
        return self._routes[key]

    def _start_stage(self, t: int, job: int, chain: int) -> None:
        progress = self._progress[(job, chain)]
        stage = self._chains[(job, chain)][progress[0]]
        progress[1] = len(stage.messages)
        if not stage.messages:  # nothing to send: the stage ends at once
            progress[1] = 1
            self._delivered(t, job, chain)
        for src, dst, size in stage.messages:
            self._arrive(t, job, chain, self._route(src, dst), 0, size)

    def _arrive(self, t: int, job: int, chain: int, route: tuple[Link, ...], hop: int, size: int) -> None:
        """A message is at the device before ``route[hop]`` (or delivered)."""
        if hop == len(route):
            self._delivered(t, job, chain)
            return
        link = route[hop]
        dim = self.topology.dims[link[0]]
        start = max(t, self._busy.get(link, 0))
        self._busy[link] = start + int(size / dim.bandwidth_bpns)
        self._push(start + int(dim.latency_ns + size / dim.bandwidth_bpns), _HOP, job, chain, route, hop + 1, size)

    def _delivered(self, t: int, job: int, chain: int) -> None:
        progress = self._progress[(job, chain)]
        progress[1] -= 1
        if progress[1]:
            return
        stages = self._chains[(job, chain)]
        done = t + stages[progress[0]].delay_ns
        progress[0] += 1
        if progress[0] < len(stages):
            self._push(done, _STAGE, job, chain, None, 0, 0)
            return
        del self._progress[(job, chain)], self._chains[(job, chain)]
        self._latest[job] = max(self._latest[job], done)
        self._open_chains[job] -= 1
        if not self._open_chains[job]:
            del self._open_chains[job]
            self.completions[job] = self._latest.pop(job)


@dataclasses.dataclass
class _Pending:
    start_ns: int
    provisional_ns: int


class SynchronizedNetwork:
    """The time-synchronized protocol over a :class:`LinkSimulator`.

    ``submit`` adds jobs at their ``now_ns`` and returns provisional
    completion times (everything known so far run to the end); ``advance``
    moves the committed clock and returns what finished.
    """

    def __init__(self, topology: Topology) -> None:
        self.sim = LinkSimulator(topology)
        self.clock_ns = 0
        self._pending: dict[int, _Pending] = {}

    def is_pending(self, job: int) -> bool:
        return job in self._pending

    def submit(self, jobs: Iterable[tuple[int, int, Sequence[Sequence[Stage]]]]) -> dict[int, int]:
        """Adds (id, now_ns, chains) jobs in order; returns id -> provisional completion ns."""
        ids = []
        for job, now_ns, chains in jobs:
            self.sim.run_until(now_ns - 1)  # events at now_ns see the new work already queued
            self.clock_ns = max(self.clock_ns, now_ns)
            self.sim.submit(job, now_ns, chains)
            self._pending[job] = _Pending(now_ns, now_ns)
            ids.append(job)
        ahead = self.sim.clone()
        ahead.run_until(None)
        for job, pending in self._pending.items():
            pending.provisional_ns = ahead.completions[job]
        return {job: self._pending[job].provisional_ns for job in ids}

    def advance(self, until_ns: int) -> tuple[list[tuple[int, int]], int]:
        """Runs to ``until_ns``; returns (completions as (ns, id) sorted, next_event_ns or -1)."""
        self.sim.run_until(until_ns)
        self.clock_ns = until_ns
        done = sorted((t, job) for job, t in self.sim.completions.items() if t <= until_ns and job in self._pending)
        for _, job in done:
            del self._pending[job]
            del self.sim.completions[job]
        next_ns = min((p.provisional_ns for p in self._pending.values()), default=-1)
        return done, next_ns
