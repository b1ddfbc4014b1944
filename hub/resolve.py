"""From config to wire: presets resolved, KV capacity, session and topology specs.

Everything here is a pure function of the scenario config (and presets), so
the runner, the search and the CLI compute the same numbers. Bad input raises
:class:`ScenarioError` located by its config path; :func:`parallelism_problems`
returns its problems instead, all of them (``cosim validate`` lists each).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2
from pydantic import ValidationError

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from . import memory, presets
from .config import ClientConfig, ClientHardware, ScenarioConfig
from .errors import ScenarioError
from .presets.hf import from_hf_config
from .presets.user import find_device, find_model

DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0}
FIDELITY = {v: k.removeprefix("FIDELITY_").lower() for k, v in pb.Fidelity.items()}


def resolve_model(config: ScenarioConfig, name: str) -> presets.ModelPreset:
    """The model preset of ``models[name]`` with the config's dtype and overrides applied.

    Raises:
        ScenarioError: an unknown preset, or overrides that are unknown or give an impossible shape.
    """
    entry = config.models[name]
    try:
        if entry.hf_config is not None:
            hf = entry.hf_config
            preset = from_hf_config(hf.config, name=str(hf.config.get("_name_or_path") or name),
                                    source=hf.file or "config.json")
        else:
            preset = find_model(config.presets, str(entry.preset))
    except presets.UnknownPreset as err:
        raise ScenarioError(f"models.{name}.preset", str(err)) from None
    except ValueError as err:
        raise ScenarioError(f"models.{name}.hf_config", str(err)) from None
    unknown = set(entry.overrides) - set(presets.ModelPreset.model_fields)
    if unknown:
        raise ScenarioError(f"models.{name}.overrides", f"unknown fields {sorted(unknown)}")
    update = {"bytes_per_param": DTYPE_BYTES[entry.dtype], **entry.overrides}
    try:
        return presets.ModelPreset.model_validate({**preset.model_dump(), **update})
    except ValidationError as err:
        problems = [": ".join([*map(str, e["loc"]), str(e["msg"]).removeprefix("Value error, ")])
                    for e in err.errors()]
        raise ScenarioError(f"models.{name}.overrides", f"gives an impossible model: {'; '.join(problems)}") from None


def resolve_hardware(config: ScenarioConfig, client: ClientConfig, where: str) -> pb.HardwareSpec:
    """The HardwareSpec of a client's cluster: device preset, count, dtype, overrides."""
    assert client.hardware is not None and client.model is not None
    return device_spec(config, client.hardware.device, client.hardware.count, config.models[client.model].dtype,
                       where=f"{where}.hardware.device")


def resolve_device(config: ScenarioConfig, device: str) -> presets.DevicePreset:
    """The device preset of ``hardware[device]``.

    Raises:
        ScenarioError: at ``hardware.<device>.preset``, for an unknown preset.
    """
    try:
        return find_device(config.presets, config.hardware[device].preset)
    except presets.UnknownPreset as err:
        raise ScenarioError(f"hardware.{device}.preset", str(err)) from None


def device_spec(config: ScenarioConfig, device: str, count: int, dtype: str, *, where: str = "") -> pb.HardwareSpec:
    """The HardwareSpec of ``count`` devices of ``hardware[device]`` computing in ``dtype``.

    Raises:
        ScenarioError: an unknown preset; or, at ``where`` (the place that chose the device), a
            device that lists no peak for ``dtype``.
    """
    entry = config.hardware[device]
    preset = resolve_device(config, device)
    if "peak_tflops" in entry.overrides and dtype not in preset.peak_tflops:
        dtype = next(iter(preset.peak_tflops))  # the override replaces the peak anyway
    try:
        spec = presets.hardware_spec(preset, count, dtype)
    except presets.UnknownPreset:
        raise ScenarioError(where or f"hardware.{device}", f"{preset.name} lists no {dtype} peak (only "
                            f"{', '.join(preset.peak_tflops)}); use one of those dtypes or set "
                            f"hardware.{device}.overrides.peak_tflops") from None
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


