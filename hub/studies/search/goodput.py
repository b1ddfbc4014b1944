"""Goodput: the highest request rate at which a scenario's SLOs hold (BestServe §3.5, Algorithm 8).

Main names: :func:`goodput` (``cosim.goodput``); what it returns is in :mod:`.results`.

The search follows BestServe: T_min, the end-to-end time of one mean-sized
request served alone, sets the bracket [0.1 / T_min, 1.2 / T_min]; the SLO
must hold at the low end (else goodput is 0). Batching lets a deployment
serve far more than 1 / T_min, so the high end doubles until the SLO fails.
The feasibility test replaces BestServe's tau = 0.1 with confidence bounds
over R seeded replications (see :mod:`cosim.hub.studies.search.stats`). The same R
seeds are used at every rate (common random numbers: the Poisson gaps of
seed s at rate 2x are those at rate x, halved), so the comparison between
two rates is not blurred by different draws.

Bisection then narrows two boundaries to within ``tolerance`` (relative):

- the lower one, between the highest rate shown FEASIBLE and the next rate tested;
- the upper one, between the lowest rate shown INFEASIBLE and the rate tested before it
  (unless ``refine_upper=False``, which ``cosim search`` uses: its ranking needs only the lower one).

``goodput_rps`` is the highest FEASIBLE rate: the SLOs hold there with the
stated confidence. ``interval_rps`` is [that rate, lowest INFEASIBLE rate]:
rates in between are within simulation noise of the SLO boundary.
``estimate_rps`` interpolates where the mean statistic crosses its target.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config.slo import validate_slo
from ...errors import ScenarioError
from . import scenario as sc
from .results import GoodputResult, RatePoint, SearchState
from .stats import Verdict, bounds, judge, point_feasible

log = logging.getLogger(__name__)

# Runs a rate's replications (each as scenario.replicate's arguments) and returns their statistics, in order.
Mapper = Callable[[Sequence[tuple[Any, ...]]], list[dict[str, float]]]
def judge_runs(slo: dict[str, dict[str, float]], rate: float, runs: list[dict[str, float]],
               confidence: float) -> RatePoint:
    """The verdict at ``rate`` from its replications' statistics (as :func:`cosim.hub.studies.search.scenario.replicate`
    returns them)."""
    keys = [(m, s) for m, stats in slo.items() for s in stats]
    samples = {key: [r[f"{key[0]}.{key[1]}"] for r in runs] for key in keys}
    found = bounds(samples, slo, confidence)
    energy = [r.get(sc.TOKENS_PER_J, math.nan) for r in runs]
    per_j = math.fsum(energy) / len(energy) if energy and not any(map(math.isnan, energy)) else None
    return RatePoint(rate, judge(found), tuple(found), tokens_per_j=per_j)


def _serial_map(args: Sequence[tuple[Any, ...]]) -> list[dict[str, float]]:
    """Runs the replications here, one after another, sharing one parsed config and in-process backends."""
    if not args:
        return []
    replicator = sc.Replicator(args[0][0], args[0][1])
    return [replicator(seed, stop_on) for _, _, seed, stop_on in args]


class NeedRate(Exception):
    """A replay (:func:`replay`) reached a rate whose replications it has not got."""

    def __init__(self, rate: float) -> None:
        super().__init__(f"no replications at {rate} requests/s")
        self.rate = rate


class _RateSearch:
    """The bisection state of one scenario: every rate tested so far and its verdict.

    ``memo``: replications already run, by rate; a rate found there is judged from them, not rerun
    (it still counts its runs: the search made them). ``assumed``: rates taken as feasible without
    runs (a conditional replay, :func:`replay`). ``can_run`` False: a rate in neither raises
    :class:`NeedRate`.
    """

    def __init__(self, data: dict[str, Any], base_dir: Path, *, seeds: list[int], confidence: float,
                 mapper: Mapper | None, trace_rate: float | None, early_stop: bool = True,
                 memo: dict[float, list[dict[str, float]]] | None = None,
                 assumed: frozenset[float] = frozenset()) -> None:
        self.data, self.base_dir, self.seeds, self.early_stop = data, base_dir, seeds, early_stop
        self.confidence, self.mapper, self.trace_rate = confidence, mapper, trace_rate
        self.memo, self.assumed = memo or {}, assumed
        self.points: dict[float, RatePoint] = {}
        self.runs: dict[float, list[dict[str, float]]] = {}  # each rate's replications, as replicate returns them
        self.num_runs = 0
        self.bracketed = False  # the bracket's ends are found (bisection from here on)

    def state(self, t_min: float) -> SearchState:
        """Plain data (JSON-ready) from which ``goodput(..., state=...)`` rebuilds this search exactly."""
        return {"t_min": t_min, "num_runs": self.num_runs, "seeds": list(self.seeds),
                "rates": [{"rate_per_s": r, "runs": self.runs[r]} for r in sorted(self.runs)]}

    def known(self, rate: float) -> bool:
        """Whether ``rate``'s verdict needs no new simulation."""
        return rate in self.points or rate in self.memo or rate in self.assumed

    def test(self, rate: float) -> RatePoint:
        """Runs every seed at ``rate`` (once; repeats are looked up) and judges the result."""
        if rate in self.points:
            return self.points[rate]
        if rate in self.memo:
            runs = self.memo[rate]
        elif rate in self.assumed:
            point = RatePoint(rate, Verdict.FEASIBLE, ())
            self.points[rate] = point
            return point
        elif self.mapper is None:
            raise NeedRate(rate)
        else:
            runs = self.mapper(self.run_args(rate))
            self.num_runs += len(runs)
            point = self.judge(rate, runs)
            log.info("rate %.4g/s: %s (%s)", rate, point.verdict.value,
                     ", ".join(f"{b.metric}.{b.statistic} {b.mean:.4g} [{b.lower:.4g}, {b.upper:.4g}] vs {b.target:g}"
                               for b in point.bounds))
            return point
        self.num_runs += len(runs)
        return self.judge(rate, runs)

    def run_args(self, rate: float) -> list[tuple[dict[str, Any], str, int, tuple[str, ...]]]:
        """The replications of ``rate``: :func:`cosim.hub.studies.search.scenario.replicate`'s arguments."""
        scenario = sc.with_rate(self.data, rate, trace_rate=self.trace_rate)
        # One replication's verdict is the rate's (stats.judge), so its run may stop once it fails; with
        # more, the interval needs each run's value, which a stopped run only bounds from below.
        stop_on = ("fail",) if self.early_stop and len(self.seeds) == 1 else ()
        return [(scenario, str(self.base_dir), s, stop_on) for s in self.seeds]

    def judge(self, rate: float, runs: list[dict[str, float]]) -> RatePoint:
        """The verdict at ``rate`` from its replications' statistics."""
        self.runs[rate] = runs
        point = judge_runs(self.data["slo"], rate, runs, self.confidence)
        self.points[rate] = point
        return point

    def sorted_points(self) -> list[RatePoint]:
        return [self.points[r] for r in sorted(self.points)]

    def next_rate(self, tolerance: float, refine_upper: bool = True) -> float | None:
        """The midpoint of the wider-than-tolerance boundary gap, or None when both are narrow
        (only the lower boundary's gap counts unless ``refine_upper``)."""
        rates = sorted(self.points)
        infeasible = [r for r in rates if self.points[r].verdict is Verdict.INFEASIBLE]
        cap = infeasible[0] if infeasible else math.inf
        feasible = [r for r in rates if self.points[r].verdict is Verdict.FEASIBLE and r < cap]
        if feasible:
            low = feasible[-1]
            above = [r for r in rates if r > low]
            if above and above[0] - low > tolerance * low:
                return (low + above[0]) / 2
        if infeasible and refine_upper:
            below = [r for r in rates if r < cap]
            if below and cap - below[-1] > tolerance * below[-1]:
                return (below[-1] + cap) / 2
        return None


