"""From config to wire: presets resolved, KV capacity, session and topology specs.

Everything here is a pure function of the scenario config (and presets), so
the runner, the search and the CLI compute the same numbers. Bad input raises
:class:`ScenarioError` located by its config path; :func:`parallelism_problems`
returns its problems instead, all of them (``cosim validate`` lists each).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import struct_pb2
from pydantic import ValidationError

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from ..errors import ScenarioError
from . import memory, presets
from .bounds import (
    MAX_BYTES,
    MAX_FIGURE,
    MAX_GBPS,
    MAX_LINK_LATENCY_US,
    MAX_UINT32,
    MIN_FIGURE,
    MIN_GBPS,
    MIN_LINK_EFFICIENCY,
)
from .presets.hf import from_hf_config
from .presets.user import find_device, find_model
from .scenario import ScenarioConfig
from .sections import ClientConfig, ClientHardware

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
        model = presets.ModelPreset.model_validate({**preset.model_dump(), **update})
    except ValidationError as err:
        problems = [": ".join([*map(str, e["loc"]), str(e["msg"]).removeprefix("Value error, ")])
                    for e in err.errors()]
        raise ScenarioError(f"models.{name}.overrides", f"gives an impossible model: {'; '.join(problems)}") from None
    problems = _model_bound_problems(model)
    if problems:
        where = f"models.{name}.overrides" if entry.overrides else \
            f"models.{name}.hf_config" if entry.hf_config is not None else f"models.{name}"
        raise ScenarioError(where, f"gives an impossible model: {'; '.join(problems)}")
    return model


# Bytes of one weight or KV element: 1/8 (int1) to 8 (fp64) in practice.
_MAX_ELEMENT_BYTES = 16.0


def _model_bound_problems(model: presets.ModelPreset) -> list[str]:
    """What in a model's shape a backend cannot take: integers beyond protobuf's uint32 (ModelSpec),
    element sizes beyond 16 bytes, or more parameters than a float counts exactly."""
    problems = []
    for field, value in model.model_dump().items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if field.startswith("bytes_per_"):
            if not 0 < value <= _MAX_ELEMENT_BYTES:
                problems.append(f"{field}: must be in (0, {_MAX_ELEMENT_BYTES:g}], got {value!r}")
        elif field != "num_params" and value > MAX_UINT32:
            problems.append(f"{field}: must be <= {MAX_UINT32}, got {value!r}")
    if not problems and model.total_params() > MAX_BYTES:
        problems.append(f"{model.total_params():.3g} parameters, more than the {MAX_BYTES:.3g} cosim can count")
    return problems


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
        problem = _hardware_override_problem(key, value)
        if problem:
            raise ScenarioError(f"hardware.{device}.overrides.{key}", problem)
        if key in _HARDWARE_FIGURES:
            setattr(spec, key, value)
        elif key == "mem_capacity_bytes":
            spec.mem_capacity_bytes = int(value)
        else:
            spec.extra[key] = value
    if entry.price_per_hour_usd is not None:
        spec.extra["price_per_hour_usd"] = entry.price_per_hour_usd
    return spec


# HardwareSpec figures an override may replace (besides mem_capacity_bytes), each > 0.
_HARDWARE_FIGURES = ("peak_tflops", "mem_bandwidth_gbps", "intra_node_gbps", "inter_node_gbps")
# Extra keys of the intra-node link's collectives (a device preset's figures, which the roofline reads).
_LINK_LATENCIES = ("intra_node_latency_us", "intra_node_hop_latency_us", "intra_node_path_latency_us")
_LINK_EFFICIENCIES = ("intra_node_bus_efficiency", "intra_node_path_bus_efficiency")
# Extra keys cosim itself reads (device_memory_facts): counts, each >= 1.
_HARDWARE_COUNTS = ("mem_reported_bytes", "num_sms")


def _hardware_override_problem(key: str, value: float) -> str | None:
    """Why ``hardware.<device>.overrides.<key> = value`` cannot be, or None."""
    if key in _HARDWARE_FIGURES and not MIN_FIGURE <= value <= MAX_FIGURE:
        return f"must be in [{MIN_FIGURE:g}, {MAX_FIGURE:g}], got {value!r}"
    if key in _LINK_LATENCIES and not 0 <= value <= MAX_LINK_LATENCY_US:
        return f"must be in [0, {MAX_LINK_LATENCY_US:g}] µs, got {value!r}"
    if key in _LINK_EFFICIENCIES and not MIN_LINK_EFFICIENCY <= value <= 1:
        return f"must be in [{MIN_LINK_EFFICIENCY:g}, 1], got {value!r}"
    if key == "mem_capacity_bytes" or key in _HARDWARE_COUNTS:
        if not 1 <= value <= MAX_BYTES or value != int(value):
            return f"must be a whole number in [1, {MAX_BYTES}], got {value!r}"
    elif abs(value) > 1e18:  # a backend's own key: any finite figure a double carries exactly enough
        return f"must be within +-1e18, got {value!r}"
    return None


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
    """One client's device memory as vLLM V1 profiles it (:func:`cosim.hub.config.memory.kv_memory`): the
    requested share less the weight shard (:func:`weight_bytes_per_device`), the activation peak,
    CUDA graphs, non-torch memory, ``scheduler.reserve_bytes`` and any LoRA slots, in blocks of this
    TP/PP shard.

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
    lora = client.lora.max_loras * memory.lora_adapter_bytes(
        model, client.lora.max_lora_rank, tensor_parallel=tp, pipeline_parallel=pp) if client.lora else 0
    found = memory.kv_memory(model, sched, total_bytes=total, weight_bytes=weights, tensor_parallel=tp,
                             pipeline_parallel=pp, expert_parallel=ep, num_sms=sms, lora_bytes=lora)
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


