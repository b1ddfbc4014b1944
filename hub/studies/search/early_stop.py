"""Stopping a run once its SLO verdict is decided, whatever the requests still to finish do.

Main names: :class:`SloWatch` (fed each finished request; says when the verdict is
decided), :class:`StopRun` (what it raises to stop the run) and :func:`request_values`.

The rule, exact (no approximation). A run of N requests computes each SLO
statistic over the values of its finished requests (a request without a value,
e.g. TPOT of a one-token answer, is left out). After k have finished, the N - k
unknown values can be anything >= 0, or absent. Every statistic the SLO may
constrain (a linearly interpolated percentile, the mean, the max) is
nondecreasing in each value, and leaving a value out lands between setting it
to 0 and to infinity, so the final statistic lies in [lo, hi]:

- lo: the statistic with every unknown value 0 (the mean: the known sum over N);
- hi: with every unknown value infinite (inf for the mean and max until all are known;
  for the p-th percentile, finite once fewer than about (1 - p) N requests are unknown).

The run **fails** once some statistic's lo exceeds its target (e.g. p90 TTFT:
once more than 10% of all N requests exceeded it), and **passes** once every
hi meets its target (once enough met it that even if all the rest fail, the
p90 holds). Either way the full run's verdict is the same. The check costs
O(1) per statistic per finished request (values kept sorted; ``bisect.insort``).

One caveat, as for the full run: a run whose requests never finish counts as
violated; a run stopped on a pass never learns that the rest would have hung.
Admission (:mod:`cosim.hub.sim.admission`) refuses up front every request that can
never be served, so this cannot happen for a reason cosim knows.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping

from ...errors import CosimError
from ...sim.records import RequestRecord

NS_PER_S = 1e9


class StopRun(CosimError):
    """Raised from a run's request hook once the SLO verdict is decided (the run stops there)."""

    def __init__(self, passed: bool, done: int) -> None:
        super().__init__(f"SLO verdict decided after {done} finished requests: {'met' if passed else 'violated'}")
        self.passed = passed


def request_values(record: RequestRecord) -> dict[str, float | None]:
    """A finished request's SLO metrics in seconds, as :func:`cosim.hub.metrics.stats.request_metrics`
    computes them (None where the request has no such value)."""
    per_path = record.output_tokens // record.branches
    has_first = record.first_token_ns >= 0
    multi = has_first and per_path > 1
    return {"ttft_s": (record.first_token_ns - record.arrival_ns) / NS_PER_S if has_first else None,
            "tpot_s": (record.finish_ns - record.first_token_ns) / (per_path - 1) / NS_PER_S if multi else None,
            "e2e_s": (record.finish_ns - record.arrival_ns) / NS_PER_S,
            "tbt_max_s": record.max_tbt_ns / NS_PER_S if per_path > 1 else None}


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's linear interpolation between neighbours (its two-sided form, so values match bit for bit)."""
    if t == 0 or a == b:
        return a
    if math.isinf(b):
        return b
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def _percentile(sorted_values: list[float], unknown: int, fill: float, q: float) -> float:
    """numpy's linear-interpolation percentile of ``sorted_values`` plus ``unknown`` copies of ``fill``
    (0: below them all; inf: above them all), in O(1)."""
    n = len(sorted_values) + unknown
    position = q / 100 * (n - 1)
    low = math.floor(position)
    high = min(low + 1, n - 1)
    offset = unknown if fill == 0.0 else 0  # where the known values start in the full sorted list

    def at(i: int) -> float:
        j = i - offset
        return sorted_values[j] if 0 <= j < len(sorted_values) else fill

    return _lerp(at(low), at(high), position - low)


class SloWatch:
    """The SLO verdict of a run as its requests finish (see the module's rule).

    Args:
        slo: ``{metric: {statistic: target}}``.
        total: the run's number of requests.
        stop_on: which verdicts stop the run: ``"fail"``, ``"pass"`` or both.
    """

    def __init__(self, slo: Mapping[str, Mapping[str, float]], total: int,
                 stop_on: tuple[str, ...] = ("fail", "pass")) -> None:
        self.targets = [(m, s, float(t)) for m, stats in sorted(slo.items()) for s, t in sorted(stats.items())]
        self.total, self.stop_on, self.done = total, stop_on, 0
        self.values: dict[str, list[float]] = {m: [] for m, _, _ in self.targets}
        self.sums: dict[str, float] = dict.fromkeys(self.values, 0.0)
        self.verdict: bool | None = None  # True: met, False: violated, None: undecided

    def bounds(self, metric: str, statistic: str) -> tuple[float, float]:
        """(lo, hi): where the statistic of the finished run must lie, given the requests so far."""
        known = self.values[metric]
        unknown = self.total - self.done
        if not known:  # a statistic with no value at all reads 0 (cosim.hub.studies.search.scenario.replicate)
            return 0.0, (math.inf if unknown else 0.0)
        if statistic == "mean":
            return self.sums[metric] / (len(known) + unknown), math.inf if unknown else self.sums[metric] / len(known)
        if statistic == "max":
            return known[-1], math.inf if unknown else known[-1]
        q = float(statistic[1:])
        return _percentile(known, unknown, 0.0, q), _percentile(known, unknown, math.inf, q)

    def decide(self) -> bool | None:
        """True when the SLO holds whatever the rest do, False when it is violated whatever they do."""
        met = True
        for metric, statistic, target in self.targets:
            lo, hi = self.bounds(metric, statistic)
            if lo > target:
                return False
            met = met and hi <= target
        return True if met and self.done else None

    def add(self, record: RequestRecord) -> None:
        """Records a finished request; raises :class:`StopRun` when the verdict is decided and stops the run."""
        self.done += 1
        values = request_values(record)
        for metric in self.values:
            value = values[metric]
            if value is not None:
                bisect.insort(self.values[metric], value)
                self.sums[metric] += value
        if self.done < self.total:
            self.verdict = self.decide()
            if self.verdict is not None and ("pass" if self.verdict else "fail") in self.stop_on:
                raise StopRun(self.verdict, self.done)
        else:
            self.verdict = self.decide()