def _estimate(points: list[RatePoint]) -> float:
    """Where the worst mean/target ratio crosses 1, interpolated linearly between tested rates."""
    good = [p for p in points if point_feasible(p.bounds)]
    if not good:
        return 0.0
    low = good[-1]
    above = [p for p in points if p.rate_per_s > low.rate_per_s]
    if not above:
        return low.rate_per_s
    high = above[0]
    r0, r1 = low.worst_ratio, high.worst_ratio
    if not math.isfinite(r1) or r1 <= r0:
        return (low.rate_per_s + high.rate_per_s) / 2
    return low.rate_per_s + (1.0 - r0) / (r1 - r0) * (high.rate_per_s - low.rate_per_s)


def goodput(config: sc.ConfigLike, *, overrides: Sequence[str] = (), base_dir: str | Path | None = None,
            confidence: float = 0.9, replications: int = 5, tolerance: float = 0.05,
            requests: int | None = None, seed: int | None = None, lower_rate: float | None = None,
            upper_rate: float | None = None, max_runs: int = 400, max_doublings: int = 12,
            refine_upper: bool = True, executor: Executor | None = None, pause_after: int | None = None,
            state: SearchState | None = None, early_stop: bool = True) -> GoodputResult:
    """Finds the highest request rate at which the scenario's SLOs hold (``cosim goodput``).

    Args:
        config: a scenario path, mapping or parsed config; its ``slo`` is what must hold.
        overrides: ``key=value`` assignments, as ``cosim run --set``.
        base_dir: folder relative paths resolve against (default: the config's, or the cwd).
        confidence: joint confidence of the feasibility test, in (0, 1).
        replications: seeded runs per rate (>= 2 for an interval; 1 is BestServe with tau = 0).
        tolerance: relative width to which the SLO boundaries are narrowed.
        requests: requests per run (default: the workload's).
        seed: first seed; replication k uses seed + k (default: the config's seed).
        lower_rate, upper_rate: the initial bracket (default: 0.1 / T_min and 1.2 / T_min).
        max_runs: stop bisecting (and say so in ``note``) after this many simulations.
        max_doublings: how often the upper end may double while the SLOs still hold.
        refine_upper: also narrow the interval's upper end to ``tolerance`` (about twice the runs);
            without it the upper end is the lowest violating rate the search happened to test.
        executor: runs the replications of one rate in parallel (e.g. a process pool).
        pause_after: pause after this many bisection rates (0: once the bracket is found: the low end
            tested, the high end doubled until an SLO fails); the result is ``paused``, with bounds on the
            finished search's goodput and a ``state`` (``cosim search`` prunes deployments on these bounds).
            None: run to the end.
        state: a ``paused`` result's :attr:`GoodputResult.state`: continue that search (same arguments)
            without rerunning its simulations; what it finishes with is what one uninterrupted call gives.
        early_stop: with one replication, stop each run once its SLO is violated whatever the rest of
            its requests do (:mod:`.early_stop`): the verdicts, hence the goodput and its interval, are
            the full runs'; a stopped run's statistic is the bound that decided it (``estimate_rps``
            interpolates with it). With more replications every run is simulated to the end.

    Returns:
        The goodput, its interval, and every rate tested.

    Raises:
        ScenarioError: the scenario has no SLO, no rate to vary, or bad arguments.
    """
    if not 0 < confidence < 1:
        raise ScenarioError("confidence", f"must be in (0, 1), got {confidence}")
    if replications < 1 or tolerance <= 0:
        raise ScenarioError("replications", f"need replications >= 1 and tolerance > 0, got {replications}, "
                                            f"{tolerance}")
    data, folder, trace_rate, seeds = prepare(config, overrides=overrides, base_dir=base_dir, requests=requests,
                                              seed=seed, replications=replications)
    if executor is None:
        mapper: Mapper = _serial_map
    else:
        def mapper(args: Sequence[tuple[Any, ...]]) -> list[dict[str, float]]:
            return list(executor.map(sc.replicate, *zip(*args)))
    memo: dict[float, list[dict[str, float]]] = {}
    if state is not None:
        if state["seeds"] != seeds:
            raise ScenarioError("state", f"was found with seeds {state['seeds']}, not {seeds}")
        t_min = float(state["t_min"])
        memo = {float(entry["rate_per_s"]): [dict(run) for run in entry["runs"]] for entry in state["rates"]}
    else:
        t_min = sc.single_request_s(data, folder)
    search = _RateSearch(data, folder, seeds=seeds, confidence=confidence, mapper=mapper, trace_rate=trace_rate,
                         early_stop=early_stop, memo=memo)
    ends = ladder(t_min, tolerance=tolerance, lower_rate=lower_rate, upper_rate=upper_rate, max_doublings=0)
    note, paused = _drive(search, ends[0], ends[1], tolerance=tolerance, refine_upper=refine_upper,
                          max_doublings=max_doublings, max_runs=max_runs, pause_after=pause_after)
    result = _result(search, confidence=confidence, tolerance=tolerance, t_min=t_min, note=note)
    if paused:
        result.paused, result.state = True, search.state(t_min)
        # Rates run before but not (yet) needed stay in the state, so that a resumed search finds them.
        result.state["rates"] = [{"rate_per_s": r, "runs": (search.runs | memo)[r]} for r in sorted(search.runs | memo)]
    return result


