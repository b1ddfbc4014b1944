"""What the scheduler hands out and takes back: a step's batch, its outcome, and steady decodes.

A :class:`ScheduledBatch` is one step: the sequences it runs, the tokens each
computes and the context each already holds. Its :attr:`~ScheduledBatch.signature`
(new tokens and context per sequence) is all a runtime backend sees of it.
After the step, :meth:`Scheduler.update` turns it into a :class:`StepOutcome`.

:class:`SteadyDecodes` are the steps that :meth:`Scheduler.steady_decodes`
guarantees to be the same sequences decoding, one token longer each step: a
decode run (:mod:`cosim.hub.timing.runs`) times and records every one but skips
forming and updating them one by one, and has the scheduler apply them in bulk
later (a speed device with no effect on results).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .lora import LoraStep
from .sequence import Sequence

# A batch's (new_tokens, context_tokens), then (StepBatch field, values) pairs where it has more (LoRA
# adapters, a lock-step group's ranks): what times it.
Signature = tuple[Any, ...]


@dataclass(slots=True)
class ScheduledBatch:
    """One scheduled step: sequences with the tokens each computes.

    Attributes:
        seqs: the sequences, in scheduling order.
        num_new: tokens each computes in this step.
        context: tokens each already holds in KV (its context).
        swap_bytes: KV bytes copied between host and device for this step.
        num_tokens: tokens computed in all.
        prefill_tokens: of those, tokens of prompts (or recomputed context), not decodes.
        admitted: sequences taken from the waiting queue for this step.
        queue_blocked: the waiting queue, if not empty, could give this step no one (more).
        queue_stamp: sequences the scheduler had ever queued when it formed the batch (one
            queued since may change what the queue can give).
        preempted: sequences preempted to make room for it.
        cache_hits: (sequence, prompt tokens served from the prefix cache) of the admitted.
        lora: the LoRA adapters of its sequences and the loads it waits for (None: the base
            model only).
        draft_tokens: speculative decoding: of each sequence's new tokens, the drafts it verifies
            (empty without speculation).
    """

    seqs: list[Sequence] = field(default_factory=list)
    num_new: list[int] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    swap_bytes: int = 0
    num_tokens: int = 0
    prefill_tokens: int = 0
    admitted: int = 0
    queue_blocked: bool = False
    queue_stamp: int = 0
    preempted: list[Sequence] = field(default_factory=list)
    cache_hits: list[tuple[Sequence, int]] = field(default_factory=list)
    lora: LoraStep | None = None
    draft_tokens: list[int] = field(default_factory=list)

    def add(self, seq: Sequence, num_tokens: int) -> None:
        computed = seq.num_computed
        self.seqs.append(seq)
        self.num_new.append(num_tokens)
        self.context.append(computed)
        self.num_tokens += num_tokens
        if seq.generated == 0 or seq.num_tokens - computed > 1:  # not a decode (nor a verification)
            self.prefill_tokens += num_tokens

    def drop(self, seq: Sequence) -> bool:
        """Takes ``seq`` out of the step if it is in it (preempted after it was scheduled, which a
        least-important victim may be: vLLM gives its tokens back to the step's budget); whether it was."""
        for i, scheduled in enumerate(self.seqs):
            if scheduled is seq:
                del self.seqs[i]
                num, computed = self.num_new.pop(i), self.context.pop(i)
                self.num_tokens -= num
                if seq.generated == 0 or seq.num_tokens - computed > 1:  # as add() counted it
                    self.prefill_tokens -= num
                return True
        return False

    @property
    def fields(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Its StepBatch fields beyond the new and context tokens, as (name, values) pairs:
        speculative drafts, LoRA adapters (none for a plain batch)."""
        extra: tuple[tuple[str, tuple[int, ...]], ...] = ()
        if any(self.draft_tokens):
            extra += (("draft_tokens", tuple(self.draft_tokens)),)
        if self.lora is not None:
            extra += self.lora.key
        return extra

    @property
    def signature(self) -> Signature:
        return (tuple(self.num_new), tuple(self.context), *self.fields)


@dataclass(slots=True)
class StepOutcome:
    """What a step changed, for the client to record.

    Attributes:
        sampled: sequences that sampled a token at the end of the step, in batch order.
        forked: (parent, its new sibling branches) for multi-path reasoning.
        finished: sequences whose stage ended (their KV blocks are freed).
        kv_blocks_used: blocks in use after the step, before the finished freed theirs.
        num_waiting: the waiting queue's length at that moment.
        extra_tokens: speculative decoding: (sequence, tokens it sampled beyond one).
    """

    sampled: list[Sequence]
    forked: list[tuple[Sequence, list[Sequence]]]
    finished: list[Sequence]
    kv_blocks_used: int
    num_waiting: int
    extra_tokens: list[tuple[Sequence, int]] = field(default_factory=list)


class SteadyDecodes(NamedTuple):
    """Steps certain to be the same sequences decoding while no work arrives
    (:meth:`Scheduler.steady_decodes`): what a decode run (:mod:`cosim.hub.timing.runs`) takes.

    Attributes:
        seqs: the sequences (the scheduler's running list when the steps begin).
        new_blocks: KV blocks they grow into at each step, in order.
        queue_stamp: the queue stamp of each step's batch (no one queued since).
        lora: their LoRA adapters, the same every step (None: the base model only).
    """

    seqs: list[Sequence]
    new_blocks: list[int]
    queue_stamp: int
    lora: LoraStep | None
