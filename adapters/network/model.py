"""Congestion-unaware timing (SYNC_MODE_PREDICT) of collectives and transfers.

:class:`NetworkModel` holds one session's topology, system knobs and
endpoints. :meth:`NetworkModel.collective_ns` reproduces ASTRA-sim 2.0's
analytical backend and system layer: the collective is cut into
``preferred_dataset_splits`` chunks; each chunk runs its phases in dimension
order; chunks run one after another in 1-D and pipeline across dimensions in
several (each dimension serves ``active_chunks_per_dimension`` chunks at a time,
first come first served), which gives the reference's [Ring 8, Switch 4]
example its ``splits × (dim-0 RS + AG)`` shape.

:meth:`NetworkModel.transfer_ns` extends the model with point-to-point
transfers between endpoints: the size is cut into one shard per NPU pair (the
larger endpoint's NPU count), shards go in parallel; with ``layers`` L > 1 each
shard is L messages injected back to back (the sender is busy ⌊m/bw⌋ per
message), so the last one arrives ``(L-1)·⌊m/bw⌋ + st(m)`` after the start,
with m the per-layer shard; the same as the congestion-aware mode gives an
uncontended one-hop transfer.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from cosim.v1 import network_service_pb2 as net_pb

from .collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    Group,
    Phase,
    StepCosts,
    make_group,
    phase_ns,
    plan_chunk,
)
from .topology import Topology


def shard_pairs(src_npus: Sequence[int], dst_npus: Sequence[int], size_bytes: int) -> list[tuple[int, int, int]]:
    """Splits a transfer into (src, dst, bytes) shards sent in parallel.

    Shard j goes from ``src_npus[j % |src|]`` to ``dst_npus[j % |dst|]``; there
    are max(|src|, |dst|) shards and the remainder bytes go to the first ones.
    """
    count = max(len(src_npus), len(dst_npus))
    base, extra = divmod(size_bytes, count)
    return [(src_npus[j % len(src_npus)], dst_npus[j % len(dst_npus)], base + (1 if j < extra else 0))
            for j in range(count) if base + (1 if j < extra else 0) > 0]


def layer_sizes(size_bytes: int, layers: int) -> list[int]:
    """``layers`` near-equal message sizes summing to ``size_bytes`` (0 or 1: one)."""
    count = max(1, min(layers, size_bytes))
    base, extra = divmod(size_bytes, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


class NetworkModel:
    """One session's network: topology, system layer and endpoints.

    Args:
        spec: a validated ``NetworkSessionSpec``.
    """

    def __init__(self, spec: net_pb.NetworkSessionSpec) -> None:
        self.topology = Topology.from_spec(spec)
        system = spec.system
        self.costs = StepCosts(int(system.endpoint_delay_ns), system.local_mem_bandwidth_gbps)
        self.splits = max(1, system.preferred_dataset_splits)
        self.active_chunks = max(1, system.active_chunks_per_dimension)
        self.is_local_bw_aware = system.collective_optimization == net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE
        self.algorithms: dict[int, Sequence[int]] = {
            ALL_REDUCE: tuple(system.all_reduce), ALL_GATHER: tuple(system.all_gather),
            REDUCE_SCATTER: tuple(system.reduce_scatter), ALL_TO_ALL: tuple(system.all_to_all)}
        self.endpoints = {e.name: tuple(e.npu_ids) for e in spec.endpoints}
        self._groups: dict[str, Group] = {}
        self._cache: dict[tuple[int, int, str], int] = {}

    def group(self, endpoint: str) -> Group:
        """The NPUs of ``endpoint`` ("" = every NPU) as a collective group."""
        if endpoint not in self._groups:
            npus = self.endpoints[endpoint] if endpoint else range(self.topology.num_npus)
            self._groups[endpoint] = make_group(self.topology, list(npus))
        return self._groups[endpoint]

    def chunks(self, kind: int, size_bytes: int, group: Group) -> list[int]:
        """Chunk sizes: size / splits, raised to the group size except for all-gather."""
        chunk = size_bytes // self.splits
        if kind != ALL_GATHER:
            chunk = max(chunk, group.size)
        return [max(chunk, 1)] * self.splits

    def plan(self, kind: int, chunk_bytes: int, group: Group) -> list[Phase]:
        """Phases of one chunk (see :func:`.collectives.plan_chunk`)."""
        return plan_chunk(group, kind, chunk_bytes, algorithms=self.algorithms,
                          is_local_bw_aware=self.is_local_bw_aware, costs=self.costs)

    def collective_ns(self, kind: int, size_bytes: int, endpoint: str = "") -> int:
        """Congestion-unaware time of one collective, ns (cached per session)."""
        key = (kind, size_bytes, endpoint)
        if key not in self._cache:
            group = self.group(endpoint)
            chunks = self.chunks(kind, size_bytes, group)
            stages = [[(p.dim, phase_ns(self.topology, p, self.costs.endpoint_delay_ns))
                       for p in self.plan(kind, c, group)] for c in chunks]
            self._cache[key] = pipeline_ns(stages, self.active_chunks)
        return self._cache[key]

    def transfer_ns(self, src: str, dst: str, size_bytes: int, layers: int) -> int:
        """Congestion-unaware time of a point-to-point transfer, ns."""
        ep = self.costs.endpoint_delay_ns
        worst = 0
        for s, d, shard in shard_pairs(self.endpoints[src], self.endpoints[dst], size_bytes):
            if s == d:
                continue  # the shard is already where it must go
            sizes = layer_sizes(shard, layers)
            bandwidth = self.topology.path(s, d)[1]
            inject = sum(int(m / bandwidth) for m in sizes[:-1])
            worst = max(worst, inject + self.topology.send_ns(s, d, sizes[-1]) + ep)
        return worst


def pipeline_ns(stages: list[list[tuple[int, int]]], servers_per_dim: int) -> int:
    """Makespan of chunks flowing through (dim, duration) stages.

    NOTE: each dimension has ``servers_per_dim`` servers; a chunk's next stage
    starts when it finished the previous one and a server of that dimension is
    free; stages are served in order of readiness (ties: lower chunk first).
    Chunks that are alone in the dims they use never wait, so 1-D chunks add up.
    """
    free: dict[int, list[int]] = {}
    ready = [(0, i, 0) for i in range(len(stages)) if stages[i]]  # (ready_ns, chunk, stage)
    heapq.heapify(ready)
    end = 0
    while ready:
        t, chunk, index = heapq.heappop(ready)
        dim, duration = stages[chunk][index]
        servers = free.setdefault(dim, [0] * servers_per_dim)
        start = max(t, heapq.heappop(servers))
        finish = start + duration
        heapq.heappush(servers, finish)
        end = max(end, finish)
        if index + 1 < len(stages[chunk]):
            heapq.heappush(ready, (finish, chunk, index + 1))
    return end


__all__ = ["NetworkModel", "layer_sizes", "pipeline_ns", "shard_pairs"]
