"""Writes ASTRA-sim 2.0's inputs for one transfer or collective.

A run folder holds ``network.yml`` and ``system.json`` (from the session's
topology and system layer), ``remote_memory.json``, an optional
``comm_group.json`` (the NPUs of a collective on one endpoint) and the
workload: one Chakra ET per NPU, ``workload.<npu>.et``, in the shape of
Chakra's microbenchmark generator (one COMM_COLL_NODE per NPU for a
collective; COMM_SEND/COMM_RECV nodes, chained back to back when a transfer
is streamed layer by layer, for a point-to-point transfer). The mapping is
documented in ``docs/astrasim.md``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosim.adapters.network.model import layer_sizes, shard_pairs
from cosim.v1 import network_service_pb2 as net_pb

from . import chakra

WORKLOAD_PREFIX = "workload"
COMM_GROUP_ID = 1  # the one group of comm_group.json, named by each node's pg_name (0 means every NPU)
# ASTRA-sim divides by local-mem-bw; a spec without one means "reductions are free",
# which a bandwidth this large gives (3 x floor(m / 1e21 x 1e9) = 0 for any real m).
FREE_LOCAL_MEM_GBPS = 1e12

_TOPOLOGY_NAMES = {net_pb.TOPOLOGY_KIND_RING: "Ring", net_pb.TOPOLOGY_KIND_FULLY_CONNECTED: "FullyConnected",
                   net_pb.TOPOLOGY_KIND_SWITCH: "Switch"}
_ALGORITHM_NAMES = {net_pb.COLLECTIVE_ALGORITHM_RING: "ring", net_pb.COLLECTIVE_ALGORITHM_DIRECT: "direct",
                    net_pb.COLLECTIVE_ALGORITHM_HALVING_DOUBLING: "halvingDoubling",
                    net_pb.COLLECTIVE_ALGORITHM_DOUBLE_BINARY_TREE: "doubleBinaryTree"}
_COMM_TYPES = {net_pb.COLLECTIVE_KIND_ALL_REDUCE: chakra.ALL_REDUCE,
               net_pb.COLLECTIVE_KIND_ALL_GATHER: chakra.ALL_GATHER,
               net_pb.COLLECTIVE_KIND_REDUCE_SCATTER: chakra.REDUCE_SCATTER,
               net_pb.COLLECTIVE_KIND_ALL_TO_ALL: chakra.ALL_TO_ALL}


def gbps_to_astra(bandwidth_gbps: float) -> float:
    """Decimal GB/s to ASTRA-sim's network.yml "GB/s" (GiB/s): the inverse of its bw x 2^30 / 1e9."""
    return bandwidth_gbps * 1e9 / (1 << 30)


def network_yml(spec: net_pb.NetworkSessionSpec) -> str:
    """The analytical ``network.yml`` of a session's topology, dimension 0 first."""
    dims = list(spec.dims)
    return "\n".join([
        "# written by cosim's astrasim adapter; bandwidth is ASTRA-sim's GB/s (GiB/s)",
        f"topology: [ {', '.join(_TOPOLOGY_NAMES[d.kind] for d in dims)} ]",
        f"npus_count: [ {', '.join(str(d.npus) for d in dims)} ]",
        f"bandwidth: [ {', '.join(repr(gbps_to_astra(d.bandwidth_gbps)) for d in dims)} ]",
        f"latency: [ {', '.join(repr(float(d.latency_ns)) for d in dims)} ]",
        ""])


def system_json(spec: net_pb.NetworkSessionSpec) -> dict[str, Any]:
    """The ``system.json`` of a session's system layer (ring everywhere by default)."""
    system, num_dims = spec.system, len(spec.dims)

    def names(field: str) -> list[str]:
        algorithms = list(getattr(system, field)) or [net_pb.COLLECTIVE_ALGORITHM_RING] * num_dims
        return [_ALGORITHM_NAMES[a] for a in algorithms]

    optimization = "localBWAware" if system.collective_optimization == \
        net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE else "baseline"
    return {
        "scheduling-policy": "LIFO",
        "endpoint-delay": int(system.endpoint_delay_ns),
        "active-chunks-per-dimension": max(1, system.active_chunks_per_dimension),
        "preferred-dataset-splits": max(1, system.preferred_dataset_splits),
        "all-reduce-implementation": names("all_reduce"),
        "all-gather-implementation": names("all_gather"),
        "reduce-scatter-implementation": names("reduce_scatter"),
        "all-to-all-implementation": names("all_to_all"),
        "collective-optimization": optimization,
        "local-mem-bw": system.local_mem_bandwidth_gbps or FREE_LOCAL_MEM_GBPS,
        "boost-mode": 0,
    }


