"""Packing orders: the order of a scheduler's waiting queue, and which running sequence is preempted.

- ``fcfs``: arrival order; a preempted sequence goes back first; the newest running is preempted.
- ``least_work_left``: the fewest prefill and decode tokens left first (ties by arrival).
- ``priority``: vLLM's priority policy: the request class's priority, lower first, then arrival; the
  least important running sequence is preempted (vLLM: ``max(running, key=(priority, arrival))``).
- ``edf``: earliest deadline first (the class's ``deadline_s``), preempting the latest deadline.

Each order is registered by name in :data:`cosim.hub.config.choices.PACKING`
(``clients[].scheduler.packing``).
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from typing import ClassVar

from .sequence import Sequence


class PackingOrder(ABC):
    """Where a sequence waits, and who makes room when KV blocks run out.

    Attributes:
        arrival_order: the queue is in the order sequences were queued, so one not yet visible to
            the step being formed (async scheduling) hides everyone behind it.
    """

    arrival_order: ClassVar[bool] = False

    @abstractmethod
    def queue(self, waiting: list[Sequence], seq: Sequence, *, front: bool) -> None:
        """Puts a new sequence in ``waiting`` (``front``: a branch of a request already running)."""

    def requeue(self, waiting: list[Sequence], seq: Sequence) -> None:
        """Puts a preempted sequence back in ``waiting``: first, to resume before the others."""
        waiting.insert(0, seq)

    def victim(self, running: list[Sequence]) -> Sequence:
        """The running sequence to preempt: the newest."""
        return running[-1]


class Fcfs(PackingOrder):
    """``fcfs``: first come, first served."""

    arrival_order = True

    def queue(self, waiting: list[Sequence], seq: Sequence, *, front: bool) -> None:
        waiting.insert(0 if front else len(waiting), seq)


class LeastWorkLeft(PackingOrder):
    """``least_work_left``: the fewest tokens left to compute first."""

    def queue(self, waiting: list[Sequence], seq: Sequence, *, front: bool) -> None:
        waiting.insert(0 if front else len(waiting), seq)
        waiting.sort(key=lambda s: (s.remaining_work, s.order))


class Priority(PackingOrder):
    """``priority``: the request class's priority, lower first, then arrival (admission order)."""

    def key(self, seq: Sequence) -> tuple[int, int]:
        return seq.request.priority, seq.order

    def queue(self, waiting: list[Sequence], seq: Sequence, *, front: bool) -> None:
        bisect.insort(waiting, seq, key=self.key)

    def requeue(self, waiting: list[Sequence], seq: Sequence) -> None:
        bisect.insort(waiting, seq, key=self.key)

    def victim(self, running: list[Sequence]) -> Sequence:
        return max(running, key=self.key)


class EarliestDeadline(Priority):
    """``edf``: the earliest deadline first, then arrival."""

    def key(self, seq: Sequence) -> tuple[int, int]:
        return seq.request.deadline_ns, seq.order
