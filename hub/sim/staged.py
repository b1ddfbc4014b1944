"""Load stages: turns sent at set times within stages that run one after the other.

inference-perf (kubernetes-sigs/inference-perf, v0.4.0 ``loadgen/load_generator.py``) runs the
``stages`` of a load profile in turn: a stage's requests are queued with send times from its
timer, and the next stage starts only when every request of this one has finished, then waits
``load.interval`` seconds and one second more (the time it gives its workers to fill their
queues: ``start_time = time.perf_counter() + 1``). :class:`StageClock` does that for a
:class:`~cosim.hub.sim.conversations.SessionDriver` whose plan is staged: a turn of stage ``s``
with send time ``offset_ns`` is released at ``start(s) + offset_ns``, or when its predecessors
have ended if that is later (a chat's round waits for the round before it, as inference-perf's
user session lock makes it), and stage ``s + 1`` starts ``gap_ns`` after the last turn of stage
``s`` ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")  # a live session (the driver's; this module knows nothing of it)


class StageClock(Generic[T]):
    """Starts a staged plan's stages and releases their turns.

    Args:
        totals: turns per stage (the stage ends when that many have ended).
        gap_ns: from a stage's last turn's end to the next stage's start.
        timing: a turn's (stage, send time after its stage's start in ns), by session and turn index.
        release: releases a turn at a time (the session driver's).
    """

    def __init__(self, totals: list[int], gap_ns: int, *, timing: Callable[[T, int], tuple[int, int]],
                 release: Callable[[T, int, int], None]) -> None:
        self.totals, self.gap_ns, self.timing, self.release = totals, gap_ns, timing, release
        self.starts: list[int | None] = [None] * len(totals)
        self.done = [0] * len(totals)
        # Per stage, the turns ready (predecessors ended) before the stage started: (session, turn, ready at).
        self.pending: list[list[tuple[T, int, int]]] = [[] for _ in totals]

    def start(self) -> None:
        """Starts stage 0 at time 0 (its turns were handed in by :meth:`ready`)."""
        self._begin(0, 0)

    def ready(self, live: T, j: int, at_ns: int) -> None:
        """Turn ``j`` of ``live`` may go from ``at_ns`` on (its predecessors have ended): released at
        its send time in its stage, or at ``at_ns`` if later; held until its stage starts."""
        stage, offset_ns = self.timing(live, j)
        start = self.starts[stage]
        if start is None:
            self.pending[stage].append((live, j, at_ns))
            return
        self.release(live, j, max(at_ns, start + offset_ns))

    def turn_done(self, stage: int, now_ns: int) -> None:
        """A turn of ``stage`` ended: the next stage starts once every turn of this one has."""
        self.done[stage] += 1
        if self.done[stage] == self.totals[stage] and stage + 1 < len(self.totals):
            self._begin(stage + 1, now_ns + self.gap_ns)

    def _begin(self, stage: int, at_ns: int) -> None:
        self.starts[stage] = at_ns
        waiting, self.pending[stage] = self.pending[stage], []
        for live, j, ready_ns in waiting:
            self.ready(live, j, ready_ns)
