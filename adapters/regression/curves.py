"""Piecewise-linear tables: the compact, closed-form model behind every operator fit.

A :class:`Table` holds shared knots ``x`` and one column of values per
quantity (e.g. one column per operator). Fitting averages repeated
measurements at a knot and drops knots that linear interpolation between
their neighbours already reproduces within a relative tolerance, which
keeps artifacts small without moving any kept point. Evaluation is one
``bisect`` and one blend, far cheaper than an sklearn ``predict``.

GEMM columns can be fitted *tiled*: cuBLAS kernels cover the token
dimension in 128-row tiles and often switch kernel when one more tile is
needed, so their time jumps right after multiples of 128 tokens and
interpolating across such a boundary predicts neither side. A tiled column
is interpolated only within ``(k·tile, (k+1)·tile]`` and held flat to the
segment's edges; the jump sits between knots at ``k·tile`` and
``k·tile + 1`` (tokens are integers, so nothing is ever looked up between).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Table:
    """Piecewise-linear functions of one variable sharing their knots.

    Attributes:
        x: increasing knot positions.
        y: values, shape ``(len(x), num_columns)``.
        columns: column names.
    """

    x: np.ndarray
    y: np.ndarray
    columns: tuple[str, ...]

    def __post_init__(self) -> None:
        self._xs = [float(v) for v in self.x]
        self._rows = [np.asarray(row, dtype=float) for row in self.y]
        # Slopes per segment, so evaluation is y0 + slope * dx.
        self._slopes = [(self._rows[i + 1] - self._rows[i]) / (self._xs[i + 1] - self._xs[i])
                        for i in range(len(self._xs) - 1)] or [np.zeros(self.y.shape[1])]

    @property
    def x_min(self) -> float:
        return self._xs[0]

    @property
    def x_max(self) -> float:
        return self._xs[-1]

    def __call__(self, x: float) -> np.ndarray:
        """Values of every column at ``x``.

        Beyond the last knot values grow in proportion to ``x`` (GEMMs and
        transfers past their knee scale linearly with size; a noisy last
        segment could otherwise extrapolate to negative times); below the
        first knot they are held constant.
        """
        xs = self._xs
        if x >= xs[-1]:
            return self._rows[-1] * (x / xs[-1]) if xs[-1] > 0 else self._rows[-1]
        if x <= xs[0] or len(xs) == 1:
            return self._rows[0]
        i = bisect.bisect_right(xs, x) - 1
        return self._rows[i] + self._slopes[i] * (x - xs[i])

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        """Vectorized :meth:`__call__` at many points, shape ``(len(x), num_columns)``."""
        x = np.asarray(x, dtype=float)
        if len(self.x) > 1 and (x > self.x[-1]).any():
            return np.vstack([self(v) for v in x])
        x = np.maximum(x, self.x[0])
        idx = np.clip(np.searchsorted(self.x, x, side="right") - 1, 0, max(len(self.x) - 2, 0))
        if len(self.x) == 1:
            return np.repeat(self.y[:1], len(x), axis=0)
        x0, x1 = self.x[idx], self.x[idx + 1]
        w = ((x - x0) / (x1 - x0))[:, None]
        return self.y[idx] * (1 - w) + self.y[idx + 1] * w

    def to_json(self, digits: int = 5) -> dict[str, Any]:
        """JSON-ready dict; values rounded to ``digits`` significant digits."""
        def sig(v: float) -> float:
            return float(f"{v:.{digits}g}")
        return {"columns": list(self.columns), "x": [sig(v) for v in self.x],
                "y": [[sig(v) for v in row] for row in self.y]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Table:
        return cls(x=np.asarray(data["x"], dtype=float), y=np.asarray(data["y"], dtype=float),
                   columns=tuple(data["columns"]))


def average_duplicates(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorts by ``x`` and averages rows of ``y`` that share an ``x`` (NaN-aware)."""
    keys, inverse = np.unique(x, return_inverse=True)
    y2 = np.atleast_2d(y.T).T
    out = np.zeros((len(keys), y2.shape[1]))
    for j in range(y2.shape[1]):
        col = y2[:, j]
        ok = ~np.isnan(col)
        sums = np.bincount(inverse[ok], weights=col[ok], minlength=len(keys))
        counts = np.bincount(inverse[ok], minlength=len(keys))
        out[:, j] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return keys.astype(float), out


