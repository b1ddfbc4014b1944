"""LRU contents of one memory level instance (time-synchronized mode).

Main name: :class:`LevelStore`.
"""

from __future__ import annotations

from collections import OrderedDict


class LevelStore:
    """KV entries held by one level, least recently used first.

    Args:
        capacity_bytes: most bytes the level holds.
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self.entries: OrderedDict[str, int] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def touch(self, key: str) -> None:
        """Marks ``key`` most recently used."""
        self.entries.move_to_end(key)

    def remove(self, key: str) -> bool:
        """Drops ``key``; returns whether it was held."""
        size = self.entries.pop(key, None)
        if size is None:
            return False
        self.used_bytes -= size
        return True

    def insert(self, key: str, size_bytes: int) -> list[tuple[str, int]]:
        """Puts ``key`` as most recently used, evicting LRU entries until it fits.

        A key already held is refreshed with the new size. The caller checks
        ``size_bytes <= capacity_bytes``.

        Returns:
            The evicted ``(key, size_bytes)`` pairs, least recently used first.
        """
        self.remove(key)
        evicted: list[tuple[str, int]] = []
        while self.used_bytes + size_bytes > self.capacity_bytes:
            victim, victim_bytes = self.entries.popitem(last=False)
            self.used_bytes -= victim_bytes
            evicted.append((victim, victim_bytes))
        self.entries[key] = size_bytes
        self.used_bytes += size_bytes
        return evicted
