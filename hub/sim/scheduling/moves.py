"""The two moves a batching policy forms a step from (:mod:`.policies`).

:meth:`SchedulerMoves.schedule_running` takes running sequences in admission order, preempting the
newest (or least important) when KV blocks run out; :meth:`SchedulerMoves.admit` takes waiting ones
in queue order while budget, seats and blocks allow, each admission in named steps: whether the step
may see it yet, whether vLLM passes it over, how many tokens it computes, and taking it.
"""

from __future__ import annotations

from collections.abc import Hashable

from .batch import ScheduledBatch
from .sequence import LOADING, RUNNING, SWAPPED, Sequence
from .state import SchedulerState


class SchedulerMoves(SchedulerState):
    """A scheduler's state with the two moves policies form steps from."""

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
        busy = self._busy_adapters() if self.lora is not None and self.waiting else set()
        i = 0  # the queue's first sequence not passed over
        unseen = False  # a prompt queued while the step before ran: the next step sees it, so the queue is not blocked
        while i < len(self.waiting) and len(batch.seqs) < max_seqs and len(self.running) < seats:
            queued = self.waiting[i]
            if self._queued_too_late(queued):
                unseen = True
                if self.packing.arrival_order:
                    break  # so was everyone behind it
                i += 1
                continue
            loading = queued.state == LOADING  # ``_passed_over`` finds whether its copy is done
            if self._passed_over(queued, busy):
                i += 1
                continue
            loaded = queued.num_computed if loading else 0  # tokens an offload tier's copy computed
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
            self._take(i, seq, num, hit, cached + loaded, batch, busy)
            budget -= num
        batch.queue_blocked = bool(self.waiting) and not unseen
        return batch

    def _queued_too_late(self, seq: Sequence) -> bool:
        """One step ahead (vLLM's async scheduling): whether ``seq`` is a prompt queued while the
        step before this one ran, which the step formed now cannot see yet."""
        visible = self._visible
        return visible is not None and seq.order >= visible and not seq.generated

    def _passed_over(self, seq: Sequence, busy: set[str]) -> bool:
        """Whether vLLM skips ``seq`` and takes the ones behind it: its KV is still being copied back
        from the offload tier (once the copy is done, the tier gives it the blocks and it waits as any
        other), or its adapter would exceed ``max_loras`` beside the ``busy`` ones."""
        if seq.state == LOADING and (self.offload is None or not self.offload.loaded(seq)):
            return True
        lora = self.lora
        if lora is None or seq.request.lora is None:
            return False
        return seq.request.lora not in busy and len(busy) >= lora.spec.max_loras

    def _take(self, i: int, seq: Sequence, num: int, hit: list[Hashable], computed: int, batch: ScheduledBatch,
              busy: set[str]) -> None:
        """Admits ``seq``, the waiting sequence at ``i``, into ``batch`` to compute ``num`` tokens: its
        adapter brought in, its swapped KV back, its blocks allocated (``hit``: those cached), the
        ``computed`` tokens it need not compute (cached or loaded) counted as a cache hit."""
        if self.lora is not None and seq.request.lora is not None:
            self._activate_adapter(seq, batch, busy)
        if seq.state == SWAPPED:
            self._swap_in(seq, batch)
        self.kv.allocate(seq, num, hit)
        if computed:
            batch.cache_hits.append((seq, computed))
        self.waiting.pop(i)
        seq.state = RUNNING
        self.running.append(seq)
        batch.add(seq, num)
        batch.admitted += 1