def simplify(x: np.ndarray, y: np.ndarray, rel_tol: float) -> np.ndarray:
    """Indices of knots to keep so interpolation stays within ``rel_tol`` of every dropped knot.

    Greedy left-to-right: extend the current segment while every skipped
    point is reproduced within tolerance in every column.
    """
    n = len(x)
    if n <= 2:
        return np.arange(n)
    keep, start = [0], 0
    end = start + 2
    while end < n:
        xs, ys = x[start], y[start]
        slope = (y[end] - ys) / (x[end] - xs)
        mid = slice(start + 1, end)
        pred = ys + slope * (x[mid, None] - xs)
        err = np.abs(pred - y[mid]) / np.maximum(np.abs(y[mid]), 1e-12)
        if np.all(err <= rel_tol):
            end += 1
        else:
            start = end - 1
            keep.append(start)
            end = start + 2
    keep.append(n - 1)
    return np.asarray(keep)


def _fill_missing(x: np.ndarray, col: np.ndarray) -> np.ndarray:
    """``col`` with NaN knots interpolated from the measured ones (all NaN: zeros)."""
    ok = ~np.isnan(col)
    if not ok.any():
        return np.zeros_like(col)
    return np.interp(x, x[ok], col[ok])


def _tiled(q: np.ndarray, x: np.ndarray, col: np.ndarray, tile: float) -> np.ndarray:
    """Values of ``col`` at ``q`` interpolating only within each ``(k·tile, (k+1)·tile]``.

    A segment holding no knot (the grid is coarser than the tile there) is
    interpolated across, as an untiled column.
    """
    ok = ~np.isnan(col)
    x, col = x[ok], col[ok]
    seg, qseg = np.ceil(x / tile), np.ceil(q / tile)
    out = np.interp(q, x, col)
    for s in np.unique(qseg):
        inside = seg == s
        if inside.any():
            at = qseg == s
            out[at] = np.interp(q[at], x[inside], col[inside])  # flat beyond the segment's own knots
    return out


