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

Between GPUs without NVLink, NCCL's time depends on the path its bytes take
(:data:`PATHS`): peer to peer over PCIe, with the GPUs meeting at a CPU root
complex (``p2p``) or below one PCIe switch (``switch``), or staged through host
memory by its SHM transport (``host_staged``). On such a path NCCL picks, per
message, the fastest of its protocols by its own tuning model
(``src/graph/tuning.cc``): LL for small messages (8-byte stores of 4 data bytes
and a 4-byte flag: a low latency, half the bandwidth) and Simple for large ones;
LL128 is enabled only on NVLink. :func:`path_all_reduce_ns` times that choice::

    protocol p:  latency_p + steps x hop_p + share x bytes / (bus_bandwidth x width_p)
    time       = min over LL and Simple

with NCCL's base and per-step latencies of each protocol on PCI. A
:class:`PathLink` holds the path's two fitted figures (the LL latency and the
Simple bus bandwidth) and is built from a preset's figures by
:func:`path_link`.

The times are the compiled core's (``core/src/roofline/collectives.rs``):
``all_reduce_ns(size_bytes, ranks, bus_bytes_per_s, *, latency_us=0,
hop_latency_us=0, formula="ring")`` (``formula`` ``bestserve``: BestServe's
formula 8, bytes / n), ``all_to_all_ns(size_bytes, ranks, bus_bytes_per_s, *,
latency_us=0, hop_latency_us=0)``, and on a path ``path_all_reduce_ns(size_bytes,
ranks, link)`` (2(n-1) steps, 2(n-1)/n of the bytes) and
``path_all_to_all_ns(size_bytes, ranks, link)`` (n-1 steps, (n-1)/n of the bytes),
each 0 for a single rank.

Main names: :func:`all_reduce_ns`, :func:`all_to_all_ns`, :func:`path_all_reduce_ns`,
:func:`path_all_to_all_ns`, :class:`PathLink`, :func:`path_link`, :data:`PATH_CODES`.
"""

from __future__ import annotations

import dataclasses

from cosim_core import PCIE_PROTOCOLS as PROTOCOL_FIGURES
from cosim_core import (
    all_reduce_ns,
    all_to_all_ns,
    path_all_reduce_ns,
    path_all_to_all_ns,
    path_fastest_ns,
    path_protocol_ns,
)

__all__ = ["HOST_STAGED_BUS_GBPS", "HOST_STAGED_LATENCY_US", "LL", "PATHS", "PATH_CODES", "PCIE_PROTOCOLS", "SIMPLE",
           "PathLink", "Protocol", "all_reduce_ns", "all_to_all_ns", "path_all_reduce_ns", "path_all_to_all_ns",
           "path_link", "path_name"]


# -- paths without NVLink ---------------------------------------------------------------------

# Where the bytes of a collective go between two GPUs without NVLink (docs/validation.md, "PCIe
# paths"). NCCL (>= 2.19, src/graph/paths.cc, ncclTopoCheckP2p) uses its P2P transport below a
# PCIe switch, and through a CPU root complex only on AMD hosts with at most 2 GPUs; otherwise,
# and wherever the driver refuses peer access (GeForce cards), its SHM transport stages them
# through host memory.
PATHS = ("p2p", "switch", "host_staged")
# HardwareSpec.extra holds numbers only, so a path travels there as its code; the hub's presets
# write the same table (cosim.hub.config.presets.PATH_CODES; a test holds the two equal).
PATH_CODES: dict[str, float] = {"p2p": 1.0, "switch": 2.0, "host_staged": 3.0}


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One of NCCL's protocols on a PCI path, as its tuning model times it.

    Attributes:
        name: NCCL's name.
        base_latency_us: NCCL's base latency of the Ring algorithm with this protocol (baseLat).
        hop_latency_us: NCCL's latency of one ring step over PCI (hwLat[PCI][Ring]).
        width: the share of the Simple protocol's bus bandwidth it reaches.
    """

    name: str
    base_latency_us: float
    hop_latency_us: float
    width: float


# NCCL's protocols on PCI, as the compiled core holds them (its source: NCCL 2.28.3's tuning
# constants, core/src/roofline/collectives.rs): LL (6.6 µs base, 1.0 µs per step, half the bus
# bandwidth) and Simple (8.4 µs, 5.7 µs, all of it). LL128 needs NVLink, so it never runs over PCIe.
# The Vidur PCIe all-reduces (docs/validation.md) fit best with LL's 0.5.
LL, SIMPLE = PCIE_PROTOCOLS = tuple(Protocol(*figures) for figures in PROTOCOL_FIGURES)


