"""A scheduler's state and its primitive changes: the queue, the running set, KV blocks, adapters.

:class:`SchedulerState` holds what one client's scheduler knows (waiting queue, running set, KV
blocks, swap space, LoRA slots, the offload tier) and the changes every move is made of: queueing
in the packing policy's order, preempting a victim, swapping KV back in, forking reasoning branches,
bringing adapters into GPU slots. :mod:`.moves` adds the two moves a batching policy forms a step
from, and :mod:`.scheduler` the contract a client steps through.
"""

from __future__ import annotations

from typing import Self

from ...config.choices import BATCHING, PACKING
from ...config.scheduler import SchedulerConfig
from ..registry import chosen
from .batch import ScheduledBatch
from .kv import BlockManager
from .lora import LoraSlots, LoraStep
from .offload import OffloadTier
from .packing import PackingOrder
from .policies import BatchingPolicy
from .sequence import LOADING, RUNNING, SWAPPED, WAITING, Sequence
from .speculative import SpecStats, Speculation


class SchedulerState:
    """Waiting queue, running set and KV blocks of one client (see :class:`.scheduler.Scheduler`).

    Args:
        config: the client's scheduler section.
        kv: its KV blocks.
        kv_bytes_per_token: KV bytes of one token (swap sizes).
        one_step_ahead: form each step as vLLM's async scheduling does (the client's
            ``forms_one_step_ahead``); None: the scheduler section's default. Never with micro-batches.
    """

    def __new__(cls, *args: object, **kwargs: object) -> Self:
        # Scheduler.copy() makes blank instances with Scheduler.__new__; compiled by mypyc (setup.py),
        # that needs a __new__ of its own, and it must be on the class defining __init__: on a
        # subclass, mypyc's constructor would skip the inherited __init__.
        return object.__new__(cls)

    def __init__(self, config: SchedulerConfig, kv: BlockManager, *, kv_bytes_per_token: float = 0.0,
                 micro_batches: int = 1, hold_finished_kv: bool = False, lora: LoraSlots | None = None,
                 speculation: Speculation | None = None, offload: OffloadTier | None = None,
                 lock_step: bool = False, one_step_ahead: bool | None = None) -> None:
        self.config, self.kv, self.kv_bytes_per_token = config, kv, kv_bytes_per_token
        self.offload = offload  # the KV offload tier (see .offload), if any; a copy has none
        self.hold_finished_kv = hold_finished_kv  # a finished sequence's KV stays until release()
        self.micro_batches = micro_batches  # batches in flight at once (pipeline parallelism)
        self.in_flight: set[int] = set()  # ids of the sequences of the batches in flight (micro_batches > 1)
        self.policy: BatchingPolicy = chosen(BATCHING, config.batching, BatchingPolicy)(config)
        self.packing: PackingOrder = chosen(PACKING, config.packing, PackingOrder)()
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.swap_free_bytes = config.swap_space_bytes
        self._next_order = 0
        # vLLM's async scheduling (see .scheduler's docstring): a step is formed one step ahead
        ahead = config.forms_one_step_ahead if one_step_ahead is None else one_step_ahead
        self.one_step_ahead = ahead and micro_batches == 1
        self._visible: int | None = None  # one step ahead: the queue orders below it were queued by then
        self.lock_step = lock_step  # a data-parallel rank stepping with others (see Scheduler._form_one_step_ahead)
        self._retiring: list[Sequence] = []  # one step ahead: finished in the step just done, seats still held
        self._borrowed: set[int] = set()  # in a copy: ids of the original's waiting sequences, cloned on write
        self.speculation = speculation  # speculative decoding (see .speculative), if any
        self.spec_stats = SpecStats()
        self.lora = lora  # LoRA adapters' GPU slots and host cache (see .lora), if enabled
        self._flying: list[Sequence] = []  # while a step forms beside micro-batches in flight: their sequences

    # -- the queue ------------------------------------------------------------
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
        """Puts ``seq`` in the waiting queue where the packing order (:mod:`.packing`) puts it."""
        self.packing.queue(self.waiting, seq, front=front)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_running(self) -> int:
        """Sequences running: a count right even while a decode run's steps are pending on them."""
        return len(self.running)

    def release(self, seq: Sequence) -> None:
        """Frees a finished sequence's KV held since it finished (``hold_finished_kv``)."""
        self.kv.release(seq)


    def next_load_ns(self) -> int | None:
        """When a copy back from the offload tier is next done, if one is under way (an idle client wakes then)."""
        return self.offload.next_load_ns() if self.offload is not None else None


    def _retire(self) -> None:
        """Frees the seats (and, unless held, the KV) of the sequences finished in the step just done."""
        if not self.hold_finished_kv:
            for seq in self._retiring:
                self.kv.release(seq)
        self._retiring = []


    def _writable(self, i: int) -> Sequence:
        seq = self.waiting[i]
        if self._borrowed and id(seq) in self._borrowed:
            seq = self.waiting[i] = seq.clone()
        return seq


    # -- the changes moves are made of -------------------------------------------------------------
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
        """The running sequence to preempt (the packing order's choice: the newest, or the least important)."""
        return self.packing.victim(self.running)

    def _preempt(self, seq: Sequence, batch: ScheduledBatch) -> None:
        self.running.remove(seq)
        batch.drop(seq)  # a victim chosen by importance may be scheduled in this step already
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
        self.packing.requeue(self.waiting, seq)

    def _swap_in(self, seq: Sequence, batch: ScheduledBatch) -> None:
        """Brings a swapped sequence's KV back (space checked by the caller)."""
        self.kv.grow_by(seq, seq.swapped_blocks)
        self.swap_free_bytes += seq.swapped_bytes
        batch.swap_bytes += 2 * seq.swapped_bytes  # the copy out and the copy back both cost time
        seq.swapped_blocks = seq.swapped_bytes = 0