def runtime_session_spec(config: ScenarioConfig, client: ClientConfig, model: presets.ModelPreset,
                         hardware: pb.HardwareSpec) -> pb.SessionSpec:
    """The runtime session of a client with a model and a cluster: ``model`` on ``hardware`` at the
    client's parallelism, with its backend's options (as a run opens it)."""
    assert client.hardware is not None and client.backend is not None
    hw = client.hardware
    return pb.SessionSpec(client=client.name, model=model.to_model_spec(), hardware=hardware,
                          parallelism=pb.Parallelism(tensor=hw.tensor_parallel, pipeline=hw.pipeline_parallel,
                                                     expert=hw.expert_parallel),
                          options=session_options(config.backends[client.backend].options))


def network_session_spec(config: ScenarioConfig, hardware: Mapping[str, pb.HardwareSpec]) -> net_pb.NetworkSessionSpec:
    """The network session of a scenario: its topology, and each client's devices as its NPUs.

    With ``network.topology``, the clients' devices are consecutive NPUs of it, in client order.
    Without, each client's devices fill nodes of its own, ``devices_per_node`` NPUs joined by the
    device preset's intra-node link (so its tensor-parallel collectives stay there), and the
    nodes hang off one switch at the NIC's bandwidth (which transfers between clients cross).

    Raises:
        ScenarioError: at ``network.topology``, a topology with fewer NPUs than the clients have
            devices, or none given where no client's hardware could set the default one.
    """
    network = config.network
    counts = [(client.name, client.hardware.count if client.hardware else 1) for client in config.clients]
    if network.topology:
        dims = [net_pb.TopologyDim(kind=_TOPOLOGY_KINDS[d.kind], npus=d.npus, bandwidth_gbps=d.bandwidth_gbps,
                                   latency_ns=d.latency_ns) for d in network.topology]
        endpoints, needed = _endpoints(counts, node=1)
        npus = math.prod(d.npus for d in network.topology)
        if npus < needed:
            raise ScenarioError("network.topology", f"has {npus} NPUs, fewer than the {needed} the clients need "
                                                    "(each client's devices, one per client without hardware)")
    elif not hardware:
        raise ScenarioError("network.topology", "give one: no client has hardware to derive the default from")
    else:
        node = min(spec.devices_per_node for spec in hardware.values())
        endpoints, npus = _endpoints(counts, node=node)
        nic = net_pb.TopologyDim(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=max(2, npus // node),
                                 bandwidth_gbps=min(spec.inter_node_gbps for spec in hardware.values()),
                                 latency_ns=network.link.latency_s * 1e9 / 2)
        dims = [nic]
        if node > 1:
            # NCCL's bus bandwidth on the link (the network model's bandwidth is a collective's), and
            # its hop latency; the presets' figures, each with its source (docs/validation.md).
            links = [(spec.intra_node_gbps * spec.extra.get("intra_node_bus_efficiency", 1.0),
                      spec.extra.get("intra_node_hop_latency_us", 0.0)) for spec in hardware.values()]
            dims.insert(0, net_pb.TopologyDim(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=node,
                                              bandwidth_gbps=min(gbps for gbps, _ in links),
                                              latency_ns=max(us for _, us in links) * 1e3))
    mode = pb.SYNC_MODE_TIME_SYNCHRONIZED if network.mode == "congestion_aware" else pb.SYNC_MODE_PREDICT
    options = config.backends[network.backend].options if network.backend else {}
    return net_pb.NetworkSessionSpec(client="hub", dims=dims, endpoints=endpoints, mode=mode,
                                     options=session_options(options))


def _endpoints(counts: Sequence[tuple[str, int]], *, node: int) -> tuple[list[net_pb.Endpoint], int]:
    """Each client's NPUs, consecutive from the start of a node of ``node`` NPUs of its own; and
    how many NPUs that takes."""
    endpoints, offset = [], 0
    for name, count in counts:
        endpoints.append(net_pb.Endpoint(name=name, npu_ids=range(offset, offset + count)))
        offset += -(-count // node) * node
    return endpoints, offset


_TOPOLOGY_KINDS = {"ring": net_pb.TOPOLOGY_KIND_RING, "fully_connected": net_pb.TOPOLOGY_KIND_FULLY_CONNECTED,
                   "switch": net_pb.TOPOLOGY_KIND_SWITCH}


def session_options(options: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(options))
    return struct


# Numeric MemoryLevel fields (cosim.v1.MemoryLevel): capacity and bandwidth > 0 (1 byte, 1 MB/s at
# least), latency up to an hour, hit rates a probability. NaN fails every range.
_LEVEL_BOUNDS = {"capacity_bytes": (1, MAX_BYTES), "bandwidth_gbps": (MIN_GBPS, MAX_GBPS),
                 "latency_ns": (0, 3.6e12), "hit_rate": (0, 1)}


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
    where = where or f"clients[{client.name}].memory.levels"
    for index, level in enumerate(client.memory.levels):
        for key, (low, high) in _LEVEL_BOUNDS.items():
            value = level.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and not low <= value <= high:
                raise ScenarioError(f"{where}[{index}].{key}", f"must be in [{low:g}, {high:g}], got {value!r}")
    try:
        levels = [mem_pb.MemoryLevel(**level) for level in client.memory.levels]
    except (ValueError, TypeError) as err:
        raise ScenarioError(where, str(err)) from None
    return mem_pb.MemorySessionSpec(client=client.name, levels=levels, mode=mode,
                                    kv_bytes_per_token=max(1, int(kv_bytes_per_token)),
                                    options=session_options(config_options or {}))
