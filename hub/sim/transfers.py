"""Inter-client transfers: a plain link, or a network backend (either mode).

Every transfer service has ``start(src, dst, size_bytes, on_done)``: the
transfer starts now and ``on_done(duration_ns)`` runs at its completion, as a
kernel event; ``start`` returns when that is expected (exact, but for a
time-synchronized session: the backend's provisional end), a lookahead hint.
The time-synchronized service keeps the backend's clock in step with the
hub's: it schedules the backend's ``next_event_ns`` as an event and calls
``Advance`` there (conservative synchronization).
"""

from __future__ import annotations

import itertools

from cosim.v1 import network_service_pb2 as net_pb

from ..backends.rpc import NetworkClient
from ..config.sections import LinkConfig
from .kernel import DONE, Kernel
from .timesync import OnDone, TimeSync


class LinkTransfers:
    """One documented link shared by every client pair: latency + size / bandwidth, no contention."""

    def __init__(self, kernel: Kernel, link: LinkConfig) -> None:
        self.kernel = kernel
        self.bytes_per_ns = link.bandwidth_gbps  # GB/s (decimal) is bytes per ns
        self.latency_ns = int(round(link.latency_s * 1e9))

    def start(self, src: str, dst: str, size_bytes: int, on_done: OnDone) -> int:
        duration = self.latency_ns + int(size_bytes / self.bytes_per_ns)
        self.kernel.call_at(self.kernel.now_ns + duration, DONE, on_done, duration, label=f"transfer done {dst}")
        return self.kernel.now_ns + duration


class NetworkTransfers:
    """Transfers timed by a network backend session.

    Args:
        kernel: the event kernel.
        client: the network backend's gRPC client.
        session_id: a session whose endpoints are the hub's client names.
        time_synchronized: the session is congestion-aware (Advance protocol).
        layers: KV sent as this many back-to-back messages.
    """

    def __init__(self, kernel: Kernel, client: NetworkClient, session_id: str, *, time_synchronized: bool,
                 layers: int = 1) -> None:
        self.kernel, self.client, self.session_id = kernel, client, session_id
        self.layers = layers
        self._ids = itertools.count(1)
        self._collectives: dict[tuple[str, int], int] = {}
        self._sync = TimeSync(kernel, client, session_id) if time_synchronized else None

    def start(self, src: str, dst: str, size_bytes: int, on_done: OnDone) -> int:
        now = self.kernel.now_ns
        transfer = net_pb.PointToPoint(id=next(self._ids), src=src, dst=dst, size_bytes=max(1, size_bytes),
                                       layers=self.layers, now_ns=now)
        (result,) = self.client.transfer(self.session_id, [transfer], stateful=self._sync is not None,
                                         sim_time_ns=now)
        if self._sync is None:
            self.kernel.call_at(now + result.duration_ns, DONE, on_done, result.duration_ns,
                                label=f"transfer done {dst}")
        else:
            self._sync.submitted(transfer.id, now + result.duration_ns, on_done)
        return now + result.duration_ns

    def all_reduce_ns(self, endpoint: str, size_bytes: int) -> int:
        """Time of one all-reduce over an endpoint's NPUs (predict mode), cached by size."""
        key = (endpoint, size_bytes)
        if key not in self._collectives:
            op = net_pb.CollectiveOp(id=next(self._ids), kind=net_pb.COLLECTIVE_KIND_ALL_REDUCE,
                                     size_bytes=max(1, size_bytes), endpoint=endpoint, now_ns=self.kernel.now_ns)
            (result,) = self.client.collective(self.session_id, [op], stateful=False, sim_time_ns=self.kernel.now_ns)
            self._collectives[key] = result.duration_ns
        return self._collectives[key]
