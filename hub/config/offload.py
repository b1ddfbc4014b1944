"""A client's KV offload tiers: ``clients[].scheduler.kv_offload`` (docs/kv-offload.md).

vLLM's CPU offloading (the OffloadingConnector with its CPU backend, vLLM 0.11 to 0.15:
``--kv-transfer-config '{"kv_connector":"OffloadingConnector", ..., "kv_connector_extra_config":
{"num_cpu_blocks": N}}'``, or ``--kv-offloading-size`` GiB from 0.14) keeps a host tier of
``cpu_blocks`` KV blocks, filled as blocks are computed and read back on a prefix hit the GPU
cache misses (:mod:`cosim.hub.sim.scheduling.offload`). A ``storage`` tier below it is an
LMCache-style local store (disk or remote), written through with the host tier.
"""

from __future__ import annotations

from pydantic import Field

from .bounds import MAX_BLOCKS, MAX_GBPS, MIN_GBPS
from .frozen import FrozenModel

#: Host-link rate a KV copy reaches, as a share of the link's datasheet rate: vLLM's offloading blog
#: (2025-12-29, "Inside vLLM's New Offloading Connector", NVIDIA H100) measures "up to about 50GB/s"
#: single-direction with DMA (cudaMemcpyAsync) for the 0.5-2.5 MB blocks of vLLM 0.12's layout, on a
#: PCIe Gen5 x16 link of 64 GB/s per direction (the H100-SXM preset's host_link_gbps).
HOST_DMA_EFFICIENCY = 50 / 64


class StorageTierConfig(FrozenModel):
    """An LMCache-style storage tier below the host tier (local disk, or a remote store)."""

    blocks: int = Field(gt=0, le=MAX_BLOCKS, description="capacity, KV blocks (of the client's block_size)")
    read_gbps: float = Field(ge=MIN_GBPS, le=MAX_GBPS, description="read rate, GB/s (e.g. an NVMe drive's)")
    write_gbps: float = Field(ge=MIN_GBPS, le=MAX_GBPS, description="write rate, GB/s")
    latency_s: float = Field(0.0, ge=0, le=3600, description="per read or write, seconds")


class KVOffloadConfig(FrozenModel):
    """vLLM's CPU KV offloading of one client (OffloadingConnector, vLLM 0.11-0.15; docs/kv-offload.md)."""

    cpu_blocks: int = Field(gt=0, le=MAX_BLOCKS, description="host tier capacity, KV blocks of the client's "
                            "block_size per device (vLLM's num_cpu_blocks; the BLIS experiments' cpu_kv_blocks)")
    host_gbps: float | None = Field(
        None, ge=MIN_GBPS, le=MAX_GBPS, description="copy rate between a device and host memory, GB/s per "
        "direction; default the device preset's host_link_gbps x 50/64 (vLLM's measured DMA rate on H100)")
    storage: StorageTierConfig | None = Field(None, description="an LMCache-style tier below the host tier")
