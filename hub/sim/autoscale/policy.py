"""What an autoscaled pool wants: the metric over a sliding window, then Kubernetes HPA's count.

Main names: :class:`MetricWindow` (the replicas' samples and the pool's finished
requests over the last ``window_s``), :class:`Recommender` (the replica count a
metric asks for, with HPA's hysteresis).

Hysteresis, as HPA's (https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/,
"Algorithm details" and "Stabilization window"):

- the wanted count is ``ceil(ready x metric / target)``, ``ready`` being the
  replicas the metric was measured on;
- a metric within ``1 +- tolerance`` of its target changes nothing (the count
  stays at the replicas ready and provisioning);
- scaling down goes only to the highest count any decision of the last
  ``scale_down_stabilization_s`` wanted, so a short lull does not drain replicas
  that the next burst needs; scaling up is immediate;
- provisioning replicas count as replicas: a decision taken while they load
  does not order them again.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ...config.autoscale import ReplicasConfig
from ...config.slo import Slo
from ...metrics.slo import meets_slo
from ...metrics.stats import request_metrics
from ..records import RequestRecord

NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Sample:
    """The pool's ready replicas at one time: their waiting sequences, all they hold (running and
    waiting), and how long their steps ran since the sample before (of the replicas ready at both)."""

    time_ns: int
    num_ready: int
    num_waiting: int
    num_held: int
    busy_ns: int  # busy time since the last sample, summed over the replicas ready at both
    ready_ns: int  # time since the last sample, summed over the same replicas


class MetricWindow:
    """Samples and finished requests of the last ``window_s``, and the policy's metric over them.

    Args:
        config: the pool's replicas section.
        slo: the scenario's SLO (the ``slo`` policy's).
    """

    def __init__(self, config: ReplicasConfig, slo: Slo) -> None:
        self.config, self.slo = config, slo
        self.window_ns = round(config.window_s * NS_PER_S)
        self.samples: deque[Sample] = deque()
        self.finished: deque[RequestRecord] = deque()  # the pool's, in finish order

    def add_sample(self, sample: Sample) -> None:
        self.samples.append(sample)

    def add_finished(self, request: RequestRecord) -> None:
        self.finished.append(request)

    def _trim(self, now_ns: int) -> None:
        """Forgets what is older than the window (``(now - window, now]`` stays)."""
        start = now_ns - self.window_ns
        while self.samples and self.samples[0].time_ns <= start:
            self.samples.popleft()
        while self.finished and self.finished[0].finish_ns <= start:
            self.finished.popleft()

    def metric(self, now_ns: int, *, pool_holds_requests: bool) -> float | None:
        """The policy's metric over the window: mean waiting sequences per ready replica (``queue``),
        mean running and waiting ones (``concurrency``), busy fraction of the ready replicas
        (``utilization``), or the fraction of the pool's finished requests missing the SLO (``slo``);
        None where the window has nothing to read (no sample; for ``slo``, no request finished while
        the pool holds some: they may be late, not absent)."""
        self._trim(now_ns)
        policy = self.config.policy
        if policy == "slo":
            if not self.finished:
                return None if pool_holds_requests else 0.0
            good = meets_slo(request_metrics(list(self.finished)), self.slo)
            return 1.0 - float(good.sum()) / len(self.finished)
        if not self.samples:
            return None
        if policy in ("queue", "concurrency"):
            held = [s.num_waiting if policy == "queue" else s.num_held for s in self.samples]
            return sum(n / s.num_ready for n, s in zip(held, self.samples) if s.num_ready) / len(self.samples)
        ready_ns = sum(s.ready_ns for s in self.samples)
        return sum(s.busy_ns for s in self.samples) / ready_ns if ready_ns else None

    @property
    def target(self) -> float:
        """The value the metric is held at: the slo policy's is the miss fraction ``1 - target``."""
        return 1.0 - self.config.target if self.config.policy == "slo" else self.config.target


class Recommender:
    """The replica count each decision wants (see the module docstring).

    Args:
        config: the pool's replicas section.
    """

    def __init__(self, config: ReplicasConfig) -> None:
        self.config = config
        self.stabilization_ns = round(config.scale_down_stabilization_s * NS_PER_S)
        self._history: deque[tuple[int, int]] = deque()  # (time, wanted) of past decisions

    def decide(self, now_ns: int, *, metric: float | None, target: float, ready: int, current: int) -> int:
        """The count to scale to.

        Args:
            now_ns: the decision's time.
            metric: the window's metric (None: no reading; the count stays).
            target: its target.
            ready: replicas the metric was measured on.
            current: replicas ready and provisioning.
        """
        cfg = self.config
        ratio = metric / target if metric is not None else 1.0
        if metric is None or abs(ratio - 1.0) <= cfg.tolerance or ready == 0:
            wanted = current
        else:
            wanted = math.ceil(min(ready * ratio, cfg.max))  # (a tiny target: no overflow)
        wanted = min(max(wanted, cfg.min), cfg.max)
        while self._history and self._history[0][0] <= now_ns - self.stabilization_ns:
            self._history.popleft()
        self._history.append((now_ns, wanted))
        if wanted < current:  # down only as far as the decisions of the stabilization window allow
            wanted = min(current, max(w for _, w in self._history))
        return wanted


def pick_to_remove(loads: Sequence[int], count: int) -> list[int]:
    """Indexes (into ``loads``, oldest replica first) of the ``count`` replicas to drain: the least
    loaded, the newest among equals (vLLM-style engines drain fastest when they hold least)."""
    order = sorted(range(len(loads)), key=lambda i: (loads[i], -i))
    return order[:count]
