"""From config to wire: presets resolved, KV capacity, session and topology specs.

Everything here is a pure function of the scenario config (and presets), so
the runner, the search and the CLI compute the same numbers.
"""

from __future__ import annotations

from typing import Any, Mapping

from google.protobuf import struct_pb2

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from . import presets
from .config import ClientConfig, ScenarioConfig
from .errors import ScenarioError

DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0}
FIDELITY = {v: k.removeprefix("FIDELITY_").lower() for k, v in pb.Fidelity.items()}


def resolve_model(config: ScenarioConfig, name: str) -> presets.ModelPreset:
    """The model preset of ``models[name]`` with the config's dtype and overrides applied."""
    entry = config.models[name]
    try:
        preset = presets.get_model(entry.preset)
    except presets.UnknownPreset as err:
        raise ScenarioError(f"models.{name}.preset", str(err)) from None
    unknown = set(entry.overrides) - set(presets.ModelPreset.model_fields)
    if unknown:
        raise ScenarioError(f"models.{name}.overrides", f"unknown fields {sorted(unknown)}")
    update = {"bytes_per_param": DTYPE_BYTES[entry.dtype], **entry.overrides}
    return presets.ModelPreset.model_validate({**preset.model_dump(), **update})


def resolve_hardware(config: ScenarioConfig, client: ClientConfig, where: str) -> pb.HardwareSpec:
    """The HardwareSpec of a client's cluster: device preset, count, dtype, overrides."""
    assert client.hardware is not None and client.model is not None
    return device_spec(config, client.hardware.device, client.hardware.count, config.models[client.model].dtype)


def device_spec(config: ScenarioConfig, device: str, count: int, dtype: str) -> pb.HardwareSpec:
    """The HardwareSpec of ``count`` devices of ``hardware[device]`` computing in ``dtype``."""
    entry = config.hardware[device]
    try:
        preset = presets.get_device(entry.preset)
        if "peak_tflops" in entry.overrides and dtype not in preset.peak_tflops:
            dtype = next(iter(preset.peak_tflops))  # the override replaces the peak anyway
        spec = presets.hardware_spec(preset, count, dtype)
    except presets.UnknownPreset as err:
        raise ScenarioError(f"hardware.{device}.preset", str(err)) from None
    for key, value in entry.overrides.items():
        if key in ("peak_tflops", "mem_bandwidth_gbps", "intra_node_gbps", "inter_node_gbps"):
            setattr(spec, key, value)
        elif key == "mem_capacity_bytes":
            spec.mem_capacity_bytes = int(value)
        else:
            spec.extra[key] = value
    if entry.price_per_hour_usd is not None:
        spec.extra["price_per_hour_usd"] = entry.price_per_hour_usd
    return spec


def kv_capacity_blocks(client: ClientConfig, model: presets.ModelPreset, hardware: pb.HardwareSpec,
                       where: str) -> int:
    """KV blocks of one client: device memory x utilization - weight shard - reserve, per TP/PP shard."""
    sched = client.scheduler
    if sched.num_gpu_blocks is not None:
        return sched.num_gpu_blocks
    tp, pp = client.hardware.tensor_parallel, client.hardware.pipeline_parallel
    weights = model.weight_bytes() / (tp * pp)
    free = hardware.mem_capacity_bytes * sched.gpu_memory_utilization - weights - sched.reserve_bytes
    if free <= 0:
        raise ScenarioError(
            f"{where}.hardware", f"model {model.name} needs {weights / 1e9:.1f} GB of weights per device at "
            f"TP={tp} PP={pp}, more than {hardware.device}'s usable "
            f"{hardware.mem_capacity_bytes * sched.gpu_memory_utilization / 1e9:.1f} GB; raise tensor_parallel "
            f"or pick a larger device")
    kv_heads_per_device = max(1, model.num_kv_heads // tp)
    per_token = 2 * (model.num_layers // pp) * kv_heads_per_device * model.effective_head_dim \
        * model.bytes_per_kv_element
    blocks = int(free // (per_token * sched.block_size))
    if blocks < 1:
        raise ScenarioError(f"{where}.hardware", f"no memory left for even one KV block on {hardware.device}")
    return blocks


def network_session_spec(config: ScenarioConfig, hardware: Mapping[str, pb.HardwareSpec]) -> net_pb.NetworkSessionSpec:
    """The network session of a scenario: its topology, and each client's devices as consecutive NPUs."""
    endpoints, offset = [], 0
    for client in config.clients:
        count = client.hardware.count if client.hardware else 1
        endpoints.append(net_pb.Endpoint(name=client.name, npu_ids=range(offset, offset + count)))
        offset += count
    network = config.network
    if network.topology:
        dims = [net_pb.TopologyDim(kind=_TOPOLOGY_KINDS[d.kind], npus=d.npus, bandwidth_gbps=d.bandwidth_gbps,
                                   latency_ns=d.latency_ns) for d in network.topology]
    else:
        slowest = min(spec.inter_node_gbps for spec in hardware.values())
        dims = [net_pb.TopologyDim(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=max(2, offset), bandwidth_gbps=slowest,
                                   latency_ns=network.link.latency_s * 1e9 / 2)]
    mode = pb.SYNC_MODE_TIME_SYNCHRONIZED if network.mode == "congestion_aware" else pb.SYNC_MODE_PREDICT
    options = config.backends[network.backend].options if network.backend else {}
    return net_pb.NetworkSessionSpec(client="hub", dims=dims, endpoints=endpoints, mode=mode,
                                     options=session_options(options))


_TOPOLOGY_KINDS = {"ring": net_pb.TOPOLOGY_KIND_RING, "fully_connected": net_pb.TOPOLOGY_KIND_FULLY_CONNECTED,
                   "switch": net_pb.TOPOLOGY_KIND_SWITCH}


def session_options(options: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(options))
    return struct


def memory_session_spec(client: ClientConfig, kv_bytes_per_token: float,
                        config_options: Mapping[str, Any] | None = None) -> mem_pb.MemorySessionSpec:
    """The memory hierarchy of a KV-retrieval client (``kv_bytes_per_token`` turns misses into tokens)."""
    assert client.memory is not None
    mode = pb.SYNC_MODE_TIME_SYNCHRONIZED if client.memory.mode == "time_synchronized" else pb.SYNC_MODE_PREDICT
    try:
        levels = [mem_pb.MemoryLevel(**level) for level in client.memory.levels]
    except (ValueError, TypeError) as err:
        raise ScenarioError(f"clients[{client.name}].memory.levels", str(err)) from None
    return mem_pb.MemorySessionSpec(client=client.name, levels=levels, mode=mode,
                                    kv_bytes_per_token=max(1, int(kv_bytes_per_token)),
                                    options=session_options(config_options or {}))
