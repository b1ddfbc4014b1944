"""Batching policies: how a scheduler forms each step from its two moves.

Every policy composes :meth:`Scheduler.schedule_running` (running sequences
in admission order, preempting the newest when KV blocks run out) and
:meth:`Scheduler.admit` (waiting sequences in queue order while budget, seats
and blocks allow):

- ``static``: a batch is formed when the client is idle; it runs (prefill,
  then decodes) until every sequence in it finishes; nothing joins meanwhile.
- ``continuous``: prefill-prioritized (Orca / vLLM V0): when waiting prompts
  can be admitted, the step prefills them whole and running decodes pause;
  otherwise the step decodes every running sequence.
- ``chunked``: Sarathi-Serve / vLLM V1: running sequences first (decodes and
  unfinished chunks), then waiting prompts, all within one token budget
  (``chunk_size``, default ``max_num_batched_tokens``); prompts are split. As
  in vLLM, ``long_prefill_token_threshold`` caps what one request computes in a
  step, and ``scheduler_reserve_full_isl`` admits a prompt only when blocks for
  all of it are free.
- ``mixed``: every running decode plus whole waiting prompts that fit the
  remaining budget, in one step.

Prefill-only and decode-only clients need no policy of their own: their
sequences simply end after the first token, or arrive with the prompt's KV.

Each policy is registered by name in :data:`cosim.hub.config.choices.BATCHING`
(``clients[].scheduler.batching``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Protocol

from ...config.scheduler import SchedulerConfig
from .batch import ScheduledBatch
from .sequence import Sequence


class Moves(Protocol):
    """What a policy forms a step from: a scheduler's queues and its two moves (:class:`.scheduler.Scheduler`)."""

    running: list[Sequence]
    waiting: list[Sequence]

    def schedule_running(self, batch: ScheduledBatch, *, budget: int | None,
                         max_chunk_tokens: int = 0) -> ScheduledBatch: ...

    def admit(self, batch: ScheduledBatch, *, budget: int, whole_prompts: bool, max_chunk_tokens: int = 0,
              reserve_whole_prompt: bool = False) -> ScheduledBatch: ...


class BatchingPolicy(ABC):
    """Forms a scheduler's next step.

    Attributes:
        token_budget: most tokens one step computes.
        whole_prompts: prompts are admitted whole, never split, so a prompt longer than the token
            budget can never run (admission refuses it before the run, as vLLM does).
    """

    whole_prompts: ClassVar[bool] = True

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.token_budget = config.max_num_batched_tokens

    @abstractmethod
    def form(self, s: Moves) -> ScheduledBatch:
        """The next step of ``s`` (possibly empty: nothing can run)."""

    def decodes_all(self, num_running: int) -> bool:
        """Whether a step with no admissions runs every one of ``num_running`` decoding sequences.

        A speed hook: where it is True the timing layer may apply such steps in bulk (a decode
        run). The default is the safe answer, False (step by step); a policy that caps decodes
        must leave it so, or results change when decode runs are on."""
        return False


class Static(BatchingPolicy):
    """``static``: a batch runs until every sequence in it finishes; nothing joins meanwhile."""

    def form(self, s: Moves) -> ScheduledBatch:
        if s.running:
            return s.schedule_running(ScheduledBatch(queue_blocked=bool(s.waiting)), budget=None)
        return s.admit(ScheduledBatch(), budget=self.token_budget, whole_prompts=self.whole_prompts)

    def decodes_all(self, num_running: int) -> bool:
        return True  # a step without admissions decodes every running sequence, unbudgeted


class Continuous(BatchingPolicy):
    """``continuous``: waiting prompts whole when they fit, else every running decode."""

    def form(self, s: Moves) -> ScheduledBatch:
        batch = s.admit(ScheduledBatch(), budget=self.token_budget, whole_prompts=self.whole_prompts)
        if batch.seqs:
            return batch
        return s.schedule_running(batch, budget=None)

    def decodes_all(self, num_running: int) -> bool:
        return True  # a step without admissions decodes every running sequence, unbudgeted


class Mixed(BatchingPolicy):
    """``mixed``: every running decode plus the whole waiting prompts that fit the rest."""

    def form(self, s: Moves) -> ScheduledBatch:
        batch = s.schedule_running(ScheduledBatch(), budget=None)
        return s.admit(batch, budget=self.token_budget - batch.num_tokens, whole_prompts=self.whole_prompts)

    def decodes_all(self, num_running: int) -> bool:
        return True  # a step without admissions decodes every running sequence, unbudgeted


class Chunked(BatchingPolicy):
    """``chunked``: running sequences first, then waiting prompts, split to one token budget."""

    whole_prompts = False

    def __init__(self, config: SchedulerConfig) -> None:
        super().__init__(config)
        self.token_budget = config.chunk_size or config.max_num_batched_tokens
        self.max_chunk_tokens = config.long_prefill_token_threshold

    def form(self, s: Moves) -> ScheduledBatch:
        cap = self.max_chunk_tokens
        batch = s.schedule_running(ScheduledBatch(), budget=self.token_budget, max_chunk_tokens=cap)
        if batch.preempted:
            return batch  # vLLM V1 admits no waiting request in a step that preempted
        return s.admit(batch, budget=self.token_budget - batch.num_tokens, whole_prompts=self.whole_prompts,
                       max_chunk_tokens=cap, reserve_whole_prompt=self.config.scheduler_reserve_full_isl)

    def decodes_all(self, num_running: int) -> bool:
        return num_running <= self.token_budget
