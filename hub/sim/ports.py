"""What the simulation asks of timing, as protocols: the seam between :mod:`cosim.hub.sim` and :mod:`cosim.hub.timing`.

The simulator decides what a step holds and what it does to the requests; how long it lasts, and how
cheaply that is found out, is the timing layer's business. The simulator sees only these protocols,
so it never imports the timing layer; the assembly (:mod:`cosim.hub.studies.simulation`) plugs in
:class:`cosim.hub.timing.step_timer.StepTimer` and :class:`cosim.hub.timing.cache.RuntimeSessionProxy`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from collections.abc import Sequence as Seq
from typing import Protocol

from .power import StepJoules
from .scheduling import ScheduledBatch, Scheduler, Sequence, Signature, StepOutcome


class Timed(Protocol):
    """A backend's answer for one step, as far as the simulation reads it."""

    @property
    def duration_ns(self) -> int: ...


class StepTimes(Protocol):
    """A runtime session: how long a step of given new and context tokens per sequence takes; on a
    miss of its timing cache, ``ahead(n)`` gives up to n more batches (their signatures) to time in
    the same call."""

    def step_time(self, new_tokens: Seq[int], context_tokens: Seq[int], *, now_ns: int,
                  ahead: Callable[[int], Seq[Signature]] | None = None) -> Timed: ...


class Settled(Protocol):
    """Records steps the timing layer applied in bulk: a decode run's sequences, its steps applied,
    their longest step and the last's end (each sequence sampled a token per step)."""

    def __call__(self, seqs: list[Sequence], steps: int, max_gap_ns: int, last_ns: int) -> None: ...


class StepClock(Protocol):
    """Forms one LLM client's steps and times them (:class:`cosim.hub.timing.step_timer.StepTimer`).

    The client begins a step, asks its duration, and ends it at that time; the clock may apply steps
    of a decode run in bulk (reported through :class:`Settled`), never changing what they do. The
    scheduler's sequences are up to date only as :meth:`settled` returns them.
    """

    def begin(self) -> ScheduledBatch | None:
        """The next step's batch; None when nothing can run."""

    def in_run(self, batch: ScheduledBatch) -> bool:
        """Whether ``batch`` is a decode run's step (its sequences all started; its effects pending)."""

    @property
    def run_size(self) -> tuple[int, int]:
        """The decode run's sequences and requests, while one of its steps ends."""

    def duration_ns(self, batch: ScheduledBatch, now_ns: int,
                    dp_rank_tokens: Seq[int] = ()) -> tuple[int, StepJoules]: ...

    def end(self, batch: ScheduledBatch, start_ns: int, end_ns: int) -> StepOutcome | None: ...

    def run_ahead(self, start_ns: int, horizon_ns: Callable[[], int]) -> Iterator[tuple[int, StepJoules]]:
        """Takes a decode run's steps from ``start_ns`` while each ends before ``horizon_ns()``;
        yields each one's duration and energy as it is taken."""

    def interrupt(self) -> None: ...

    def forget_forecast(self) -> None: ...

    def settled(self) -> Scheduler:
        """The scheduler with every step taken applied to its sequences (and recorded)."""


class MakeStepClock(Protocol):
    """Builds a client's :class:`StepClock` over its scheduler.

    Args:
        scheduler: the client's scheduler.
        settled: records a decode run's steps on the requests when they are applied.
        next_arrival_ns: when the next request may arrive at the client (a hint), or None.
        alone: the client steps on its own, not in a data-parallel lock-step group (whose step
            times depend on the other ranks' batches).
        overlapping: its steps overlap (pipeline micro-batches).
    """

    def __call__(self, *, scheduler: Scheduler, settled: Settled,
                 next_arrival_ns: Callable[[int], int | None] | None, alone: bool,
                 overlapping: bool) -> StepClock: ...
