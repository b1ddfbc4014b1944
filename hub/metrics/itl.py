"""Inter-token latency (ITL) per token, and statistics of counted values.

Clients count each token's gap since its request's previous token
(:attr:`cosim.hub.sim.records.ClientTimeline.token_gaps`: gap ns -> tokens), so a
run keeps one entry per distinct gap, not one per token. Statistics of such
counted values equal those of the values repeated by their counts, exactly:
:func:`counted_statistic` gives ``np.percentile(np.repeat(values, counts), q)``
(numpy's default, linear interpolation, as ``vllm bench serve`` uses) without
building the repeated array.

Main names: :func:`merged_gaps`, :func:`counted_statistic`, :func:`itl_block`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from itertools import chain

import numpy as np

from ..config.slo import STATISTICS
from .stats import NS_PER_S


def merged_gaps(gap_counts: Iterable[Mapping[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of several clients as (sorted distinct gaps in ns, tokens with each gap)."""
    counts = list(gap_counts)
    gaps = np.fromiter(chain.from_iterable(counts), np.int64)
    tokens = np.fromiter(chain.from_iterable(c.values() for c in counts), np.int64)
    values, where = np.unique(gaps, return_inverse=True)
    totals = np.zeros(values.size, np.int64)
    np.add.at(totals, where, tokens)
    return values, totals


def _at(values: np.ndarray, cumulative: np.ndarray, rank: int) -> float:
    """The value at 0-based ``rank`` of the repeated (sorted) array."""
    return float(values[int(np.searchsorted(cumulative, rank, side="right"))])


def counted_statistic(values: np.ndarray, counts: np.ndarray, name: str) -> float | None:
    """A statistic of ``values`` (sorted ascending) each taken ``counts`` times; None when empty.

    ``name``: ``mean``, ``std`` (population, as numpy's), ``max``, ``median`` or ``pXX``
    (linear interpolation between closest ranks, as :func:`numpy.percentile`).
    """
    total = int(counts.sum()) if counts.size else 0
    if total == 0:
        return None
    weights = counts.astype(float)
    mean = float(np.dot(values.astype(float), weights) / total)
    if name == "mean":
        return mean
    if name == "std":
        return math.sqrt(float(np.dot((values - mean) ** 2, weights) / total))
    if name == "max":
        return float(values[counts > 0][-1])
    q = 50.0 if name == "median" else float(name[1:]) if name.startswith("p") else math.nan
    if math.isnan(q):
        raise ValueError(f"unknown statistic {name!r}")
    cumulative = np.cumsum(counts)
    position = (total - 1) * q / 100
    low = math.floor(position)
    below = _at(values, cumulative, low)
    above = _at(values, cumulative, min(low + 1, total - 1))
    return below + (above - below) * (position - low)


def itl_block(values_ns: np.ndarray, counts: np.ndarray) -> dict[str, float | None]:
    """``{mean, p50, p90, p99, max}`` of per-token ITL in seconds (None without gaps)."""
    block: dict[str, float | None] = {}
    for name in STATISTICS:
        value = counted_statistic(values_ns, counts, name)
        block[name] = None if value is None else value / NS_PER_S
    return block