def prepare(config: sc.ConfigLike, *, overrides: Sequence[str] = (), base_dir: str | Path | None = None,
            requests: int | None = None, seed: int | None = None, replications: int = 5
            ) -> tuple[dict[str, Any], Path, float | None, list[int]]:
    """The scenario a goodput search varies, as :func:`goodput` takes it: (mapping, base folder, a trace's
    own rate or None, the replications' seeds).

    Raises:
        ScenarioError: no SLO, or an arrival process without a rate.
    """
    data, folder = sc.as_mapping(config, overrides=tuple(overrides), base_dir=base_dir)
    validate_slo(data["slo"], needed_by="goodput")  # the scenario's own check, plus: some bound must be set
    if requests is not None:
        data["workload"]["requests"] = requests
    trace_rate = sc.base_rate(data, folder) if data["workload"]["arrival"]["process"] == "trace" else None
    sc.with_rate(data, 1.0, trace_rate=trace_rate)  # fails early for a process without a rate
    first = data["seed"] if seed is None else seed
    return data, folder, trace_rate, [first + k for k in range(replications)]


def ladder(t_min: float, *, tolerance: float, lower_rate: float | None = None, upper_rate: float | None = None,
           max_doublings: int = 12) -> list[float]:
    """The bracket's rates, as the search computes them: the low end, then the high end and each doubling
    of it (``max_doublings`` of them); the search tests the low end, then the others in turn until one is
    infeasible. Each is the same float :func:`goodput` tests (doubling a float is exact)."""
    low = lower_rate if lower_rate is not None else 0.1 / t_min
    high = max(upper_rate if upper_rate is not None else 1.2 / t_min, low * (1 + 2 * tolerance))
    rates = [low]
    for _ in range(max_doublings + 1):
        rates.append(high)
        high *= 2
    return rates


