"""Paged KV-cache blocks of one client, with vLLM V1's prefix cache.

Capacity is a number of blocks of ``block_size`` tokens. A sequence holds the
blocks of the tokens it has computed: first the *cached* blocks it shares
through the cache (``seq.cached``, counted in ``seq.prefix_blocks``), then
blocks of its own (``seq.num_blocks``).

With prefix caching on, the pool behaves as vLLM V1's block pool:

- a full block is known by the hash of its tokens and its parent's
  (:mod:`.block_hash`) and is cached as soon as it is allocated for computing
  (vLLM caches blocks in ``allocate_slots``, before the step runs), so a
  request admitted later, in the same step or after, reuses it;
- a sequence being admitted reuses the longest run of cached blocks that
  match its leading tokens, all but its last token at most (:meth:`cache_hit`);
- blocks freed by finished or preempted sequences keep their hashes and join
  the free queue's tail, a sequence's tail block first; allocation takes from
  the queue's head, evicting the cached blocks it takes (LRU). A preempted
  sequence readmitted gets back whatever of its blocks was not evicted.

Free blocks, the evictable cached ones included, are ``num_free`` (vLLM's
count). Multi-path reasoning branches share their parent's prompt blocks
through the same reference counts, with or without prefix caching.
"""

from __future__ import annotations

from collections.abc import Hashable
from itertools import compress, repeat, takewhile
from operator import add, not_, sub
from typing import Self

