"""Synthesized token ids, built from segments, that make equal content equal ids.

Prefix caching by content (the block hash chain, core/src/hasher.rs) compares token ids. Where a
workload has no real ids but knows which parts of two prompts are the same (a Mooncake trace's
``hash_ids``, a session's history), :class:`SegmentIds` gives a prompt ids that agree exactly where
the content does: a prompt is a list of segments, each a run of tokens named by a key, and token
``i`` of segment ``key`` has id ``key * 2**24 + i``. Equal keys give equal ids; different keys never
collide; and the ids are computed when a block is hashed, so a 100k-token prompt costs its segment
list, not 800 kB of ids.

Key spaces (all above the ids of any real vocabulary, below 2**63):

- :func:`block_key`: a Mooncake ``hash_id`` (one 512-token block);
- :func:`prefix_key`: a declared shared prefix (``workload.prefix``), for a session's first turn;
- :func:`session_key`: a session's own segments (a turn's new tokens, a turn's output);
- :func:`question_key`: a question that requests repeat (an inference-perf user's question).
"""

from __future__ import annotations

import numpy as np

SEGMENT_BITS = 24  # tokens per segment at most: 16,777,216
MAX_SEGMENT_TOKENS = 1 << SEGMENT_BITS
_BLOCK_BASE = 1 << 12  # key spaces, each below the next (keys < 2**39 keep ids < 2**63)
_PREFIX_BASE = 1 << 36
_SESSION_BASE = 1 << 37
_QUESTION_BASE = 1 << 38
SEGMENTS_PER_SESSION = 1 << 12  # two per turn: 2048 turns
MAX_HASH_ID = _PREFIX_BASE - _BLOCK_BASE  # a trace's block hashes below this


def block_key(hash_id: int) -> int:
    """The key of a trace's prefix block ``hash_id`` (0 <= hash_id < :data:`MAX_HASH_ID`)."""
    return _BLOCK_BASE + hash_id


def prefix_key(index: int) -> int:
    """The key of declared shared prefix ``index``."""
    return _PREFIX_BASE + index


def question_key(index: int) -> int:
    """The key of repeated question ``index`` (< 2**38)."""
    return _QUESTION_BASE + index


def session_key(session: int, segment: int) -> int:
    """The key of segment ``segment`` (< 4096) of session ``session`` (< 2**25)."""
    return _SESSION_BASE + session * SEGMENTS_PER_SESSION + segment


class SegmentIds:
    """The token ids of a run of segments: ``keys[j]`` holds ``lengths[j]`` tokens.

    Behaves as a read-only sequence of ints for what cosim asks of token ids: ``len()``, and
    slices (``ids[a:b]``, an int64 array).
    """

    __slots__ = ("keys", "_starts", "_length")

    def __init__(self, keys: list[int] | np.ndarray, lengths: list[int] | np.ndarray) -> None:
        self.keys = np.asarray(keys, dtype=np.int64)
        sizes = np.asarray(lengths, dtype=np.int64)
        if len(sizes) and (sizes.min() < 0 or sizes.max() > MAX_SEGMENT_TOKENS):
            raise ValueError(f"segment lengths must be in [0, {MAX_SEGMENT_TOKENS}], got {sizes.min()}..{sizes.max()}")
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._length = int(self._starts[-1])

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: slice) -> np.ndarray:
        start, stop, step = index.indices(self._length)
        if step != 1:
            raise ValueError("SegmentIds slices take step 1")
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        positions = np.arange(start, stop, dtype=np.int64)
        segment = np.searchsorted(self._starts, positions, side="right") - 1
        ids: np.ndarray = (self.keys[segment] << SEGMENT_BITS) + (positions - self._starts[segment])
        return ids

    def head(self, length: int) -> SegmentIds:
        """The first ``length`` tokens, as segments."""
        cut = int(np.searchsorted(self._starts, length, side="left"))
        lengths = np.diff(self._starts[:cut + 1])
        if cut and self._starts[cut] > length:
            lengths[-1] -= self._starts[cut] - length
        return SegmentIds(self.keys[:cut], lengths)

    def segments(self) -> list[tuple[int, int]]:
        """(key, length) of each segment."""
        return list(zip(self.keys.tolist(), np.diff(self._starts).tolist()))

    def __repr__(self) -> str:
        return f"SegmentIds({len(self.keys)} segments, {self._length} tokens)"


def block_ids(hash_ids: list[int], num_tokens: int, block_tokens: int) -> SegmentIds:
    """A trace prompt's ids from its prefix-block hashes: block ``k`` of the prompt is
    ``hash_ids[k]``'s ``block_tokens`` tokens (the last one cut to ``num_tokens``)."""
    count = len(hash_ids)
    lengths = np.full(count, block_tokens, dtype=np.int64)
    if count:
        lengths[-1] = num_tokens - block_tokens * (count - 1)
    return SegmentIds([block_key(h) for h in hash_ids], lengths)
