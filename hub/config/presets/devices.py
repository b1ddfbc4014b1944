"""Device presets: peak compute, memory and interconnect of one device.

:class:`DevicePreset` holds datasheet figures (see ``devices.yaml`` for the
conventions: dense peaks, per-direction GB/s, GiB capacities) and a source
for each; :meth:`DevicePreset.peak_tflops_for` resolves dtype spellings.
The intra-node link is a kind (:data:`LINK_KINDS`), a per-direction
bandwidth and the three figures of NCCL's ring model that collectives are
timed with (``docs/validation.md``, "Links and collectives"); between GPUs
without NVLink, also the path NCCL's bytes take (:data:`PATH_CODES`) and
its two figures ("PCIe paths").
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from cosim.hub.config.bounds import (
    MAX_BYTES,
    MAX_DEVICES,
    MAX_FIGURE,
    MAX_LINK_LATENCY_US,
    MIN_FIGURE,
    MIN_LINK_EFFICIENCY,
)
from cosim.hub.config.frozen import FrozenModel
from cosim.hub.config.presets.registry import unknown

DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")

# Spellings users write in configs (torch/HF names) -> the keys used in peak_tflops.
DTYPE_ALIASES = {
    "float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "float16": "fp16",
    "half": "fp16", "bfloat16": "bf16", "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8", "e4m3": "fp8", "nvfp4": "fp4", "mxfp4": "fp4",
}

# Intra-node link kinds: NVLink (bridge or NVSwitch), PCIe (no GPU link), Huawei HCCS, AMD
# Infinity Fabric (xGMI), NVLink-C2C (Grace), Intel UPI (CPU sockets), RoCE (Intel Gaudi's on-chip
# 200 GbE RDMA ports, wired all to all without a switch). A kind names the link and changes no
# timing: collectives on each take the same ring model with the preset's own figures.
LINK_KINDS = ("nvlink", "pcie", "hccs", "infinity_fabric", "nvlink_c2c", "upi", "roce")
LinkKind = Literal["nvlink", "pcie", "hccs", "infinity_fabric", "nvlink_c2c", "upi", "roce"]

# Paths NCCL's bytes take between GPUs without NVLink (devices.yaml, intra_node_path), and the code
# each travels as in HardwareSpec.extra, which holds numbers only. The roofline's collectives read
# the same table (cosim.adapters.roofline.collectives.PATH_CODES; a test holds the two equal).
PATH_CODES: dict[str, float] = {"p2p": 1.0, "switch": 2.0, "host_staged": 3.0}
PathKind = Literal["p2p", "switch", "host_staged"]
PATH_FIELDS = ("intra_node_path", "intra_node_path_latency_us", "intra_node_path_bus_efficiency")

# Figures that must name a source when set.
SOURCED_FIELDS = ("peak_tflops", "mem_bandwidth_gbps", "mem_capacity_gib", "intra_node_link", "intra_node_gbps",
                  "intra_node_latency_us", "intra_node_hop_latency_us", "intra_node_bus_efficiency",
                  *PATH_FIELDS, "inter_node_gbps", "devices_per_node", "tdp_w", "idle_w", "memory_bound_w",
                  "price_per_hour_usd")

# Figures of the KV-capacity computation (cosim.hub.config.memory); sourced when set.
MEMORY_FIELDS = ("mem_reported_bytes", "num_sms", "host_link_gbps")


def normalize_dtype(dtype: str) -> str:
    """Canonical dtype key ('bfloat16' -> 'bf16'); unknown spellings pass through lower-cased."""
    key = dtype.strip().lower()
    return DTYPE_ALIASES.get(key, key)


class DevicePreset(FrozenModel):
    """One accelerator or CPU as the roofline and KV-capacity models see it.

    Its figures are finite and bounded as ``hardware.<name>.overrides`` are (README, "What `cosim
    validate` refuses"): a scenario's presets file holds them too.
    """

    name: str = Field(description="Device name, e.g. 'H100-SXM'.")
    aliases: tuple[str, ...] = Field(default=(), description="Other names, matched case-insensitively.")
    kind: Literal["gpu", "npu", "cpu"] = Field(description="Device class.")
    vendor: str = Field(description="Manufacturer.")
    peak_tflops: dict[str, float] = Field(description="Dense peak TFLOP/s (TOP/s for int8) per dtype key.")
    mem_bandwidth_gbps: float = Field(ge=MIN_FIGURE, le=MAX_FIGURE, description="Memory bandwidth, GB/s.")
    mem_capacity_gib: float = Field(gt=0, le=MAX_BYTES / 2**30,
                                    description="Memory capacity, GiB (datasheet 'GB' of HBM/GDDR).")
    mem_reported_bytes: int | None = Field(
        default=None, gt=0, le=MAX_BYTES,
        description="Total memory the CUDA runtime reports (torch.cuda.mem_get_info), bytes: what vLLM multiplies "
                    "by gpu_memory_utilization; null = mem_capacity_gib.")
    num_sms: int | None = Field(default=None, gt=0, le=MAX_BYTES,
                                description="Streaming multiprocessors (CUs); null = unknown.")
    intra_node_link: LinkKind = Field(description=f"Kind of the link between devices of a node, one of {LINK_KINDS}.")
    intra_node_gbps: float = Field(ge=MIN_FIGURE, le=MAX_FIGURE,
                                   description="Per-device interconnect inside a node, GB/s per direction.")
    intra_node_latency_us: float = Field(
        ge=0, le=MAX_LINK_LATENCY_US,
        description="Fixed time of one collective on the intra-node link (NCCL's base latency), µs.")
    intra_node_hop_latency_us: float = Field(
        ge=0, le=MAX_LINK_LATENCY_US,
        description="Latency of one algorithm step on the link (a ring all-reduce takes 2(n-1)), µs.")
    intra_node_bus_efficiency: float = Field(
        ge=MIN_LINK_EFFICIENCY, le=1,
        description="Bus bandwidth a collective reaches, as a fraction of intra_node_gbps.")
    intra_node_path: PathKind | None = Field(
        default=None, description="Path of NCCL's bytes between devices without NVLink: p2p (PCIe peer to peer "
                                  "through a CPU root complex), switch (below one PCIe switch) or host_staged "
                                  "(through host memory); null = the ring model above.")
    intra_node_path_latency_us: float | None = Field(
        default=None, ge=0, le=MAX_LINK_LATENCY_US,
        description="Fixed time of an LL collective over PCIe peer to peer, µs (needs intra_node_path).")
    intra_node_path_bus_efficiency: float | None = Field(
        default=None, ge=MIN_LINK_EFFICIENCY, le=1,
        description="Simple-protocol bus bandwidth over PCIe peer to peer, as a share of intra_node_gbps (needs "
                    "intra_node_path).")
    inter_node_gbps: float = Field(ge=MIN_FIGURE, le=MAX_FIGURE,
                                   description="Per-device bandwidth between nodes, GB/s per direction.")
    devices_per_node: int = Field(gt=0, le=MAX_DEVICES, description="Devices in one node.")
    tdp_w: float | None = Field(
        default=None, gt=0, description="Thermal design power of one device, watts: its power through a "
                                        "compute-bound step (docs/energy.md); null = no power figure, no energy.")
    idle_w: float | None = Field(
        default=None, ge=0, description="Power of one idle device, watts; null = a fraction of tdp_w "
                                        "(cosim.hub.sim.power.IDLE_FRACTION).")
    memory_bound_w: float | None = Field(
        default=None, ge=0, description="Power of one device through a memory-bandwidth-bound step (decode), "
                                        "watts; null = a fraction of tdp_w "
                                        "(cosim.hub.sim.power.MEMORY_BOUND_FRACTION).")
    host_link_gbps: float | None = Field(
        default=None, ge=MIN_FIGURE, le=MAX_FIGURE,
        description="The device's link to its host's memory, GB/s per direction (KV offload to CPU memory, "
                    "cosim.hub.sim.scheduling.offload); null = unknown.")
    price_per_hour_usd: float | None = Field(
        default=None, ge=0, description="Approximate on-demand cloud price of one device-hour; null = none found.")
    sources: dict[str, str] = Field(description="Source of each figure, keyed by field name.")

    @model_validator(mode="after")
    def _check(self) -> DevicePreset:
        bad = [d for d, v in self.peak_tflops.items() if d not in DTYPES or not MIN_FIGURE <= v <= MAX_FIGURE]
        if bad or not self.peak_tflops:
            raise ValueError(f"peak_tflops needs values in [{MIN_FIGURE:g}, {MAX_FIGURE:g}] for dtypes among {DTYPES}, "
                             f"got {self.peak_tflops}")
        missing = [f for f in (*SOURCED_FIELDS, *MEMORY_FIELDS)
                   if getattr(self, f) is not None and f not in self.sources]
        if missing:
            raise ValueError(f"sources missing for {missing}")
        path_figures = [getattr(self, f) is not None for f in PATH_FIELDS]
        if any(path_figures) and not all(path_figures):
            raise ValueError(f"{', '.join(PATH_FIELDS)} go together: give all three or none")
        if self.tdp_w is None and (self.idle_w is not None or self.memory_bound_w is not None):
            raise ValueError("idle_w and memory_bound_w need tdp_w (the peak the power model rises to)")
        known = [v for v in (self.idle_w, self.memory_bound_w, self.tdp_w) if v is not None]
        if known != sorted(known):
            raise ValueError(f"power figures must satisfy idle_w <= memory_bound_w <= tdp_w, got idle_w="
                             f"{self.idle_w}, memory_bound_w={self.memory_bound_w}, tdp_w={self.tdp_w}")
        return self

    def __hash__(self) -> int:
        # The dict fields are unhashable; equal presets share a name, so hashing it is consistent.
        return hash(self.name)

    @property
    def mem_capacity_bytes(self) -> int:
        return int(self.mem_capacity_gib * 2**30)

    def peak_tflops_for(self, dtype: str) -> float:
        """Dense peak TFLOP/s for ``dtype`` ('fp16', 'bfloat16', 'fp8', ...).

        Raises:
            UnknownPreset: the device lists no figure for that dtype.
        """
        value = self.peak_tflops.get(normalize_dtype(dtype))
        if value is None:
            shown = {d: d for d in self.peak_tflops}
            raise unknown(f"{self.name} dtype", dtype, shown, list(self.peak_tflops))
        return value
