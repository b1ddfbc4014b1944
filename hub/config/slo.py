"""Service-level objectives as a scenario gives them, and the one check of their bounds.

An SLO maps a metric to thresholds per statistic, as in the scenario's
``slo:`` key: ``{"ttft_s": {"p90": 2.0}, "tpot_s": {"p90": 0.1}}``. What a
run attains of it: :mod:`cosim.hub.metrics.slo`.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real

from ..errors import ScenarioError

SLO_METRICS = ("ttft_s", "tpot_s", "e2e_s", "tbt_max_s")
# The statistics a summary reports of each latency, and an SLO may bound.
STATISTICS = ("mean", "p50", "p90", "p99", "max")
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
