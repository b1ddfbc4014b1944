"""The per-client LLM scheduler: every change to its sequences, through two calls.

As in vLLM, a client asks :meth:`Scheduler.schedule` for the next step
(:class:`ScheduledBatch`: which sequences compute how many tokens) and hands
it back after the step with :meth:`Scheduler.update`, which advances the
sequences, samples, forks reasoning branches, finishes stages and frees their
KV (:class:`StepOutcome`). The batching policy (:mod:`.policies`) decides what
a step holds, out of two moves: :meth:`schedule_running` and :meth:`admit`.

KV blocks are allocated as tokens are scheduled. When a running sequence
needs a block and none is free, the newest running sequence is preempted
(recompute: its KV is dropped and it re-enters the front of the queue; swap:
its KV moves to host memory and back, the copy time added to the step), as
vLLM does.

Lookahead schedules on a :meth:`copy` (the same policy code, on cloned
sequences), and a :class:`DecodeRun` lets a client skip forming and updating
steps that are certain to be the same sequences decoding.
"""

from __future__ import annotations

from .batch import DecodeRun, ScheduledBatch, StepOutcome
from .config import SchedulerConfig
from .kv import BlockManager
from .policies import POLICIES
from .sequence import FINISHED, RUNNING, SWAPPED, WAITING, Sequence


