"""The optional parts of an LLM client a scenario may give it, built for :mod:`.simulation`.

- :func:`lora_slots`: its LoRA adapters' GPU slots and host cache (:mod:`cosim.hub.sim.scheduling.lora`);
- :func:`frontends`: the API server in front of each client (:mod:`cosim.hub.sim.frontend`), one per
  data-parallel group, as one ``vllm serve`` fronts all its ranks.
"""

from __future__ import annotations

from ..config.memory import lora_adapter_bytes
from ..config.presets import ModelPreset
from ..config.scenario import ScenarioConfig
from ..config.sections import ClientConfig
from ..sim.frontend import FrontEnd
from ..sim.kernel import Kernel
from ..sim.scheduling.lora import LoraSlots, LoraSpec


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
