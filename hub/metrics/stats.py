"""Per-request latency arrays, statistic blocks and JSON-safe rounding.

Main names: :class:`RequestMetrics` (one numpy column per metric, NaN where a
value does not exist), :func:`request_metrics`, :func:`latency_columns`, :func:`stat_block`,
:func:`clean`. (The CSV text of times and floats is the core's: core/src/text.rs.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config.slo import STATISTICS
from ..sim.records import RequestRecord

NS_PER_S = 1_000_000_000
SIGNIFICANT_DIGITS = 9
# Statistics a latency block reports (and an SLO may constrain).
LATENCY_METRICS = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "tbt_max_s")


@dataclass(frozen=True)
class RequestMetrics:
    """Latency columns of a list of requests, aligned with that list.

    A value is NaN where it does not exist: TTFT before the first token,
    E2E before the finish, TPOT and TBT max for requests that asked for a
    single output token per path (no gap between tokens to measure).
    """

    finished: np.ndarray  # bool
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    queue_s: np.ndarray
    tbt_max_s: np.ndarray

    def column(self, name: str) -> np.ndarray:
        """The column called ``name`` (one of :data:`LATENCY_METRICS`)."""
        column: np.ndarray = getattr(self, name)
        return column


def queue_ns(record: RequestRecord) -> int:
    """Total queueing delay of a request: the sum over its started stages of
    ``start_ns - enqueue_ns`` (transfers are not queueing; they are excluded)."""
    return sum(s.start_ns - s.enqueue_ns for s in record.stages if s.start_ns >= 0)


def request_metrics(requests: Sequence[RequestRecord]) -> RequestMetrics:
    """Computes TTFT, TPOT, E2E, queue and TBT max (seconds) per request.

    TTFT = first_token - arrival; TPOT = (finish - first_token) /
    (tokens per path - 1); E2E = finish - arrival; queue = :func:`queue_ns`.
    A multi-path request's ``branches`` paths decode side by side, each
    ``output_tokens / branches`` tokens long, so its TPOT is one path's time
    per token, as for a single-path request (not the time per token of all paths).
    """
    n = len(requests)
    return latency_columns(
        arrival=np.fromiter((r.arrival_ns for r in requests), np.int64, n),
        first=np.fromiter((r.first_token_ns for r in requests), np.int64, n),
        finish=np.fromiter((r.finish_ns for r in requests), np.int64, n),
        path_tokens=np.fromiter((r.output_tokens // r.branches for r in requests), np.int64, n),
        max_tbt=np.fromiter((r.max_tbt_ns for r in requests), np.int64, n),
        queue=np.fromiter((queue_ns(r) for r in requests), np.int64, n),
        started=np.fromiter((any(s.start_ns >= 0 for s in r.stages) for r in requests), bool, n))


def latency_columns(*, arrival: np.ndarray, first: np.ndarray, finish: np.ndarray, path_tokens: np.ndarray,
                    max_tbt: np.ndarray, queue: np.ndarray, started: np.ndarray) -> RequestMetrics:
    """:func:`request_metrics` from int64 ns columns (``path_tokens``: output tokens per path; ``started``:
    some stage started)."""
    finished = finish >= 0
    has_first = first >= 0
    multi = finished & has_first & (path_tokens > 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = (finish - first) / np.where(multi, path_tokens - 1, 1)
    return RequestMetrics(
        finished=finished,
        ttft_s=np.where(has_first, (first - arrival) / NS_PER_S, np.nan),
        tpot_s=np.where(multi, tpot / NS_PER_S, np.nan),
        e2e_s=np.where(finished, (finish - arrival) / NS_PER_S, np.nan),
        queue_s=np.where(started, queue / NS_PER_S, np.nan),
        tbt_max_s=np.where(finished & (path_tokens > 1), max_tbt / NS_PER_S, np.nan),
    )


def statistics(values: np.ndarray, names: Sequence[str]) -> dict[str, float | None]:
    """Statistics of the non-NaN ``values`` by name (``mean``, ``max``, ``pXX``); None each when there
    are none.

    Percentiles use numpy's default (linear interpolation), all from one call (one partition)."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return dict.fromkeys(names)
    unknown = [name for name in names if name not in ("mean", "max") and not name.startswith("p")]
    if unknown:
        raise ValueError(f"unknown statistic {unknown[0]!r}")
    ranks = [name for name in names if name.startswith("p")]
    out: dict[str, float | None] = {}
    if ranks:
        out.update(zip(ranks, np.percentile(values, [float(name[1:]) for name in ranks]).tolist()))
    if "mean" in names:
        out["mean"] = float(np.mean(values))
    if "max" in names:
        out["max"] = float(np.max(values))
    return {name: out[name] for name in names}


def statistic(values: np.ndarray, name: str) -> float | None:
    """One statistic of the non-NaN ``values`` (:func:`statistics`); None when there are none."""
    return statistics(values, (name,))[name]


def stat_block(values: np.ndarray) -> dict[str, float | None]:
    """``{mean, p50, p90, p99, max}`` of the non-NaN values."""
    return statistics(values, STATISTICS)


def latency_block(metrics: RequestMetrics, mask: np.ndarray) -> dict[str, dict[str, float | None]]:
    """A stat block per latency metric over the requests selected by ``mask``."""
    return {name: stat_block(metrics.column(name)[mask]) for name in LATENCY_METRICS}


def round_sig(x: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """``x`` rounded to ``digits`` significant digits (stable text in JSON)."""
    return float(f"{x:.{digits}g}")


def clean(value: Any) -> Any:
    """A JSON-ready copy: numpy scalars to Python, floats rounded, NaN/inf to None,
    tuples to lists, mapping keys to str."""
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return [clean(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return round_sig(x) if math.isfinite(x) else None
    return value
