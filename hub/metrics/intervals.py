"""Prediction intervals of a run's headline metrics: summary.json's ``intervals`` block.

A run with ``output.intervals`` is run three times (:mod:`cosim.hub.studies.intervals`): as
configured, and with every step of each runtime session scaled to the low and to the high edge of
the step error its backend declares. Each headline metric's interval is ``[min, max]`` of its three
values: the low edge gives the lower latencies but the higher throughput, and a queue or a batch
can tip either way, so the nominal value is always inside. Main names: :func:`intervals_block`,
:func:`interval_of`, :func:`value_at`, :data:`HEADLINE`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# The headline metrics, as paths into summary.json.
LATENCY_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
LATENCY_STATS = ("mean", "p90", "p99")
HEADLINE: tuple[tuple[str, ...], ...] = (
    *(("latency", metric, stat) for metric in LATENCY_METRICS for stat in LATENCY_STATS),
    ("throughput", "requests_per_s"), ("throughput", "output_tokens_per_s"), ("goodput_requests_per_s",),
)
WHAT = ("step-model error only: [min, max] of the run and two reruns with every step scaled by 1 + low and "
        "1 + high of the step error its backend declares; not workload randomness (docs/intervals.md)")
NONE_DECLARED = "no backend declares a step error: no interval, and no rerun"


def value_at(summary: Mapping[str, Any], path: Sequence[str]) -> Any:
    """The value at ``path`` in ``summary``, or None."""
    value: Any = summary
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def intervals_block(nominal: Mapping[str, Any], edges: Sequence[Mapping[str, Any]],
                    bands: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """summary.json's ``intervals``: each headline metric's ``[min, max]`` over the nominal summary
    and the edge runs' (a metric missing from any is left out), and each client's declared band.

    Args:
        nominal: the run's summary.
        edges: the summaries of the reruns at the low and the high edge (none when no backend
            declared a step error).
        bands: per client, ``{low, high, basis}`` as its backend declared it, or None.
    """
    block: dict[str, Any] = {"what": WHAT if edges else NONE_DECLARED, "clients": dict(bands)}
    if not edges:
        return block
    for path in HEADLINE:
        values = [value_at(summary, path) for summary in (nominal, *edges)]
        if any(value is None for value in values):
            continue
        parent = block
        for key in path[:-1]:
            parent = parent.setdefault(key, {})
        parent[path[-1]] = [min(values), max(values)]
    return block


def interval_of(summary: Mapping[str, Any], path: Sequence[str]) -> tuple[float, float] | None:
    """The ``[low, high]`` of the metric at ``path`` in the summary's ``intervals``, if it has one."""
    found = value_at(summary.get("intervals") or {}, path)
    return (found[0], found[1]) if isinstance(found, list) and len(found) == 2 else None


def band_text(band: Mapping[str, Any] | None) -> str:
    """A client's declared band in words: ``-11.6%/+11.6% (basis)``, or that it has none."""
    if band is None:
        return "none declared (steps not scaled)"
    return f"{100 * band['low']:+.1f}%/{100 * band['high']:+.1f}% ({band['basis']})"
