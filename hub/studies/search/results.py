"""What a goodput search finds (:func:`.goodput.goodput`): the verdict at each rate tested, and the result."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from .stats import Bound, Verdict

# What :attr:`GoodputResult.state` holds: T_min, the runs so far, and each tested rate's replications.
SearchState = dict[str, Any]


@dataclass(frozen=True)
class RatePoint:
    """The verdict at one request rate.

    Attributes:
        rate_per_s: requests per second offered.
        verdict: feasible, undecided or infeasible (see :mod:`cosim.hub.studies.search.stats`).
        bounds: per SLO statistic, its mean and confidence bounds across the replications.
        tokens_per_j: mean output tokens per joule of the replications (summary.json
            ``energy.tokens_per_j``); None when a run has no energy total.
    """

    rate_per_s: float
    verdict: Verdict
    bounds: tuple[Bound, ...]
    tokens_per_j: float | None = None

    @property
    def worst_ratio(self) -> float:
        """max over SLO statistics of mean / target (<= 1: the point estimate meets every SLO)."""
        return max((b.mean / b.target for b in self.bounds), default=0.0)  # none: a rate taken as feasible


@dataclass
class GoodputResult:
    """What :func:`goodput` found.

    Attributes:
        goodput_rps: highest rate at which every SLO holds with probability >= ``confidence`` (0 if none).
        interval_rps: (goodput_rps, lowest rate at which an SLO is violated with that confidence; inf if
            none was found below the search's cap).
        estimate_rps: rate where the mean of the worst SLO statistic crosses its target (interpolated).
        confidence: joint confidence level of the feasibility test.
        replications: runs per rate; ``seeds`` are their seeds (the same at every rate).
        tolerance: relative width to which both boundaries were narrowed.
        num_runs: simulations it took, including the single-request run.
        single_request_s: T_min, the end-to-end time of one mean-sized request alone.
        points: every rate tested, by rate.
        slo: the SLOs tested.
        note: why the search stopped early, if it did.
        paused: the search paused (``pause_after``); :attr:`state` resumes it, and the goodput of the
            finished search lies in [:attr:`lower_bound_rps`, :attr:`upper_bound_rps`).
        state: plain data from which ``goodput(..., state=...)`` continues the search exactly.
        tokens_per_j: output tokens per joule at ``goodput_rps`` (mean of its replications); None
            when goodput is 0 or the runs have no energy total.
    """

    goodput_rps: float
    interval_rps: tuple[float, float]
    estimate_rps: float
    confidence: float
    replications: int
    seeds: list[int]
    tolerance: float
    num_runs: int
    single_request_s: float
    points: list[RatePoint] = field(default_factory=list)
    slo: dict[str, dict[str, float]] = field(default_factory=dict)
    note: str = ""
    tokens_per_j: float | None = None
    paused: bool = False
    state: SearchState = field(default_factory=dict, repr=False)

    @property
    def lower_bound_rps(self) -> float:
        """What the finished search's goodput is at least: ``goodput_rps`` (final unless ``paused``)."""
        return self.goodput_rps

    @property
    def upper_bound_rps(self) -> float:
        """What the finished search's goodput is less than (for a ``paused`` result, the next rate tested
        above ``goodput_rps``: the bisection only tests rates between the two); ``goodput_rps`` when final."""
        if not self.paused:
            return self.goodput_rps
        above = [p.rate_per_s for p in self.points if p.rate_per_s > self.goodput_rps]
        return above[0] if above else math.inf

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (inf becomes None)."""
        data = asdict(self)
        data.pop("state")
        data["interval_rps"] = [_finite(v) for v in self.interval_rps]
        data["points"] = [{"rate_per_s": p.rate_per_s, "verdict": p.verdict.value, "tokens_per_j": p.tokens_per_j,
                           "bounds": [{k: _finite(v) if isinstance(v, float) else v for k, v in asdict(b).items()}
                                      for b in p.bounds]} for p in self.points]
        return data


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
