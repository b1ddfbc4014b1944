"""The per-client LLM scheduler: which sequences run in the next step.

Batching policies (``SchedulerConfig.batching``):

- ``static``: a batch is formed when the client is idle; it runs (prefill,
  then decodes) until every sequence in it finishes; nothing joins meanwhile.
- ``continuous``: prefill-prioritized (Orca / vLLM V0): when waiting prompts
  can be admitted, the step prefills them whole and running decodes pause;
  otherwise the step decodes every running sequence.
- ``chunked``: Sarathi-Serve / vLLM V1: running sequences first (decodes and
  unfinished chunks), then waiting prompts, all within one token budget
  (``chunk_size``, default ``max_num_batched_tokens``); prompts are split.
- ``mixed``: every running decode plus whole waiting prompts that fit the
  remaining budget, in one step.

KV blocks are allocated as tokens are scheduled. When a running sequence
needs a block and none is free, the newest running sequence is preempted
(recompute: its KV is dropped and it re-enters the front of the queue; swap:
its KV moves to host memory and back, the copy time added to the step),
as vLLM does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config import SchedulerConfig
from .kv import BlockManager
from .sequence import RUNNING, SWAPPED, WAITING, Sequence


Signature = tuple[tuple[int, ...], tuple[int, ...]]  # a batch's (new_tokens, context_tokens): what times it


@dataclass
class Step:
    """One scheduled step: sequences with the tokens each computes."""

    seqs: list[Sequence] = field(default_factory=list)
    num_new: list[int] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    swap_bytes: int = 0  # KV bytes copied between host and device in this step
    num_tokens: int = 0
    prefill_tokens: int = 0  # tokens of prompts (or recomputed context), not decodes

    def add(self, seq: Sequence, num_tokens: int) -> None:
        computed = seq.num_computed
        self.seqs.append(seq)
        self.num_new.append(num_tokens)
        self.context.append(computed)
        self.num_tokens += num_tokens
        if num_tokens > 1 or seq.generated == 0 or seq.num_tokens - computed > 1:
            self.prefill_tokens += num_tokens


class _Decoding:
    """The decoding sequences a lookahead advances, as arrays in running order: tokens computed,
    tokens left to sample, KV blocks each can fill (shared prefix included), shared prefix blocks.
    Arrays, because a departure touches every sequence's blocks and batches run to hundreds."""

    def __init__(self, rows: list[tuple[int, int, int, int]]) -> None:
        columns = np.array(rows, dtype=np.int64).reshape(-1, 4).T
        self.computed, self.left, self.held, self.prefix = columns

    def __len__(self) -> int:
        return len(self.computed)

    @property
    def steps_to_departure(self) -> int:
        return int(self.left.min())

    def batches(self, run: int) -> list[Signature]:
        """The next ``run`` decode steps' (new_tokens, context_tokens) signatures."""
        ones = (1,) * len(self.computed)
        return [(ones, tuple((self.computed + i).tolist())) for i in range(run)]

    def advance(self, run: int, block_size: int) -> int:
        """Takes ``run`` decode steps and drops the sequences that finish; returns the change in
        free blocks (blocks grown into, less the blocks the finished ones release)."""
        computed = self.computed + run
        grown = np.maximum(self.held, -(-computed // block_size))
        change = -int((grown - self.held).sum())
        stay = self.left > run
        if stay.all():
            self.computed, self.left, self.held = computed, self.left - run, grown
            return change
        change += int((grown - self.prefix)[~stay].sum())
        self.computed, self.left, self.held, self.prefix = computed[stay], self.left[stay] - run, grown[stay], \
            self.prefix[stay]
        return change

    def extend(self, rows: list[tuple[int, int, int, int]]) -> None:
        """Adds admitted sequences at the end (as the scheduler appends them to ``running``)."""
        if rows:
            more = _Decoding(rows)
            self.computed, self.left, self.held, self.prefix = (
                np.concatenate(pair) for pair in ((self.computed, more.computed), (self.left, more.left),
                                                  (self.held, more.held), (self.prefix, more.prefix)))


class Scheduler:
    """Waiting queue, running set and KV blocks of one client."""

    def __init__(self, config: SchedulerConfig, kv: BlockManager, *, kv_bytes_per_token: float = 0.0) -> None:
        self.config = config
        self.kv = kv
        self.kv_bytes_per_token = kv_bytes_per_token
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.swap_free_bytes = config.swap_space_bytes
        self.num_preemptions = 0
        budget = config.chunk_size if config.batching == "chunked" and config.chunk_size else None
        self.token_budget = budget or config.max_num_batched_tokens

    # -- queue -------------------------------------------------------------
    def enqueue(self, seq: Sequence, *, front: bool = False) -> None:
        """Adds a sequence to the waiting queue (ordered by the packing policy); ``front``
        puts it first (a branch of a request already running)."""
        seq.state = WAITING
        if front:
            self.waiting.insert(0, seq)
        else:
            self.waiting.append(seq)
        if self.config.packing == "least_work_left":
            self.waiting.sort(key=lambda s: (s.remaining_work, s.order))

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def may_admit(self) -> bool:
        """Whether the next step may take a waiting sequence (static batching waits for the batch to end)."""
        return bool(self.waiting) and (self.config.batching != "static" or not self.running)

    def finish(self, seq: Sequence, *, prefix_tokens: int = 0) -> None:
        """Removes a finished sequence and frees its blocks."""
        self.running.remove(seq)
        self.kv.release(seq, prefix_tokens=prefix_tokens)

    # -- step formation ----------------------------------------------------
    def schedule(self) -> Step:
        """Forms the next step (possibly empty: nothing can run)."""
        policy = self.config.batching
        if policy == "static":
            return self._schedule_static()
        if policy == "continuous":
            step = self._admit(Step(), budget=self.token_budget, whole_prompts=True)
            return step if step.seqs else self._schedule_running(Step(), budget=None)
        if policy == "mixed":
            step = self._schedule_running(Step(), budget=None)
            return self._admit(step, budget=self.token_budget - step.num_tokens, whole_prompts=True)
        preemptions = self.num_preemptions
        step = self._schedule_running(Step(), budget=self.token_budget)
        if self.num_preemptions != preemptions:
            return step  # vLLM V1 admits no waiting request in a step that preempted
        return self._admit(step, budget=self.token_budget - step.num_tokens, whole_prompts=False)

    def _schedule_static(self) -> Step:
        if self.running:
            return self._schedule_running(Step(), budget=None)
        return self._admit(Step(), budget=self.config.max_num_batched_tokens, whole_prompts=True)

    def _schedule_running(self, step: Step, *, budget: int | None) -> Step:
        """Schedules running sequences in admission order, preempting the newest when blocks run out."""
        i = 0
        block_size = self.kv.block_size
        while i < len(self.running):
            seq = self.running[i]
            remaining = seq.num_tokens - seq.num_computed
            num = remaining if budget is None else min(remaining, budget - step.num_tokens)
            if num <= 0:
                break
            if seq.num_computed + num <= (seq.num_blocks + seq.prefix_blocks) * block_size:
                step.add(seq, num)  # fast path: its blocks already hold the new tokens
                i += 1
                continue
            while not self.kv.grow(seq, num):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            else:
                step.add(seq, num)
                i += 1
                continue
            break  # seq itself was preempted: it was the newest
        return step

    def _admit(self, step: Step, *, budget: int, whole_prompts: bool) -> Step:
        """Admits waiting sequences FCFS (or by packing order) while budget, seats and blocks allow."""
        while self.waiting and len(step.seqs) < self.config.max_num_seqs and \
                len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            resumed = self.kv.resume(seq)  # a preempted sequence's KV still cached (prefix caching)
            cached = 0 if resumed else self.kv.attach_prefix(seq, seq.request.prefix_tokens)
            need = seq.remaining_tokens
            num = need if whole_prompts or seq.state == SWAPPED else min(need, budget)
            fits = num > 0 and not (whole_prompts and num > budget and (step.seqs or self.running))
            if not fits or not self.kv.can_allocate(self.kv.blocks_needed(seq, num)):
                if resumed:
                    self.kv.undo_resume(seq)
                self.kv.detach_prefix(seq)
                if fits and self._unpin_waiting():
                    continue  # blocks that queued sequences shared are evictable now: try again
                break
            if seq.state == SWAPPED:
                self._swap_in(seq, step)
            self.kv.grow(seq, num)
            if resumed:
                self.kv.commit_resume(seq)
            if cached:
                seq.request.cached_tokens = cached
            self.waiting.pop(0)
            seq.state = RUNNING
            self.running.append(seq)
            step.add(seq, num)
            budget -= num
        return step

    def _unpin_waiting(self) -> bool:
        """Drops the shared KV blocks waiting sequences hold (they will recompute), so the
        head of the queue can evict them; a queue must never pin the blocks its head needs."""
        pinned = [seq for seq in self.waiting[1:] if seq.prefix_blocks]
        for seq in pinned:
            self.kv.detach_prefix(seq)
        return bool(pinned)

    # -- lookahead -----------------------------------------------------------
    def lookahead(self, step: Step, max_steps: int) -> list[Signature]:
        """The batches that follow ``step`` if no work arrives.

        Once every running sequence is decoding, each later step is the same
        sequences with contexts one longer; a sequence leaves after its last
        token. A waiting request that ``step`` could not admit can only get in
        when one leaves (as ``step`` ends, or later): with continuous batching
        (FCFS, no prefix caching) the prediction admits the queue's head as
        :meth:`_admit` would with the freed seats and blocks (a prefill step, then decodes with it), departure
        after departure while the queue lasts: arrivals join its tail, so they
        cannot change these admissions. Once an admission empties the queue, an
        arrival could join the next one, so it stops at the departure after
        that. With the other policies it stops at the first departure (static
        batching never admits mid-batch). A preemption only makes predictions
        unused. Returns at most ``max_steps`` (new_tokens, context_tokens)
        signatures; none while a prompt is still being chunked.
        """
        block_size = self.kv.block_size
        scheduled = {id(seq): num for seq, num in zip(step.seqs, step.num_new)}
        rows: list[tuple[int, int, int, int]] = []
        free = self.kv.num_free
        for seq in self.running:
            computed = seq.num_computed + scheduled.get(id(seq), 0)
            sampled = computed >= seq.num_tokens
            if seq.num_tokens + sampled - computed != 1:
                return []  # still prefilling after this step
            left = seq.target_generated - seq.generated - sampled
            if left > 0:
                rows.append((computed, left, seq.num_blocks + seq.prefix_blocks, seq.prefix_blocks))
            else:
                free += seq.num_blocks  # it leaves as ``step`` ends
        live = _Decoding(rows)
        queue = self._admissions_queue()
        batches: list[Signature] = []
        while len(batches) < max_steps:
            admitted = self._predict_admission(queue, len(live), free) if queue else []
            if admitted:
                if not queue or any(seq.forks for seq, _, _ in admitted):
                    queue = None  # arrivals (or forked branches) could join the admissions after these
                batches.append((tuple(need for _, need, _ in admitted),
                                tuple(seq.num_computed for seq, _, _ in admitted)))
                rows = []
                for seq, need, blocks in admitted:
                    free -= blocks
                    left = seq.target_generated - seq.generated - 1
                    if left > 0:
                        rows.append((seq.num_computed + need, left, seq.num_blocks + blocks, 0))
                    else:
                        free += seq.num_blocks + blocks
                live.extend(rows)
                if not live:
                    continue  # they all left (prefill-only): the next step admits again
            elif not live:
                break  # nothing runs and the head does not fit: a wait is no step
            run = min(live.steps_to_departure, max_steps - len(batches))
            batches += live.batches(run)
            if queue is None:
                break
            free += live.advance(run, block_size)
            if free < 0 and not self.kv.enable_prefix_caching:
                break  # a sequence would be preempted
        return batches[:max_steps]

    def _admissions_queue(self) -> list[Sequence] | None:
        """What :meth:`lookahead` may take from the queue at departures: a copy of it where it can
        predict admissions, nothing (static batching, or an empty queue), or None: stop there."""
        config = self.config
        if not self.waiting or config.batching == "static":
            return []
        if config.batching != "continuous" or config.packing != "fcfs" or self.kv.enable_prefix_caching \
                or any(seq.forks for seq in self.running):  # a forking sequence queues its branches first
            return None
        return list(self.waiting)

    def _predict_admission(self, queue: list[Sequence], num_running: int,
                           free_blocks: int) -> list[tuple[Sequence, int, int]]:
        """Who :meth:`_admit` takes from ``queue`` (whole prompts, FCFS) when a departure frees room:
        (sequence, tokens, new blocks) each, popped from ``queue``. A swapped head stops it."""
        admitted: list[tuple[Sequence, int, int]] = []
        budget, seats = self.token_budget, self.config.max_num_seqs - num_running
        while queue and len(admitted) < seats and queue[0].state != SWAPPED:
            seq = queue[0]
            need = seq.num_tokens - seq.num_computed
            blocks = self.kv.blocks_needed(seq, need)
            if need <= 0 or (need > budget and (admitted or num_running)) or blocks > free_blocks:
                break
            admitted.append((seq, need, blocks))
            queue.pop(0)
            free_blocks -= blocks
            budget -= need
        return admitted

    # -- preemption ----------------------------------------------------------
    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.num_preemptions += 1
        seq.request.preemptions += 1
        kv_bytes = int(seq.num_computed * self.kv_bytes_per_token)
        if self.config.preemption == "swap" and seq.num_blocks and not seq.prefix_blocks \
                and kv_bytes <= self.swap_free_bytes:
            self.swap_free_bytes -= kv_bytes
            seq.swapped_blocks, seq.swapped_bytes = seq.num_blocks, kv_bytes
            self.kv.num_free += seq.num_blocks
            seq.num_blocks = 0
            seq.state = SWAPPED
        else:
            self.kv.park(seq)  # with prefix caching its full blocks stay cached until evicted
            seq.num_computed = 0
            seq.state = WAITING
        self.waiting.insert(0, seq)

    def _swap_in(self, seq: Sequence, step: Step) -> None:
        """Brings a swapped sequence's KV back (space checked by the caller)."""
        self.kv.grow_by(seq, seq.swapped_blocks)
        self.swap_free_bytes += seq.swapped_bytes
        step.swap_bytes += 2 * seq.swapped_bytes  # the copy out and the copy back both cost time
        seq.swapped_blocks = seq.swapped_bytes = 0
