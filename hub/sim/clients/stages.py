"""How non-LLM stages are timed: pre/post-processing, RAG retrieval, KV retrieval.

Each timer implements ``serve(request, finish)`` for a :class:`ServiceClient`.
The IVF-PQ search model (:func:`ivfpq_search_ns`) is a roofline over the
search's arithmetic and memory traffic, phase by phase, as RAGO models it:

- coarse quantizer: the query against every centroid, ``2 C d`` FLOPs over
  ``4 C d`` bytes (fp32 centroids);
- lookup tables: per probe, distances to the 256 codewords of every
  sub-quantizer, ``2 x 256 x d`` FLOPs over ``4 x 256 x d`` bytes;
- scan: per probed vector, one table lookup and add per code byte, over its
  code and an 8-byte id;
- top-k: one comparison per scanned vector.

Each phase takes ``max(FLOPs / (peak x e_c), bytes / (bandwidth x e_m))``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from cosim.v1 import memory_service_pb2 as mem_pb

from ...backends.rpc import MemoryClient
from ...config.stages import KVRetrievalConfig, RagConfig, ServiceTimeConfig
from ..kernel import DONE, Kernel
from ..ports import StepTimes
from ..records import RequestRecord, StageRecord
from ..timesync import TimeSync


def ivfpq_search_ns(config: RagConfig, *, peak_tflops: float, mem_bandwidth_gbps: float) -> dict[str, int]:
    """Time of each IVF-PQ search phase on a device, ns (see the module docstring)."""
    flops_per_ns = peak_tflops * 1e3 * config.compute_efficiency
    bytes_per_ns = mem_bandwidth_gbps * config.memory_efficiency
    c, d, scanned = config.centroids, config.dim, config.probes * config.points_per_probe
    phases = {
        "coarse": (2.0 * c * d, 4.0 * c * d),
        "lookup_tables": (2.0 * 256 * d * config.probes, 4.0 * 256 * d * config.probes),
        "scan": (2.0 * scanned * config.pq_code_bytes, scanned * (config.pq_code_bytes + 8.0)),
        "top_k": (float(scanned), 0.0),
    }
    return {name: int(max(flops / flops_per_ns, traffic / bytes_per_ns)) for name, (flops, traffic) in phases.items()}


class LinearStageTimer:
    """Pre/post-processing: ``base + per_token x tokens``, plus a prefill of a model when one is given.

    A postprocessing model (a reward model, a toxicity filter) scores each
    reasoning path of a multi-path request: one batch of one sequence per path.
    """

    def __init__(self, kernel: Kernel, kind: str, service: ServiceTimeConfig,
                 model_timing: StepTimes | None = None) -> None:
        self.kernel, self.kind, self.service, self.model_timing = kernel, kind, service, model_timing

    def serve(self, request: RequestRecord, finish: Callable[[], None]) -> None:
        tokens = request.input_tokens if self.kind == "preprocess" else max(request.output_tokens, 1)
        duration = int(round((self.service.base_s + self.service.per_token_s * tokens) * 1e9))
        if self.model_timing is not None:
            paths = request.branches if self.kind == "postprocess" else 1
            batch = [max(1, tokens // paths)] * paths
            duration += self.model_timing.step_time(batch, [0] * paths, now_ns=self.kernel.now_ns).duration_ns
        self.kernel.call_at(self.kernel.now_ns + duration, DONE, finish)


class RagStageTimer:
    """Embedding (a prefill of the embedder), embedding transfer, IVF-PQ retrieval; then the prompt grows.

    The sub-steps are recorded as stages ``rag:embedding``, ``rag:embed_transfer``
    and ``rag:retrieval`` inside the request's ``rag`` stage.
    """

    def __init__(self, kernel: Kernel, client: str, config: RagConfig, embedding: StepTimes, *,
                 embed_device: str, retrieval_peak_tflops: float, retrieval_bandwidth_gbps: float,
                 max_query_tokens: int | None = None, embed_bytes_per_value: float = 4.0) -> None:
        self.kernel, self.client, self.config, self.embedding = kernel, client, config, embedding
        self.max_query_tokens = config.max_query_tokens or max_query_tokens
        search = ivfpq_search_ns(config, peak_tflops=retrieval_peak_tflops,
                                 mem_bandwidth_gbps=retrieval_bandwidth_gbps)
        self.retrieval_ns = sum(search.values())
        same_device = embed_device == config.retrieval_device
        self.embed_transfer_ns = 0 if same_device else \
            int(config.dim * embed_bytes_per_value / config.embed_link_gbps)

    def serve(self, request: RequestRecord, finish: Callable[[], None]) -> None:
        now = self.kernel.now_ns
        query = min(request.input_tokens, self.max_query_tokens or request.input_tokens)
        embed_ns = self.embedding.step_time([query], [0], now_ns=now).duration_ns
        parts = (("rag:embedding", embed_ns), ("rag:embed_transfer", self.embed_transfer_ns),
                 ("rag:retrieval", self.retrieval_ns))
        for kind, duration in parts:
            request.stages.append(StageRecord(kind=kind, client=self.client, enqueue_ns=now, start_ns=now,
                                              end_ns=now + duration))
            now += duration
        request.input_tokens += self.config.top_k * self.config.doc_tokens
        request.context_bytes = int(self.config.top_k * self.config.doc_tokens * self.config.context_bytes_per_token)
        self.kernel.call_at(now, DONE, finish)


class KVRetrievalTimer:
    """Looks the request's prefix KV up in a memory backend; a miss leaves the prefix to recompute."""

    def __init__(self, kernel: Kernel, client: str, config: KVRetrievalConfig, memory: MemoryClient,
                 session_id: str, kv_bytes_per_token: dict[str, float]) -> None:
        self.kernel, self.client, self.memory, self.session_id = kernel, client, memory, session_id
        self.kv_bytes_per_token = kv_bytes_per_token
        self.stateful = config.mode == "time_synchronized"
        self.parallel_decode_transfer = config.parallel_decode_transfer
        self._ids = itertools.count(1)
        self._sync = TimeSync(kernel, memory, session_id) if self.stateful else None
        self.num_lookups = self.num_hits = 0

    def _access(self, op: mem_pb.AccessOp.ValueType, request: RequestRecord) -> mem_pb.AccessResult:
        size = max(1, int(request.prefix_tokens * self.kv_bytes_per_token[request.model]))
        access = mem_pb.MemoryAccess(id=next(self._ids), op=op, key=request.prefix_id or f"request-{request.id}",
                                     size_bytes=size, client=self.client, now_ns=self.kernel.now_ns)
        (result,) = self.memory.access(self.session_id, [access], stateful=self.stateful,
                                       sim_time_ns=self.kernel.now_ns)
        return result

    def serve(self, request: RequestRecord, finish: Callable[[], None]) -> None:
        if request.prefix_tokens <= 0:
            self.kernel.call_at(self.kernel.now_ns, DONE, finish)
            return
        result = self._access(mem_pb.ACCESS_OP_LOOKUP, request)
        self.num_lookups += 1
        recompute = min(request.prefix_tokens, int(result.recompute_tokens))
        request.retrieved_tokens = request.prefix_tokens - recompute
        # MIST: the decode client fetches the same KV in parallel, so only new KV crosses P -> D later.
        request.retrieved_at_decode = self.parallel_decode_transfer and request.retrieved_tokens > 0
        self.num_hits += request.retrieved_tokens > 0
        if self._sync is None:
            self.kernel.call_at(self.kernel.now_ns + result.duration_ns, DONE, finish)
        else:
            self._sync.submitted(result.id, self.kernel.now_ns + result.duration_ns, lambda _ns: finish())

    def store(self, request: RequestRecord) -> None:
        """Stores a recomputed prefix so later requests find it (time-synchronized mode keeps contents)."""
        if self.stateful and request.prefix_tokens > 0 and request.retrieved_tokens == 0:
            result = self._access(mem_pb.ACCESS_OP_STORE, request)
            self._sync.submitted(result.id, self.kernel.now_ns + result.duration_ns, lambda _ns: None)  # type: ignore[union-attr]
