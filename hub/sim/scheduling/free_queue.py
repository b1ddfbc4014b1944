"""vLLM's free block queue, cheap to copy.

A :class:`~cosim.hub.sim.scheduling.kv.BlockManager` with prefix caching keeps its free blocks in
eviction order: cached blocks (one entry each, by hash) and runs of blocks holding nothing
cached (an int key and a count). Blocks are taken from the head, freed to the tail, and a
cached block found again is taken out of the middle.

The queue is a list of entries with a dict of each live entry's index in it. An entry
taken out of the middle only leaves the dict: its slot in the list is stale, skipped when
the head reaches it, and the list is compacted once half of it is stale. Every operation
is O(1) amortized, and a copy is a list's and two dicts' C-level copies: the lookahead
copies a client's KV at every forecast, and an ``OrderedDict`` of a few thousand cached
blocks copies 50 times slower.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Self

COMPACT_MIN = 64  # stale slots tolerated before the list is compacted


class FreeQueue:
    """Free blocks in eviction order, head first (see the module)."""

    __slots__ = ("_order", "_index", "_start", "_runs")

    def __new__(cls, *args: object, **kwargs: object) -> Self:
        # copy() makes blank instances with FreeQueue.__new__; compiled by mypyc (setup.py), that needs
        # a __new__ of the class's own
        return object.__new__(cls)

    def __init__(self) -> None:
        self._order: list[Hashable] = []  # entries by place; stale slots included
        self._index: dict[Hashable, int] = {}  # live entry -> its slot in _order
        self._start = 0  # the head's slot: those before it are gone
        self._runs: dict[Hashable, int] = {}  # run key -> blocks in the run (a cached block: 1, absent)

    def copy(self) -> FreeQueue:
        """An independent copy."""
        copy = FreeQueue.__new__(FreeQueue)
        copy._order, copy._index, copy._start, copy._runs = self._order[:], dict(self._index), self._start, \
            dict(self._runs)
        return copy

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._index

    def items(self) -> Iterator[tuple[Hashable, int]]:
        """(entry, blocks) from head to tail."""
        index, runs = self._index, self._runs
        for slot in range(self._start, len(self._order)):
            key = self._order[slot]
            if index.get(key) == slot:
                yield key, runs.get(key, 1)

    def head(self) -> tuple[Hashable, int]:
        """The first entry and its blocks (the queue is not empty)."""
        order, index, slot = self._order, self._index, self._start
        while index.get(order[slot]) != slot:
            slot += 1
        self._start = slot
        key = order[slot]
        return key, self._runs.get(key, 1)

    def pop_head(self) -> None:
        """Drops the first entry (after :meth:`head`)."""
        key = self._order[self._start]
        del self._index[key]
        self._runs.pop(key, None)
        self._start += 1
        self._compact_if_stale()

    def shorten_head(self, blocks: int) -> None:
        """The first entry, a run, gives up ``blocks`` of its blocks (after :meth:`head`)."""
        self._runs[self._order[self._start]] -= blocks

    def append_run(self, key: int, blocks: int) -> None:
        """Adds a run of ``blocks`` uncached blocks at the tail, under a new key."""
        self._index[key] = len(self._order)
        self._order.append(key)
        self._runs[key] = blocks

    def extend(self, keys: list[Hashable]) -> None:
        """Adds cached blocks at the tail, in order."""
        start = len(self._order)
        self._order += keys
        self._index.update(zip(keys, range(start, start + len(keys))))

    def tail_run(self) -> Hashable | None:
        """The last entry if it is a run (its blocks can grow), else None."""
        order, index = self._order, self._index
        while len(order) > self._start and index.get(order[-1]) != len(order) - 1:
            order.pop()  # stale slots at the tail
        if len(order) > self._start and order[-1] in self._runs:
            return order[-1]
        return None

    def grow_run(self, key: Hashable, blocks: int) -> None:
        """Adds ``blocks`` to run ``key``."""
        self._runs[key] += blocks

    def remove_all(self, keys: list[Hashable]) -> None:
        """Takes cached blocks out of the queue, wherever they are."""
        index = self._index
        for key in keys:
            del index[key]
        self._compact_if_stale()

    def _compact_if_stale(self) -> None:
        if len(self._order) - len(self._index) > max(COMPACT_MIN, len(self._index)):
            index = self._index
            live = [key for slot, key in enumerate(self._order) if index.get(key) == slot]
            self._order, self._start = live, 0
            self._index = {key: slot for slot, key in enumerate(live)}