def fit_table(x: np.ndarray, y: np.ndarray, columns: tuple[str, ...], *, rel_tol: float = 0.005,
              tile: int = 0, tiled: tuple[str, ...] = ()) -> Table:
    """Fits a :class:`Table` to measurements (averaged, then simplified).

    Args:
        x: positions of the measurements (repeats allowed).
        y: values, shape ``(len(x), len(columns))``; NaN marks a value left
            out of the fit (filled from the column's other knots; an all-NaN
            column becomes 0).
        columns: column names.
        rel_tol: largest relative error a dropped knot may get.
        tile: tile size for the ``tiled`` columns (0: none tiled).
        tiled: columns interpolated only within tiles (module docstring).
    """
    kx, ky = average_duplicates(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    is_tiled = [tile > 0 and c in tiled for c in columns]
    if any(is_tiled):
        # Knots either side of every tile boundary with measurements on both sides.
        seg = np.ceil(kx / tile)
        bounds = [b for b in np.arange(tile, kx[-1], tile) if (seg == b / tile).any() and (seg == b / tile + 1).any()]
        kx_all = np.union1d(kx, np.concatenate([bounds, np.add(bounds, 1.0)]))
    else:
        kx_all = kx
    out = np.zeros((len(kx_all), len(columns)))
    for j, col in enumerate(ky.T):
        if is_tiled[j] and (~np.isnan(col)).any():
            out[:, j] = _tiled(kx_all, kx, col, float(tile))
        else:
            out[:, j] = np.interp(kx_all, kx, _fill_missing(kx, col))
    keep = simplify(kx_all, out, rel_tol)
    return Table(x=kx_all[keep], y=out[keep], columns=columns)


@dataclass
class Grid:
    """Bilinear interpolation on a rectangular grid, with a measured domain.

    Cells the measurements did not cover are filled at fit time by linear
    interpolation (or extrapolation) along the second axis, so evaluation is
    plain bilinear; ``limit`` records, per first-axis knot, the largest
    second-axis value actually measured, for out-of-range checks.

    Attributes:
        x: first-axis knots (e.g. batch size or chunk size).
        z: second-axis knots (e.g. KV-cache tokens).
        v: values, shape ``(len(x), len(z))``.
        limit: largest measured ``z`` per ``x`` knot.
    """

    x: np.ndarray
    z: np.ndarray
    v: np.ndarray
    limit: np.ndarray

    def __call__(self, x: float, z: float) -> float:
        xs, zs, v = self.x, self.z, self.v
        i = min(max(int(np.searchsorted(xs, x, side="right")) - 1, 0), len(xs) - 2)
        j = min(max(int(np.searchsorted(zs, z, side="right")) - 1, 0), len(zs) - 2)
        wx = (x - xs[i]) / (xs[i + 1] - xs[i])
        wz = (z - zs[j]) / (zs[j + 1] - zs[j])
        top = v[i, j] + (v[i, j + 1] - v[i, j]) * wz
        bottom = v[i + 1, j] + (v[i + 1, j + 1] - v[i + 1, j]) * wz
        return float(top + (bottom - top) * wx)

    def covers(self, x: float, z: float) -> bool:
        """True when (x, z) lies inside the measured domain."""
        if not self.x[0] <= x <= self.x[-1] or z > self.z[-1]:
            return False
        i = int(np.searchsorted(self.x, x, side="left"))
        return z <= float(self.limit[min(i, len(self.limit) - 1)])

    def to_json(self, digits: int = 5) -> dict[str, Any]:
        def sig(a: np.ndarray) -> list[Any]:
            return [float(f"{v:.{digits}g}") for v in a]
        return {"x": sig(self.x), "z": sig(self.z), "v": [sig(row) for row in self.v], "limit": sig(self.limit)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Grid:
        return cls(x=np.asarray(data["x"], float), z=np.asarray(data["z"], float),
                   v=np.asarray(data["v"], float), limit=np.asarray(data["limit"], float))


def fit_grid(x: np.ndarray, z: np.ndarray, y: np.ndarray) -> Grid:
    """Fits a :class:`Grid` to scattered measurements on a (possibly ragged) lattice.

    Repeats at one (x, z) are averaged; missing cells in a row are filled by
    linear interpolation along ``z`` (extrapolating from the row's last two
    points); rows with fewer than two points are dropped.
    """
    xs, zs = np.unique(x), np.unique(z)
    sums = np.zeros((len(xs), len(zs)))
    counts = np.zeros_like(sums)
    np.add.at(sums, (np.searchsorted(xs, x), np.searchsorted(zs, z)), y)
    np.add.at(counts, (np.searchsorted(xs, x), np.searchsorted(zs, z)), 1)
    rows, keep, limit = [], [], []
    for i in range(len(xs)):
        ok = counts[i] > 0
        if ok.sum() < 2:
            continue
        zk, yk = zs[ok], sums[i, ok] / counts[i, ok]
        row = np.interp(zs, zk, yk)
        slope = (yk[-1] - yk[-2]) / (zk[-1] - zk[-2])
        beyond = zs > zk[-1]
        row[beyond] = yk[-1] + slope * (zs[beyond] - zk[-1])
        rows.append(np.maximum(row, 0.0))
        keep.append(xs[i])
        limit.append(zk[-1])
    return Grid(x=np.asarray(keep, float), z=zs.astype(float), v=np.vstack(rows), limit=np.asarray(limit, float))
