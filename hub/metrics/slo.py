"""Service-level objectives: validation, per-request attainment, observed values.

An SLO maps a metric to thresholds per statistic, as in the scenario's
``slo:`` key (:mod:`cosim.hub.config.slo`: its bounds checked). Two readings,
both reported:

- per request (:func:`meets_slo`): a completed request meets the SLO when
  each of its own metric values is <= every threshold given for that metric
  (the statistic names only say which aggregate the user cares about; for a
  single request they all equal its value). A metric a request does not have
  (TPOT of a one-token answer) constrains nothing. Goodput and attainment
  count these requests (DistServe, MIST §V-A).
- aggregate (:func:`slo_report`): each configured statistic computed over the
  completed requests and compared with its threshold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config.slo import SLO_METRICS, SLO_STATISTICS, Slo, slo_problems, validate_slo
from .stats import RequestMetrics, statistic

__all__ = ["SLO_METRICS", "SLO_STATISTICS", "Slo", "meets_slo", "slo_problems", "slo_report", "validate_slo"]


def meets_slo(metrics: RequestMetrics, slo: Slo) -> np.ndarray:
    """Boolean mask of the requests that completed and meet every constraint."""
    ok = metrics.finished.copy()
    for metric, limits in slo.items():
        if not limits:
            continue
        values = metrics.column(metric)
        bound = min(float(v) for v in limits.values())
        # NaN (metric absent for this request) passes: `~(NaN > bound)` is True.
        ok &= ~(values > bound)
    return ok


def slo_report(metrics: RequestMetrics, slo: Slo) -> dict[str, dict[str, dict[str, Any]]]:
    """Each configured constraint with its observed value over completed
    requests and whether it is met (False when nothing was observed)."""
    report: dict[str, dict[str, dict[str, Any]]] = {}
    for metric, limits in sorted(slo.items()):
        values = metrics.column(metric)[metrics.finished]
        entry: dict[str, dict[str, Any]] = {}
        for stat, threshold in sorted(limits.items()):
            observed = statistic(values, stat)
            entry[stat] = {"target": float(threshold), "observed": observed,
                           "met": observed is not None and observed <= float(threshold)}
        report[metric] = entry
    return report
