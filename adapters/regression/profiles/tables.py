"""Interpolated lookups over LLMServingSim v2 profile tables.

Every axis is interpolated linearly between the two bracketing grid points,
clamped below the grid and extrapolated linearly from the top two points
above it, as LLMServingSim's ``trace_generator`` does. Main names:
:class:`Curve` (1D), :class:`AttentionTable` (4D: prefill chunk, prefill
history, decodes, decode KV), :class:`MoETable` (2D: tokens, experts) and
:class:`SkewFit` (alpha buckets for non-uniform decode KV lengths).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


class Curve:
    """A 1D piecewise-linear curve with clamping below and extrapolation above."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        order = np.argsort(np.asarray(xs, dtype=float))
        self.xs = np.asarray(xs, dtype=float)[order]
        self.ys = np.asarray(ys, dtype=float)[order]

    @property
    def top(self) -> float:
        return float(self.xs[-1])

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if len(xs) == 1 or x <= xs[0]:
            return float(ys[0])
        if x >= xs[-1]:
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return float(ys[-1] + slope * (x - xs[-1]))
        return float(np.interp(x, xs, ys))


def _bracket(grid: Sequence[int], x: float) -> list[tuple[int, float]]:
    """(grid value, weight) pairs interpolating ``x`` on a sorted grid (weights may be
    negative above the grid: linear extrapolation from the top two points)."""
    if len(grid) == 1 or x <= grid[0]:
        return [(grid[0], 1.0)]
    i = bisect.bisect_left(grid, x)
    if i < len(grid) and grid[i] == x:
        return [(grid[i], 1.0)]
    lo, hi = (grid[-2], grid[-1]) if i >= len(grid) else (grid[i - 1], grid[i])
    w = (x - lo) / (hi - lo)
    return [(lo, 1.0 - w), (hi, w)]


class _Slice:
    """Times of one (prefill_chunk, n_decode) pair over (kv_prefill, kv_decode).

    Rows are kv_prefill values, each a curve over kv_decode; the grid need not
    be rectangular (each row keeps the kv_decode points it was profiled at).
    """

    def __init__(self, points: Iterable[tuple[int, int, float]]) -> None:
        rows: dict[int, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
        for kvp, kvd, t in points:
            rows[kvp][0].append(kvd)
            rows[kvp][1].append(t)
        self.kvps = sorted(rows)
        self.rows = {kvp: Curve(*rows[kvp]) for kvp in self.kvps}

    def __call__(self, kv_prefill: float, kv_decode: float) -> float:
        return sum(w * self.rows[kvp](kv_decode) for kvp, w in _bracket(self.kvps, kv_prefill))


class AttentionTable:
    """One attention-layer call on a (merged) mixed batch, from ``attention.csv``.

    Multilinear over the (prefill_chunk, n_decode) corners, each corner a
    bilinear (kv_prefill, kv_decode) slice; a corner that was not profiled
    takes the nearest profiled pair (nearest in log space).
    """

    def __init__(self, rows: Iterable[tuple[int, int, int, int, float]]) -> None:
        grouped: dict[tuple[int, int], list[tuple[int, int, float]]] = defaultdict(list)
        for pc, kvp, nd, kvd, t in rows:
            grouped[(pc, nd)].append((kvp, kvd, t))
        self.slices = {key: _Slice(points) for key, points in grouped.items()}
        self.pcs = sorted({pc for pc, _ in self.slices})
        self.nds = sorted({nd for _, nd in self.slices})

    def _corner(self, pc: int, nd: int) -> _Slice:
        found = self.slices.get((pc, nd))
        if found is not None:
            return found
        key = min(self.slices, key=lambda k: (abs(np.log1p(k[0]) - np.log1p(pc)) +
                                              abs(np.log1p(k[1]) - np.log1p(nd))))
        self.slices[(pc, nd)] = self.slices[key]  # memoized: the grid is fixed
        return self.slices[key]

    def __call__(self, prefill_chunk: float, kv_prefill: float, n_decode: float, kv_decode: float) -> float:
        total = 0.0
        for pc, wp in _bracket(self.pcs, prefill_chunk):
            for nd, wn in _bracket(self.nds, n_decode):
                total += wp * wn * self._corner(pc, nd)(kv_prefill, kv_decode)
        return total


class MoETable:
    """The whole sparse MoE block on one rank, from ``moe.csv``: (tokens, activated experts)."""

    def __init__(self, rows: Iterable[tuple[int, int, float]]) -> None:
        by_experts: dict[int, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
        for tokens, experts, t in rows:
            by_experts[experts][0].append(tokens)
            by_experts[experts][1].append(t)
        self.experts = sorted(by_experts)
        self.curves = {e: Curve(*by_experts[e]) for e in self.experts}

    def __call__(self, tokens: float, experts: float) -> float:
        # Few-token rows lack the many-expert columns; a curve extrapolates from its own points.
        return sum(w * self.curves[e](tokens) for e, w in _bracket(self.experts, experts))


class SkewFit:
    """Alpha of the skew correction ``t_mean + alpha (t_max - t_mean)`` per bucket.

    Args:
        axes: ``meta.yaml::skew_fit.bucket_axes`` (bins and labels).
        table: bucket key -> alpha (``skew_fit.csv``).
        alpha_default: used when the bucket has no entry.
    """

    def __init__(self, axes: Mapping[str, list], table: Mapping[str, float], alpha_default: float) -> None:
        self.axes, self.table, self.alpha_default = axes, dict(table), alpha_default

    def _label(self, axis: str, value: float) -> str:
        bins, labels = self.axes[f"{axis}_bins"], self.axes[f"{axis}_labels"]
        for upper, label in zip(bins[1:], labels):
            if value <= upper:
                return str(label)
        return str(labels[-1])

    def alpha(self, pc: int, n: int, kv_min: float, kv_mean: float, kv_max: float, kp: float) -> float:
        """Alpha for a batch (keyed by the raw prefill chunk, as upstream does)."""
        spread = kv_max - kv_min
        rate = (kv_mean - kv_min) / spread if spread > 0 else 0.0
        key = "|".join((f"pc={pc}", self._label("n", n), self._label("skew_rate", rate),
                        self._label("kv_big", kv_max), self._label("kp", kp)))
        return self.table.get(key, self.alpha_default)
