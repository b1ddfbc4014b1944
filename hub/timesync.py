"""Conservative time synchronization with a stateful (time-synchronized) backend.

Work submitted to such a backend gets a provisional completion that later
work may delay but never advance. The hub keeps one event at the earliest
provisional completion it knows; there it calls ``Advance(now)``, hands each
reported completion to its callback, and schedules the backend's
``next_event_ns``. So the backend's clock never runs behind the hub's, and
the hub never acts on a completion before the backend has committed it
(HLA-style conservative synchronization, as in DESIGN.md).
"""

from __future__ import annotations

from typing import Callable

from cosim.v1 import types_pb2 as pb

from .kernel import DONE, Kernel

OnDone = Callable[[int], None]


class TimeSync:
    """Completion bookkeeping for one time-synchronized backend session.

    Args:
        kernel: the event kernel.
        advance: calls the backend's ``Advance(until_ns)``.
    """

    def __init__(self, kernel: Kernel, advance: Callable[[int], pb.AdvanceResponse]) -> None:
        self.kernel, self._advance_backend = kernel, advance
        self._pending: dict[int, tuple[int, OnDone]] = {}  # id -> (start_ns, on_done)
        self._sync_at: int | None = None

    def submitted(self, work_id: int, provisional_end_ns: int, on_done: OnDone) -> None:
        """Registers submitted work; ``on_done(duration_ns)`` runs when the backend reports it done."""
        self._pending[work_id] = (self.kernel.now_ns, on_done)
        self._sync(provisional_end_ns)

    def _sync(self, time_ns: int) -> None:
        if self._sync_at is None or time_ns < self._sync_at:
            self._sync_at = time_ns
            self.kernel.call_at(time_ns, DONE, self._on_sync, time_ns)

    def _on_sync(self, time_ns: int) -> None:
        if time_ns != self._sync_at:
            return  # superseded by an earlier sync point
        self._sync_at = None
        reply = self._advance_backend(time_ns)
        for completion in reply.completions:
            start_ns, on_done = self._pending.pop(completion.id)
            on_done(completion.completion_ns - start_ns)
        if reply.next_event_ns >= 0:
            self._sync(reply.next_event_ns)
