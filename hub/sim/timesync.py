"""Conservative time synchronization with a stateful (time-synchronized) backend.

Work submitted to such a backend gets a provisional completion that later
work may delay but never advance. The hub keeps one event at the earliest
provisional completion it knows; there it calls ``Advance(now)``, hands each
reported completion to its callback, and schedules the backend's
``next_event_ns``. So the backend's clock never runs behind the hub's, and
the hub never acts on a completion before the backend has committed it
(HLA-style conservative synchronization, as in DESIGN.md). A reply that
breaks this (a completion the hub never submitted, outside the time since
the last ``Advance``, or a next event before now) is a :class:`BackendError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cosim.v1 import types_pb2 as pb

from ..errors import BackendError
from .kernel import DONE, Kernel

OnDone = Callable[[int], None]


class SyncedBackend(Protocol):
    """What :class:`TimeSync` needs of a backend client (MemoryClient, NetworkClient)."""

    name: str
    address: str

    def advance(self, session_id: str, until_ns: int) -> pb.AdvanceResponse: ...


class TimeSync:
    """Completion bookkeeping for one time-synchronized backend session.

    Args:
        kernel: the event kernel.
        backend: the backend's client; its ``advance`` is called, its name and address name it in errors.
        session_id: the time-synchronized session.
    """

    def __init__(self, kernel: Kernel, backend: SyncedBackend, session_id: str) -> None:
        self.kernel, self.backend, self.session_id = kernel, backend, session_id
        self._pending: dict[int, tuple[int, OnDone]] = {}  # id -> (start_ns, on_done)
        self._sync_at: int | None = None
        self._synced_ns = 0  # until_ns of the last Advance: the backend reported everything before it

    def submitted(self, work_id: int, provisional_end_ns: int, on_done: OnDone) -> None:
        """Registers submitted work; ``on_done(duration_ns)`` runs when the backend reports it done."""
        if provisional_end_ns < self.kernel.now_ns:
            raise self._fault(f"gave work {work_id} a provisional completion at {provisional_end_ns} ns, before "
                              f"its submission at {self.kernel.now_ns} ns; durations must be >= 0", "")
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
        reply = self.backend.advance(self.session_id, time_ns)
        since_ns, self._synced_ns = self._synced_ns, time_ns
        for completion in reply.completions:
            start_ns, on_done = self._completed(completion, since_ns, time_ns)
            on_done(completion.completion_ns - start_ns)
        if reply.next_event_ns >= 0:
            if reply.next_event_ns < time_ns:
                raise self._fault(f"answered next_event_ns={reply.next_event_ns} to Advance(until_ns={time_ns}); "
                                  "the next event must not be before now (or -1 for none)")
            self._sync(reply.next_event_ns)

    def _completed(self, completion: pb.Completion, since_ns: int, until_ns: int) -> tuple[int, OnDone]:
        """The pending work a reported completion ends, checked against the hub's clock."""
        if completion.id not in self._pending:
            raise self._fault(f"reported completion of id {completion.id} to Advance(until_ns={until_ns}), "
                              "which the hub never submitted or was already reported done")
        start_ns, on_done = self._pending.pop(completion.id)
        earliest = max(start_ns, since_ns)
        if not earliest <= completion.completion_ns <= until_ns:
            raise self._fault(
                f"reported id {completion.id} done at completion_ns={completion.completion_ns} to "
                f"Advance(until_ns={until_ns}); it was submitted at {start_ns} ns and the previous Advance "
                f"reached {since_ns} ns, so it must lie in [{earliest}, {until_ns}]")
        return start_ns, on_done

    def _fault(self, message: str, rpc: str = "Advance") -> BackendError:
        return BackendError(message, backend=self.backend.name, address=self.backend.address, rpc=rpc,
                            sim_time_ns=self.kernel.now_ns)
