"""Node SKUs of the Vidur NCCL measurements and the efficiency parameters that
map them onto the analytical network model.

The network model takes bandwidths and per-hop latencies; NCCL reaches a
fraction of a link's nominal bandwidth and pays a fixed cost per algorithm
step. So each (node SKU, operation, level, shape) gets two parameters, applied
when the topology is built (:func:`session_spec`), never inside the backend:

- ``efficiency``: the bus efficiency; the model's bandwidth is nominal × efficiency;
- ``latency_ns``: the latency of one hop (a Switch step is two hops).

Levels: ``intra`` is NVLink (NVSwitch in a DGX; a bridged pair in the
``pairwise_nvlink`` boxes), ``inter`` what joins NVLink domains (InfiniBand
between DGX nodes; PCIe between NVLink pairs). Shape is ``ranks x ranks per
node``: NCCL picks its algorithm, protocol and channel count (and so the NICs
it drives) by shape, so one efficiency per SKU does not fit every shape. The
intra parameters of a shape with several NVLink domains are those of one
domain alone (``16x8`` uses ``8x8``). The values were fitted with
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

Key = tuple[str, str, str, str]  # (sku, operation, level, "ranksxranks_per_node")

# Operation is "all_reduce" or "send_recv".
PARAMETERS: dict[Key, Efficiency] = {
    ('a100_dgx', 'all_reduce', 'inter', '16x8'): Efficiency(0.061, 180180.0),
    ('a100_dgx', 'all_reduce', 'inter', '2x1'): Efficiency(0.239, 19330.0),
    ('a100_dgx', 'all_reduce', 'inter', '4x2'): Efficiency(0.088, 0.0),
    ('a100_dgx', 'all_reduce', 'inter', '8x4'): Efficiency(0.145, 54530.0),
    ('a100_dgx', 'all_reduce', 'intra', '2x2'): Efficiency(0.641, 10500.0),
    ('a100_dgx', 'all_reduce', 'intra', '4x4'): Efficiency(0.69, 4410.0),
    ('a100_dgx', 'all_reduce', 'intra', '8x8'): Efficiency(0.642, 2040.0),
    ('a100_dgx', 'send_recv', 'inter', '2x1'): Efficiency(0.311, 14170.0),
    ('a100_dgx', 'send_recv', 'intra', '2x2'): Efficiency(0.956, 5250.0),
    ('a100_pairwise_nvlink', 'all_reduce', 'inter', '4x4'): Efficiency(0.27, 5890.0),
    ('a100_pairwise_nvlink', 'all_reduce', 'intra', '2x2'): Efficiency(0.751, 16980.0),
    ('a100_pairwise_nvlink', 'send_recv', 'inter', '2x1'): Efficiency(0.079, 0.0),
    ('a100_pairwise_nvlink', 'send_recv', 'intra', '2x2'): Efficiency(1.159, 5870.0),
    ('a40_pairwise_nvlink', 'send_recv', 'inter', '2x1'): Efficiency(0.087, 0.0),
    ('a40_pairwise_nvlink', 'send_recv', 'intra', '2x2'): Efficiency(0.073, 0.0),
    ('h100_dgx', 'all_reduce', 'intra', '2x2'): Efficiency(0.753, 4590.0),
    ('h100_dgx', 'all_reduce', 'intra', '4x4'): Efficiency(0.934, 2120.0),
    ('h100_dgx', 'all_reduce', 'intra', '8x8'): Efficiency(0.941, 1160.0),
    ('h100_dgx', 'send_recv', 'inter', '2x1'): Efficiency(0.716, 6470.0),
    ('h100_dgx', 'send_recv', 'intra', '2x2'): Efficiency(0.807, 3960.0),
    ('h100_pairwise_nvlink', 'all_reduce', 'inter', '4x4'): Efficiency(0.315, 8660.0),
    ('h100_pairwise_nvlink', 'all_reduce', 'intra', '2x2'): Efficiency(0.719, 8080.0),
    ('h100_pairwise_nvlink', 'send_recv', 'inter', '2x1'): Efficiency(0.039, 0.0),
    ('h100_pairwise_nvlink', 'send_recv', 'intra', '2x2'): Efficiency(1.159, 5870.0),
}


def level_keys(sku: NodeSku, num_workers: int, devices_per_node: int, operation: str) -> dict[str, Key]:
    """The parameter key of each level a shape uses."""
    intra_n = min(devices_per_node, sku.nvlink_domain, num_workers)
    keys = {}
    if intra_n > 1:
        keys["intra"] = (sku.name, operation, "intra", f"{intra_n}x{intra_n}")
    if num_workers // intra_n > 1:
        keys["inter"] = (sku.name, operation, "inter", f"{num_workers}x{devices_per_node}")
    return keys


def session_spec(sku: NodeSku, num_workers: int, devices_per_node: int, operation: str,
                 params: dict[Key, Efficiency] | None = None) -> net_pb.NetworkSessionSpec:
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
    keys = level_keys(sku, num_workers, devices_per_node, operation)
    for n, level, kind, nominal in ((intra_n, "intra", sku.intra_kind, sku.intra_gbps),
                                    (inter_n, "inter", SWITCH, sku.inter_gbps)):
        if n > 1:
            p = table.get(keys[level], Efficiency(1.0, 0.0))
            spec.dims.add(kind=kind, npus=n, bandwidth_gbps=nominal * p.efficiency, latency_ns=p.latency_ns)
    spec.system.local_mem_bandwidth_gbps = sku.local_mem_gbps
    spec.system.collective_optimization = net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE
    spec.endpoints.add(name="all", npu_ids=range(num_workers))
    spec.endpoints.add(name="src", npu_ids=[0])
    spec.endpoints.add(name="dst", npu_ids=[num_workers - 1])
    return spec
