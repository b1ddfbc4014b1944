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

With vLLM's async scheduling (``async_scheduling``; by default with chunked
batching), the engine forms step n+1 while step n runs, before n's outputs are known
(``EngineCore.step_with_batch_queue``), so a step is formed as from the start
of the step before it: a prompt queued after that start waits one more step,
and a sequence that finished in the step just done still holds its seat and
KV blocks (vLLM skips scheduling it, as its ``max_tokens`` is reached, but
frees it only when that step's output is processed). When that view gives
nothing to run, vLLM waits for the step in flight and forms again with its
outputs applied; so does :meth:`Scheduler.schedule`.

Lookahead schedules on a :meth:`copy` (the same policy code, on cloned
sequences). For decode runs (:mod:`cosim.hub.timing.runs`) the scheduler says
which steps are certain to be the same sequences decoding
(:meth:`Scheduler.steady_decodes`) and applies such steps in bulk
(:meth:`Scheduler.apply_decodes`).

With a KV offload tier (:mod:`.offload`, vLLM's CPU offloading), each step's
new full blocks are stored there as it ends, and a sequence the tier can give
blocks to is admitted to load them: it waits in the queue (LOADING), skipped
without blocking it, until the copy is known to be done.
"""

from __future__ import annotations

from .batch import ScheduledBatch, SteadyDecodes, StepOutcome
from .moves import SchedulerMoves
from .sequence import FINISHED, Sequence
from .speculative import SpecStats


class Scheduler(SchedulerMoves):
    """Waiting queue, running set and KV blocks of one client, stepped through :meth:`schedule`
    and :meth:`update` (see the module docstring and :class:`.state.SchedulerState`)."""

    # -- the contract ----------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        """Forms the next step (possibly empty: nothing can run).

        With micro-batches in flight (pipeline parallelism, vLLM's batch queue), a sequence in one
        of them cannot be scheduled again until it is handed back: the step is formed from the
        others, and its sequences are in flight until :meth:`update`.
        """
        if self.one_step_ahead:
            batch = self._form_one_step_ahead()
        elif self.micro_batches == 1:
            batch = self.policy.form(self)
        else:
            batch = self._form_beside_in_flight()
            self.in_flight.update(map(id, batch.seqs))
        batch.queue_stamp = self._next_order
        if self.offload is not None and batch.seqs:
            self.offload.step_started()
        if self.speculation is not None:
            batch.draft_tokens = [max(0, num - (seq.num_tokens - computed))  # a prefill chunk verifies none
                                  for seq, num, computed in zip(batch.seqs, batch.num_new, batch.context)]
        if self.lora is not None and batch.seqs:
            self._lora_step(batch)
        return batch

    def _form_one_step_ahead(self) -> ScheduledBatch:
        """The step as vLLM's async scheduling forms it, while the step before it still runs;
        if that gives nothing, the step formed once that one's outputs are applied. A data-parallel
        rank in lock-step (``lock_step``) then has nothing for this step: vLLM's DP engine loop, its
        early step empty, waits for the step in flight and runs a dummy batch with the other ranks'
        next step (``DPEngineCoreProc.run_busy_loop``: ``if not executed: execute_dummy_batch()``)
        before it schedules again with everything it knows."""
        retiring = bool(self._retiring)
        ahead = retiring or self._visible is not None
        batch = self.policy.form(self)
        self._retire()
        if not batch.seqs and ahead:
            self._visible = None
            if self.lock_step:
                return batch
            batch = self.policy.form(self)
        elif retiring:
            batch.queue_blocked = False  # the seats and blocks freed now may admit someone next step
        self._visible = self._next_order if batch.seqs else None
        return batch

    def _form_beside_in_flight(self) -> ScheduledBatch:
        """The policy's step over the running sequences not in flight; the running order is kept
        (in flight, they stay where they were; the admitted join the end)."""
        if not self.in_flight:
            return self.policy.form(self)
        everyone, flying = self.running, self.in_flight
        self.running = [seq for seq in everyone if id(seq) not in flying]
        if self.lora is not None:
            self._flying = [seq for seq in everyone if id(seq) in flying]  # their adapters stay busy
        try:
            batch = self.policy.form(self)
        finally:
            self._flying = []
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
        if self.offload is not None:
            self.offload.step_ended()
            self.offload.store_step(batch.seqs, batch.num_new)
        if self.speculation is not None:
            return self._update_speculative(batch)
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
        return self._conclude(sampled, forking, finished)

    def _update_speculative(self, batch: ScheduledBatch) -> StepOutcome:
        """:meth:`update` with speculative decoding: a sequence whose tokens are all computed
        verifies the drafts scheduled with them, keeps the accepted ones plus one token, and
        gets ``k`` new drafts (see :mod:`.speculative`)."""
        speculation, stats = self.speculation, self.spec_stats
        assert speculation is not None
        sampled: list[Sequence] = []
        forking: list[Sequence] = []
        finished: list[Sequence] = []
        extra: list[tuple[Sequence, int]] = []
        for seq, num in zip(batch.seqs, batch.num_new):
            real = seq.num_tokens - seq.num_computed  # its tokens, then the drafts
            if num < real:
                seq.num_computed += num  # a partial prefill chunk samples nothing
                continue
            drafts = num - real
            accepted = 0
            if drafts:
                assert seq.spec_draws is not None
                accepted = speculation.accepted(float(seq.spec_draws[seq.spec_step]), drafts)
                seq.spec_step += 1
                stats.verifications += 1
                stats.drafted += drafts
                stats.accepted += accepted
            seq.num_computed += real + accepted  # the rejected drafts' KV is discarded
            new = min(accepted + 1, seq.target_generated - seq.generated)  # tokens past the target are dropped
            seq.num_tokens += new
            seq.generated += new
            if new > 1:
                extra.append((seq, new - 1))
            sampled.append(seq)
            if seq.forks:
                forking.append(seq)
            if seq.generated >= seq.target_generated:
                finished.append(seq)
                seq.drafts = 0
            else:
                seq.drafts = speculation.k  # proposed after this sample, verified next step
        return self._conclude(sampled, forking, finished, extra)

    def _conclude(self, sampled: list[Sequence], forking: list[Sequence], finished: list[Sequence],
                  extra_tokens: list[tuple[Sequence, int]] | None = None) -> StepOutcome:
        """Forks the branches of the sampled, and retires the finished (:meth:`update`)."""
        forked = [(seq, self._fork(seq)) for seq in forking]
        outcome = StepOutcome(sampled, forked, finished, self.kv.num_used, len(self.waiting), extra_tokens or [])
        for seq in finished:
            if self.offload is not None:
                self.offload.forget(seq)
            self.running.remove(seq)
            if self.one_step_ahead:
                self._retiring.append(seq)  # freed once the next step is formed
            elif not self.hold_finished_kv:
                self.kv.release(seq)
            seq.state = FINISHED
        if self._retiring and not self.has_work:
            self._retire()  # the step formed ahead of the next is empty: vLLM frees them with these outputs
        return outcome


    # -- decode runs: what timing may apply in bulk (cosim.hub.timing.runs) -------
    def steady_decodes(self, batch: ScheduledBatch, outcome: StepOutcome) -> SteadyDecodes | None:
        """The steps after ``batch`` (just updated into ``outcome``) that are certain to be the
        running sequences decoding unchanged while no work arrives, and the KV blocks each takes.

        That holds when every running sequence sampled at the end of ``batch`` (so each now
        decodes, and its last token came then), the policy would take them all, and the queue
        can give no one: it is empty, or ``batch`` tried it, admitted no one, and since then
        nothing was queued and no one left (a step later only fewer blocks are free). The steps
        last until a sequence finishes, or its sequences would need more KV blocks than are
        free (a preemption or a prefix-cache eviction is :meth:`schedule`'s to decide); the last
        is formed by :meth:`schedule` and handed back with :meth:`update` like any other.
        """
        running = self.running
        n = len(running)
        if self.speculation is not None or self.offload is not None:
            return None  # each step advances a sequence by its accepted drafts; each step's blocks are stored
        # sampled minus finished are running; a sampled sequence has forked already
        if not n or len(outcome.sampled) - len(outcome.finished) != n or not self.policy.decodes_all(n):
            return None
        if self.waiting and (outcome.finished or batch.admitted or batch.preempted or batch.swap_bytes
                             or batch.num_tokens != n  # a step of decodes only leaves the queue no more budget
                             or not batch.queue_blocked or batch.queue_stamp != self._next_order):
            return None
        length = min([seq.target_generated - seq.generated for seq in running])
        # A sequence whose blocks hold ``room`` more tokens needs a block at step
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
        if not new_blocks:
            return None
        # the same adapters every step: touched once here
        lora = self._lora_step(ScheduledBatch(seqs=running)) if self.lora is not None else None
        return SteadyDecodes(list(running), new_blocks, batch.queue_stamp, lora)

    def begin_decode_step(self, new_blocks: int) -> None:
        """A step of :meth:`steady_decodes` begins without being formed: it takes its new KV
        blocks (the sequences are credited them by :meth:`apply_decodes`), and the sequences
        finished in the step before free their seats, as :meth:`schedule` does."""
        self.kv.take(new_blocks)
        if self._retiring:
            self._retire()

    def apply_decodes(self, seqs: list[Sequence], steps: int, begun: int) -> None:
        """Applies ``steps`` decode steps of :meth:`steady_decodes`'s sequences ``seqs`` at once,
        as :meth:`update` applies them one by one (each sampled a token per step, the blocks its
        steps filled cached), and credits them the blocks of ``begun`` more steps begun since
        (a step in flight holds its blocks already)."""
        kv = self.kv
        block_size, caching = kv.block_size, kv.enable_prefix_caching
        for seq in seqs:
            computed = seq.num_computed = seq.num_computed + steps
            seq.num_tokens += steps
            seq.generated += steps
            held = -(-(computed + begun) // block_size) - seq.prefix_blocks  # blocks_for, inlined: a hot loop
            if held > seq.num_blocks:
                seq.num_blocks = held
            if caching:  # the blocks its steps filled are cached, as each step's allocation caches them
                upto = min(computed + begun, seq.num_tokens)
                # (not asked when no block of its own filled: 15 steps in 16 at 16-token blocks)
                if upto // block_size > seq.prefix_blocks and seq.num_blocks:
                    kv.cache_full_blocks(seq, upto)

    # -- lookahead ---------------------------------------------------------------
    def copy(self) -> Scheduler:
        """A copy to schedule hypothetically: running sequences cloned, waiting ones cloned when
        first changed, KV blocks copied; the records stay the original's, and the copy writes none."""
        copy = Scheduler.__new__(Scheduler)
        copy.config, copy.policy, copy.packing = self.config, self.policy, self.packing
        copy.kv_bytes_per_token = self.kv_bytes_per_token
        copy.kv = self.kv.copy()
        copy.running = [seq.clone() for seq in self.running]
        copy.waiting = list(self.waiting)
        copy._borrowed = set(map(id, self.waiting))
        copy.swap_free_bytes, copy._next_order = self.swap_free_bytes, self._next_order
        copy.micro_batches, copy.in_flight = 1, set()  # a pipelined client predicts nothing (see LLMClient)
        copy.hold_finished_kv = self.hold_finished_kv
        copy.one_step_ahead, copy._visible, copy.lock_step = self.one_step_ahead, self._visible, self.lock_step
        copy._retiring = [seq.clone() for seq in self._retiring]
        copy.speculation, copy.spec_stats = self.speculation, SpecStats()  # a copy draws nothing: see add()
        copy.lora, copy._flying = self.lora.copy() if self.lora is not None else None, []
        copy.offload = None  # a prediction: the copy neither loads nor stores (LOADING sequences wait)
        return copy

