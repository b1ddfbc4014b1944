"""The sessions a backend client opened, so that a restarted backend gets them back.

A backend that restarts loses its sessions: the next call naming one is
answered NOT_FOUND. The client then re-opens it with the request that opened
it and retries the call, under the id its callers already hold (the backend's
new id is mapped to it). What "re-open" gives back depends on the session:

- a session that only ever answered predictions (every runtime session; memory
  and network sessions in predict mode) holds nothing but its spec, so the
  re-opened one answers every later call exactly as the lost one would have:
  a run survives a restart with identical results;
- a session that took a state-changing call (time-synchronized Access,
  Transfer, Advance) held contents and in-flight work the hub cannot replay,
  so losing it stops the run with an error saying so.

A restart loses every session at once, so the first NOT_FOUND marks them all
stale: none of their old ids is sent again (a restarted backend may hand the
same ids to new sessions), and each is re-opened before its next call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class OpenSession:
    """One session as its callers know it.

    Attributes:
        id: the id callers hold (the backend's id when it was first opened).
        open_rpc: the OpenSession method that opened it.
        open_request: the request that opened it (its spec), sent again to re-open it.
        live_id: the backend's id of it now; None once the backend lost it.
        stateful: it took a state-changing call, so a re-opened one would not be the same.
        reopened: how many times it was re-opened.
    """

    id: str
    open_rpc: Callable[..., Any]
    open_request: Any
    live_id: str | None
    stateful: bool = False
    reopened: int = 0


class OpenSessions:
    """The sessions of one backend client, by the id their callers hold."""

    def __init__(self) -> None:
        self._by_id: dict[str, OpenSession] = {}

    def add(self, backend_id: str, open_rpc: Callable[..., Any], open_request: Any) -> str:
        """Records a session the backend just opened as ``backend_id``; returns the id callers get
        (``backend_id``, made unique where a restarted backend reused an id callers still hold)."""
        caller_id, n = backend_id, 1
        while caller_id in self._by_id:
            n += 1
            caller_id = f"{backend_id}~{n}"
        self._by_id[caller_id] = OpenSession(caller_id, open_rpc, open_request, backend_id)
        return caller_id

    def get(self, caller_id: str) -> OpenSession | None:
        """The session callers name ``caller_id``; None for an id this client did not open."""
        return self._by_id.get(caller_id)

    def lose_all(self) -> None:
        """Marks every session lost (the backend restarted): none of their ids is sent again."""
        for session in self._by_id.values():
            session.live_id = None

    def remove(self, caller_id: str) -> None:
        """Forgets a closed session."""
        self._by_id.pop(caller_id, None)
