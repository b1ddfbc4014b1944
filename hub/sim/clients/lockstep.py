"""Data-parallel ranks of a mixture-of-experts model, stepping in lock-step as vLLM's do.

vLLM runs a data-parallel (DP) deployment of an MoE model as one engine core
per rank, each with its own scheduler and KV cache, but the ranks' forward
passes are coupled: every MoE layer gathers all ranks' tokens for the experts
(the expert-parallel all-gather / all-to-all), so a step ends for all ranks
at once, when the slowest is done. A rank with no work runs a dummy batch so
the others can proceed, and with CUDA graphs each rank's forward is padded to
the most tokens of any rank (``coordinate_batch_across_dp``).

A :class:`LockStepGroup` holds the clients of one such deployment (the
clients sharing a ``dp_group``). At each step every member with work forms
its batch; each is timed knowing every rank's tokens (``StepBatch.dp_rank_tokens``,
so a backend sizes expert compute and collectives by them); the step lasts as
long as the slowest, and all members' steps end together. An idle rank's dummy
batch is not timed: padded to the same tokens and without attention it is
never the slowest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..kernel import DONE, WAKE, Kernel
from ..scheduling import ScheduledBatch


class Rank(Protocol):
    """One rank of a group: an LLM client (:class:`.llm.LLMClient`), as the group steps it."""

    def begin_step(self) -> ScheduledBatch | None: ...

    def time_step(self, batch: ScheduledBatch, now_ns: int, dp_rank_tokens: Sequence[int] = ()) -> int: ...

    def end_step(self, batch: ScheduledBatch, start_ns: int) -> None: ...

    def wake_for_loads(self) -> None: ...


class LockStepGroup:
    """The DP ranks (clients) of one deployment; members join it when they are built.

    Args:
        name: the group's name (the clients' ``dp_group``).
        kernel: the event kernel.
    """

    def __init__(self, name: str, kernel: Kernel) -> None:
        self.name, self.kernel = name, kernel
        self.members: list[Rank] = []
        self.busy = False
        self.num_steps = 0
        self._wake_pending = False
        self._wake_label, self._done_label = f"wake {name}", f"step done {name}"

    def join(self, client: Rank) -> None:
        self.members.append(client)

    def wake(self) -> None:
        """Asks for the next group step at the current time, after same-time events."""
        if not self.busy and not self._wake_pending:
            self._wake_pending = True
            self.kernel.call_at(self.kernel.now_ns, WAKE, self._on_wake, label=self._wake_label)

    def _on_wake(self) -> None:
        self._wake_pending = False
        batches = [member.begin_step() for member in self.members]
        if not any(batches):
            # No rank had a step one step ahead: vLLM's ranks all run a dummy batch, and then form their
            # steps with what they know (a rank idle before it formed with everything already). The
            # dummy step's time is not counted.
            batches = [member.begin_step() for member in self.members]
        if not any(batches):
            for member in self.members:
                member.wake_for_loads()
            return  # nothing can run on any rank
        now = self.kernel.now_ns
        tokens = [batch.num_tokens if batch else 0 for batch in batches]
        duration = max(member.time_step(batch, now, tokens)
                       for member, batch in zip(self.members, batches) if batch)
        self.busy = True
        self.num_steps += 1
        self.kernel.call_at(now + duration, DONE, self._on_step_done, batches, now, label=self._done_label)

    def _on_step_done(self, batches: list[ScheduledBatch | None], start_ns: int) -> None:
        self.busy = False
        for member, batch in zip(self.members, batches):
            if batch is not None:
                member.end_step(batch, start_ns)
        self.wake()