def parallelism_problems(client: ClientConfig, model: presets.ModelPreset | None, where: str) -> list[ScenarioError]:
    """How a client's parallel degrees fail to fit its devices or its model (``model`` None: devices only).

    The same checks every SDK backend makes when it opens the session, here
    located in the config and all at once, before any backend starts; and one
    no backend can make: devices beyond TP x PP, which nothing would use.
    """
    assert client.hardware is not None
    hw, at = client.hardware, f"{where}.hardware"
    tp, pp, ep = hw.tensor_parallel, hw.pipeline_parallel, hw.expert_parallel
    problems = []
    if tp * pp > hw.count:
        problems.append(ScenarioError(f"{at}.count", f"{hw.count} devices, fewer than tensor_parallel x "
                                                     f"pipeline_parallel = {tp} x {pp} = {tp * pp}"))
    elif tp * pp < hw.count:  # the idle devices would be billed and counted in the network
        hint = (f"; expert_parallel={ep} adds no devices: experts are split over the TP ranks of this client and "
                f"of its data-parallel sibling clients (EP = TP x DP)") if ep > 1 else ""
        problems.append(ScenarioError(f"{at}.count", f"{hw.count} devices, more than tensor_parallel x "
                                                     f"pipeline_parallel = {tp} x {pp} = {tp * pp} use; set count "
                                                     f"to {tp * pp} or raise the parallelism (data parallelism is "
                                                     f"one client per replica){hint}"))
    if model is None:
        return problems
    if model.num_attention_heads % tp:
        problems.append(ScenarioError(f"{at}.tensor_parallel", f"{tp} does not divide the {model.num_attention_heads} "
                                                               f"attention heads of {model.name}"))
    elif model.num_kv_heads % tp and tp % model.num_kv_heads:
        problems.append(ScenarioError(f"{at}.tensor_parallel", f"{tp} neither divides nor is a multiple of the "
                                                               f"{model.num_kv_heads} KV heads of {model.name}"))
    if model.num_layers % pp:
        problems.append(ScenarioError(f"{at}.pipeline_parallel",
                                      f"{pp} does not divide the {model.num_layers} layers of {model.name}"))
    if ep > 1 and not model.is_moe:
        problems.append(ScenarioError(f"{at}.expert_parallel", f"{ep} needs a mixture-of-experts model; "
                                                               f"{model.name} is dense"))
    elif ep > 1 and model.num_experts % ep:
        problems.append(ScenarioError(f"{at}.expert_parallel",
                                      f"{ep} does not divide the {model.num_experts} experts of {model.name}"))
    return problems


def weight_bytes_per_device(model: presets.ModelPreset, hardware: ClientHardware) -> float:
    """Weight bytes one device of a client's cluster holds.

    Pipeline stages split the layers. Tensor parallelism splits attention,
    router, embeddings and LM head, and, without expert parallelism, every
    expert too. With ``expert_parallel`` = EP > 1 each rank holds
    ``num_experts / EP`` whole experts (vLLM's ``--enable-expert-parallel``:
    EP = TP x DP, the MoE layers' own TP is 1; EP may span data-parallel
    clients): dense part / (TP x PP) + experts / (EP x PP).
    """
    tp, pp, ep = hardware.tensor_parallel, hardware.pipeline_parallel, hardware.expert_parallel
    experts = model.expert_weight_bytes()
    expert_shards = ep if model.is_moe and ep > 1 else tp
    return (model.weight_bytes() - experts) / (tp * pp) + experts / (expert_shards * pp)


def kv_capacity_blocks(client: ClientConfig, model: presets.ModelPreset, hardware: pb.HardwareSpec,
                       where: str) -> int:
    """KV blocks of one client: ``scheduler.num_gpu_blocks`` when set, else :func:`kv_memory_of`'s.

    Raises:
        ScenarioError: see :func:`kv_memory_of`.
    """
    if client.scheduler.num_gpu_blocks is not None:
        return client.scheduler.num_gpu_blocks
    return kv_memory_of(client, model, hardware, where).num_blocks


def kv_memory_report(client: ClientConfig, model: presets.ModelPreset, hardware: pb.HardwareSpec,
                     where: str) -> memory.KVMemory | None:
    """:func:`kv_memory_of` for reports: None, not an error, when ``scheduler.num_gpu_blocks`` is set
    and the computation fails (the pinned count is then the only capacity there is).

    Raises:
        ScenarioError: see :func:`kv_memory_of`, when no ``num_gpu_blocks`` is set.
    """
    try:
        return kv_memory_of(client, model, hardware, where)
    except ScenarioError:
        if client.scheduler.num_gpu_blocks is None:
            raise
        return None


def device_memory_facts(hardware: pb.HardwareSpec) -> tuple[int, int | None]:
    """(total bytes as CUDA reports it, streaming multiprocessors or None) of one device of a cluster.

    ``hardware.extra`` may override both (``mem_reported_bytes``, ``num_sms``: hardware overrides
    land there); else the device preset's figures, its reported total only while
    ``mem_capacity_bytes`` is the preset's own (an overridden capacity is taken as reported).
    """
    try:
        preset: presets.DevicePreset | None = presets.get_device(hardware.device)
    except presets.UnknownPreset:
        preset = None
    total = hardware.mem_capacity_bytes
    if "mem_reported_bytes" in hardware.extra:
        total = int(hardware.extra["mem_reported_bytes"])
    elif preset is not None and preset.mem_reported_bytes and total == preset.mem_capacity_bytes:
        total = preset.mem_reported_bytes
    sms = hardware.extra.get("num_sms", preset.num_sms if preset is not None else None)
    return total, int(sms) if sms else None


