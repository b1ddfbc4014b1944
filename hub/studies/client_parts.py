"""The optional parts of an LLM client a scenario may give it, built for :mod:`.simulation`.

- :func:`lora_slots`: its LoRA adapters' GPU slots and host cache (:mod:`cosim.hub.sim.scheduling.lora`);
- :func:`frontends`: the API server in front of each client (:mod:`cosim.hub.sim.frontend`), one per
  data-parallel group, as one ``vllm serve`` fronts all its ranks;
- :func:`offload_tier`: its KV offload tiers (:mod:`cosim.hub.sim.scheduling.offload`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..config.memory import block_bytes, lora_adapter_bytes
from ..config.offload import HOST_DMA_EFFICIENCY
from ..config.presets import ModelPreset
from ..config.resolve import resolve_device
from ..config.scenario import ScenarioConfig
from ..config.sections import ClientConfig
from ..errors import ScenarioError
from ..sim.frontend import FrontEnd
from ..sim.kernel import Kernel
from ..sim.scheduling import BlockManager
from ..sim.scheduling.lora import LoraSlots, LoraSpec
from ..sim.scheduling.offload import OffloadSpec, OffloadTier, StorageSpec


def lora_slots(cfg: ClientConfig, model: ModelPreset) -> LoraSlots | None:
    """A client's LoRA slots and host cache (:mod:`cosim.hub.sim.scheduling.lora`), where it serves LoRA."""
    lora, hardware = cfg.lora, cfg.hardware
    if lora is None or hardware is None:
        return None
    per_device = lora_adapter_bytes(model, 1, tensor_parallel=hardware.tensor_parallel,
                                    pipeline_parallel=hardware.pipeline_parallel)
    return LoraSlots(LoraSpec(max_loras=lora.max_loras, max_cpu_loras=lora.max_cpu_loras or lora.max_loras,
                              device_bytes_per_rank=per_device, host_bytes_per_rank=lora_adapter_bytes(model, 1),
                              host_to_device_gbps=lora.host_to_device_gbps or cfg.scheduler.host_bandwidth_gbps,
                              disk_to_host_gbps=lora.disk_to_host_gbps))


def frontends(config: ScenarioConfig, kernel: Kernel) -> dict[str, FrontEnd]:
    """The API server in front of each LLM client, by client name (the scenario's ``frontend``; none
    without it): a client's own, or its data-parallel group's, shared by the group's ranks."""
    if config.frontend is None:
        return {}
    by_group: dict[str, FrontEnd] = {}
    out: dict[str, FrontEnd] = {}
    for cfg in config.clients:
        if cfg.kind != "llm":
            continue
        key = f"dp_group {cfg.dp_group}" if cfg.dp_group is not None else cfg.name
        if key not in by_group:
            by_group[key] = FrontEnd(config.frontend, kernel, key)
        out[cfg.name] = by_group[key]
    return out


def offload_tier(where: str, config: ScenarioConfig, cfg: ClientConfig, model: ModelPreset, kv: BlockManager,
                 clock: Callable[[], int]) -> OffloadTier | None:
    """A client's KV offload tiers (its ``scheduler.kv_offload``), or None without them.

    Raises:
        ScenarioError: no host-link rate: neither ``host_gbps`` nor the device preset's ``host_link_gbps``.
    """
    offload, hardware = cfg.scheduler.kv_offload, cfg.hardware
    if offload is None or hardware is None:
        return None
    gbps = offload.host_gbps
    if gbps is None:
        link = resolve_device(config, hardware.device).host_link_gbps
        if link is None:
            raise ScenarioError(f"{where}.scheduler.kv_offload.host_gbps",
                                f"device {hardware.device!r} has no host_link_gbps in its preset; give the copy "
                                "rate between a device and host memory, GB/s per direction")
        gbps = link * HOST_DMA_EFFICIENCY
    size = block_bytes(model, cfg.scheduler, tensor_parallel=hardware.tensor_parallel,
                       pipeline_parallel=hardware.pipeline_parallel)
    storage = None
    if offload.storage is not None:
        tier = offload.storage
        storage = StorageSpec(blocks=tier.blocks, read_ns_per_block=size / tier.read_gbps,
                              write_ns_per_block=size / tier.write_gbps, latency_ns=round(tier.latency_s * 1e9))
    scheduler = cfg.scheduler
    spec = OffloadSpec(cpu_blocks=offload.cpu_blocks, block_size=scheduler.block_size, block_bytes=size,
                       host_ns_per_block=size / gbps, storage=storage,
                       one_step_ahead=cfg.forms_one_step_ahead and hardware.pipeline_parallel == 1)
    return OffloadTier(spec, kv, clock)
