"""Draws of token lengths and arrival times from the synthetic distributions.

Each function takes its own ``numpy.random.Generator`` so the stream of one
quantity does not shift when another part of the workload changes. Trace
based lengths and arrivals are read in :mod:`cosim.hub.workload.generator`.
"""

from __future__ import annotations

import math
from typing import TypeAlias

import numpy as np

from cosim.hub.workload.config import (
    ConstantArrival,
    FixedLength,
    GammaArrival,
    LognormalLength,
    NormalLength,
    PoissonArrival,
    PrefixConfig,
    UniformArrival,
    UniformLength,
)

SyntheticLength: TypeAlias = FixedLength | UniformLength | NormalLength | LognormalLength
SyntheticArrival: TypeAlias = PoissonArrival | GammaArrival | UniformArrival | ConstantArrival


def sample_lengths(dist: SyntheticLength, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token lengths (int64, unclipped; see :func:`clip_lengths`)."""
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.low, dist.high, size=n, endpoint=True, dtype=np.int64)
    if isinstance(dist, NormalLength):
        values = rng.normal(dist.mean, dist.std, size=n)
    else:
        # mean of a lognormal is exp(mu + sigma^2/2); solve for mu.
        mu = math.log(dist.mean) - dist.sigma**2 / 2
        values = rng.lognormal(mu, dist.sigma, size=n)
    return np.rint(values).astype(np.int64)


def clip_lengths(values: np.ndarray, low: int, high: int | None) -> np.ndarray:
    """Clip lengths to ``low..high`` (no upper bound when ``high`` is None)."""
    upper = high if high is not None else np.iinfo(np.int64).max
    clipped: np.ndarray = np.clip(values, low, upper).astype(np.int64)
    return clipped


def sample_arrivals_ns(process: SyntheticArrival, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` non-decreasing arrival times in integer nanoseconds."""
    if isinstance(process, ConstantArrival):
        return np.full(n, _to_ns(process.at_s), dtype=np.int64)
    if isinstance(process, UniformArrival):
        slots = np.arange(n, dtype=np.float64)
        if process.jitter:
            slots += process.jitter * rng.random(n)
        times_s = process.start_s + slots / process.rate_per_s
    else:
        mean_gap = 1.0 / process.rate_per_s
        if isinstance(process, PoissonArrival):
            gaps = rng.exponential(mean_gap, size=n)
        else:
            shape = 1.0 / process.cv**2  # gamma CV is 1/sqrt(shape)
            gaps = rng.gamma(shape, mean_gap / shape, size=n)
        times_s = process.start_s + np.cumsum(gaps)
    # Rounding cannot reorder: times_s is non-decreasing and rint is monotone.
    return np.rint(times_s * 1e9).astype(np.int64)


def sample_prefixes(config: PrefixConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Prefix index per request, -1 for requests without a prefix."""
    has_prefix = rng.random(n) < config.share
    if config.popularity == "zipf":
        weights = 1.0 / np.arange(1, config.num_prefixes + 1) ** config.zipf_s
        choice = rng.choice(config.num_prefixes, size=n, p=weights / weights.sum())
    else:
        choice = rng.integers(0, config.num_prefixes, size=n)
    return np.where(has_prefix, choice, -1).astype(np.int64)


def _to_ns(seconds: float) -> int:
    return round(seconds * 1e9)
