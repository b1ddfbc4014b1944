"""Processor-sharing bandwidth of one memory level (time-synchronized mode).

An access first waits the level's fixed latency, then streams its bytes. The
streaming accesses of a channel split its bandwidth equally (processor
sharing), so each start or finish changes everyone's rate; the channel keeps
fractional-nanosecond times internally and callers round with
:func:`~cosim.adapters.memory.formula.to_ns`.

Main name: :class:`SharedChannel`.
"""

from __future__ import annotations

import copy
import dataclasses
import math

# A flow is done when less than this fraction of its bytes is left (float noise).
_DONE_FRACTION = 1e-9


@dataclasses.dataclass
class _Flow:
    join_ns: float  # when the latency is over and streaming starts
    size_bytes: float
    remaining_bytes: float


class SharedChannel:
    """Bandwidth shared by the accesses in flight on one level instance.

    Args:
        bandwidth_gbps: the level's bandwidth, GB/s (= bytes per ns).
        clock_ns: time the channel starts at.
    """

    def __init__(self, bandwidth_gbps: float, clock_ns: float = 0.0) -> None:
        self.bandwidth = bandwidth_gbps
        self.clock_ns = clock_ns
        self.flows: dict[int, _Flow] = {}

    def start(self, access_id: int, latency_ns: int, size_bytes: int) -> None:
        """Starts an access at the channel's clock (call :meth:`run_until` first)."""
        self.flows[access_id] = _Flow(self.clock_ns + latency_ns, float(size_bytes), float(size_bytes))

    def run_until(self, until_ns: float) -> list[tuple[float, int]]:
        """Moves the clock to ``until_ns`` and returns the flows finished on the way.

        Returns:
            ``(finish_ns, access_id)`` pairs in finishing order.

        NOTE: between two consecutive events (a flow joining or finishing) the
        set of streaming flows is fixed, so each advances at bandwidth / count;
        the loop jumps from event to event and stops at ``until_ns``.
        """
        finished: list[tuple[float, int]] = []
        while self.flows:
            active = {i: f for i, f in self.flows.items() if f.join_ns <= self.clock_ns}
            next_join = min((f.join_ns for f in self.flows.values() if f.join_ns > self.clock_ns), default=math.inf)
            rate = self.bandwidth / len(active) if active else 0.0
            least_bytes = min((f.remaining_bytes for f in active.values()), default=math.inf)
            next_finish = self.clock_ns + least_bytes / rate if active else math.inf
            if min(next_join, next_finish) > until_ns:
                for flow in active.values():
                    flow.remaining_bytes -= (until_ns - self.clock_ns) * rate
                break
            if next_join < next_finish:
                for flow in active.values():
                    flow.remaining_bytes -= (next_join - self.clock_ns) * rate
                self.clock_ns = next_join
                continue
            # Every streaming flow moved exactly least_bytes; the smallest ones are done.
            # Deciding by bytes, not by clock arithmetic, keeps the loop finite at large clocks.
            self.clock_ns = next_finish
            for access_id, flow in active.items():
                flow.remaining_bytes -= least_bytes
                if flow.remaining_bytes <= flow.size_bytes * _DONE_FRACTION:
                    finished.append((next_finish, access_id))
                    del self.flows[access_id]
        if until_ns != math.inf:
            self.clock_ns = max(self.clock_ns, until_ns)
        return finished

    def projected(self) -> dict[int, float]:
        """Finish time of every flow in flight if nothing else starts (provisional)."""
        twin = copy.deepcopy(self)
        return {access_id: finish_ns for finish_ns, access_id in twin.run_until(math.inf)}
