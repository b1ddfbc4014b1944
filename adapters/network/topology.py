"""Multi-dimensional topology: NPU addresses, hop counts, send times and links.

:class:`Topology` is built once per session from the ``dims`` of a
``NetworkSessionSpec``. It answers the congestion-unaware send time of
ASTRA-sim's analytical backend (:meth:`Topology.send_ns`) and, for the
congestion-aware mode, the directed links a message crosses
(:meth:`Topology.route`).

NPU ids are mixed-radix with dimension 0 least significant, so dimension-0
peers are consecutive ids. Bandwidths are bytes/ns (the proto's decimal GB/s;
the network.yml loader already applied ASTRA-sim's GiB conversion).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from cosim.v1 import network_service_pb2 as net_pb

RING = net_pb.TOPOLOGY_KIND_RING
FULLY_CONNECTED = net_pb.TOPOLOGY_KIND_FULLY_CONNECTED
SWITCH = net_pb.TOPOLOGY_KIND_SWITCH

# A directed link: (dim, kind of link, a, b). For Ring and FullyConnected a and
# b are NPU ids; Switch up-links are (dim, "up", npu, group) and down-links
# (dim, "down", group, npu), with one switch per group of dim peers.
Link = tuple[int, str, int, int]


@dataclasses.dataclass(frozen=True)
class Dim:
    """One dimension: basic topology, NPU count, bytes/ns, ns per hop."""

    kind: int
    npus: int
    bandwidth_bpns: float
    latency_ns: float


class Topology:
    """The dims of one session and the arithmetic on NPU ids.

    Args:
        dims: dimensions, dimension 0 first.
    """

    def __init__(self, dims: Sequence[Dim]) -> None:
        self.dims = tuple(dims)
        self.num_npus = math.prod(d.npus for d in self.dims)
        self._strides = [math.prod(d.npus for d in self.dims[:i]) for i in range(len(self.dims))]

    @classmethod
    def from_spec(cls, spec: net_pb.NetworkSessionSpec) -> Topology:
        """Builds the topology of a (validated) session spec."""
        return cls([Dim(d.kind, d.npus, d.bandwidth_gbps, d.latency_ns) for d in spec.dims])

    def address(self, npu: int) -> tuple[int, ...]:
        """Per-dimension coordinates of ``npu`` (dimension 0 first)."""
        return tuple((npu // s) % d.npus for s, d in zip(self._strides, self.dims))

    def npu_id(self, address: Sequence[int]) -> int:
        """Inverse of :meth:`address`."""
        return sum(c * s for c, s in zip(address, self._strides))

    def first_differing_dim(self, src: int, dst: int) -> int:
        """Lowest dimension whose coordinates differ; -1 when src == dst."""
        for i, (a, b) in enumerate(zip(self.address(src), self.address(dst))):
            if a != b:
                return i
        return -1

    def hops(self, dim: int, a: int, b: int) -> int:
        """Hops between coordinates ``a`` and ``b`` of ``dim`` (ASTRA-sim rules)."""
        if a == b:
            return 0
        d = self.dims[dim]
        if d.kind == RING:  # bidirectional: the shorter way round
            dist = abs(a - b)
            return min(dist, d.npus - dist)
        return 1 if d.kind == FULLY_CONNECTED else 2

    def wire_ns(self, dim: int, hops: int, size_bytes: float) -> int:
        """⌊hops × latency + size / bw⌋: one cut-through send in ``dim``."""
        d = self.dims[dim]
        return int(hops * d.latency_ns + size_bytes / d.bandwidth_bpns)

    def path(self, src: int, dst: int) -> tuple[float, float]:
        """(Σ hops × latency, bottleneck bytes/ns) over the dimensions that differ."""
        latency, bandwidth = 0.0, float("inf")
        for dim, (a, b) in enumerate(zip(self.address(src), self.address(dst))):
            if a != b:
                latency += self.hops(dim, a, b) * self.dims[dim].latency_ns
                bandwidth = min(bandwidth, self.dims[dim].bandwidth_bpns)
        return latency, bandwidth

    def send_ns(self, src: int, dst: int, size_bytes: float) -> int:
        """Congestion-unaware send time of ``size_bytes`` from ``src`` to ``dst``.

        ⌊hops × latency + size / bw⌋, charged once for serialization however
        many hops (cut-through), as ASTRA-sim's congestion-unaware backend.
        ASTRA-sim sends in the lowest differing dimension only; its
        collectives never differ in more than one, where this is the same. A
        point-to-point transfer may cross several: then the latencies add up
        and the slowest dimension's bandwidth serializes. 0 when src == dst.
        """
        if src == dst:
            return 0
        latency, bandwidth = self.path(src, dst)
        if len(self.dims) == 1 or self.first_differing_dim(src, dst) == self._last_differing_dim(src, dst):
            dim = self.first_differing_dim(src, dst)  # ASTRA-sim's own arithmetic, bit for bit
            return self.wire_ns(dim, self.hops(dim, self.address(src)[dim], self.address(dst)[dim]), size_bytes)
        return int(latency + size_bytes / bandwidth)

    def _last_differing_dim(self, src: int, dst: int) -> int:
        pairs = list(zip(self.address(src), self.address(dst)))
        return max((i for i, (a, b) in enumerate(pairs) if a != b), default=-1)

    # --- congestion-aware routing -------------------------------------------------

    def route(self, src: int, dst: int) -> list[Link]:
        """Directed links from ``src`` to ``dst``, dimension-ordered (ascending).

        Within one dimension: Ring takes the shorter direction (clockwise on a
        tie), FullyConnected its dedicated link, Switch the up- and down-link
        of the switch of that group of peers.
        """
        links: list[Link] = []
        here = list(self.address(src))
        goal = self.address(dst)
        for dim, d in enumerate(self.dims):
            if here[dim] == goal[dim]:
                continue
            group = self._group(here, dim)
            if d.kind == RING:
                step = 1 if (goal[dim] - here[dim]) % d.npus <= d.npus // 2 else -1
                while here[dim] != goal[dim]:
                    a = self.npu_id(here)
                    here[dim] = (here[dim] + step) % d.npus
                    links.append((dim, "ring", a, self.npu_id(here)))
            elif d.kind == FULLY_CONNECTED:
                a = self.npu_id(here)
                here[dim] = goal[dim]
                links.append((dim, "fc", a, self.npu_id(here)))
            else:
                a = self.npu_id(here)
                here[dim] = goal[dim]
                links += [(dim, "up", a, group), (dim, "down", group, self.npu_id(here))]
        return links

    def _group(self, address: Sequence[int], dim: int) -> int:
        """Id of the set of peers along ``dim`` (the NPU with coordinate 0 there)."""
        return self.npu_id([0 if i == dim else c for i, c in enumerate(address)])
