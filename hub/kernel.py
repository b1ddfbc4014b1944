"""The discrete-event kernel: a clock and a heap of events. No gRPC, no I/O.

Heap entries are ``(time_ns, priority, seq, event)``; ``seq`` comes from the
kernel's own counter, so events at the same time and priority run in the
order they were scheduled and every run is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Protocol

from .errors import HubError

# Priorities at equal times: finished work frees resources before new work
# arrives, and clients pick their next batch only after both.
DONE = 0
ARRIVAL = 1
WAKE = 2


class Event(Protocol):
    """Anything with ``handle()``; it may schedule follow-up events."""

    def handle(self) -> None: ...


class Call:
    """An event that calls a function with arguments."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., None], *args: object) -> None:
        self.fn, self.args = fn, args

    def handle(self) -> None:
        self.fn(*self.args)


class Kernel:
    """Clock plus event heap.

    Attributes:
        now_ns: the simulated time of the event being handled.
        num_events: events handled so far.
    """

    def __init__(self) -> None:
        self.now_ns = 0
        self.num_events = 0
        self._heap: list[tuple[int, int, int, Event]] = []
        self._seq = itertools.count()

    def schedule(self, time_ns: int, priority: int, event: Event) -> None:
        """Schedules ``event`` at ``time_ns`` (never in the past)."""
        if time_ns < self.now_ns:
            raise HubError(f"event scheduled at {time_ns} ns, before now ({self.now_ns} ns)")
        heapq.heappush(self._heap, (time_ns, priority, next(self._seq), event))

    def call_at(self, time_ns: int, priority: int, fn: Callable[..., None], *args: object) -> None:
        """Schedules ``fn(*args)`` at ``time_ns``."""
        self.schedule(time_ns, priority, Call(fn, *args))

    def next_time_ns(self) -> int | None:
        """Time of the next event, or None when the heap is empty."""
        return self._heap[0][0] if self._heap else None

    def run(self, *, stop: Callable[[], bool] = lambda: False) -> None:
        """Handles events in order until the heap is empty or ``stop()`` is true.

        NOTE: time never goes backwards: every event is at or after ``now_ns``,
        which :meth:`schedule` enforces.
        """
        heap = self._heap
        while heap and not stop():
            time_ns, _, _, event = heapq.heappop(heap)
            self.now_ns = time_ns
            self.num_events += 1
            event.handle()