def kv_memory_of(client: ClientConfig, model: presets.ModelPreset, hardware: pb.HardwareSpec,
                 where: str) -> memory.KVMemory:
    """One client's device memory as vLLM V1 profiles it (:func:`cosim.hub.memory.kv_memory`): the
    requested share less the weight shard (:func:`weight_bytes_per_device`), the activation peak,
    CUDA graphs, non-torch memory and ``scheduler.reserve_bytes``, in blocks of this TP/PP shard.

    Raises:
        ScenarioError: at ``<where>.hardware``, when the weights or the rest leave no room for one
            block; at ``<where>.hardware.pipeline_parallel``, a stage without a layer.
    """
    sched = client.scheduler
    assert client.hardware is not None
    tp, pp, ep = client.hardware.tensor_parallel, client.hardware.pipeline_parallel, client.hardware.expert_parallel
    if model.num_layers < pp:  # no layer per stage would leave no KV per token to divide by
        raise ScenarioError(f"{where}.hardware.pipeline_parallel",
                            f"{pp} stages for the {model.num_layers} layers of {model.name}")
    total, sms = device_memory_facts(hardware)
    weights = weight_bytes_per_device(model, client.hardware)
    found = memory.kv_memory(model, sched, total_bytes=total, weight_bytes=weights, tensor_parallel=tp,
                             pipeline_parallel=pp, expert_parallel=ep, num_sms=sms)
    ep_text, raise_ep = (f" EP={ep}", " or expert_parallel") if model.is_moe else ("", "")
    if weights >= found.requested_bytes:
        raise ScenarioError(
            f"{where}.hardware", f"model {model.name} needs {weights / 1e9:.1f} GB of weights per device at "
            f"TP={tp} PP={pp}{ep_text}, more than {hardware.device}'s usable {found.requested_bytes / 1e9:.1f} GB; "
            f"raise tensor_parallel{raise_ep} or pick a larger device")
    if found.num_blocks < 1:
        raise ScenarioError(
            f"{where}.hardware", f"no memory left for one KV block of model {model.name} on {hardware.device} at "
            f"TP={tp} PP={pp}{ep_text}: {found.describe()}; raise tensor_parallel{raise_ep}, lower "
            f"max_num_batched_tokens or max_num_seqs, or pick a larger device")
    return found


def network_session_spec(config: ScenarioConfig, hardware: Mapping[str, pb.HardwareSpec]) -> net_pb.NetworkSessionSpec:
    """The network session of a scenario: its topology, and each client's devices as consecutive NPUs.

    Raises:
        ScenarioError: at ``network.topology``, a topology with fewer NPUs than the clients have
            devices, or none given where no client's hardware could set the default one.
    """
    endpoints, offset = [], 0
    for client in config.clients:
        count = client.hardware.count if client.hardware else 1
        endpoints.append(net_pb.Endpoint(name=client.name, npu_ids=range(offset, offset + count)))
        offset += count
    network = config.network
    if network.topology:
        dims = [net_pb.TopologyDim(kind=_TOPOLOGY_KINDS[d.kind], npus=d.npus, bandwidth_gbps=d.bandwidth_gbps,
                                   latency_ns=d.latency_ns) for d in network.topology]
        npus = math.prod(d.npus for d in network.topology)
        if npus < offset:
            raise ScenarioError("network.topology", f"has {npus} NPUs, fewer than the {offset} the clients need "
                                                    "(each client's devices, one per client without hardware)")
    elif not hardware:
        raise ScenarioError("network.topology", "give one: no client has hardware to derive the default from")
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
                        config_options: Mapping[str, Any] | None = None, *,
                        where: str = "") -> mem_pb.MemorySessionSpec:
    """The memory hierarchy of a KV-retrieval client (``kv_bytes_per_token`` turns misses into tokens).

    Raises:
        ScenarioError: at ``where`` (default ``clients[<name>].memory.levels``), a level with
            unknown fields or values of the wrong type.
    """
    assert client.memory is not None
    mode = pb.SYNC_MODE_TIME_SYNCHRONIZED if client.memory.mode == "time_synchronized" else pb.SYNC_MODE_PREDICT
    try:
        levels = [mem_pb.MemoryLevel(**level) for level in client.memory.levels]
    except (ValueError, TypeError) as err:
        raise ScenarioError(where or f"clients[{client.name}].memory.levels", str(err)) from None
    return mem_pb.MemorySessionSpec(client=client.name, levels=levels, mode=mode,
                                    kv_bytes_per_token=max(1, int(kv_bytes_per_token)),
                                    options=session_options(config_options or {}))
