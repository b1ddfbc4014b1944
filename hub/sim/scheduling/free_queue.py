"""vLLM's free block queue, cheap to copy.

A :class:`~cosim.hub.sim.scheduling.kv.BlockManager` with prefix caching keeps its free blocks in
eviction order: cached blocks (one entry each, by hash) and runs of blocks holding nothing
cached (an int key and a count). Blocks are taken from the head, freed to the tail, and a
cached block found again is taken out of the middle.

The queue is a doubly linked list, as vLLM's ``FreeKVCacheBlockQueue``, whose links are kept in
:class:`~cosim.hub.sim.scheduling.cow_dict.CowDict`\\ s: every operation is O(1), the queue holds
exactly its live entries (an entry taken out leaves nothing behind), and a copy costs the dicts'
shard lists, not the entries: the lookahead copies a client's KV at about every arrival, and with
tens of thousands of cached blocks a full copy cost milliseconds each time.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Self

from .cow_dict import CowDict

Links = tuple[Hashable | None, Hashable | None]  # an entry's neighbours, head side first (None: none;
# the head's first is stale)
NO_LINKS: Links = (None, None)


class FreeQueue:
    """Free blocks in eviction order, head first (see the module).

    Args:
        capacity: about how many entries it will hold at most (the KV's blocks; sizes the dicts'
            shards).
    """

    __slots__ = ("_links", "_runs", "_head", "_tail")

    def __new__(cls, *args: object, **kwargs: object) -> Self:
        # copy() makes blank instances with FreeQueue.__new__; compiled by mypyc (setup.py), that needs
        # a __new__ of the class's own
        return object.__new__(cls)

    def __init__(self, capacity: int = 0) -> None:
        self._links: CowDict[Hashable, Links] = CowDict(capacity)  # entry -> (the one before, the one after)
        self._runs: CowDict[Hashable, int] = CowDict(capacity // 16)  # run key -> its blocks (cached: absent)
        self._head: Hashable | None = None
        self._tail: Hashable | None = None

    def copy(self) -> FreeQueue:
        """An independent copy."""
        copy = FreeQueue.__new__(FreeQueue)
        copy._links, copy._runs, copy._head, copy._tail = self._links.copy(), self._runs.copy(), self._head, \
            self._tail
        return copy

    def __len__(self) -> int:
        return len(self._links)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._links

    def items(self) -> Iterator[tuple[Hashable, int]]:
        """(entry, blocks) from head to tail."""
        key, links, runs = self._head, self._links, self._runs
        while key is not None:
            yield key, runs.get(key, 1)
            key = links[key][1]

    def take(self, num_blocks: int) -> list[Hashable]:
        """Takes ``num_blocks`` blocks from the head (there are as many): the entries it empties, in
        order; a run it takes only part of keeps the rest."""
        taken: list[Hashable] = []
        runs = self._runs
        while num_blocks:
            key = self._head
            assert key is not None, "took more blocks than the free queue holds"
            count = runs.get(key, 1)
            if count > num_blocks:
                runs[key] = count - num_blocks
                break
            runs.pop(key, 0)
            self._unlink(key)
            taken.append(key)
            num_blocks -= count
        return taken

    def append_run(self, key: int, blocks: int) -> None:
        """Adds a run of ``blocks`` uncached blocks at the tail, under a new key."""
        self.extend([key])
        self._runs[key] = blocks

    def extend(self, keys: list[Hashable]) -> None:
        """Adds entries (cached blocks) at the tail, in order."""
        if not keys:
            return
        links, tail = self._links, self._tail
        if tail is None:
            self._head = keys[0]
        else:
            links[tail] = (links[tail][0], keys[0])
        following: list[Hashable | None] = [*keys[1:], None]
        links.update(zip(keys, zip([tail, *keys[:-1]], following)))
        self._tail = keys[-1]

    def tail_run(self) -> Hashable | None:
        """The last entry if it is a run (its blocks can grow), else None."""
        tail = self._tail
        return tail if tail is not None and tail in self._runs else None

    def grow_run(self, key: Hashable, blocks: int) -> None:
        """Adds ``blocks`` to run ``key``."""
        self._runs[key] = self._runs[key] + blocks

    def remove_all(self, keys: list[Hashable]) -> None:
        """Takes cached blocks out of the queue, wherever they are."""
        for key in keys:
            self._unlink(key)

    def _unlink(self, key: Hashable) -> None:
        # The head's link to the entry before it is left stale (never read: the head is known by
        # _head), so that taking from the head writes one link, not two.
        links = self._links
        before, after = links.pop(key, NO_LINKS)
        if key == self._head:
            self._head = after
            if after is None:
                self._tail = None
            return
        links[before] = (links[before][0], after)
        if after is None:
            self._tail = before
        else:
            links[after] = (before, links[after][1])
