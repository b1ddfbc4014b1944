"""What the scheduler hands out and takes back: a step's batch, its outcome, and decode runs.

A :class:`ScheduledBatch` is one step: the sequences it runs, the tokens each
computes and the context each already holds. Its :attr:`~ScheduledBatch.signature`
(new tokens and context per sequence) is all a runtime backend sees of it.
After the step, :meth:`Scheduler.update` turns it into a :class:`StepOutcome`.

A :class:`DecodeRun` is a stretch of steps that :meth:`Scheduler.decode_run`
guarantees to be the same sequences decoding, one token longer each step: the
client times and records every step but skips forming and updating them one by
one, and applies them to the sequences in bulk later (a speed device with no
effect on results).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


class DecodeRun:
    """Steps of one unchanged decode batch whose effects on the sequences are pending.

    Attributes:
        seqs: the batch (the scheduler's running list at the start).
        contexts: each sequence's computed tokens when the pending steps began.
        new_blocks: KV blocks the batch grows into at each step of the run, in order.
        taken: steps begun so far (their blocks taken).
        done: steps finished and not yet applied to the sequences.
        max_gap_ns: longest of those steps (each sequence's gap between tokens).
        last_ns: when the last of them ended.
        lora: its sequences' LoRA adapters, the same every step (None: the base model only).
    """

    __slots__ = ("seqs", "ones", "contexts", "new_blocks", "queue_stamp", "taken", "done", "max_gap_ns", "last_ns",
                 "lora")

    def __init__(self, seqs: list[Sequence], new_blocks: list[int], queue_stamp: int) -> None:
        self.seqs, self.new_blocks, self.queue_stamp = seqs, new_blocks, queue_stamp
        self.ones = [1] * len(seqs)
        self.contexts = [seq.num_computed for seq in seqs]
        self.taken = self.done = self.max_gap_ns = self.last_ns = 0
        self.lora: LoraStep | None = None

    @property
    def steps_left(self) -> int:
        return len(self.new_blocks) - self.taken

    def step(self) -> ScheduledBatch:
        """The batch of the run's next step (its blocks are the scheduler's to take)."""
        k = self.done
        return ScheduledBatch(seqs=self.seqs, num_new=self.ones, context=[c + k for c in self.contexts],
                              num_tokens=len(self.seqs), queue_blocked=True, queue_stamp=self.queue_stamp,
                              lora=self.lora)

    def signatures(self, steps: int) -> list[Signature]:
        """The signatures of the run's next ``steps`` steps (lookahead, on a scheduler's copy)."""
        ones, done = tuple(self.ones), self.done
        if self.lora is not None:
            lora = self.lora.key
            return [(ones, tuple([c + k for c in self.contexts]), *lora) for k in range(done, done + steps)]
        return [(ones, tuple([c + k for c in self.contexts])) for k in range(done, done + steps)]

    def end_step(self, start_ns: int, end_ns: int) -> None:
        self.done += 1
        self.max_gap_ns = max(self.max_gap_ns, end_ns - start_ns)
        self.last_ns = end_ns
