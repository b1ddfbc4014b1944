"""The ``replicas:`` section of a client: an autoscaled pool of clones of it (docs/autoscaling.md).

:class:`ReplicasConfig` holds the pool's bounds, its policy and its timing; the checks that need
the whole scenario (the SLO a ``slo`` policy reads, names, what a pool cannot be part of) are
:mod:`.scenario`'s. The defaults
follow Kubernetes' Horizontal Pod Autoscaler (``kube-controller-manager``
flags and ``HPA behavior``, https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/):
a 15 s sync period, a 10 % tolerance and a 300 s scale-down stabilization window.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .bounds import MAX_GBPS, MIN_GBPS
from .frozen import FieldProblem, FrozenModel

Policy = Literal["queue", "concurrency", "utilization", "slo"]

# Longest autoscaler period, window or delay: a day of simulated time; the shortest period or window: 1 ms.
MAX_PERIOD_S = 86_400.0
MIN_PERIOD_S = 1e-3
# Most replicas of one pool: each is a whole client (scheduler, KV cache), built when it is added.
MAX_REPLICAS = 1000


class ReplicasConfig(FrozenModel):
    """An autoscaled pool of replicas of one client, named ``<name>-0``, ``<name>-1``, ...

    The policy's metric, averaged over the last ``window_s`` and read every
    ``interval_s``: ``queue`` (requests waiting per ready replica), ``concurrency``
    (requests running or waiting per ready replica, Knative's), ``utilization``
    (the fraction of time a ready replica's steps ran) or ``slo`` (the fraction of
    the pool's requests finished in the window that miss the scenario's ``slo``,
    against ``1 - target``). The wanted count is Kubernetes HPA's,
    ``ceil(ready x metric / target)``, within ``[min, max]``.
    """

    min: int = Field(1, ge=1, le=MAX_REPLICAS, description="fewest replicas (at least 1: a pool never scales "
                                                          "to zero)")
    max: int = Field(ge=1, le=MAX_REPLICAS, description="most replicas at once, provisioning and draining ones "
                                                       "included")
    initial: int | None = Field(None, ge=1, le=MAX_REPLICAS, description="replicas ready at t=0; default min")
    policy: Policy = Field(description="queue, concurrency, utilization or slo: the metric the pool scales on")
    target: float = Field(ge=1e-3, le=1e9, description="queue: waiting requests per replica; concurrency: running "
                                                    "and waiting ones; utilization: busy fraction in (0, 1]; "
                                                    "slo: attainment in (0, 1)")
    window_s: float = Field(30.0, ge=MIN_PERIOD_S, le=MAX_PERIOD_S, description="the metric is averaged over this much "
                                                                    "recent simulated time, seconds")
    interval_s: float = Field(15.0, ge=MIN_PERIOD_S, le=MAX_PERIOD_S, description="the policy decides every this many "
                                                                      "seconds (HPA's sync period, 15 s)")
    sample_s: float = Field(1.0, ge=MIN_PERIOD_S, le=MAX_PERIOD_S, description="the replicas' queue and busy time are "
                                                                   "read every this many seconds (at most "
                                                                   "interval_s)")
    tolerance: float = Field(0.1, ge=0, lt=1, description="no change while metric / target is within 1 +- "
                                                          "this (HPA's, 0.1)")
    scale_down_stabilization_s: float = Field(
        300.0, ge=0, le=MAX_PERIOD_S, description="scale down only to the most replicas any decision of this "
                                                  "many past seconds wanted (HPA's, 300 s)")
    load_bandwidth_gbps: float | None = Field(
        None, ge=MIN_GBPS, le=MAX_GBPS, description="each device reads its weight shard at this many GB/s "
                                                    "while a replica provisions; default the client's "
                                                    "scheduler.host_bandwidth_gbps (weights in host memory)")
    startup_s: float = Field(0.0, ge=0, le=MAX_PERIOD_S, description="fixed start-up time a provisioning "
                                                                    "replica adds to its weight load, seconds "
                                                                    "(engine init, compile, CUDA graphs)")

    @model_validator(mode="after")
    def _check(self) -> ReplicasConfig:
        if self.max < self.min:
            raise FieldProblem("max", f"must be >= min={self.min}, got {self.max}")
        if self.initial is not None and not self.min <= self.initial <= self.max:
            raise FieldProblem("initial", f"must be within [min, max] = [{self.min}, {self.max}], got {self.initial}")
        if self.policy in ("utilization", "slo") and self.target > 1:
            raise FieldProblem("target", f"a {self.policy} target is a fraction in (0, 1], got {self.target}")
        if self.policy == "slo" and self.target >= 1:
            raise FieldProblem("target", "an slo target below 1 leaves room to miss (a target of 1 scales on "
                                         "any single miss); e.g. 0.9")
        if self.sample_s > self.interval_s:
            raise FieldProblem("sample_s", f"must be <= interval_s={self.interval_s}, got {self.sample_s}")
        return self

    @property
    def initial_replicas(self) -> int:
        """Replicas ready at t=0."""
        return self.initial if self.initial is not None else self.min
