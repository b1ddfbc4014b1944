"""Checks of the specs and batches every backend receives.

Each check raises :class:`InvalidArgument` naming the field, so a lab's
backend never sees a malformed request.
"""

from __future__ import annotations

from collections.abc import Sequence

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from .backend import PlainBatch
from .errors import InvalidArgument


def _positive(field: str, value: float) -> None:
    if not value > 0:
        raise InvalidArgument(field, value, "must be > 0")


def validate_session_spec(spec: pb.SessionSpec, *, field: str = "spec") -> None:
    """Checks a runtime session spec: model shape, hardware and parallelism."""
    model, hw, par = spec.model, spec.hardware, spec.parallelism
    for name in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                 "intermediate_size", "vocab_size"):
        _positive(f"{field}.model.{name}", getattr(model, name))
    if model.num_attention_heads % model.num_kv_heads:
        raise InvalidArgument(f"{field}.model.num_kv_heads", model.num_kv_heads,
                              f"does not divide num_attention_heads={model.num_attention_heads}")
    if model.experts_per_token > max(model.num_experts, 1):
        raise InvalidArgument(f"{field}.model.experts_per_token", model.experts_per_token,
                              f"exceeds num_experts={model.num_experts}")
    if model.shared_experts and model.shared_experts >= model.experts_per_token:
        raise InvalidArgument(f"{field}.model.shared_experts", model.shared_experts,
                              f"must be below experts_per_token={model.experts_per_token}, which counts them")
    if not hw.device:
        raise InvalidArgument(f"{field}.hardware.device", hw.device, "must name a device")
    _positive(f"{field}.hardware.count", hw.count)
    for name in ("peak_tflops", "mem_bandwidth_gbps", "intra_node_gbps", "inter_node_gbps"):
        if getattr(hw, name) < 0:
            raise InvalidArgument(f"{field}.hardware.{name}", getattr(hw, name), "must be >= 0")
    tp, pp = par.tensor or 1, par.pipeline or 1
    ep, dp = par.expert or 1, par.data or 1
    if model.num_attention_heads % tp:
        raise InvalidArgument(f"{field}.parallelism.tensor", tp,
                              f"does not divide num_attention_heads={model.num_attention_heads}")
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise InvalidArgument(f"{field}.parallelism.tensor", tp,
                              f"neither divides nor is a multiple of num_kv_heads={model.num_kv_heads}")
    if model.num_layers % pp:
        raise InvalidArgument(f"{field}.parallelism.pipeline", pp,
                              f"does not divide num_layers={model.num_layers}")
    if ep > 1 and (model.num_experts < 2 or model.num_experts % ep):
        raise InvalidArgument(f"{field}.parallelism.expert", ep,
                              f"does not divide num_experts={model.num_experts}")
    if tp * pp * dp > hw.count:
        raise InvalidArgument(f"{field}.hardware.count", hw.count,
                              f"is fewer than tensor x pipeline x data = {tp * pp * dp} devices")


def validate_batches(batches: Sequence[pb.StepBatch | PlainBatch], *, field: str = "batches") -> None:
    """Checks each step batch as :func:`validate_batch` does; the quick test runs for every batch of
    every call, so it names no field unless one fails."""
    for i, batch in enumerate(batches):
        new = batch.new_tokens
        n = len(new)
        if not n or len(batch.context_tokens) != n or min(new) == 0:
            validate_batch(batch, field=f"{field}[{i}]")


def validate_batch(batch: pb.StepBatch | PlainBatch, *, field: str) -> None:
    """Checks one step batch: parallel arrays of equal, non-zero length."""
    n = len(batch.new_tokens)
    if n == 0:
        raise InvalidArgument(f"{field}.new_tokens", [], "must hold at least one sequence")
    if len(batch.context_tokens) != n:
        raise InvalidArgument(f"{field}.context_tokens", f"<{len(batch.context_tokens)} entries>",
                              f"must have as many entries as new_tokens ({n})")
    if min(batch.new_tokens) == 0:
        index = list(batch.new_tokens).index(0)
        raise InvalidArgument(f"{field}.new_tokens[{index}]", 0, "must be > 0")


def validate_memory_spec(spec: mem_pb.MemorySessionSpec, *, field: str = "spec") -> None:
    """Checks a memory hierarchy: at least one level, each with sane figures."""
    if not spec.levels:
        raise InvalidArgument(f"{field}.levels", [], "must hold at least one level")
    if spec.mode == pb.SYNC_MODE_UNSPECIFIED:
        raise InvalidArgument(f"{field}.mode", "SYNC_MODE_UNSPECIFIED", "must be PREDICT or TIME_SYNCHRONIZED")
    for i, level in enumerate(spec.levels):
        where = f"{field}.levels[{i}]"
        _positive(f"{where}.capacity_bytes", level.capacity_bytes)
        _positive(f"{where}.bandwidth_gbps", level.bandwidth_gbps)
        if level.latency_ns < 0:
            raise InvalidArgument(f"{where}.latency_ns", level.latency_ns, "must be >= 0")
        if not 0.0 <= level.hit_rate <= 1.0:
            raise InvalidArgument(f"{where}.hit_rate", level.hit_rate, "must be in [0, 1]")


def validate_network_spec(spec: net_pb.NetworkSessionSpec, *, field: str = "spec") -> None:
    """Checks a topology: dims, and endpoints that fit on it."""
    if not spec.dims:
        raise InvalidArgument(f"{field}.dims", [], "must hold at least one dimension")
    if spec.mode == pb.SYNC_MODE_UNSPECIFIED:
        raise InvalidArgument(f"{field}.mode", "SYNC_MODE_UNSPECIFIED", "must be PREDICT or TIME_SYNCHRONIZED")
    total = 1
    for i, dim in enumerate(spec.dims):
        where = f"{field}.dims[{i}]"
        if dim.kind == net_pb.TOPOLOGY_KIND_UNSPECIFIED:
            raise InvalidArgument(f"{where}.kind", "TOPOLOGY_KIND_UNSPECIFIED",
                                  "must be RING, FULLY_CONNECTED or SWITCH")
        if dim.npus < 2:
            raise InvalidArgument(f"{where}.npus", dim.npus, "must be > 1")
        _positive(f"{where}.bandwidth_gbps", dim.bandwidth_gbps)
        if dim.latency_ns < 0:
            raise InvalidArgument(f"{where}.latency_ns", dim.latency_ns, "must be >= 0")
        total *= dim.npus
    names: set[str] = set()
    for i, endpoint in enumerate(spec.endpoints):
        where = f"{field}.endpoints[{i}]"
        if not endpoint.name or endpoint.name in names:
            raise InvalidArgument(f"{where}.name", endpoint.name, "must be a unique, non-empty name")
        names.add(endpoint.name)
        if not endpoint.npu_ids:
            raise InvalidArgument(f"{where}.npu_ids", [], "must hold at least one NPU id")
        for npu in endpoint.npu_ids:
            if npu >= total:
                raise InvalidArgument(f"{where}.npu_ids", npu,
                                      f"is out of range: the topology has {total} NPUs (ids 0..{total - 1})")
