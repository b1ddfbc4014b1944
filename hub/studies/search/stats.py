"""The feasibility test of the goodput search: confidence bounds on SLO statistics.

Main names: :func:`confidence_bounds`, :func:`judge`, :class:`Verdict`.

BestServe (Algorithm 9) accepts a rate when the simulated P90 is within
(1 + tau) of the goal, tau = 0.1 chosen by eye. Here a rate is judged from R
independent replications (seeds s_0..s_{R-1}, the same seeds at every rate):

- each replication r gives one value ``x_r`` of each constrained statistic
  (e.g. its own p90 TTFT over the run's completed requests);
- the x_r are i.i.d. across replications, so a Student-t interval on their
  mean is valid however strongly the requests *within* a run are correlated
  (queueing makes neighbouring requests' latencies nearly equal, which is why
  a distribution-free order-statistic interval over pooled requests, which
  assumes independent requests, would be far too narrow);
- with k constraints each one-sided bound is taken at level 1 - alpha / k
  (Bonferroni), alpha = 1 - confidence, so all k hold jointly with probability
  at least ``confidence``.

A rate is FEASIBLE when every upper bound meets its SLO (the SLO holds with the
stated confidence), INFEASIBLE when some lower bound exceeds its SLO (it is
violated with that confidence), and UNDECIDED otherwise (the rate is within
simulation noise of the boundary). With one replication there is no interval:
the point values decide (BestServe with tau = 0).
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class Verdict(str, enum.Enum):
    """Outcome of the feasibility test at one request rate."""

    FEASIBLE = "feasible"
    UNDECIDED = "undecided"
    INFEASIBLE = "infeasible"


@dataclass(frozen=True)
class Bound:
    """Mean and two-sided confidence bounds of one SLO statistic across replications.

    Attributes:
        metric, statistic: e.g. ``ttft_s``, ``p90``.
        target: the SLO threshold (seconds).
        mean, lower, upper: estimate and confidence bounds (seconds; inf when a run had no value).
    """

    metric: str
    statistic: str
    target: float
    mean: float
    lower: float
    upper: float


@functools.cache  # a search asks for the same few (level, num) at every judgement; scipy's ppf costs ~0.1 ms
def t_quantile(level: float, num: int) -> float:
    """One-sided Student-t quantile at ``level`` with ``num - 1`` degrees of freedom (0 for one sample)."""
    if num < 2:
        return 0.0
    # scipy is a dependency of scikit-learn; its special functions are what stats.t.ppf calls, without
    # the 0.6 s import of scipy.stats in each search worker. Imported late so `import cosim` stays quick.
    from scipy.special import stdtrit

    return float(stdtrit(num - 1, level))


def confidence_bounds(values: Sequence[float], level: float) -> tuple[float, float, float]:
    """(mean, lower, upper): one-sided bounds each holding with probability ``level``.

    Values may be inf (a replication that never produced the statistic); then
    every bound is inf, which reads as "violated".
    """
    if not values or any(math.isinf(v) for v in values):
        return math.inf, math.inf, math.inf
    num = len(values)
    mean = math.fsum(values) / num
    if num < 2:
        return mean, mean, mean
    variance = math.fsum((v - mean) ** 2 for v in values) / (num - 1)
    half = t_quantile(level, num) * math.sqrt(variance / num)
    return mean, mean - half, mean + half


def bounds(samples: Mapping[tuple[str, str], Sequence[float]], slo: Mapping[str, Mapping[str, float]],
           confidence: float) -> list[Bound]:
    """Bounds of every SLO statistic, each at the Bonferroni level 1 - (1 - confidence) / k.

    Args:
        samples: per (metric, statistic), the value of each replication.
        slo: ``{metric: {statistic: target}}``.
        confidence: joint confidence level, in (0, 1).
    """
    targets = [(m, s, float(t)) for m, stats in sorted(slo.items()) for s, t in sorted(stats.items())]
    level = 1.0 - (1.0 - confidence) / max(1, len(targets))
    result = []
    for metric, statistic, target in targets:
        mean, lower, upper = confidence_bounds(samples[(metric, statistic)], level)
        result.append(Bound(metric, statistic, target, mean, lower, upper))
    return result


def judge(found: Sequence[Bound]) -> Verdict:
    """FEASIBLE if every upper bound meets its target, INFEASIBLE if a lower bound misses one."""
    if any(b.lower > b.target for b in found):
        return Verdict.INFEASIBLE
    if all(b.upper <= b.target for b in found):
        return Verdict.FEASIBLE
    return Verdict.UNDECIDED


def point_feasible(found: Sequence[Bound]) -> bool:
    """Whether the mean of every statistic meets its target (the point estimate's verdict)."""
    return all(b.mean <= b.target for b in found)