def _drive(search: _RateSearch, low: float, high: float, *, tolerance: float, refine_upper: bool,
           max_doublings: int, max_runs: int, pause_after: int | None) -> tuple[str, bool]:
    """The search (BestServe's bracket, then bisection), each rate run or looked up by ``search``;
    returns its note and whether it paused (``pause_after`` new bisection rates run)."""
    note = _bracket(search, low, high, max_doublings)
    search.bracketed = True
    tested = 0
    while not note and (rate := search.next_rate(tolerance, refine_upper)) is not None:
        if not search.known(rate):
            if pause_after is not None and tested >= pause_after:
                return note, True
            tested += 1
        if search.num_runs + len(search.seeds) > max_runs:
            note = f"stopped after {search.num_runs} runs (max_runs); the interval is wider than the tolerance"
            break
        search.test(rate)
    return note, False


def _bracket(search: _RateSearch, low: float, high: float, max_doublings: int) -> str:
    """Tests the bracket's ends, doubling the upper one until an SLO fails; a note if the search must stop."""
    search.num_runs += 1  # T_min's run
    if search.test(low).verdict is not Verdict.FEASIBLE:
        return f"the SLOs are not shown to hold even at {low:.4g} requests/s (the pessimistic rate)"
    for _ in range(max_doublings + 1):
        if search.test(high).verdict is Verdict.INFEASIBLE:
            return ""
        high *= 2
    return (f"the SLOs still hold at {high / 2:.4g} requests/s: the deployment serves the whole workload "
            f"as one burst within the SLOs; raise workload.requests (or max_doublings)")


