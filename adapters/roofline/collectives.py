"""Collective times of the roofline: NCCL's ring model on one link.

NCCL times a collective as a base latency, plus one hop latency per
algorithm step, plus the bytes over the algorithm bandwidth
(``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` in NCCL's
``src/graph/tuning.cc``). For a ring all-reduce over ``n`` ranks that is
2(n-1) steps, and the algorithm bandwidth is the bus bandwidth times
n / (2(n-1)), so::

    all_reduce = latency + 2(n-1) hop + 2(n-1)/n x bytes / bus_bandwidth

An all-to-all (MoE dispatch or combine) sends (n-1)/n of each rank's buffer
to the other ranks; it is charged n-1 steps, the count NCCL's model gives
all-gather and reduce-scatter, which are built the same way::

    all_to_all = latency + (n-1) hop + (n-1)/n x bytes / bus_bandwidth

``bus_bandwidth`` is the link's per-direction bandwidth times the bus
efficiency a collective reaches on it (``comm_eff``). The device presets
carry all three link figures, fitted to NCCL measurements
(``docs/validation.md``, "Links and collectives").

Main names: :func:`all_reduce_ns`, :func:`all_to_all_ns`.
"""

from __future__ import annotations

NS = 1e9


def all_reduce_ns(size_bytes: float, ranks: int, bus_bytes_per_s: float, *, latency_us: float = 0.0,
                  hop_latency_us: float = 0.0, formula: str = "ring") -> float:
    """Time of one all-reduce of ``size_bytes`` per rank over ``ranks`` ranks, in ns.

    Args:
        size_bytes: the buffer every rank holds before and after.
        ranks: ranks taking part (> 1).
        bus_bytes_per_s: bus bandwidth, bytes/s (link bandwidth x efficiency).
        latency_us: fixed time of the collective.
        hop_latency_us: latency of one of its 2(ranks - 1) steps.
        formula: ``ring`` (2(n-1)/n x bytes) or ``bestserve`` (BestServe's
            formula 8, bytes / n).

    Returns:
        The all-reduce time in ns; 0 for a single rank.
    """
    if ranks < 2:
        return 0.0
    scale = 1.0 / ranks if formula == "bestserve" else 2.0 * (ranks - 1) / ranks
    return (latency_us + 2 * (ranks - 1) * hop_latency_us) * 1e3 + scale * size_bytes / bus_bytes_per_s * NS


def all_to_all_ns(size_bytes: float, ranks: int, bus_bytes_per_s: float, *, latency_us: float = 0.0,
                  hop_latency_us: float = 0.0) -> float:
    """Time of one all-to-all of each rank's ``size_bytes`` buffer over ``ranks`` ranks, in ns.

    Args:
        size_bytes: each rank's send buffer, (ranks - 1)/ranks of which leaves the rank.
        ranks: ranks taking part (> 1).
        bus_bytes_per_s: bus bandwidth, bytes/s (link bandwidth x efficiency).
        latency_us: fixed time of the collective.
        hop_latency_us: latency of one of its ranks - 1 steps.

    Returns:
        The all-to-all time in ns; 0 for a single rank.
    """
    if ranks < 2:
        return 0.0
    return (latency_us + (ranks - 1) * hop_latency_us) * 1e3 + (ranks - 1) / ranks * size_bytes / bus_bytes_per_s * NS