@dataclass(frozen=True)
class RunFiles:
    """Paths of one run's inputs, as the binary's command-line options want them."""

    workload_prefix: Path
    system: Path
    network: Path
    remote_memory: Path
    comm_group: Path | None

    def arguments(self) -> list[str]:
        """ASTRA-sim 2.0's options naming these files."""
        args = [f"--workload-configuration={self.workload_prefix}", f"--system-configuration={self.system}",
                f"--network-configuration={self.network}", f"--remote-memory-configuration={self.remote_memory}"]
        if self.comm_group is not None:
            args.append(f"--comm-group-configuration={self.comm_group}")
        return args


def _write_common(folder: Path, spec: net_pb.NetworkSessionSpec, comm_group: Sequence[int] | None) -> RunFiles:
    folder.mkdir(parents=True, exist_ok=True)
    files = RunFiles(workload_prefix=folder / WORKLOAD_PREFIX, system=folder / "system.json",
                     network=folder / "network.yml", remote_memory=folder / "remote_memory.json",
                     comm_group=folder / "comm_group.json" if comm_group is not None else None)
    files.network.write_text(network_yml(spec))
    files.system.write_text(json.dumps(system_json(spec), indent=2) + "\n")
    files.remote_memory.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}) + "\n")
    if files.comm_group is not None:
        files.comm_group.write_text(json.dumps({str(COMM_GROUP_ID): list(comm_group or [])}) + "\n")
    return files


def num_npus(spec: net_pb.NetworkSessionSpec) -> int:
    """NPUs in the topology: the product of the dimensions' counts."""
    total = 1
    for dim in spec.dims:
        total *= dim.npus
    return total


def write_collective(folder: Path, spec: net_pb.NetworkSessionSpec, kind: int, size_bytes: int,
                     npus: Sequence[int] | None) -> RunFiles:
    """Inputs for one collective of ``size_bytes`` per NPU over ``npus`` (None: all).

    NPUs outside the group get a trace with one node ASTRA-sim skips
    (:func:`.chakra.idle_node`); a group smaller than the topology is written
    to ``comm_group.json`` and named in each node's ``pg_name``.
    """
    total = num_npus(spec)
    group = set(range(total)) if npus is None else set(npus)
    files = _write_common(folder, spec, None if npus is None or len(group) == total else sorted(group))
    comm_group = None if files.comm_group is None else COMM_GROUP_ID
    for npu in range(total):
        nodes = [chakra.collective_node(0, _COMM_TYPES[kind], size_bytes, comm_group) if npu in group
                 else chakra.idle_node()]
        chakra.write_et(f"{files.workload_prefix}.{npu}.et", nodes)
    return files


def write_transfer(folder: Path, spec: net_pb.NetworkSessionSpec, src_npus: Sequence[int],
                   dst_npus: Sequence[int], size_bytes: int, layers: int) -> RunFiles | None:
    """Inputs for one point-to-point transfer, sharded as the network backend does.

    Shard j goes from ``src_npus[j % |src|]`` to ``dst_npus[j % |dst|]``; a
    shard streamed in ``layers`` messages is a chain of sends (and of
    receives), each depending on the one before. Returns None when every
    shard already sits where it must go (nothing to simulate).
    """
    per_npu: dict[int, list[Any]] = {}
    tag = 0
    for s, d, shard in shard_pairs(src_npus, dst_npus, size_bytes):
        if s == d:
            continue
        for size in layer_sizes(shard, layers):
            for npu, make in ((s, chakra.send_node), (d, chakra.recv_node)):
                nodes = per_npu.setdefault(npu, [])
                deps = [nodes[-1].id] if nodes and _same_pair(nodes[-1], s, d) else []
                nodes.append(make(len(nodes), s, d, size, tag, deps))
            tag += 1
    if not per_npu:
        return None
    files = _write_common(folder, spec, None)
    for npu in range(num_npus(spec)):
        chakra.write_et(f"{files.workload_prefix}.{npu}.et", per_npu.get(npu) or [chakra.idle_node()])
    return files


def _same_pair(node: Any, src: int, dst: int) -> bool:
    """True when ``node`` belongs to the same (src, dst) shard, so layers chain."""
    values = chakra.attributes(node)
    return bool(values.get("comm_src") == src and values.get("comm_dst") == dst)
