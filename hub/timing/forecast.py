"""Lookahead: the steps that follow a client's step in flight if no work arrives.

A :class:`Forecast` runs the client's own scheduler policy on a copy of its
state (:meth:`Scheduler.copy`), with decode runs taken in bulk, so there is one
model of admission, preemption and KV growth. It is extended on demand and
kept: when the client is asked for predictions again (a top-up while another
client misses, or its own miss once they run out) and nothing changed its
scheduler but its own steps, the forecast continues where it stopped instead
of copying the scheduler and predicting the same steps again. What it returns
for a step in flight is what a fresh copy would predict from there
(:func:`predict`), so keeping it changes no call and no result. For a client
with a drafter model it also keeps each predicted step's drafter forwards
(:meth:`Forecast.drafts`), which the drafter's own session times ahead.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from cosim_core import DecodeRun

from ..sim.scheduling import ScheduledBatch, Scheduler, Signature, StepOutcome


def predict(scheduler: Scheduler, in_flight: ScheduledBatch, depth: int) -> list[Signature]:
    """The signatures of up to ``depth`` batches that follow ``in_flight`` if no work arrives.

    A backlog is predicted while it lasts, since arrivals join the queue's tail. Once the
    predicted steps empty the queue, an arrival could join the next admission, so prediction
    stops at the next departure.
    """
    batches = Forecast(scheduler, in_flight).after(0, depth, in_flight)
    assert batches is not None  # the origin's own step always matches
    return batches


class Forecast:
    """Predicted steps after an origin (the step in flight when it was made), grown on demand.

    Step ``k`` is the k-th after the origin (the origin is step 0). Per step it keeps the
    signature, and once the step is applied on the copy, whether requests wait after it and
    whether it is a departure with none waiting (where a backlog's prediction stops), so that
    :meth:`after` can answer for any later step in flight as a fresh copy made then would.
    Valid only while the scheduler changes by its own steps alone: a caller drops it when work
    arrives or KV is released.

    Args:
        scheduler: the client's scheduler (copied).
        in_flight: its step in flight, the origin.
        drafts_of: the signatures of the drafter model's forwards after a formed batch
            (:meth:`cosim.hub.sim.clients.drafter.Drafter.forwards`), kept per step; None: none.
    """

    def __init__(self, scheduler: Scheduler, in_flight: ScheduledBatch,
                 drafts_of: Callable[[ScheduledBatch], list[Signature]] | None = None) -> None:
        sim = scheduler.copy()
        running = scheduler.running
        if len(in_flight.seqs) == len(running) and all(map(operator.is_, in_flight.seqs, running)):
            seqs = list(sim.running)  # the common case: the step runs every running sequence, in order
        else:
            clones = {id(seq): clone for seq, clone in zip(running, sim.running)}
            seqs = [clones[id(seq)] for seq in in_flight.seqs]
        self._sim = sim
        self._last = ScheduledBatch(seqs=seqs, num_new=in_flight.num_new, draft_tokens=in_flight.draft_tokens,
                                    context=in_flight.context, num_tokens=in_flight.num_tokens,
                                    admitted=in_flight.admitted, queue_blocked=in_flight.queue_blocked,
                                    queue_stamp=in_flight.queue_stamp)
        self._outcome: StepOutcome = sim.update(self._last)
        self._signatures: list[Signature] = []  # of steps 1, 2, ...
        self._drafts_of = drafts_of
        self._drafts: list[list[Signature]] = []  # of steps 1, 2, ...: the drafter's forwards after each
        self._waiting = [bool(sim.waiting)]  # per applied step from 0: requests wait after it
        self._departs = [False]  # per applied step from 0: someone finished and none wait
        self._applied = 0  # steps applied on the copy; the one after them, if formed, is pending
        self.ended = False  # the copy can run nothing more (a wait is no step)

    @property
    def num_steps(self) -> int:
        """Steps predicted so far."""
        return len(self._signatures)

    def after(self, step: int, depth: int, in_flight: ScheduledBatch) -> list[Signature] | None:
        """The signatures of up to ``depth`` steps after step ``step``, now in flight as
        ``in_flight``, as :func:`predict` would give them from a fresh copy; None when the
        forecast does not hold that step (it ended before it, or predicted another batch).
        """
        limit = step + depth
        while self._applied < step and not self.ended:  # the step in flight, and what it changes
            self._advance(limit - len(self._signatures))
        if self._applied < step:
            return None
        if step and self._signatures[step - 1] != in_flight.signature:
            return None
        backlog, departs = self._waiting[step], self._departs
        checked = step + 1  # the next step whose departure is to be checked
        while True:
            last_checked = min(self._applied, limit - 1)  # the step at the depth ends the call unchecked
            while checked <= last_checked:
                if backlog and departs[checked]:
                    return self._signatures[step:checked]  # the backlog is gone: an arrival joins next
                checked += 1
            if len(self._signatures) >= limit or self.ended:
                return self._signatures[step:limit]
            self._advance(limit - len(self._signatures))

    def drafts(self, step: int, count: int) -> list[Signature]:
        """The drafter's forwards after each of the ``count`` predicted steps after step ``step``
        (those :meth:`after` gave), in order; none without ``drafts_of``."""
        return [forward for forwards in self._drafts[step:step + count] for forward in forwards]

    def _advance(self, room: int) -> None:
        """Applies the pending step on the copy, or forms the next (a decode run: up to ``room``)."""
        sim = self._sim
        if self._applied < len(self._signatures):
            outcome = self._outcome = sim.update(self._last)
            waiting = bool(sim.waiting)
            self._waiting.append(waiting)
            self._departs.append(bool(outcome.finished) and not waiting)
            self._applied += 1
            return
        run = DecodeRun.start(sim, self._last, self._outcome)
        if run is not None:
            steps = min(run.steps_left, room)
            self._signatures += run.signatures(steps)
            if self._drafts_of is not None:  # kept aligned (a speculating client takes no decode runs)
                self._drafts += [[] for _ in range(steps)]
            self._last = run.take_in_bulk(steps)  # its last step in flight, applied like any other
            # A run's steps before its last change no queue and finish no one.
            self._waiting += [self._waiting[-1]] * (steps - 1)
            self._departs += [False] * (steps - 1)
            self._applied += steps - 1
        else:
            batch = sim.schedule()
            if not batch.seqs:
                self.ended = True  # nothing can run
                return
            self._last = batch
            self._signatures.append(batch.signature)
            if self._drafts_of is not None:
                self._drafts.append(self._drafts_of(batch))  # formed, not applied: who proposes is known
