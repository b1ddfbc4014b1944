"""Autoscaled pools of replicas of a client (docs/autoscaling.md).

- :class:`ReplicasConfig`: a client's ``replicas:`` section; :func:`replica_problems`
  checks it against the scenario.
- :class:`ReplicaPool`: the replicas, their provisioning, routing and draining, and
  the policy's decisions (:mod:`.policy`); :class:`Autoscaler` runs every pool's.
- :func:`autoscaling_block`: summary.json's ``autoscaling`` block.
"""

from ...config.autoscale import ReplicasConfig, replica_problems
from ...metrics.autoscaling_block import autoscaling_block
from .pool import Autoscaler, ReplicaPool, provisioning_ns

__all__ = ["Autoscaler", "ReplicaPool", "ReplicasConfig", "autoscaling_block", "provisioning_ns", "replica_problems"]
