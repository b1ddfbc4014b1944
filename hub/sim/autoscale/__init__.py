"""Autoscaled pools of replicas of a client (docs/autoscaling.md).

- :class:`ReplicaPool`: the replicas, their provisioning, routing and draining, and
  the policy's decisions (:mod:`.policy`); :class:`Autoscaler` runs every pool's.

The ``replicas:`` section is :mod:`cosim.hub.config.autoscale`'s; summary.json's
``autoscaling`` block, :mod:`cosim.hub.metrics.autoscaling_block`'s.
"""

from .pool import Autoscaler, ReplicaPool, provisioning_ns

__all__ = ["Autoscaler", "ReplicaPool", "provisioning_ns"]