# NCCL's SHM transport: the sending GPU stores into a host buffer, the receiving GPU loads from it
# (src/transport/shm.cc; copy engines only with NCCL_SHM_USE_CUDA_MEMCPY=1), so every byte crosses
# PCIe twice through host DRAM and the GPU's loads from host memory bound it, whatever the PCIe
# generation. Fitted (the LL latency and the Simple bus bandwidth, as for the P2P links) to
# nccl-tests all_reduce_perf, 2 GPUs, P2P refused by the driver (2x RTX 2080 Ti, PCIe Gen3 x16
# below one switch; github.com/Anthony-Hoo/Anthony-Hoo.github.io,
# posts/AutoDL_Multi-GPU_Interconnection_Test.md), 8 KiB-64 MiB: mean error 1.8%. It measured
# 4.00 GB/s from 4 MiB up; 2x A40 on PCIe Gen4 with NCCL_P2P_DISABLE=1 measured 3.86 GB/s at
# 1 GiB (github.com/eugenesiow/LLM-Insights, infrastructure/hardware/README.md).
HOST_STAGED_BUS_GBPS = 4.0
HOST_STAGED_LATENCY_US = 7.1


@dataclasses.dataclass(frozen=True)
class PathLink:
    """A path between GPUs without NVLink, with the figures NCCL's protocols are timed by.

    Attributes:
        path: one of :data:`PATHS`.
        bus_gbps: bus bandwidth of the Simple protocol, GB/s.
        latency_us: fixed time of an LL collective (NCCL's 6.6 µs base latency and the launch
            cost a measurement adds); a Simple one takes NCCL's 1.8 µs more.
    """

    path: str
    bus_gbps: float
    latency_us: float

    def protocol_ns(self, protocol: Protocol, size_bytes: float, steps: int, share: float) -> float:
        """Time of a collective of ``steps`` ring steps that sends ``share`` x ``size_bytes`` per
        rank, with ``protocol``, in ns: ``latency_us`` plus the protocol's base latency over LL's and
        its ``steps`` hop latencies, then the bytes at ``width`` x ``bus_gbps``."""
        return path_protocol_ns(self, PCIE_PROTOCOLS.index(protocol), size_bytes, steps, share)

    def fastest_ns(self, size_bytes: float, steps: int, share: float) -> tuple[float, Protocol]:
        """The protocol NCCL's tuning model would pick (the fastest; LL on a tie), and its time in ns."""
        ns, index = path_fastest_ns(self, size_bytes, steps, share)
        return ns, PCIE_PROTOCOLS[index]


def path_name(code: float) -> str:
    """The path whose :data:`PATH_CODES` code is ``code``.

    Raises:
        ValueError: no path has that code.
    """
    for name, value in PATH_CODES.items():
        if value == code:
            return name
    raise ValueError(f"no intra-node path has code {code}; codes are {PATH_CODES}")


def path_link(path: str, gbps: float, *, latency_us: float, bus_efficiency: float,
              host_staged_gbps: float = HOST_STAGED_BUS_GBPS,
              host_staged_latency_us: float = HOST_STAGED_LATENCY_US) -> PathLink:
    """The :class:`PathLink` of ``path`` on a link of ``gbps`` GB/s per direction.

    Args:
        path: one of :data:`PATHS`.
        gbps: the link's per-direction bandwidth, GB/s.
        latency_us: LL latency of P2P on the link (the preset's ``intra_node_path_latency_us``).
        bus_efficiency: Simple bus bandwidth of P2P as a share of ``gbps``.
        host_staged_gbps: Simple bus bandwidth through host memory, GB/s.
        host_staged_latency_us: LL latency through host memory.

    Returns:
        P2P's figures for ``p2p`` and ``switch`` (measured P2P bandwidth and latency through a
        switch equal those through a root complex within a few percent: docs/validation.md);
        the host memory's for ``host_staged``, its bandwidth never above P2P's on the link.

    Raises:
        ValueError: an unknown path or a figure out of range.
    """
    if path not in PATHS:
        raise ValueError(f"intra-node path {path!r} is not one of {PATHS}")
    if not (gbps > 0 and 0 < bus_efficiency <= 1 and latency_us >= 0 and host_staged_gbps > 0
            and host_staged_latency_us >= 0):
        raise ValueError(f"path figures out of range: gbps={gbps}, bus_efficiency={bus_efficiency}, "
                         f"latency_us={latency_us}, host_staged_gbps={host_staged_gbps}, "
                         f"host_staged_latency_us={host_staged_latency_us}")
    p2p_gbps = gbps * bus_efficiency
    if path == "host_staged":
        return PathLink(path, min(host_staged_gbps, p2p_gbps), host_staged_latency_us)
    return PathLink(path, p2p_gbps, latency_us)
