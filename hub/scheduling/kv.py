"""Paged KV-cache blocks of one client, with an optional prefix cache.

Capacity is a number of blocks of ``block_size`` tokens. A sequence owns
``ceil(num_computed / block_size)`` blocks minus the full blocks it shares
through the prefix cache. Prefix blocks stay cached after their last user
finishes and are evicted least-recently-used when space is needed, tail
blocks first (a cached chain stays a valid, shorter prefix).

With prefix caching on, a sequence preempted by recompute leaves its full
blocks cached (:meth:`BlockManager.park`), as vLLM's block pool keeps freed
blocks' hashes until they are reused: when it is readmitted it gets back the
part nobody evicted meanwhile (:meth:`BlockManager.resume`) and recomputes
only the rest.
"""

from __future__ import annotations

from collections import OrderedDict

from .sequence import Sequence


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens."""
    return -(-num_tokens // block_size)


class BlockManager:
    """Counts free and used blocks; owns the prefix cache.

    Attributes:
        num_blocks: capacity in blocks.
        block_size: tokens per block.
        num_free: blocks neither owned by a sequence nor held by the cache.
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        self.num_free = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        # prefix id -> [blocks, users]; insertion order is LRU order (oldest first)
        self._prefixes: OrderedDict[str, list[int]] = OrderedDict()

    def copy(self) -> BlockManager:
        """An independent copy (lookahead schedules on it)."""
        copy = BlockManager(self.num_blocks, self.block_size, enable_prefix_caching=self.enable_prefix_caching)
        copy.num_free = self.num_free
        copy._prefixes = OrderedDict((key, entry.copy()) for key, entry in self._prefixes.items())
        return copy

    @property
    def num_used(self) -> int:
        """Blocks held by sequences or by the prefix cache."""
        return self.num_blocks - self.num_free

    def _evictable(self) -> int:
        return sum(blocks for blocks, users in self._prefixes.values() if users == 0)

    def can_allocate(self, num_blocks: int) -> bool:
        """Whether ``num_blocks`` more blocks can be had (evicting unused prefixes if needed)."""
        return num_blocks <= self.num_free or num_blocks <= self.num_free + self._evictable()

    def _take(self, num_blocks: int) -> bool:
        if num_blocks > self.num_free:
            for prefix_id in [p for p, (_, users) in self._prefixes.items() if users == 0]:
                entry = self._prefixes[prefix_id]
                evicted = min(entry[0], num_blocks - self.num_free)  # only what is missing, tail first
                entry[0] -= evicted
                self.num_free += evicted
                if entry[0] == 0:
                    del self._prefixes[prefix_id]
                if num_blocks <= self.num_free:
                    break
        if num_blocks > self.num_free:
            return False
        self.num_free -= num_blocks
        return True

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Extra blocks ``seq`` needs to compute ``num_new_tokens`` more tokens."""
        total = blocks_for(seq.num_computed + num_new_tokens, self.block_size)
        return max(0, total - seq.num_blocks - seq.prefix_blocks)

    def grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Allocates the blocks ``seq`` needs for ``num_new_tokens`` more tokens; False if none are free."""
        needed = self.blocks_needed(seq, num_new_tokens)
        if needed and not self._take(needed):
            return False
        seq.num_blocks += needed
        return True

    def take_free(self, num_blocks: int) -> None:
        """Takes ``num_blocks`` free blocks for sequences credited later (a decode run,
        which checked they are free: nothing is evicted)."""
        self.num_free -= num_blocks

    def grow_by(self, seq: Sequence, num_blocks: int) -> bool:
        """Gives ``seq`` ``num_blocks`` more blocks (swap-in); False if they cannot be had."""
        if not self._take(num_blocks):
            return False
        seq.num_blocks += num_blocks
        return True

    def attach_prefix(self, seq: Sequence, prefix_tokens: int) -> int:
        """Shares cached blocks of ``seq.prefix_id`` with a sequence being admitted.

        Returns the prompt tokens served from the cache (whole blocks only; at
        least one prompt token is always left to compute, as vLLM does).
        """
        if not self.enable_prefix_caching or seq.num_computed or seq.prefix_id is None:
            return 0
        entry = self._prefixes.get(seq.prefix_id)
        if entry is None:
            return 0
        usable = min(entry[0], (min(prefix_tokens, seq.num_tokens - 1)) // self.block_size)
        if usable <= 0:
            return 0
        entry[1] += 1
        self._prefixes.move_to_end(seq.prefix_id)
        seq.prefix_blocks = usable
        seq.num_computed = usable * self.block_size
        return seq.num_computed

    def detach_prefix(self, seq: Sequence) -> None:
        """Undoes :meth:`attach_prefix` for a sequence that could not be admitted after all."""
        if seq.prefix_blocks:
            self._prefixes[seq.prefix_id][1] -= 1  # type: ignore[index]
            seq.prefix_blocks = 0
            seq.num_computed = 0

    def release(self, seq: Sequence, *, prefix_tokens: int = 0) -> None:
        """Frees a sequence's blocks. With prefix caching, the full blocks of
        its prefix move into the cache instead of being freed."""
        if seq.prefix_blocks:
            entry = self._prefixes[seq.prefix_id]  # type: ignore[index]
            entry[1] -= 1
        elif self.enable_prefix_caching and seq.prefix_id and prefix_tokens and seq.prefix_id not in self._prefixes:
            cacheable = min(prefix_tokens, seq.num_computed) // self.block_size
            cacheable = min(cacheable, seq.num_blocks)
            if cacheable > 0:
                self._prefixes[seq.prefix_id] = [cacheable, 0]
                seq.num_blocks -= cacheable
        self.num_free += seq.num_blocks
        seq.num_blocks = 0
        seq.prefix_blocks = 0

    # -- preempted sequences' KV kept as evictable cache (vLLM V1 with prefix caching) --
    @staticmethod
    def _parked_key(seq: Sequence) -> str:
        return f"\x00parked:{seq.order}"  # order is unique per client; id() is reused

    def park(self, seq: Sequence) -> None:
        """Releases a preempted sequence's blocks, keeping its full blocks cached and evictable.

        Without prefix caching, or for a sequence sharing a prefix entry, this is :meth:`release`.
        """
        full = min(seq.num_blocks, seq.num_computed // self.block_size)
        if self.enable_prefix_caching and not seq.prefix_blocks and full > 0:
            self._prefixes[self._parked_key(seq)] = [full, 0]
            seq.num_blocks -= full
        self.release(seq)

    def resume(self, seq: Sequence) -> int:
        """Re-attaches what is left of a parked sequence's blocks; returns the tokens they hold.

        The blocks are pinned until :meth:`commit_resume` (admitted) or :meth:`undo_resume`.
        """
        entry = self._prefixes.get(self._parked_key(seq))
        if entry is None or seq.num_computed or seq.prefix_blocks:
            return 0
        usable = min(entry[0], (seq.num_tokens - 1) // self.block_size)  # one token is always computed
        if usable <= 0:
            return 0
        entry[1] += 1
        seq.prefix_blocks = usable
        seq.num_computed = usable * self.block_size
        return seq.num_computed

    def commit_resume(self, seq: Sequence) -> None:
        """Turns the blocks :meth:`resume` pinned into the sequence's own blocks."""
        entry = self._prefixes.pop(self._parked_key(seq))
        self.num_free += entry[0] - seq.prefix_blocks  # blocks past the usable part are freed
        seq.num_blocks += seq.prefix_blocks
        seq.prefix_blocks = 0

    def undo_resume(self, seq: Sequence) -> None:
        """Unpins a parked sequence that could not be admitted after all."""
        self._prefixes[self._parked_key(seq)][1] -= 1
        seq.prefix_blocks = 0
        seq.num_computed = 0

    def fork(self, parent: Sequence, children: list[Sequence], *, prompt_tokens: int) -> None:
        """Lets ``children`` share the parent's full prompt blocks (multi-path reasoning).

        The shared blocks move into a cache entry the parent and children all
        reference; each releases its reference when it finishes, as with a
        shared prefix. A parent already on a cached prefix shares that entry.
        """
        if not parent.prefix_blocks:
            full = min(parent.num_blocks, prompt_tokens // self.block_size)
            if full == 0:
                return
            parent.prefix_id = f"\x00fork:{parent.order}"  # order is unique per client; id() is reused
            self._prefixes[parent.prefix_id] = [full, 1]
            parent.num_blocks -= full
            parent.prefix_blocks = full
        entry = self._prefixes[parent.prefix_id]  # type: ignore[index]
        entry[1] += len(children)
        for child in children:
            child.prefix_id, child.prefix_blocks = parent.prefix_id, parent.prefix_blocks