@dataclass(frozen=True)
class Replay:
    """Where the search stands given the replications run so far (:func:`replay`).

    Attributes:
        result: the search as far as it can go (``paused`` unless it is finished).
        needed: the next rate it must test; None when finished.
        lower_rps, upper_rps: the finished search's goodput g satisfies ``lower_rps <= g < upper_rps``
            (``upper_rps`` may equal g's bound ``inf``); a finished replay has ``lower_rps == g``.
    """

    result: GoodputResult
    needed: float | None
    lower_rps: float
    upper_rps: float


def replay(data: dict[str, Any], *, t_min: float, memo: dict[float, list[dict[str, float]]], seeds: list[int],
           confidence: float, tolerance: float, refine_upper: bool = False, max_runs: int = 400,
           max_doublings: int = 12, assume_feasible: frozenset[float] = frozenset()) -> Replay:
    """The goodput search of ``data`` (the same decisions :func:`goodput` makes with these settings), run
    against replications already made (``memo``, by rate) until it needs a rate the memo lacks.

    With ``assume_feasible`` (rates of :func:`ladder` below some tested ones), those rates count as
    feasible without runs: a *conditional* replay. Its ``upper_rps`` still bounds the real search's
    goodput: the real search differs only if one of them is not feasible, and then its goodput is
    below that rate (an infeasible one caps it; below one that is not feasible, no bisection runs
    above the highest feasible rate under it), hence below every rate the conditional one tested above
    them. Its ``lower_rps`` bounds nothing and is not used so.
    """
    search = _RateSearch(data, Path(), seeds=seeds, confidence=confidence, mapper=None, trace_rate=None,
                         memo=memo, assumed=assume_feasible)
    ends = ladder(t_min, tolerance=tolerance, max_doublings=0)
    needed: float | None = None
    try:
        note, _ = _drive(search, ends[0], ends[1], tolerance=tolerance, refine_upper=refine_upper,
                         max_doublings=max_doublings, max_runs=max_runs, pause_after=None)
    except NeedRate as need:
        note, needed = "", need.rate
    result = _result(search, confidence=confidence, tolerance=tolerance, t_min=t_min, note=note)
    if needed is None:
        return Replay(result, None, result.goodput_rps, result.goodput_rps)
    result.paused = True
    # Before the bracket's high end fails, a higher rate may still hold; after, bisection only tests
    # rates below the lowest failing one tested (see GoodputResult.upper_bound_rps).
    upper = result.upper_bound_rps if search.bracketed else result.interval_rps[1]
    return Replay(result, needed, result.goodput_rps, upper)


def _result(search: _RateSearch, *, confidence: float, tolerance: float, t_min: float, note: str) -> GoodputResult:
    points = search.sorted_points()
    infeasible = [p.rate_per_s for p in points if p.verdict is Verdict.INFEASIBLE]
    cap = infeasible[0] if infeasible else math.inf
    feasible = [p.rate_per_s for p in points if p.verdict is Verdict.FEASIBLE and p.rate_per_s < cap]
    best = feasible[-1] if feasible else 0.0
    per_j = search.points[best].tokens_per_j if feasible else None
    slo = {m: dict(stats) for m, stats in search.data["slo"].items()}
    return GoodputResult(goodput_rps=best, interval_rps=(best, cap), estimate_rps=_estimate(points),
                         confidence=confidence, replications=len(search.seeds), seeds=list(search.seeds),
                         tolerance=tolerance, num_runs=search.num_runs, single_request_s=t_min, points=points,
                         slo=slo, note=note, tokens_per_j=per_j)

