"""Least-squares fit of the kernel model (:mod:`..kernels`) to measured kernels.

The residual of a row is ``log(predicted / measured)``: a relative error
that weighs a 3 µs norm like a 30 ms GEMM. Rows are weighted so that every
(dataset, device, operator class) group counts as much as any other,
whatever its row count, and groups are thinned to :data:`MAX_GROUP_ROWS`
evenly spaced rows (deterministic). Bounds keep every parameter physical
(efficiencies in (0, 1], times >= 0).

Main names: :func:`fit_kernels`, :func:`errors_pct`, :data:`BOUNDS`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict

import numpy as np
from scipy.optimize import least_squares

from ..kernels import KERNEL_KEYS, KernelParams
from .rows import Rows, predict_ns

log = logging.getLogger(__name__)

MAX_GROUP_ROWS = 2500
# (lower, upper) of every kernel parameter, in KERNEL_KEYS order.
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_eff": (0.05, 1.0), "gemm_m_half": (0.0, 4096.0), "gemm_mem_eff": (0.05, 1.0), "gemm_floor_us": (0.0, 50.0),
    "elem_mem_eff": (0.05, 1.0), "elem_floor_us": (0.0, 50.0), "attn_eff": (0.05, 1.0), "attn_mem_eff": (0.05, 1.0),
    "attn_floor_us": (0.0, 100.0), "attn_tile_us": (0.0, 2.0), "attn_varlen_share": (0.05, 1.0),
    "attn_span_ns": (0.0, 200.0), "sampler_us": (0.0, 500.0)}
# Parameters only calls with a prefill chunk and cached KV identify (Row.mixed).
MIXED_KEYS = ("attn_varlen_share", "attn_span_ns")


def thin(rows: Rows) -> Rows:
    """At most MAX_GROUP_ROWS evenly spaced rows per (dataset, device, class) group."""
    groups: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for i, key in enumerate(zip(rows.dataset, rows.device, rows.kind)):
        groups[key].append(i)
    keep = []
    for idx in groups.values():
        step = max(1, -(-len(idx) // MAX_GROUP_ROWS))
        keep += idx[::step]
    return rows.where(np.array(sorted(keep), dtype=np.int64))


def group_weights(rows: Rows) -> np.ndarray:
    """Weights that give every (dataset, device, class) group the same total."""
    keys = list(zip(rows.dataset, rows.device, rows.kind))
    counts: dict[tuple[str, str, int], int] = defaultdict(int)
    for key in keys:
        counts[key] += 1
    return np.array([1.0 / counts[key] for key in keys]) * len(keys) / max(len(counts), 1)


def _params(x: np.ndarray, fixed: dict[str, float]) -> KernelParams:
    free = [k for k in KERNEL_KEYS if k not in fixed]
    return KernelParams(**dict(zip(free, (float(v) for v in x))), **fixed)


def fit_kernels(rows: Rows, *, start: KernelParams | None = None) -> KernelParams:
    """Fits every kernel parameter the rows can identify.

    A parameter no row identifies (the sampler on a device measured only
    through GEMM tables) keeps ``start``'s value: a family passes the
    generic fit's. The varlen attention terms (:data:`MIXED_KEYS`) are the
    exception: without a measured call that mixes a prefill chunk with cached
    KV they stay neutral (no slower than a decode-only call), since the
    penalty was measured only on FlashAttention-2 GPUs, and Hopper's
    FlashAttention-3 splits the KV of varlen calls as it does for decodes.
    """
    start = start or KernelParams()
    rows = thin(rows)
    kinds = set(int(k) for k in rows.kind)
    prefixes = {0: "gemm_", 1: "elem_", 2: "attn_", 3: "sampler"}
    fixed = {k: getattr(start, k) for k in KERNEL_KEYS
             if not any(k.startswith(prefixes[kind]) for kind in kinds) or k in MIXED_KEYS}
    if rows.mixed.any():
        for key in MIXED_KEYS:
            del fixed[key]
    free = [k for k in KERNEL_KEYS if k not in fixed]
    weights = np.sqrt(group_weights(rows))
    log_measured = np.log(rows.measured_ns)

    def residuals(x: np.ndarray) -> np.ndarray:
        return weights * (np.log(predict_ns(rows, _params(x, fixed))) - log_measured)

    lower = np.array([BOUNDS[k][0] for k in free])
    upper = np.array([BOUNDS[k][1] for k in free])
    x0 = np.clip(np.array([getattr(start, k) for k in free]), lower + 1e-9, upper - 1e-9)
    result = least_squares(residuals, x0, bounds=(lower, upper), x_scale=np.maximum(np.abs(x0), 1e-3),
                           loss="soft_l1", f_scale=0.1, max_nfev=400)
    params = _params(result.x, fixed)
    if not rows.mixed.any():
        params = dataclasses.replace(params, attn_varlen_share=1.0, attn_span_ns=0.0)
    log.info("kernel fit on %d rows: cost %.4g, %s", len(rows), result.cost, params)
    return params


def errors_pct(rows: Rows, k: KernelParams) -> np.ndarray:
    """Signed percentage error of every row under ``k``."""
    return (predict_ns(rows, k) / rows.measured_ns - 1.0) * 100.0


def replace(k: KernelParams, **changes: float) -> KernelParams:
    return dataclasses.replace(k, **changes)