from .block_hash import block_hashes
from .cow_dict import CowDict
from .free_queue import FreeQueue
from .sequence import SWAPPED, Sequence


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens."""
    return -(-num_tokens // block_size)


class BlockManager:
    """Counts free blocks, and with prefix caching keeps vLLM's cached blocks and free queue.

    Attributes:
        num_blocks: capacity in blocks.
        block_size: tokens per block.
        num_free: blocks no sequence holds (cached ones nobody uses included).
    """

    def __new__(cls, *args: object, **kwargs: object) -> Self:
        # copy() makes blank instances with BlockManager.__new__; compiled by mypyc (setup.py), that needs
        # a __new__ of the class's own
        return object.__new__(cls)

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        self.num_free = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        # shared or cached block -> sequences holding it; CowDicts, as the free queue's, copy cheaply
        self._refs: CowDict[Hashable, int] = CowDict(num_blocks)
        self._free = FreeQueue(num_blocks if enable_prefix_caching else 0)  # prefix caching only
        self._next_key = 0  # keys of runs; with caching off, of shared blocks too
        if enable_prefix_caching and num_blocks:
            self._free_run(num_blocks)

    def copy(self) -> BlockManager:
        """An independent copy (lookahead schedules on it)."""
        copy = BlockManager.__new__(BlockManager)
        copy.num_blocks, copy.block_size, copy.num_free = self.num_blocks, self.block_size, self.num_free
        copy.enable_prefix_caching, copy._next_key = self.enable_prefix_caching, self._next_key
        copy._refs, copy._free = self._refs.copy(), self._free.copy()
        return copy

    @property
    def num_used(self) -> int:
        """Blocks held by sequences."""
        return self.num_blocks - self.num_free

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Extra blocks ``seq`` needs to compute ``num_new_tokens`` more tokens."""
        total = blocks_for(seq.num_computed + num_new_tokens, self.block_size)
        return max(0, total - seq.num_blocks - seq.prefix_blocks)

    # -- allocation ------------------------------------------------------------
    def cache_hit(self, seq: Sequence) -> list[Hashable]:
        """The cached blocks holding the longest run of ``seq``'s leading tokens, for a sequence
        that holds no KV (whole blocks; at least one token is always left to compute, as vLLM
        does). Nothing is taken until :meth:`allocate`.

        A sequence whose whole prompt is computed elsewhere (a disaggregated decode: its KV
        comes over the network) may hit its prompt's blocks too, all but the prompt's last
        token, as vLLM's decode instance looks up its own cache before pulling the rest
        (NIXL connector: "partial prefix cache hit: just read uncomputed blocks")."""
        if not self.enable_prefix_caching or seq.num_blocks or seq.prefix_blocks or seq.state == SWAPPED:
            return []
        if not seq.num_computed:
            most = (seq.num_tokens - 1) // self.block_size
        elif seq.num_computed >= seq.prompt_tokens:
            most = (seq.prompt_tokens - 1) // self.block_size
        else:
            return []  # part of a prompt retrieved from a KV store: the rest is computed after it
        refs = self._refs
        hit: list[Hashable] = list(takewhile(refs.__contains__, seq.block_hashes[:most]))
        for i in range(len(hit), most if len(hit) == len(seq.block_hashes) else 0):  # hashed as far as it hits
            # ahead in doubling chunks, not a block per call: a long prompt's ids cost a slice per call
            chain = seq.block_hashes if i < len(seq.block_hashes) else \
                block_hashes(seq, min(most, i + max(16, i)), self.block_size)
            if chain[i] not in refs:
                break
            hit.append(chain[i])
        return hit

    def fits(self, seq: Sequence, num_new_tokens: int, hit: list[Hashable] | None = None) -> bool:
        """Whether :meth:`allocate` can give ``seq`` the cached blocks ``hit`` and the blocks for
        ``num_new_tokens`` more tokens after them (a hit block nobody holds is one of the free)."""
        if not hit:
            return self.blocks_needed(seq, num_new_tokens) <= self.num_free
        needed = blocks_for(self._computed_with(seq, hit) + num_new_tokens, self.block_size) - len(hit)
        return needed + list(map(self._refs.__getitem__, hit)).count(0) <= self.num_free

    def allocate(self, seq: Sequence, num_new_tokens: int, hit: list[Hashable] | None = None) -> bool:
        """Gives ``seq`` the cached blocks ``hit`` (from :meth:`cache_hit`) and the blocks it needs
        to compute ``num_new_tokens`` more tokens after them, as vLLM's ``allocate_slots``; False,
        changing nothing, if they cannot be had."""
        if hit:
            if not self.fits(seq, num_new_tokens, hit):
                return False
            seq.num_computed = self._computed_with(seq, hit)
            needed = blocks_for(seq.num_computed + num_new_tokens, self.block_size) - len(hit)
            self._hold(hit)
            seq.cached = list(hit)
            seq.prefix_blocks = len(hit)
        else:
            needed = self.blocks_needed(seq, num_new_tokens)
            if needed > self.num_free:
                return False
        if needed:
            self.take(needed)
            seq.num_blocks += needed
        if self.enable_prefix_caching:
            self.cache_full_blocks(seq, min(seq.num_computed + num_new_tokens, seq.num_tokens))
        return True

    def grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Allocates the blocks ``seq`` needs for ``num_new_tokens`` more tokens; False if they cannot be had."""
        return self.allocate(seq, num_new_tokens)

    def grow_by(self, seq: Sequence, num_blocks: int) -> bool:
        """Gives ``seq`` ``num_blocks`` more blocks (swap-in); False if they cannot be had."""
        if num_blocks > self.num_free:
            return False
        self.take(num_blocks)
        seq.num_blocks += num_blocks
        return True

    def take(self, num_blocks: int) -> None:
        """Takes ``num_blocks`` free blocks from the free queue's head, evicting the cached ones
        among them (the caller checked there are enough; a decode run credits them later)."""
        self.num_free -= num_blocks
        if not self.enable_prefix_caching:
            return
        refs = self._refs
        for key in self._free.take(num_blocks):
            refs.pop(key, 0)  # a cached block is evicted (a run's key is in no dict)

    # -- release ---------------------------------------------------------------
    def release(self, seq: Sequence) -> None:
        """Frees a sequence's blocks (finished, preempted, or swapped out). With prefix caching
        its full blocks stay cached, and join the free queue after its tail, as vLLM frees a
        request's blocks in reverse order."""
        if self.enable_prefix_caching:
            self.cache_full_blocks(seq, seq.num_computed)
        if seq.num_blocks:
            self.num_free += seq.num_blocks
            if self.enable_prefix_caching:
                self._free_run(seq.num_blocks)
        if seq.cached:
            refs = self._refs
            blocks = seq.cached[::-1]
            counts = list(map(sub, map(refs.__getitem__, blocks), repeat(1)))
            refs.update(zip(blocks, counts))
            unheld = list(compress(blocks, map(not_, counts)))
            self.num_free += len(unheld)
            if self.enable_prefix_caching:
                self._free.extend(unheld)
            else:
                for block in unheld:
                    del refs[block]  # shared by forks only: nothing keeps it
        seq.num_blocks = seq.prefix_blocks = 0
        seq.cached = []

    def fork(self, parent: Sequence, children: list[Sequence], *, prompt_tokens: int) -> None:
        """Lets ``children`` share the parent's full prompt blocks (multi-path reasoning, as
        vLLM's parallel sampling shares a prompt through the prefix cache); each releases its
        reference when it finishes."""
        full = prompt_tokens // self.block_size
        self.cache_full_blocks(parent, full * self.block_size)
        shared = parent.cached[:full]
        for block in shared:
            self._refs[block] += len(children)
        for child in children:
            child.cached, child.prefix_blocks = list(shared), len(shared)

    # -- internals ---------------------------------------------------------------
    def _computed_with(self, seq: Sequence, hit: list[Hashable]) -> int:
        """Tokens ``seq`` has computed once it holds the cached blocks ``hit`` (a transferred
        prompt was computed already: the hit only spares its blocks)."""
        return max(seq.num_computed, len(hit) * self.block_size)

    def _hold(self, blocks: list[Hashable]) -> None:
        """One more sequence holds each of the cached ``blocks`` (taken off the free queue if nobody did)."""
        refs = self._refs
        counts = list(map(refs.__getitem__, blocks))
        if 0 in counts:
            unheld = list(compress(blocks, map(not_, counts)))
            self._free.remove_all(unheld)
            self.num_free -= len(unheld)
        refs.update(zip(blocks, map(add, counts, repeat(1))))

    def cache_full_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Turns ``seq``'s own full blocks within its first ``num_tokens`` tokens into cached
        blocks; a block someone cached already is shared instead, and ``seq``'s copy freed."""
        full = min(num_tokens // self.block_size, seq.prefix_blocks + seq.num_blocks)
        if full <= seq.prefix_blocks:
            return
        start = seq.prefix_blocks
        if self.enable_prefix_caching:
            keys: list[Hashable] = block_hashes(seq, full, self.block_size)[start:full]  # type: ignore[assignment]
        else:  # shared by forks, never found by content
            keys = list(range(self._next_key, self._next_key + full - start))
            self._next_key += full - start
        refs = self._refs
        seq.num_blocks -= len(keys)
        seq.cached += keys
        seq.prefix_blocks = full
        if not any(map(refs.__contains__, keys)):
            refs.update(zip(keys, repeat(1)))
            return
        for block in keys:
            if block in refs:
                self._hold([block])
                self.num_free += 1
                if self.enable_prefix_caching:
                    self._free_run(1)
            else:
                refs[block] = 1

    def _free_run(self, count: int) -> None:
        """Appends ``count`` uncached free blocks to the free queue's tail."""
        tail = self._free.tail_run()
        if tail is not None:
            self._free.grow_run(tail, count)
            return
        self._free.append_run(self._next_key, count)
        self._next_key += 1
