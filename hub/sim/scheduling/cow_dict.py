"""A dict whose copies cost O(shards), not O(entries): :class:`CowDict`.

The lookahead copies a client's KV blocks at about every arrival (:meth:`BlockManager.copy`), and
with prefix caching those hold every cached block: tens of thousands of entries on an H100, which
a plain ``dict`` copy paid for in full each time, and again when the copy was dropped. A
:class:`CowDict` splits its entries into shards by key hash. A copy takes the list of shards as
they are and never writes them: what it writes goes to a dict of its own (an overlay), read
first. The original copies a shard before it first writes it after a copy (copy-on-write), so
the shards a copy holds never change. A copy therefore costs a list of shard references, the
original a small shard per key it writes while copies live, and the copy what it writes: what
the lookahead touches, not what the cache holds. Copies of copies work too (the overlay is
copied).

Shards are placed by ``hash(key)``, which varies between processes for ``bytes`` keys; nothing
iterates across shards where order could matter, so results do not depend on it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ENTRIES_PER_SHARD = 8  # the shards of a dict sized for n entries hold about this many each


class _Gone:
    """The overlay's mark of a key a copy deleted."""


GONE = _Gone()


class CowDict(Generic[K, V]):
    """A mapping with copy-on-write shards (see the module): ``d[k]``, ``get``, ``in``, ``len``,
    assignment, ``del``, ``pop``, ``update`` from pairs, and :meth:`copy`.

    Args:
        capacity: about how many entries it will hold at most (sets the number of shards; any
            number of entries works).
    """

    def __init__(self, capacity: int = 0) -> None:
        num_shards = 1
        while num_shards * ENTRIES_PER_SHARD < capacity:
            num_shards *= 2
        self._mask = num_shards - 1
        empty: dict[K, V] = {}
        self._shards: list[dict[K, V]] = [empty] * num_shards  # copied on first write, as if shared
        self._owned = bytearray(num_shards)  # 1: this dict's own shard, written in place
        self._overlay: dict[K, V | _Gone] | None = None  # a copy's writes, read first; None: not a copy

    def copy(self) -> CowDict[K, V]:
        """An independent copy, sharing the shards as they are now."""
        copy: CowDict[K, V] = CowDict()  # one empty shard, replaced (mypyc: no __new__ on a Generic)
        copy._mask, copy._owned = self._mask, bytearray()
        if self._overlay is None:
            copy._shards, copy._overlay = self._shards[:], {}
            self._owned = bytearray(len(self._owned))  # its shards are the copy's now too
        else:
            copy._shards, copy._overlay = self._shards, dict(self._overlay)  # a copy's shards never change
        return copy

    def __len__(self) -> int:
        # O(shards): for checks, not the hot path
        overlay = self._overlay
        if overlay is None:
            return sum(map(len, self._shards))
        shared = sum(len(shard) for shard in self._shards) - sum(map(self._in_shards, overlay))
        return shared + sum(value is not GONE for value in overlay.values())

    def __contains__(self, key: K) -> bool:
        overlay = self._overlay
        if overlay is not None and key in overlay:
            return overlay[key] is not GONE
        return key in self._shards[hash(key) & self._mask]

    def __getitem__(self, key: K) -> V:
        overlay = self._overlay
        if overlay is not None and key in overlay:
            value = overlay[key]
            if isinstance(value, _Gone):
                raise KeyError(key)
            return value
        return self._shards[hash(key) & self._mask][key]

    def get(self, key: K, default: V) -> V:
        """The value of ``key``, else ``default``."""
        overlay = self._overlay
        if overlay is not None and key in overlay:
            value = overlay[key]
            return default if isinstance(value, _Gone) else value
        return self._shards[hash(key) & self._mask].get(key, default)

    def __setitem__(self, key: K, value: V) -> None:
        overlay = self._overlay
        if overlay is not None:
            overlay[key] = value
            return
        i = hash(key) & self._mask
        (self._shards[i] if self._owned[i] else self._own(i))[key] = value

    def __delitem__(self, key: K) -> None:
        if key not in self:
            raise KeyError(key)
        self.pop(key, cast(V, None))

    def pop(self, key: K, default: V) -> V:
        """Removes ``key`` and returns its value; ``default`` if it was absent."""
        overlay = self._overlay
        if overlay is not None:
            value = self.get(key, cast(V, GONE))
            if value is GONE:
                return default
            overlay[key] = GONE
            return value
        i = hash(key) & self._mask
        if key not in self._shards[i]:
            return default
        return (self._shards[i] if self._owned[i] else self._own(i)).pop(key)

    def update(self, pairs: Iterable[tuple[K, V]]) -> None:
        """Sets each (key, value) of ``pairs``, in order."""
        overlay = self._overlay
        if overlay is not None:
            overlay.update(pairs)
            return
        shards, owned, mask = self._shards, self._owned, self._mask
        for key, value in pairs:
            i = hash(key) & mask
            (shards[i] if owned[i] else self._own(i))[key] = value

    def values(self) -> Iterator[V]:
        """Every value, in no particular order."""
        overlay = self._overlay
        for shard in self._shards:
            for key, value in shard.items():
                if overlay is None or key not in overlay:
                    yield value
        if overlay is not None:
            for written in overlay.values():
                if not isinstance(written, _Gone):
                    yield written

    def _in_shards(self, key: K) -> bool:
        return key in self._shards[hash(key) & self._mask]

    def _own(self, i: int) -> dict[K, V]:
        """Shard ``i``, copied for this dict alone (a copy may hold it)."""
        shard = self._shards[i] = self._shards[i].copy()
        self._owned[i] = 1
        return shard
