"""Predict mode: MIST's recursive hierarchy formula (MIST §IV-A3).

    f(KV, C_n) = H_n * (T_n + Size / BW_n) + (1 - H_n) * f(KV, C_{n+1})

A lookup that misses the last level means the KV is recomputed as a prefill.
That prefill is timed by a runtime backend, not here, so the formula's term
past the last level is 0 and the missing part comes back as tokens instead.

One access returns one :class:`AccessResult`, while the formula yields an
expectation. Two answers are offered (chosen per backend, see
:class:`~cosim.adapters.memory.backend.MemoryHierarchyBackend`):

- ``expected`` (default): ``duration_ns`` is the formula's expected time and
  ``recompute_tokens`` the expected tokens to recompute (miss probability x
  tokens, rounded to nearest); ``level`` and ``hit`` name the single most
  likely outcome (ties go to the nearer level). Same numbers as MIST.
- ``sampled``: the serving level is drawn from the hit rates with a uniform
  number hashed from ``(seed, key, id)``, so each access gets one real
  outcome and the mean over many accesses is the formula. Deterministic.

Main names: :func:`serve_probabilities`, :func:`expected_ns`,
:func:`predict_lookup`, :func:`predict_store`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from cosim.v1 import memory_service_pb2 as mem_pb

EXPECTED = "expected"
SAMPLED = "sampled"
SAMPLINGS = (EXPECTED, SAMPLED)

# Float slack when turning fractional nanoseconds into integers, so that
# 1e7 + 1e-9 (float noise) stays 1e7 instead of rounding up to 1e7 + 1.
NS_SLACK = 1e-6


def to_ns(time_ns: float) -> int:
    """Integer nanoseconds of a fractional time; fractions round up."""
    return max(0, math.ceil(time_ns - NS_SLACK))


def level_time_ns(level: mem_pb.MemoryLevel, size_bytes: int) -> float:
    """Unshared time to move ``size_bytes`` from ``level``: T_n + Size / BW_n.

    GB/s are decimal, so bytes / GB/s is nanoseconds.
    """
    return level.latency_ns + size_bytes / level.bandwidth_gbps


def tokens_for(size_bytes: int, kv_bytes_per_token: int) -> int:
    """Tokens whose KV takes ``size_bytes``, rounded up; 0 when the size per token is unknown."""
    return -(-size_bytes // kv_bytes_per_token) if kv_bytes_per_token else 0


def serve_probabilities(levels: Sequence[mem_pb.MemoryLevel], size_bytes: int) -> list[float]:
    """Probability that each level serves a lookup, then the probability of missing all.

    A level smaller than the KV cannot hold it, so its hit rate counts as 0.

    Returns:
        ``len(levels) + 1`` probabilities summing to 1; the last is the miss.
    """
    probs, reach = [], 1.0
    for level in levels:
        hit_rate = level.hit_rate if size_bytes <= level.capacity_bytes else 0.0
        probs.append(reach * hit_rate)
        reach *= 1.0 - hit_rate
    probs.append(reach)
    return probs


def expected_ns(levels: Sequence[mem_pb.MemoryLevel], size_bytes: int) -> float:
    """MIST's f(KV, C_1) with f past the last level = 0, in fractional ns."""
    probs = serve_probabilities(levels, size_bytes)
    return sum(p * level_time_ns(level, size_bytes) for p, level in zip(probs, levels))


def unit_draw(seed: int, key: str, access_id: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, key, id), stable across processes."""
    digest = hashlib.blake2b(f"{seed}\0{key}\0{access_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def predict_lookup(levels: Sequence[mem_pb.MemoryLevel], access: mem_pb.MemoryAccess, *,
                   kv_bytes_per_token: int, sampling: str = EXPECTED, seed: int = 0) -> mem_pb.AccessResult:
    """Answers one LOOKUP in predict mode (see the module docstring)."""
    size = access.size_bytes
    probs = serve_probabilities(levels, size)
    tokens = tokens_for(size, kv_bytes_per_token)
    if sampling == SAMPLED:
        level = _draw_level(probs, unit_draw(seed, access.key, access.id))
        if level < 0:  # misses cost nothing here, as in the formula; the prefill pays
            return mem_pb.AccessResult(id=access.id, duration_ns=0, level=-1, hit=False, recompute_tokens=tokens)
        return mem_pb.AccessResult(id=access.id, duration_ns=to_ns(level_time_ns(levels[level], size)),
                                   level=level, hit=True)
    # max() keeps the first maximum, so ties go to the nearer level; the miss is index -1.
    likeliest = max(range(len(probs)), key=lambda i: probs[i])
    level = -1 if likeliest == len(levels) else likeliest
    return mem_pb.AccessResult(id=access.id, duration_ns=to_ns(expected_ns(levels, size)), level=level,
                               hit=level >= 0, recompute_tokens=math.floor(probs[-1] * tokens + 0.5))


def predict_store(levels: Sequence[mem_pb.MemoryLevel], access: mem_pb.MemoryAccess) -> mem_pb.AccessResult:
    """Answers one STORE in predict mode: a write to the nearest level that can hold it."""
    for index, level in enumerate(levels):
        if access.size_bytes <= level.capacity_bytes:
            return mem_pb.AccessResult(id=access.id, duration_ns=to_ns(level_time_ns(level, access.size_bytes)),
                                       level=index)
    return mem_pb.AccessResult(id=access.id, duration_ns=0, level=-1)  # fits nowhere: dropped


def _draw_level(probs: Sequence[float], u: float) -> int:
    """The level whose cumulative probability first exceeds ``u``; -1 for the miss."""
    total = 0.0
    for index, p in enumerate(probs[:-1]):
        total += p
        if u < total:
            return index
    return -1
