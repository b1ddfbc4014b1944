"""Clients of identical servers with one FIFO queue: the sequential scheduler.

Pre/post-processing, RAG and KV-retrieval clients serve one request stage at
a time per server (cores, or retrieval engines). How long a stage takes is
the client's business (:class:`StageTimer`); some stages end with an
asynchronous part (a memory-backend access) and call back when it is done.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from typing import Protocol

from ..kernel import Kernel
from ..records import ClientInfo, ClientTimeline, RequestRecord, StageRecord

OnStageDone = Callable[[RequestRecord, StageRecord], None]


class StageTimer(Protocol):
    """Starts serving one stage; calls ``finish()`` when its service is over."""

    def serve(self, request: RequestRecord, finish: Callable[[], None]) -> None: ...


class ServiceClient:
    """``servers`` identical servers behind one FIFO queue.

    Args:
        info: static facts for reports.
        kernel: the event kernel.
        kind: the stage kind it serves (``preprocess``, ``rag``, ...).
        servers: how many stages run at once (cores).
        timer: times (and performs) one stage.
        on_stage_done: the coordinator's callback.
    """

    def __init__(self, *, info: ClientInfo, kernel: Kernel, kind: str, servers: int, timer: StageTimer,
                 on_stage_done: OnStageDone) -> None:
        self.info, self.name = info, info.name
        self.kernel, self.kind, self.servers, self.timer = kernel, kind, servers, timer
        self.on_stage_done = on_stage_done
        self.serves = frozenset({kind})
        self.timeline = ClientTimeline()
        self.busy_ns = 0
        self.outstanding = 0
        self._queue: deque[tuple[RequestRecord, StageRecord]] = deque()
        self._idle = servers

    def submit(self, request: RequestRecord, stage: StageRecord) -> None:
        """Queues a stage; it starts as soon as a server is free."""
        self.outstanding += 1
        self._queue.append((request, stage))
        self._start_next()

    def load(self, metric: str) -> int:
        """Stages queued or in service (whatever the router's metric)."""
        return self.outstanding

    def _start_next(self) -> None:
        while self._idle and self._queue:
            request, stage = self._queue.popleft()
            self._idle -= 1
            stage.start_ns = self.kernel.now_ns
            self.timer.serve(request, functools.partial(self._finish, request, stage))

    def _finish(self, request: RequestRecord, stage: StageRecord) -> None:
        now = self.kernel.now_ns
        stage.end_ns = now
        self.busy_ns += now - stage.start_ns
        self.timeline.append(stage.start_ns, now, 1, request.input_tokens, 0, 0, len(self._queue))
        self._idle += 1
        self.outstanding -= 1
        self.on_stage_done(request, stage)
        self._start_next()
