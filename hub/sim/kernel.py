"""The discrete-event kernel: a clock and a heap of events. No gRPC, no I/O.

Heap entries are ``(time_ns, priority, seq, event)``; ``seq`` comes from the
kernel's own counter, so events at the same time and priority run in the
order they were scheduled and every run is deterministic. Each event carries
a label (``arrival``, ``wake c0``, ``step done c0``, ...), and the kernel can
keep the first events it handles (``cosim run --log-events N``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from ..errors import HubError, ScenarioError

# Simulated times are int64 nanoseconds on the wire and in numpy (292 years).
MAX_SIM_NS = 2**63 - 1

# Priorities at equal times: finished work frees resources before new work
# arrives, and clients pick their next batch only after both.
DONE = 0
ARRIVAL = 1
WAKE = 2


class Event:
    """A call of ``fn(*args)`` at a simulated time, with a label saying what it is."""

    __slots__ = ("fn", "args", "label")

    def __init__(self, fn: Callable[..., None], args: tuple[object, ...], label: str) -> None:
        self.fn, self.args, self.label = fn, args, label

    def describe(self) -> str:
        """The label (else the function's name), with the request it concerns where its first
        argument is a request record."""
        label = self.label or getattr(self.fn, "__qualname__", "event")
        request_id = getattr(self.args[0], "id", None) if self.args else None
        return f"{label} request {request_id}" if isinstance(request_id, int) else label


class Kernel:
    """Clock plus event heap.

    Args:
        log_limit: how many of the first events to keep in :attr:`log`.

    Attributes:
        now_ns: the simulated time of the event being handled.
        num_events: events handled so far.
        log: (time_ns, description) of the first ``log_limit`` events handled.
    """

    def __init__(self, *, log_limit: int = 0) -> None:
        self.now_ns = 0
        self.num_events = 0
        self.log_limit = log_limit
        self.log: list[tuple[int, str]] = []
        self._heap: list[tuple[int, int, int, Event]] = []
        self._seq = itertools.count()
        self._stop: Callable[[], bool] = _never  # run()'s, while it runs

    def call_at(self, time_ns: int, priority: int, fn: Callable[..., None], *args: object, label: str = "") -> None:
        """Schedules ``fn(*args)`` at ``time_ns`` (never in the past)."""
        if time_ns < self.now_ns:
            raise HubError(f"event {label!r} scheduled at {time_ns} ns, before now ({self.now_ns} ns)")
        if time_ns > MAX_SIM_NS:  # the config's bounds keep runs far below; a backend's step time may not
            raise ScenarioError("simulated time", f"event {label!r} would happen at {time_ns / 1e9:.4g} s, past "
                                f"the {MAX_SIM_NS / 1e9:.4g} s int64 nanoseconds hold: a time, rate, bandwidth "
                                "or step time of the scenario is out of all proportion")
        heapq.heappush(self._heap, (time_ns, priority, next(self._seq), Event(fn, args, label)))

    def peek(self) -> int:
        """When the next event is handled: the first pending event's time; ``now_ns`` when the run
        stops before its next event (:meth:`run`'s ``stop``); past :data:`MAX_SIM_NS` when none is
        pending. Nothing else happens in the simulation before then (see :meth:`advance`)."""
        if self._stop():
            return self.now_ns
        return self._heap[0][0] if self._heap else MAX_SIM_NS + 1

    def advance(self, time_ns: int, label: str) -> None:
        """Handles an event its caller handles itself, at ``time_ns``, instead of scheduling it:
        one before :meth:`peek`, so it is the event the heap would handle next. Saves the heap's work
        on the steps of a client alone in the simulation; the order of events is the heap's."""
        self.now_ns = time_ns
        self.num_events += 1
        if self.num_events <= self.log_limit:
            self.log.append((time_ns, label))

    @property
    def num_pending(self) -> int:
        """Events scheduled and not yet handled."""
        return len(self._heap)

    def run(self, *, stop: Callable[[], bool] = lambda: False) -> None:
        """Handles events in order until the heap is empty or ``stop()`` is true.

        NOTE: time never goes backwards: every event is at or after ``now_ns``,
        which :meth:`call_at` enforces.
        """
        heap, log = self._heap, self.log
        self._stop = stop
        try:
            while heap and not stop():
                time_ns, _, _, event = heapq.heappop(heap)
                self.now_ns = time_ns
                self.num_events += 1
                if self.num_events <= self.log_limit:
                    log.append((time_ns, event.describe()))
                event.fn(*event.args)
        finally:
            self._stop = _never


def _never() -> bool:
    return False
