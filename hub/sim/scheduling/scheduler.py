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

With vLLM's async scheduling (``host_time`` and ``async_scheduling``), the
engine forms step n+1 while step n runs, before n's outputs are known
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

import bisect
from collections.abc import Callable
from typing import Self

from ...config.scheduler import SchedulerConfig
from .batch import ScheduledBatch, SteadyDecodes, StepOutcome
from .kv import BlockManager
from .lora import LoraSlots, LoraStep
from .offload import OffloadTier
from .policies import POLICIES
from .sequence import FINISHED, LOADING, RUNNING, SWAPPED, WAITING, Sequence
from .speculative import SpecStats, Speculation


class Scheduler:
    """Waiting queue, running set and KV blocks of one client.

    Args:
        config: the client's scheduler section.
        kv: its KV blocks.
        kv_bytes_per_token: KV bytes of one token (swap sizes).
    """

    def __new__(cls, *args: object, **kwargs: object) -> Self:
        # copy() makes blank instances with Scheduler.__new__; compiled by mypyc (setup.py), that needs
        # a __new__ of the class's own
        return object.__new__(cls)

    def __init__(self, config: SchedulerConfig, kv: BlockManager, *, kv_bytes_per_token: float = 0.0,
                 micro_batches: int = 1, hold_finished_kv: bool = False, lora: LoraSlots | None = None,
                 speculation: Speculation | None = None, offload: OffloadTier | None = None,
                 lock_step: bool = False) -> None:
        self.config, self.kv, self.kv_bytes_per_token = config, kv, kv_bytes_per_token
        self.offload = offload  # the KV offload tier (see .offload), if any; a copy has none
        self.hold_finished_kv = hold_finished_kv  # a finished sequence's KV stays until release()
        self.micro_batches = micro_batches  # batches in flight at once (pipeline parallelism)
        self.in_flight: set[int] = set()  # ids of the sequences of the batches in flight (micro_batches > 1)
        self.policy = POLICIES[config.batching](config)
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.swap_free_bytes = config.swap_space_bytes
        self._next_order = 0
        # vLLM's async scheduling (see the module docstring): a step is formed one step ahead
        self.one_step_ahead = config.host_time and config.async_scheduling and micro_batches == 1
        self._visible: int | None = None  # one step ahead: the queue orders below it were queued by then
        self.lock_step = lock_step  # a data-parallel rank stepping with others (see _form_one_step_ahead)
        self._retiring: list[Sequence] = []  # one step ahead: finished in the step just done, seats still held
        self._borrowed: set[int] = set()  # in a copy: ids of the original's waiting sequences, cloned on write
        self.speculation = speculation  # speculative decoding (see .speculative), if any
        self.spec_stats = SpecStats()
        self.lora = lora  # LoRA adapters' GPU slots and host cache (see .lora), if enabled
        self._flying: list[Sequence] = []  # while a step forms beside micro-batches in flight: their sequences

    # -- the contract ----------------------------------------------------------
    def add(self, seq: Sequence, *, front: bool = False) -> None:
        """Queues a new sequence (ordered by the packing policy); ``front`` puts it first (a branch
        of a request already running)."""
        seq.order = self._next_order
        self._next_order += 1
        seq.state = WAITING
        if self.speculation is not None and seq.spec_draws is None:
            seq.spec_draws = self.speculation.draws(seq.target_generated - seq.generated)
        self._queue(seq, front=front)

    def _queue(self, seq: Sequence, *, front: bool) -> None:
        """Puts ``seq`` in the waiting queue where the packing policy orders it: FCFS (``front``:
        first), least work left, or by request priority or deadline, as vLLM's ``priority``
        policy keeps its waiting heap ordered by (priority, arrival)."""
        packing = self.config.packing
        if packing in ("priority", "edf"):
            key = _PRIORITY_KEYS[packing]
            bisect.insort(self.waiting, seq, key=key)
            return
        if front:
            self.waiting.insert(0, seq)
        else:
            self.waiting.append(seq)
        if packing == "least_work_left":
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

    def _retire(self) -> None:
        """Frees the seats (and, unless held, the KV) of the sequences finished in the step just done."""
        if not self.hold_finished_kv:
            for seq in self._retiring:
                self.kv.release(seq)
        self._retiring = []

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
            remaining = seq.num_tokens + seq.drafts - computed
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
                victim = self._victim()
                if running.index(victim) < i:
                    i -= 1  # seq moves up a place
                self._preempt(victim, batch)
                if victim is seq:
                    break
            else:
                batch.add(seq, num)
                i += 1
                continue
            break  # seq itself was preempted: it was the newest (or the least important)
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
        seats = max_seqs - len(self._retiring)
        visible = self._visible
        lora = self.lora
        busy = self._busy_adapters() if lora is not None and self.waiting else set()
        max_loras = lora.spec.max_loras if lora is not None else 0
        i = 0  # the queue's first sequence not skipped for its adapter (see .lora)
        while i < len(self.waiting) and len(batch.seqs) < max_seqs and len(self.running) < seats:
            if visible is not None and self.waiting[i].order >= visible and not self.waiting[i].generated:
                batch.queue_blocked = False  # queued while the step before ran: the next step sees it
                if self.config.packing == "fcfs":
                    return batch  # so was everyone behind it
                i += 1
                continue
            loaded = 0  # tokens an offload tier's copy computed for it
            if self.waiting[i].state == LOADING:
                if self.offload is None or not self.offload.loaded(self.waiting[i]):
                    i += 1  # vLLM skips a request waiting for its KV, and takes the ones behind it
                    continue
                loaded = self.waiting[i].num_computed
            adapter = self.waiting[i].request.lora if lora is not None else None
            if adapter is not None and adapter not in busy and len(busy) >= max_loras:
                i += 1  # vLLM: a request whose adapter would exceed max_loras is skipped; later ones may run
                continue
            seq = self._writable(i)
            hit = self.kv.cache_hit(seq)  # with prefix caching: blocks cached by content (its own, if preempted)
            cached = max(0, len(hit) * self.kv.block_size - seq.num_computed)  # tokens it need not compute
            need = seq.remaining_tokens - cached
            if self.offload is not None and self.offload.start_load(seq, hit, need if reserve_whole_prompt else 0):
                i += 1  # it waits for its blocks from the offload tier
                continue
            num = need if whole_prompts or seq.state == SWAPPED else min(need, budget, max_chunk_tokens or need)
            fits = num > 0 and not (whole_prompts and num > budget and (batch.seqs or self.running))
            reserved = need if reserve_whole_prompt else num  # blocks are still taken for num only
            if not fits or not self.kv.fits(seq, reserved, hit):
                if fits and self._unpin_waiting(keep=i):
                    continue  # blocks that queued sequences shared are evictable now: try again
                break
            if adapter is not None:
                self._activate_adapter(seq, batch, busy)
            if seq.state == SWAPPED:
                self._swap_in(seq, batch)
            self.kv.allocate(seq, num, hit)
            if cached or loaded:
                batch.cache_hits.append((seq, cached + loaded))
            self.waiting.pop(i)
            seq.state = RUNNING
            self.running.append(seq)
            batch.add(seq, num)
            batch.admitted += 1
            budget -= num
        batch.queue_blocked = bool(self.waiting)
        return batch

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
                kv.cache_full_blocks(seq, min(computed + begun, seq.num_tokens))

    def next_load_ns(self) -> int | None:
        """When a copy back from the offload tier is next done, if one is under way (an idle client wakes then)."""
        return self.offload.next_load_ns() if self.offload is not None else None

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
        copy.one_step_ahead, copy._visible, copy.lock_step = self.one_step_ahead, self._visible, self.lock_step
        copy._retiring = [seq.clone() for seq in self._retiring]
        copy.speculation, copy.spec_stats = self.speculation, SpecStats()  # a copy draws nothing: see add()
        copy.lora, copy._flying = self.lora.copy() if self.lora is not None else None, []
        copy.offload = None  # a prediction: the copy neither loads nor stores (LOADING sequences wait)
        return copy

    def _writable(self, i: int) -> Sequence:
        seq = self.waiting[i]
        if self._borrowed and id(seq) in self._borrowed:
            seq = self.waiting[i] = seq.clone()
        return seq

    # -- internals -------------------------------------------------------------
    def _unpin_waiting(self, keep: int = 0) -> bool:
        """Drops the shared KV blocks waiting sequences hold (they will recompute), so the
        sequence at ``keep`` (the head, less any skipped for their adapters) can evict them; a
        queue must never pin the blocks its head needs."""
        pinned = False
        for i in range(len(self.waiting)):
            if i != keep and self.waiting[i].prefix_blocks and self.waiting[i].state != LOADING:
                if self._borrowed and id(self.waiting[i]) in self._borrowed:
                    self.waiting[i] = self.waiting[i].clone()
                self.kv.release(self.waiting[i])
                self.waiting[i].num_computed = 0
                pinned = True
        return pinned

    def _busy_adapters(self) -> set[str]:
        """The adapters running sequences use (in flight included)."""
        return {seq.request.lora for seqs in (self.running, self._flying) for seq in seqs
                if seq.request.lora is not None}

    def _activate_adapter(self, seq: Sequence, batch: ScheduledBatch, busy: set[str]) -> None:
        """Brings an admitted sequence's adapter into a GPU slot, noting the load (or hit) on ``batch``."""
        assert self.lora is not None and seq.request.lora is not None
        step = batch.lora = batch.lora or LoraStep()
        load = self.lora.activate(seq.request.lora, seq.request.lora_rank, busy)
        if load is None:
            step.hits += 1
        else:
            step.loads.append(load)
        busy.add(seq.request.lora)

    def _lora_step(self, batch: ScheduledBatch) -> LoraStep | None:
        """Sets ``batch.lora`` to its sequences' adapters (None: the base model only) and touches them."""
        numbers: dict[str, int] = {}
        ranks, ids = [], []
        for seq in batch.seqs:
            request = seq.request
            if request.lora is None:
                ranks.append(0)
                ids.append(0)
            else:
                ranks.append(request.lora_rank)
                ids.append(numbers.setdefault(request.lora, len(numbers) + 1))
        if numbers:
            assert self.lora is not None
            self.lora.touch(numbers)
            step = batch.lora = batch.lora or LoraStep()
            step.ranks, step.ids = tuple(ranks), tuple(ids)
        return batch.lora

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
                             generated=1, prefix_id=parent.prefix_id) for _ in range(parent.forks)]
        parent.forks = 0
        if self.speculation is not None:  # branches share the parent's draws and propose drafts of their own
            for child in children:
                child.spec_draws, child.spec_step, child.drafts = parent.spec_draws, parent.spec_step, \
                    self.speculation.k
        self.kv.fork(parent, children, prompt_tokens=request.input_tokens)
        for child in children:
            if len(self.running) < self.config.max_num_seqs:
                child.order, child.state = self._next_order, RUNNING
                self._next_order += 1
                self.running.append(child)
            else:
                self.add(child, front=True)
        return children

    def _victim(self) -> Sequence:
        """The running sequence to preempt: the newest, or under ``priority``/``edf`` the least
        important (vLLM: ``max(self.running, key=lambda r: (r.priority, r.arrival_time))``)."""
        packing = self.config.packing
        if packing in ("priority", "edf"):
            return max(self.running, key=_PRIORITY_KEYS[packing])
        return self.running[-1]

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
            seq.num_computed = seq.drafts = 0  # vLLM drops a preempted request's drafts
            seq.state = WAITING
        if self.config.packing in ("priority", "edf"):
            bisect.insort(self.waiting, seq, key=_PRIORITY_KEYS[self.config.packing])
        else:
            self.waiting.insert(0, seq)

    def _swap_in(self, seq: Sequence, batch: ScheduledBatch) -> None:
        """Brings a swapped sequence's KV back (space checked by the caller)."""
        self.kv.grow_by(seq, seq.swapped_blocks)
        self.swap_free_bytes += seq.swapped_bytes
        batch.swap_bytes += 2 * seq.swapped_bytes  # the copy out and the copy back both cost time
        seq.swapped_blocks = seq.swapped_bytes = 0


# Waiting-queue order and preemption victims of vLLM's ``priority`` policy (lower value first, then
# arrival: admission order here), and of earliest deadline first.
_PRIORITY_KEYS: dict[str, Callable[[Sequence], tuple[int, int]]] = {
    "priority": lambda seq: (seq.request.priority, seq.order),
    "edf": lambda seq: (seq.request.deadline_ns, seq.order),
}
