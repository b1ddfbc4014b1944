"""Draws of token lengths and arrival times from the synthetic distributions.

Each function takes its own ``numpy.random.Generator`` so the stream of one
quantity does not shift when another part of the workload changes. Trace
based lengths and arrivals are read in :mod:`cosim.hub.sim.workload.generator`.
"""

from __future__ import annotations

import math
from typing import TypeAlias

import numpy as np

from cosim.hub.config.bounds import MAX_TIME_S, MAX_TOKENS
from cosim.hub.config.workload import (
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
from cosim.hub.errors import ScenarioError

SyntheticLength: TypeAlias = FixedLength | UniformLength | NormalLength | LognormalLength
SyntheticArrival: TypeAlias = PoissonArrival | GammaArrival | UniformArrival | ConstantArrival


def sample_lengths(dist: SyntheticLength, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token lengths, unclipped and not yet rounded for normal and lognormal draws (see
    :func:`clip_lengths`)."""
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.low, dist.high, size=n, endpoint=True, dtype=np.int64)
    if isinstance(dist, NormalLength):
        return rng.normal(dist.mean, dist.std, size=n)
    # mean of a lognormal is exp(mu + sigma^2/2); solve for mu.
    mu = math.log(dist.mean) - dist.sigma**2 / 2
    return rng.lognormal(mu, dist.sigma, size=n)


def clip_lengths(values: np.ndarray, low: int, high: int | None, *, where: str = "workload") -> np.ndarray:
    """Lengths rounded to integers and clipped to ``low..high``.

    Without ``high``, a length beyond :data:`~cosim.hub.config.bounds.MAX_TOKENS` is an error rather than
    clipped to whatever int64 makes of it (a lognormal's tail, a huge mean).

    Args:
        values: sampled or read lengths (float or int).
        low, high: the distribution's ``min`` and ``max`` (None: no upper bound).
        where: the config path of the distribution, for errors.

    Raises:
        ScenarioError: at ``where``, a sample that is not finite, or beyond MAX_TOKENS without ``high``.
    """
    if values.dtype.kind == "f":
        if not np.isfinite(values).all():
            raise ScenarioError(where, "samples overflow (not finite); lower the mean or spread, or set max")
        values = np.rint(values)
    largest = values.max(initial=0)
    if high is None and largest > MAX_TOKENS:
        raise ScenarioError(where, f"a length of {float(largest):.4g} tokens was drawn, more than the "
                                   f"{MAX_TOKENS:.0e} cosim allows; set max to clip lengths, or lower the mean "
                                   "or spread")
    # Clipped before the cast: int64 cannot hold every float sample.
    clipped: np.ndarray = np.clip(values, low, high if high is not None else MAX_TOKENS).astype(np.int64)
    return clipped


def sample_arrivals_ns(process: SyntheticArrival, n: int, rng: np.random.Generator, *,
                       where: str = "workload.arrival") -> np.ndarray:
    """``n`` non-decreasing arrival times in integer nanoseconds.

    Raises:
        ScenarioError: at ``where.rate_per_s``, arrivals beyond :data:`~cosim.hub.config.bounds.MAX_TIME_S`.
    """
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
    last = float(times_s[-1]) if n else 0.0
    if not last <= MAX_TIME_S:  # also NaN
        raise ScenarioError(f"{where}.rate_per_s", f"{process.rate_per_s:g} requests/s puts the last of {n} "
                                                   f"arrivals at {last:.4g} s, past the {MAX_TIME_S:.0e} s "
                                                   "cosim simulates; raise the rate or lower workload.requests")
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
