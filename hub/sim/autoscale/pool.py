"""An autoscaled pool of replicas of one client: provisioning, routing, draining, and its record.

Main name: :class:`ReplicaPool`. A replica is an :class:`LLMClient` built from the
pool's template (``<name>-0``, ``<name>-1``, ... in the order they are created,
never reused) and lives through four states:

- **provisioning**: built and paid for, not routable, for its provisioning time
  (:func:`provisioning_ns`: its device's weight shard over the load bandwidth,
  plus ``startup_s``); the ``initial`` replicas are ready at t=0;
- **ready**: registered with the coordinator, which routes to it;
- **draining**: taken out of routing; serves what it holds (running and queued);
- **removed**: when it holds nothing more (at once for a provisioning replica
  cancelled by a scale-down), no longer paid for.

Every ``sample_s`` the pool reads its ready replicas (waiting requests, busy
time); every ``interval_s`` it decides (:mod:`.policy`): up, new replicas start
provisioning; down, provisioning replicas are cancelled first (newest first),
then the least loaded ready ones drain. Its events run after every other event
of the same time (:data:`AUTOSCALE`), one chain for every pool (:class:`Autoscaler`),
which stops when nothing else is left to happen (the simulation's run also stops once
every request has finished).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ...config.autoscale import ReplicasConfig
from ...config.slo import Slo
from ..clients.llm import LLMClient
from ..kernel import DONE, WAKE, Kernel
from ..records import RequestRecord
from ..scheduling import Sequence
from .policy import NS_PER_S, MetricWindow, Recommender, Sample, pick_to_remove

# The pool samples and decides after the same-time events of the clients, arrivals and wake-ups.
AUTOSCALE = WAKE + 1

State = Literal["provisioning", "ready", "draining", "removed"]


def provisioning_ns(weight_bytes_per_device: float, load_bandwidth_gbps: float, startup_s: float) -> int:
    """A new replica's time to ready: each device reads its weight shard over its own link, all at once
    (``bytes / GB/s`` is nanoseconds), then the fixed start-up time."""
    return math.ceil(weight_bytes_per_device / load_bandwidth_gbps) + round(startup_s * NS_PER_S)


class Routing(Protocol):
    """The coordinator, as a pool adds and removes its routable LLM clients."""

    def register(self, client: Any) -> None: ...

    def unregister(self, client: LLMClient) -> None: ...

    def on_llm_done(self, seq: Sequence, now_ns: int, release_kv: Callable[[], None]) -> None: ...

    def next_arrival_at(self, client: LLMClient, now_ns: int) -> int | None: ...


@dataclass(eq=False)
class Replica:
    """One replica and its life (times in simulated ns; -1: not yet)."""

    client: LLMClient
    created_ns: int
    ready_ns: int
    state: State
    removed_ns: int = -1
    held_kv: int = 0  # finished stages whose KV it still holds (a prefill replica, until the transfer)
    busy_seen_ns: int = 0  # its busy time at the last sample

    @property
    def name(self) -> str:
        return self.client.name

    def lifetime_ns(self, end_ns: int) -> int:
        """How long it existed (was paid for) by ``end_ns``."""
        return (self.removed_ns if self.removed_ns >= 0 else end_ns) - self.created_ns


@dataclass(frozen=True)
class ScaleEvent:
    """A decision that changed the pool: when, the count before and after, the metric it read, and
    the replicas it added (provisioning) or took away (cancelled or draining)."""

    time_ns: int
    before: int
    after: int
    metric: float | None
    replicas: tuple[str, ...]


class _DrainWatch:
    """A replica's stage sink: the coordinator's, telling the pool when a draining replica empties."""

    def __init__(self, pool: ReplicaPool, replica: Replica, coordinator: Routing) -> None:
        self.pool, self.replica, self.coordinator = pool, replica, coordinator

    def on_llm_done(self, seq: Sequence, now_ns: int, release_kv: Callable[[], None]) -> None:
        replica = self.replica
        replica.held_kv += 1

        def release() -> None:
            replica.held_kv -= 1
            release_kv()
            self.pool.settle_drain(replica)
        self.coordinator.on_llm_done(seq, now_ns, release)
        self.pool.settle_drain(replica)

    def next_arrival_at(self, client: LLMClient, now_ns: int) -> int | None:
        return self.coordinator.next_arrival_at(client, now_ns)


@dataclass
class _Counts:
    """The replica count over time: one row per change (time, ready, provisioning, draining)."""

    rows: list[tuple[int, int, int, int]] = field(default_factory=list)

    def record(self, now_ns: int, replicas: list[Replica]) -> None:
        states = [r.state for r in replicas]
        row = (now_ns, states.count("ready"), states.count("provisioning"), states.count("draining"))
        if self.rows and self.rows[-1][0] == now_ns:
            self.rows[-1] = row  # several changes at one time: the last state stands
        elif not self.rows or self.rows[-1][1:] != row[1:]:
            self.rows.append(row)


class ReplicaPool:
    """The replicas of one client template, scaled by its policy.

    Args:
        name: the template client's name (replicas are ``<name>-<k>``).
        config: its ``replicas`` section.
        kernel: the event kernel.
        coordinator: routes to the ready replicas (and takes their finished stages).
        build: builds the replica of a name (a client with its backend session, as any client).
        load_ns: a new replica's provisioning time (:func:`provisioning_ns`).
        slo: the scenario's SLO (the ``slo`` policy's).
    """

    def __init__(self, *, name: str, config: ReplicasConfig, kernel: Kernel, coordinator: Routing,
                 build: Callable[[str], LLMClient], load_ns: int, slo: Slo) -> None:
        self.name, self.config, self.kernel, self.coordinator = name, config, kernel, coordinator
        self.build, self.load_ns = build, load_ns
        self.replicas: list[Replica] = []
        self.window = MetricWindow(config, slo)
        self.recommender = Recommender(config)
        self.events: list[ScaleEvent] = []
        self.counts = _Counts()
        self._names: set[str] = set()
        self._sample_ns, self._interval_ns = round(config.sample_s * NS_PER_S), round(config.interval_s * NS_PER_S)
        self._next_sample_ns, self._next_decision_ns = self._sample_ns, self._interval_ns
        self._last_sample_ns = 0
        for _ in range(config.initial_replicas):
            self._add(ready=True)
        self.counts.record(0, self.replicas)

    # -- the replicas' lives ---------------------------------------------------
    def _add(self, *, ready: bool) -> Replica:
        now = self.kernel.now_ns
        client = self.build(f"{self.name}-{len(self.replicas)}")
        replica = Replica(client, created_ns=now, ready_ns=now if ready else now + self.load_ns,
                          state="provisioning")
        client.sink = _DrainWatch(self, replica, self.coordinator)  # the forecast keeps the coordinator's
        self.replicas.append(replica)
        self._names.add(client.name)
        if ready:
            self._make_ready(replica)
        else:
            self.kernel.call_at(replica.ready_ns, DONE, self._make_ready, replica, label=f"ready {client.name}")
        return replica

    def _make_ready(self, replica: Replica) -> None:
        if replica.state != "provisioning":
            return  # cancelled while it provisioned
        replica.state = "ready"
        replica.busy_seen_ns = replica.client.busy_ns
        self.coordinator.register(replica.client)
        self.counts.record(self.kernel.now_ns, self.replicas)

    def _remove(self, replica: Replica) -> None:
        now = self.kernel.now_ns
        if replica.state == "ready":
            replica.state = "draining"
            self.coordinator.unregister(replica.client)  # no request is routed to it any more
            self.settle_drain(replica)
        else:  # provisioning: cancelled
            replica.state, replica.removed_ns = "removed", now

    def settle_drain(self, replica: Replica) -> None:
        """Removes a draining replica once it holds nothing: no sequence running or queued, no
        finished stage's KV awaiting its transfer."""
        client = replica.client
        if replica.state == "draining" and not replica.held_kv and not client.busy and not client.load("stages"):
            replica.state, replica.removed_ns = "removed", self.kernel.now_ns
            self.counts.record(self.kernel.now_ns, self.replicas)

    # -- sampling and deciding -----------------------------------------------
    def on_request_done(self, request: RequestRecord) -> None:
        """A finished request: the ``slo`` policy's, when one of the pool's replicas served a stage of it."""
        if any(stage.client in self._names for stage in request.stages):
            self.window.add_finished(request)

    @property
    def next_due_ns(self) -> int:
        """When the pool next samples or decides."""
        return min(self._next_sample_ns, self._next_decision_ns)

    def tick(self, now: int) -> None:
        """Samples and decides, whichever is due at ``now``."""
        if now >= self._next_sample_ns:
            self._sample(now)
            self._next_sample_ns += self._sample_ns
        if now >= self._next_decision_ns:
            self._decide(now)
            self._next_decision_ns += self._interval_ns

    def _sample(self, now: int) -> None:
        if now == self._last_sample_ns and self.window.samples:
            return
        ready = [r for r in self.replicas if r.state == "ready"]
        busy = ready_ns = 0
        for replica in ready:
            since = max(self._last_sample_ns, replica.ready_ns)
            busy += replica.client.busy_ns - replica.busy_seen_ns
            ready_ns += now - since
            replica.busy_seen_ns = replica.client.busy_ns
        waiting = sum(r.client.scheduler.num_waiting for r in ready)
        held = sum(r.client.load("stages") for r in ready)
        self.window.add_sample(Sample(now, len(ready), waiting, held, busy, ready_ns))
        self._last_sample_ns = now

    def _decide(self, now: int) -> None:
        self._sample(now)
        ready = [r for r in self.replicas if r.state == "ready"]
        provisioning = [r for r in self.replicas if r.state == "provisioning"]
        current = len(ready) + len(provisioning)
        holds = any(r.client.load("stages") for r in ready)
        metric = self.window.metric(now, pool_holds_requests=holds)
        wanted = self.recommender.decide(now, metric=metric, target=self.window.target, ready=len(ready),
                                         current=current)
        # Draining replicas still run on paid devices: the pool never holds more than max at once.
        draining = sum(r.state == "draining" for r in self.replicas)
        wanted = min(wanted, max(current, self.config.max - draining))
        if wanted > current:
            changed = [self._add(ready=False) for _ in range(wanted - current)]
        elif wanted < current:
            surplus = current - wanted
            cancelled = provisioning[::-1][:surplus]
            drained = [ready[i] for i in pick_to_remove([r.client.load("stages") for r in ready],
                                                        surplus - len(cancelled))]
            changed = [*cancelled, *drained]
            for replica in changed:
                self._remove(replica)
        else:
            return
        self.events.append(ScaleEvent(now, current, wanted, metric, tuple(r.name for r in changed)))
        self.counts.record(now, self.replicas)

    # -- the record ------------------------------------------------------------
    def record_lifetimes(self, end_ns: int) -> None:
        """Writes each replica's life by ``end_ns`` into its client's info (``ClientInfo.existed_ns``):
        the summary's cost and idle energy count that time."""
        for replica in self.replicas:
            replica.client.info.existed_ns = replica.lifetime_ns(end_ns)

    def lifetimes_ns(self, end_ns: int) -> dict[str, int]:
        """How long each replica existed by ``end_ns``, by name."""
        return {r.name: r.lifetime_ns(end_ns) for r in self.replicas}


class Autoscaler:
    """Every pool's samples and decisions, as one chain of events (at :data:`AUTOSCALE` priority).

    The chain ends when nothing else is left to happen (no event pending but its own): a run whose
    requests can no longer progress then ends as it would without pools, instead of sampling forever.

    Args:
        kernel: the event kernel.
        pools: the scenario's pools, in config order.
    """

    def __init__(self, kernel: Kernel, pools: list[ReplicaPool]) -> None:
        self.kernel, self.pools = kernel, pools

    def start(self) -> None:
        """Schedules the first sample (call once the arrivals are scheduled)."""
        self._schedule()

    def _schedule(self) -> None:
        self.kernel.call_at(min(pool.next_due_ns for pool in self.pools), AUTOSCALE, self._tick, label="autoscale")

    def _tick(self) -> None:
        now = self.kernel.now_ns
        for pool in self.pools:
            pool.tick(now)
        if self.kernel.num_pending:
            self._schedule()
