"""Service-level objectives: validation, per-request attainment, observed values.

:func:`slo_problems` is the one check of SLO bounds (config, summary, goodput
and search alike); :func:`validate_slo` raises its first problem.

An SLO maps a metric to thresholds per statistic, as in the scenario's
``slo:`` key: ``{"ttft_s": {"p90": 2.0}, "tpot_s": {"p90": 0.1}}``.

Two readings, both reported:

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

from collections.abc import Mapping
from numbers import Real
from typing import Any

import numpy as np

from ..errors import ScenarioError
from .stats import STATISTICS, RequestMetrics, statistic

SLO_METRICS = ("ttft_s", "tpot_s", "e2e_s", "tbt_max_s")
SLO_STATISTICS = STATISTICS

Slo = Mapping[str, Mapping[str, float]]


def slo_problems(slo: Slo, *, where: str = "slo", needed_by: str = "") -> list[ScenarioError]:
    """Every problem of an SLO, each located by its path: the one check of SLO bounds.

    The scenario config, ``cosim validate``, summaries, goodput and search all
    come here, so the same bad bound reads the same wherever it was given.

    Args:
        slo: ``{metric: {statistic: threshold_s}}``.
        where: the SLO's path in its input (``slo`` of a scenario).
        needed_by: what cannot work without a bound (e.g. ``"goodput"``); "" allows an empty SLO.

    Returns:
        One ScenarioError per problem (``slo.ttft_s.p95: unknown statistic; ...``), [] when valid.
    """
    problems: list[ScenarioError] = []
    for metric, limits in slo.items():
        if metric not in SLO_METRICS:
            problems.append(ScenarioError(f"{where}.{metric}", f"unknown metric; use one of {', '.join(SLO_METRICS)}"))
        if not isinstance(limits, Mapping):
            problems.append(ScenarioError(f"{where}.{metric}", f"give a threshold per statistic, e.g. {{p90: 2.0}}; "
                                                               f"got {limits!r}"))
            continue
        for stat, threshold in limits.items():
            path = f"{where}.{metric}.{stat}"
            if stat not in SLO_STATISTICS:
                problems.append(ScenarioError(path, f"unknown statistic; use one of {', '.join(SLO_STATISTICS)}"))
            elif isinstance(threshold, bool) or not isinstance(threshold, Real) or not threshold > 0:
                # A bound of 0 no request can meet; `not > 0` also rejects NaN.
                problems.append(ScenarioError(path, f"must be > 0, got {threshold}"))
    if needed_by and not problems and not any(slo.values()):
        problems.append(ScenarioError(where, f"{needed_by} needs an SLO, e.g. slo: {{ttft_s: {{p90: 2.0}}, "
                                             f"tpot_s: {{p90: 0.1}}}}"))
    return problems


def validate_slo(slo: Slo, *, where: str = "slo", needed_by: str = "") -> None:
    """Checks an SLO with :func:`slo_problems`, raising its first problem.

    Raises:
        ScenarioError: naming the path, e.g. ``slo.ttft_s.p95``.
    """
    problems = slo_problems(slo, where=where, needed_by=needed_by)
    if problems:
        raise problems[0]


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
