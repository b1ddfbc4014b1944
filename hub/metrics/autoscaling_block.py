"""The ``autoscaling`` block of summary.json: each pool's scale events, replica count over time and cost.

Main name: :func:`autoscaling_block`. Per pool (by the template client's name):
``scale_ups`` and ``scale_downs`` (decisions that changed the count), ``events``
(each decision's time, count before and after, metric, replicas added or taken
away), ``timeline`` (the count at each change: ready, provisioning, draining,
ending with the state at the end of the run), ``max_replicas``, ``mean_replicas``
(time-weighted over the run, every replica that existed: replica-seconds / run
time), ``mean_ready_replicas``, ``replica_seconds`` (each replica from its
creation, provisioning included, to its removal or the end of the run),
``device_hours`` and ``cost_usd`` (replica-seconds x devices x the device's
price per hour, as summary.json's ``cost``).
"""

from __future__ import annotations

from typing import Any

from ..sim.autoscale.policy import NS_PER_S
from ..sim.autoscale.pool import ReplicaPool


def _integral(rows: list[tuple[int, int]], end_ns: int) -> int:
    """The time integral (count x ns) of a step function given as (time, count) rows, up to ``end_ns``."""
    total = 0
    for (start, count), (stop, _) in zip(rows, [*rows[1:], (end_ns, 0)]):
        total += count * (max(stop, start) - start)
    return total


def autoscaling_block(pool: ReplicaPool, end_ns: int) -> dict[str, Any]:
    """One pool's block (see the module docstring), at the run's end ``end_ns``."""
    cfg = pool.config
    rows = [*pool.counts.rows]
    if rows[-1][0] < end_ns:
        rows.append((end_ns, *rows[-1][1:]))
    lifetimes = pool.lifetimes_ns(end_ns)
    replica_ns = sum(lifetimes.values())
    device_hours = sum(r.client.info.num_devices * lifetimes[r.name] for r in pool.replicas) / NS_PER_S / 3600
    cost = sum(r.client.info.num_devices * r.client.info.price_per_hour_usd * lifetimes[r.name]
               for r in pool.replicas) / NS_PER_S / 3600
    ready = _integral([(t, r) for t, r, _, _ in rows], end_ns)
    return {
        "policy": cfg.policy, "target": cfg.target, "min": cfg.min, "max": cfg.max,
        "provisioning_s": pool.load_ns / NS_PER_S,
        "scale_ups": sum(e.after > e.before for e in pool.events),
        "scale_downs": sum(e.after < e.before for e in pool.events),
        "replicas_created": len(pool.replicas),
        "max_replicas": max(r + p + d for _, r, p, d in rows),
        "mean_replicas": replica_ns / end_ns if end_ns > 0 else float(rows[0][1]),
        "mean_ready_replicas": ready / end_ns if end_ns > 0 else float(rows[0][1]),
        "replica_seconds": replica_ns / NS_PER_S,
        "device_hours": device_hours,
        "cost_usd": cost,
        "events": [{"t_s": e.time_ns / NS_PER_S, "from": e.before, "to": e.after, "metric": e.metric,
                    "replicas": list(e.replicas)} for e in pool.events],
        "timeline": {"t_s": [t / NS_PER_S for t, *_ in rows], "ready": [r for _, r, _, _ in rows],
                     "provisioning": [p for _, _, p, _ in rows], "draining": [d for _, _, _, d in rows]},
    }
