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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .conversations import SessionDriver, _Live


class StageClock:
    """Starts a staged plan's stages and releases their turns.

    Args:
        driver: the session driver it releases turns through.
        totals: turns per stage (the stage ends when that many have ended).
        gap_ns: from a stage's last turn's end to the next stage's start.
    """

    def __init__(self, driver: SessionDriver, totals: list[int], gap_ns: int) -> None:
        self.driver, self.totals, self.gap_ns = driver, totals, gap_ns
        self.starts: list[int | None] = [None] * len(totals)
        self.done = [0] * len(totals)
        # Per stage, the turns ready (predecessors ended) before the stage started: (session, turn, ready at).
        self.pending: list[list[tuple[_Live, int, int]]] = [[] for _ in totals]

    def start(self) -> None:
        """Makes every session of the plan live and starts stage 0 at time 0."""
        from .conversations import _Live

        driver, k = self.driver, 0
        while (session := driver.source.session(k)) is not None:
            live = driver.live[session.index] = _Live(session, -1, 0)
            driver.num_started += 1
            for j, turn in enumerate(session.turns):
                if not turn.parents:
                    self.pending[turn.stage].append((live, j, 0))
            k += 1
        self._begin(0, 0)

    def ready(self, live: _Live, j: int, at_ns: int) -> None:
        """Turn ``j`` of ``live`` may go from ``at_ns`` on (its predecessors have ended): released at
        its send time in its stage, or at ``at_ns`` if later; held until its stage starts."""
        turn = live.spec.turns[j]
        start = self.starts[turn.stage]
        if start is None:
            self.pending[turn.stage].append((live, j, at_ns))
            return
        at = max(at_ns, start + turn.offset_ns)
        if j == 0:
            live.start_ns = at  # the session's first turn: its latency counts from here
        self.driver._release(live, j, at)

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
