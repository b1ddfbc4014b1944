"""Node SKUs of the Vidur NCCL measurements and the efficiency parameters that
map them onto the analytical network model.

The network model takes bandwidths and per-hop latencies; NCCL reaches a
fraction of a link's nominal bandwidth and pays a fixed cost per algorithm
step. So each (node SKU, operation, level) gets two parameters, applied when
the topology is built (:func:`session_spec`), never inside the backend:

- ``efficiency``: the bus efficiency; the model's bandwidth is nominal × efficiency;
- ``latency_ns``: the latency of one hop (a Switch step is two hops).

Levels: ``intra`` is NVLink (NVSwitch in a DGX; a bridged pair in the
``pairwise_nvlink`` boxes), ``inter`` what joins NVLink domains (InfiniBand
between DGX nodes; PCIe between NVLink pairs). The values were fitted with
``python -m cosim.adapters.network.nccl_report --fit`` (least squares on the
relative error of messages >= 1 MiB) and rounded; docs/network-nccl.md lists
the errors they give.
"""

from __future__ import annotations

import dataclasses

from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb


@dataclasses.dataclass(frozen=True)
class NodeSku:
    """A node type: its NVLink domain and nominal per-GPU bandwidths (GB/s, one direction)."""

    name: str
    nvlink_domain: int
    intra_kind: int
    intra_gbps: float
    inter_gbps: float
    local_mem_gbps: float
    note: str


@dataclasses.dataclass(frozen=True)
class Efficiency:
    """Bus efficiency (0..1] and per-hop latency (ns) of one level."""

    efficiency: float
    latency_ns: float


SWITCH = net_pb.TOPOLOGY_KIND_SWITCH
FULLY_CONNECTED = net_pb.TOPOLOGY_KIND_FULLY_CONNECTED

# Nominal figures from the vendors' data sheets (one direction per GPU).
SKUS: dict[str, NodeSku] = {s.name: s for s in (
    NodeSku("a100_dgx", 8, SWITCH, 300.0, 25.0, 2039.0,
            "DGX A100: NVLink3 via NVSwitch 300 GB/s; HDR InfiniBand 200 Gb/s per GPU"),
    NodeSku("h100_dgx", 8, SWITCH, 450.0, 50.0, 3350.0,
            "DGX H100: NVLink4 via NVSwitch 450 GB/s; NDR InfiniBand 400 Gb/s per GPU"),
    NodeSku("a100_pairwise_nvlink", 2, FULLY_CONNECTED, 300.0, 32.0, 2039.0,
            "4x A100 PCIe: NVLink bridge pairs 300 GB/s; PCIe Gen4 x16 32 GB/s between pairs"),
    NodeSku("h100_pairwise_nvlink", 2, FULLY_CONNECTED, 300.0, 64.0, 3350.0,
            "4x H100 NVL: NVLink bridge pairs 300 GB/s; PCIe Gen5 x16 64 GB/s between pairs"),
    NodeSku("a40_pairwise_nvlink", 2, FULLY_CONNECTED, 56.25, 32.0, 696.0,
            "A40: NVLink bridge pairs 56.25 GB/s; PCIe Gen4 x16 32 GB/s between pairs"),
)}

# (sku, operation, level) -> parameters; operation is "all_reduce" or "send_recv".
PARAMETERS: dict[tuple[str, str, str], Efficiency] = {}


def parameters(sku: str, operation: str, level: str) -> Efficiency:
    """The committed parameters, or efficiency 1 and latency 0 when none were fitted."""
    return PARAMETERS.get((sku, operation, level), Efficiency(1.0, 0.0))


def session_spec(sku: NodeSku, num_workers: int, devices_per_node: int, operation: str,
                 params: dict[tuple[str, str, str], Efficiency] | None = None) -> net_pb.NetworkSessionSpec:
    """The topology of one measured configuration, with efficiencies applied.

    ``num_workers`` ranks, ``devices_per_node`` of them per node: NVLink
    domains of min(devices_per_node, nvlink_domain) GPUs (dimension 0) joined
    by the inter level (dimension 1, a switch). Endpoint ``all`` holds the
    ranks, ``src``/``dst`` the first rank and the last (the send/recv pair).
    All-reduce runs ring in each dimension, localBWAware.
    """
    table = PARAMETERS if params is None else params
    intra_n = min(devices_per_node, sku.nvlink_domain, num_workers)
    inter_n = num_workers // intra_n
    spec = net_pb.NetworkSessionSpec(client=f"{sku.name}-{num_workers}x{devices_per_node}",
                                     mode=pb.SYNC_MODE_PREDICT)
    for n, level, kind, nominal in ((intra_n, "intra", sku.intra_kind, sku.intra_gbps),
                                    (inter_n, "inter", SWITCH, sku.inter_gbps)):
        if n > 1:
            p = table.get((sku.name, operation, level), Efficiency(1.0, 0.0))
            spec.dims.add(kind=kind, npus=n, bandwidth_gbps=nominal * p.efficiency, latency_ns=p.latency_ns)
    spec.system.local_mem_bandwidth_gbps = sku.local_mem_gbps
    spec.system.collective_optimization = net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE
    spec.endpoints.add(name="all", npu_ids=range(num_workers))
    spec.endpoints.add(name="src", npu_ids=[0])
    spec.endpoints.add(name="dst", npu_ids=[num_workers - 1])
    return spec
