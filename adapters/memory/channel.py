"""Processor-sharing bandwidth of one memory level (time-synchronized mode).

An access first waits the level's fixed latency, then streams its bytes. The
streaming accesses of a channel split its bandwidth equally (processor
sharing), so each start or finish changes everyone's rate.

Because every streaming flow gets the same rate, the channel tracks one
number, ``service_bytes``: bytes each streaming flow has received since the
channel was last idle. A flow joining at service S with B bytes is done when
service reaches S + B, so flows finish in the order of those thresholds (a
heap) and each event costs O(log n). Times are fractional nanoseconds here;
callers round with :func:`~cosim.adapters.memory.formula.to_ns`.

Main name: :class:`SharedChannel`.
"""

from __future__ import annotations

import heapq
import math

# A flow is done when less than this fraction of its bytes is left (float noise).
_DONE_FRACTION = 1e-9


class SharedChannel:
    """Bandwidth shared by the accesses in flight on one level instance.

    Args:
        bandwidth_gbps: the level's bandwidth, GB/s (= bytes per ns).
        clock_ns: time the channel starts at.
    """

    def __init__(self, bandwidth_gbps: float, clock_ns: float = 0.0) -> None:
        self.bandwidth = bandwidth_gbps
        self.clock_ns = clock_ns
        self.service_bytes = 0.0
        self.streaming: list[tuple[float, int, float]] = []  # heap of (done at service, id, size)
        self.waiting: list[tuple[float, int, float]] = []    # heap of (join_ns, id, size)

    def __len__(self) -> int:
        """Accesses in flight (waiting out their latency or streaming)."""
        return len(self.streaming) + len(self.waiting)

    def start(self, access_id: int, latency_ns: int, size_bytes: int) -> None:
        """Starts an access at the channel's clock (call :meth:`run_until` first)."""
        if latency_ns > 0:
            heapq.heappush(self.waiting, (self.clock_ns + latency_ns, access_id, float(size_bytes)))
        else:
            heapq.heappush(self.streaming, (self.service_bytes + size_bytes, access_id, float(size_bytes)))

    def run_until(self, until_ns: float) -> list[tuple[float, int]]:
        """Moves the clock to ``until_ns`` and returns the flows finished on the way.

        Returns:
            ``(finish_ns, access_id)`` pairs in finishing order.

        NOTE: between two consecutive events (a flow joining or finishing) the
        number of streaming flows is fixed, so service grows at bandwidth / n;
        the loop jumps from event to event and stops at ``until_ns``.
        """
        finished: list[tuple[float, int]] = []
        while self.streaming or self.waiting:
            next_join = self.waiting[0][0] if self.waiting else math.inf
            rate = self.bandwidth / len(self.streaming) if self.streaming else 0.0
            next_finish = (self.clock_ns + (self.streaming[0][0] - self.service_bytes) / rate
                           if self.streaming else math.inf)
            if min(next_join, next_finish) > until_ns:
                self.service_bytes += (until_ns - self.clock_ns) * rate
                break
            if next_join < next_finish:
                self.service_bytes += (next_join - self.clock_ns) * rate
                self.clock_ns = next_join
                while self.waiting and self.waiting[0][0] <= self.clock_ns:
                    _, access_id, size = heapq.heappop(self.waiting)
                    heapq.heappush(self.streaming, (self.service_bytes + size, access_id, size))
                continue
            # Setting service to the threshold, not adding rate x time, keeps the
            # finishing flow exact and the loop finite at large clocks.
            self.clock_ns, self.service_bytes = next_finish, self.streaming[0][0]
            while self.streaming and self.streaming[0][0] - self.service_bytes <= self.streaming[0][2] * _DONE_FRACTION:
                finished.append((next_finish, heapq.heappop(self.streaming)[1]))
            if not self.streaming:
                self.service_bytes = 0.0  # idle: restart the count, bounding float growth
        if until_ns != math.inf:
            self.clock_ns = max(self.clock_ns, until_ns)
        return finished

    def projected(self) -> dict[int, float]:
        """Finish time of every access in flight if nothing else starts (provisional)."""
        twin = SharedChannel(self.bandwidth, self.clock_ns)
        twin.service_bytes, twin.streaming, twin.waiting = self.service_bytes, list(self.streaming), list(self.waiting)
        return {access_id: finish_ns for finish_ns, access_id in twin.run_until(math.inf)}
