"""What the conformance checks send: a sample session of each kind and sample work for it.

Main names: :func:`sample_session_spec` (Llama-3-8B on one H100-SXM), :data:`SAMPLE_BATCHES`,
:func:`sample_memory_spec` with :data:`SAMPLE_ACCESSES`, :func:`sample_network_spec` with
:data:`SAMPLE_TRANSFERS` and :data:`SAMPLE_COLLECTIVES`. Backends' own tests and tools use them too.
"""

from __future__ import annotations

from collections.abc import Mapping

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb


def sample_session_spec(*, extra: Mapping[str, float] | None = None) -> pb.SessionSpec:
    """A Llama-3-8B session on one H100-SXM (figures from the public model card and datasheet).

    Args:
        extra: figures for ``hardware.extra``, for backends that read some.
    """
    return pb.SessionSpec(
        client="conformance",
        model=pb.ModelSpec(name="meta-llama/Meta-Llama-3-8B", num_layers=32, hidden_size=4096,
                           num_attention_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                           vocab_size=128256, bytes_per_param=2, bytes_per_kv_element=2, gated_mlp=True),
        hardware=pb.HardwareSpec(device="H100-SXM", count=1, peak_tflops=989.0, mem_bandwidth_gbps=3350.0,
                                 mem_capacity_bytes=80 * 10**9, intra_node_gbps=450.0, inter_node_gbps=50.0,
                                 devices_per_node=8, extra=extra),
        parallelism=pb.Parallelism(tensor=1, pipeline=1))


SAMPLE_BATCHES = (
    pb.StepBatch(new_tokens=[512], context_tokens=[0]),  # one prefill
    pb.StepBatch(new_tokens=[1, 1, 1], context_tokens=[100, 900, 2000]),  # three decodes
    pb.StepBatch(new_tokens=[256, 1], context_tokens=[256, 64]),  # a chunk and a decode
)


def sample_memory_spec() -> mem_pb.MemorySessionSpec:
    """Host DRAM, then an SSD tier, in predict mode; KV of Llama-3-8B in fp16 (round figures)."""
    return mem_pb.MemorySessionSpec(
        client="conformance", mode=pb.SYNC_MODE_PREDICT, kv_bytes_per_token=131_072,
        levels=[mem_pb.MemoryLevel(name="dram", capacity_bytes=512 * 10**9, bandwidth_gbps=100.0, latency_ns=100,
                                   hit_rate=0.5),
                mem_pb.MemoryLevel(name="ssd", capacity_bytes=4 * 10**12, bandwidth_gbps=5.0, latency_ns=50_000,
                                   hit_rate=0.9)])


def sample_network_spec() -> net_pb.NetworkSessionSpec:
    """Two nodes of four NPUs behind switches, in predict mode; endpoints ``p`` (NPUs 0-1) and ``d`` (4-5)."""
    spec = net_pb.NetworkSessionSpec(client="conformance", mode=pb.SYNC_MODE_PREDICT,
                                     system=net_pb.SystemConfig(endpoint_delay_ns=10, local_mem_bandwidth_gbps=1000))
    spec.dims.add(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=4, bandwidth_gbps=100.0, latency_ns=500)
    spec.dims.add(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=2, bandwidth_gbps=25.0, latency_ns=2000)
    spec.endpoints.add(name="p", npu_ids=[0, 1])
    spec.endpoints.add(name="d", npu_ids=[4, 5])
    return spec


SAMPLE_ACCESSES = (
    mem_pb.MemoryAccess(id=1, op=mem_pb.ACCESS_OP_LOOKUP, key="prefix-0", size_bytes=64 * 131_072),
    mem_pb.MemoryAccess(id=2, op=mem_pb.ACCESS_OP_STORE, key="prefix-1", size_bytes=512 * 131_072),
)
SAMPLE_TRANSFERS = (net_pb.PointToPoint(id=1, src="p", dst="d", size_bytes=8_000_000),)
SAMPLE_COLLECTIVES = (net_pb.CollectiveOp(id=2, kind=net_pb.COLLECTIVE_KIND_ALL_REDUCE, size_bytes=1_000_000,
                                          endpoint="p"),)