class Scheduler:
    """Waiting queue, running set and KV blocks of one client.

    Args:
        config: the client's scheduler section.
        kv: its KV blocks.
        kv_bytes_per_token: KV bytes of one token (swap sizes).
    """

    def __init__(self, config: SchedulerConfig, kv: BlockManager, *, kv_bytes_per_token: float = 0.0,
                 micro_batches: int = 1, hold_finished_kv: bool = False) -> None:
        self.config, self.kv, self.kv_bytes_per_token = config, kv, kv_bytes_per_token
        self.hold_finished_kv = hold_finished_kv  # a finished sequence's KV stays until release()
        self.micro_batches = micro_batches  # batches in flight at once (pipeline parallelism)
        self.in_flight: set[int] = set()  # ids of the sequences of the batches in flight (micro_batches > 1)
        self.policy = POLICIES[config.batching](config)
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.swap_free_bytes = config.swap_space_bytes
        self._next_order = 0
        self._borrowed: set[int] = set()  # in a copy: ids of the original's waiting sequences, cloned on write

    # -- the contract ----------------------------------------------------------
    def add(self, seq: Sequence, *, front: bool = False) -> None:
        """Queues a new sequence (ordered by the packing policy); ``front`` puts it first (a branch
        of a request already running)."""
        seq.order = self._next_order
        self._next_order += 1
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

    def schedule(self) -> ScheduledBatch:
        """Forms the next step (possibly empty: nothing can run).

        With micro-batches in flight (pipeline parallelism, vLLM's batch queue), a sequence in one
        of them cannot be scheduled again until it is handed back: the step is formed from the
        others, and its sequences are in flight until :meth:`update`.
        """
        if self.micro_batches == 1:
            batch = self.policy.form(self)
        else:
            batch = self._form_beside_in_flight()
            self.in_flight.update(map(id, batch.seqs))
        batch.queue_stamp = self._next_order
        return batch

    def _form_beside_in_flight(self) -> ScheduledBatch:
        """The policy's step over the running sequences not in flight; the running order is kept
        (in flight, they stay where they were; the admitted join the end)."""
        if not self.in_flight:
            return self.policy.form(self)
        everyone, flying = self.running, self.in_flight
        self.running = [seq for seq in everyone if id(seq) not in flying]
        try:
            batch = self.policy.form(self)
        finally:
            kept = set(map(id, self.running))
            before = set(map(id, everyone))
            self.running = [seq for seq in everyone if id(seq) in flying or id(seq) in kept] + \
                [seq for seq in self.running if id(seq) not in before]
        return batch

    def update(self, batch: ScheduledBatch) -> StepOutcome:
        """Applies a finished step: each sequence holds its new tokens; a sequence whose tokens are
        all computed samples one; reasoning branches fork; finished stages leave and free their KV."""
        sampled: list[Sequence] = []
        forking: list[Sequence] = []
        finished: list[Sequence] = []
        if self.in_flight:
            self.in_flight.difference_update(map(id, batch.seqs))
        sample = sampled.append
        for seq, num in zip(batch.seqs, batch.num_new):  # a hot loop: each attribute read once
            computed = seq.num_computed = seq.num_computed + num
            tokens = seq.num_tokens
            if computed < tokens:
                continue  # a partial prefill chunk samples nothing
            seq.num_tokens = tokens + 1
            generated = seq.generated = seq.generated + 1
            sample(seq)
            if seq.forks:
                forking.append(seq)
            if generated >= seq.target_generated:
                finished.append(seq)
        forked = [(seq, self._fork(seq)) for seq in forking]
        outcome = StepOutcome(sampled, forked, finished, self.kv.num_used, len(self.waiting))
        for seq in finished:
            self.running.remove(seq)
            if not self.hold_finished_kv:
                self.kv.release(seq)
            seq.state = FINISHED
        return outcome

    def release(self, seq: Sequence) -> None:
        """Frees a finished sequence's KV held since it finished (``hold_finished_kv``)."""
        self.kv.release(seq)

    # -- the two moves policies form steps from ---------------------------------
    def schedule_running(self, batch: ScheduledBatch, *, budget: int | None,
                         max_chunk_tokens: int = 0) -> ScheduledBatch:
        """Adds running sequences in admission order, preempting the newest when blocks run out.

        Args:
            batch: the step so far.
            budget: most tokens the whole step computes (None: no limit).
            max_chunk_tokens: most tokens one sequence computes in the step (0: no cap), vLLM's
                ``long_prefill_token_threshold``.

        Returns:
            ``batch``, with the running sequences added.
        """
        i = 0
        block_size = self.kv.block_size
        running = self.running
        add_seq, add_new, add_context = batch.seqs.append, batch.num_new.append, batch.context.append
        while i < len(running):
            seq = running[i]
            computed = seq.num_computed
            remaining = seq.num_tokens - computed
            if remaining == 1 and seq.generated and computed < (seq.num_blocks + seq.prefix_blocks) * block_size \
                    and (budget is None or batch.num_tokens < budget):
                # fast path, a decode its blocks have room for (``batch.add`` inlined: the hot loop)
                add_seq(seq)
                add_new(1)
                add_context(computed)
                batch.num_tokens += 1
                i += 1
                continue
            num = remaining if budget is None else min(remaining, budget - batch.num_tokens)
            if num <= 0:
                break
            if max_chunk_tokens and num > max_chunk_tokens:
                num = max_chunk_tokens  # off the decode path: only a prefill (or recompute) has more than 1
            if computed + num <= (seq.num_blocks + seq.prefix_blocks) * block_size:
                batch.add(seq, num)  # its blocks already hold the new tokens
                i += 1
                continue
            while not self.kv.grow(seq, num):
                victim = self.running[-1]
                self._preempt(victim, batch)
                if victim is seq:
                    break
            else:
                batch.add(seq, num)
                i += 1
                continue
            break  # seq itself was preempted: it was the newest
        return batch

    def admit(self, batch: ScheduledBatch, *, budget: int, whole_prompts: bool, max_chunk_tokens: int = 0,
              reserve_whole_prompt: bool = False) -> ScheduledBatch:
        """Admits waiting sequences in queue order while budget, seats and blocks allow.

        Args:
            batch: the step so far.
            budget: tokens the admitted sequences may compute in the step.
            whole_prompts: admit whole prompts only; else the budget splits them.
            max_chunk_tokens: most tokens one sequence computes in the step (0: no cap).
            reserve_whole_prompt: admit a split prompt only if blocks for all of it are free, not
                just for its first chunk (vLLM's ``scheduler_reserve_full_isl``), so a long prompt
                cannot be admitted into KV it will have to preempt others for.

        Returns:
            ``batch``, with the admitted sequences added.
        """
        max_seqs = self.config.max_num_seqs
        while self.waiting and len(batch.seqs) < max_seqs and len(self.running) < max_seqs:
            seq = self._writable_head()
            hit = self.kv.cache_hit(seq)  # with prefix caching: blocks cached by content (its own, if preempted)
            cached = len(hit) * self.kv.block_size
            need = seq.remaining_tokens - cached
            num = need if whole_prompts or seq.state == SWAPPED else min(need, budget, max_chunk_tokens or need)
            fits = num > 0 and not (whole_prompts and num > budget and (batch.seqs or self.running))
            reserved = need if reserve_whole_prompt else num  # blocks are still taken for num only
            if not fits or not self.kv.fits(seq, reserved, hit):
                if fits and self._unpin_waiting():
                    continue  # blocks that queued sequences shared are evictable now: try again
                break
            if seq.state == SWAPPED:
                self._swap_in(seq, batch)
            self.kv.allocate(seq, num, hit)
            if cached:
                batch.cache_hits.append((seq, cached))
            self.waiting.pop(0)
            seq.state = RUNNING
            self.running.append(seq)
            batch.add(seq, num)
            batch.admitted += 1
            budget -= num
        batch.queue_blocked = bool(self.waiting)
        return batch

    # -- decode runs -----------------------------------------------------------
    def decode_run(self, batch: ScheduledBatch, outcome: StepOutcome) -> DecodeRun | None:
        """The steps after ``batch`` (just updated into ``outcome``) that are certain to be the
        running sequences decoding unchanged, if no work arrives.

        That holds when every running sequence sampled at the end of ``batch`` (so each now
        decodes, and its last token came then), the policy would take them all, and the queue
        can give no one: it is empty, or ``batch`` tried it, admitted no one, and since then
        nothing was queued and no one left (a step later only fewer blocks are free). The run
        lasts until a sequence finishes, or its sequences would need more KV blocks than
        are free (a preemption or a prefix-cache eviction is :meth:`schedule`'s to decide). Its
        last step is handed back with :meth:`update` like any other (sequences may finish in it).
        """
        running = self.running
        n = len(running)
        # sampled minus finished are running; a sampled sequence has forked already
        if not n or len(outcome.sampled) - len(outcome.finished) != n or not self.policy.decodes_all(n):
            return None
        if self.waiting and (outcome.finished or batch.admitted or batch.preempted or batch.swap_bytes
                             or batch.num_tokens != n  # a step of decodes only leaves the queue no more budget
                             or not batch.queue_blocked or batch.queue_stamp != self._next_order):
            return None
        length = min([seq.target_generated - seq.generated for seq in running])
        # A sequence whose blocks hold ``room`` more tokens needs a block at run step
        # room + 1, and every block_size steps after (0-based: room, room + block_size, ...).
        block_size = self.kv.block_size
        new_blocks = [0] * length
        for seq in running:
            for j in range((seq.num_blocks + seq.prefix_blocks) * block_size - seq.num_computed, length, block_size):
                new_blocks[j] += 1
        free = self.kv.num_free
        for j, blocks in enumerate(new_blocks):
            free -= blocks
            if free < 0:
                del new_blocks[j:]
                break
        return DecodeRun(list(running), new_blocks, batch.queue_stamp) if new_blocks else None

    def run_step(self, run: DecodeRun) -> ScheduledBatch:
        """The run's next step, taking the blocks it grows into, as :meth:`schedule` would."""
        self.kv.take(run.new_blocks[run.taken])
        run.taken += 1
        return run.step()

    def settle(self, run: DecodeRun) -> int:
        """Applies the run's finished steps to its sequences (each sampled a token per step) and
        credits them the blocks of the steps begun; returns how many steps it applied."""
        k = run.done
        if not run.taken:
            return 0
        block_size = self.kv.block_size
        begun = run.taken - k  # a step in flight holds its blocks already
        for seq in run.seqs:
            computed = seq.num_computed = seq.num_computed + k
            seq.num_tokens += k
            seq.generated += k
            held = -(-(computed + begun) // block_size) - seq.prefix_blocks  # blocks_for, inlined: a hot loop
            if held > seq.num_blocks:
                seq.num_blocks = held
        if k:
            run.contexts = [c + k for c in run.contexts]
            run.taken -= k
            del run.new_blocks[:k]
            run.done = run.max_gap_ns = 0
        return k

    # -- lookahead ---------------------------------------------------------------
    def copy(self) -> Scheduler:
        """A copy to schedule hypothetically: running sequences cloned, waiting ones cloned when
        first changed, KV blocks copied; the records stay the original's, and the copy writes none."""
        copy = Scheduler.__new__(Scheduler)
        copy.config, copy.policy, copy.kv_bytes_per_token = self.config, self.policy, self.kv_bytes_per_token
        copy.kv = self.kv.copy()
        copy.running = [seq.clone() for seq in self.running]
        copy.waiting = list(self.waiting)
        copy._borrowed = set(map(id, self.waiting))
        copy.swap_free_bytes, copy._next_order = self.swap_free_bytes, self._next_order
        copy.micro_batches, copy.in_flight = 1, set()  # a pipelined client predicts nothing (see LLMClient)
        copy.hold_finished_kv = self.hold_finished_kv
        return copy

    def _writable_head(self) -> Sequence:
        seq = self.waiting[0]
        if self._borrowed and id(seq) in self._borrowed:
            seq = self.waiting[0] = seq.clone()
        return seq

    # -- internals -------------------------------------------------------------
    def _unpin_waiting(self) -> bool:
        """Drops the shared KV blocks waiting sequences hold (they will recompute), so the
        head of the queue can evict them; a queue must never pin the blocks its head needs."""
        pinned = False
        for i in range(1, len(self.waiting)):
            if self.waiting[i].prefix_blocks:
                if self._borrowed and id(self.waiting[i]) in self._borrowed:
                    self.waiting[i] = self.waiting[i].clone()
                self.kv.release(self.waiting[i])
                self.waiting[i].num_computed = 0
                pinned = True
        return pinned

    def _fork(self, parent: Sequence) -> list[Sequence]:
        """Multi-path reasoning: the parent's sibling branches start beside it.

        Each sibling shares the parent's prompt KV blocks (copy-on-write, as
        vLLM's parallel sampling), has sampled its own first token from the
        same prefill, and decodes its own tokens into its own blocks, beside
        the parent from the next step on (at the queue's front if no seat is free).
        """
        request = parent.request
        children = [Sequence(request, parent.stage, num_tokens=request.input_tokens + 1,
                             num_computed=request.input_tokens, target_generated=parent.target_generated,
                             generated=1) for _ in range(parent.forks)]
        parent.forks = 0
        self.kv.fork(parent, children, prompt_tokens=request.input_tokens)
        for child in children:
            if len(self.running) < self.config.max_num_seqs:
                child.order, child.state = self._next_order, RUNNING
                self._next_order += 1
                self.running.append(child)
            else:
                self.add(child, front=True)
        return children

    def _preempt(self, seq: Sequence, batch: ScheduledBatch) -> None:
        self.running.remove(seq)
        batch.preempted.append(seq)
        kv_bytes = int(seq.num_computed * self.kv_bytes_per_token)
        if self.config.preemption == "swap" and seq.num_blocks and not seq.prefix_blocks \
                and kv_bytes <= self.swap_free_bytes:
            self.swap_free_bytes -= kv_bytes
            seq.swapped_blocks, seq.swapped_bytes = seq.num_blocks, kv_bytes
            self.kv.release(seq)
            seq.state = SWAPPED
        else:
            self.kv.release(seq)  # with prefix caching its full blocks stay cached until evicted
            seq.num_computed = 0
            seq.state = WAITING
        self.waiting.insert(0, seq)

    def _swap_in(self, seq: Sequence, batch: ScheduledBatch) -> None:
        """Brings a swapped sequence's KV back (space checked by the caller)."""
        self.kv.grow_by(seq, seq.swapped_blocks)
        self.swap_free_bytes += seq.swapped_bytes
        batch.swap_bytes += 2 * seq.swapped_bytes  # the copy out and the copy back both cost time
        seq.swapped_blocks = seq.swapped_bytes = 0
