"""A backend's per-session cache of exact answers, least recently used evicted first."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most ``maxsize`` answers by key; a hit becomes the most recent, a store past the size
    drops the least recent. Only for answers that are exact (a deterministic model's)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def lookup(self, key: K) -> V | None:
        """The answer for ``key``, or None when it is not cached."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def store(self, key: K, value: V) -> None:
        self._entries[key] = value
        if len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
