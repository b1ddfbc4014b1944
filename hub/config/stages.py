"""Config of the clients that serve one non-LLM stage: pre/post-processing, RAG, KV retrieval.

Part of the scenario config (:mod:`cosim.hub.config.scenario`): a client's ``service``,
``rag`` and ``memory`` sections.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .bounds import MAX_GBPS, MAX_TOKENS, MIN_GBPS
from .frozen import FrozenModel


class ServiceTimeConfig(FrozenModel):
    """Service time of a pre/post-processing stage: linear in its tokens, plus an optional model prefill."""

    base_s: float = Field(0.0, ge=0, le=86_400, description="fixed time per stage, seconds")
    per_token_s: float = Field(0.0, ge=0, le=1.0, description="time per token (prompt for preprocess, output "
                                                            "for postprocess), seconds: normalization, tokenization")


class RagConfig(FrozenModel):
    """Retrieval of a RAG client: IVF-PQ search on a device, top-k documents added to the prompt.

    Times follow a roofline over the search's arithmetic and bytes (docs/multistage.md), as RAGO does.
    """

    retrieval_device: str = Field(description="a key of `hardware`: the device that searches the index")
    centroids: int = Field(4_000_000, gt=0, le=10**12, description="IVF centroids")
    probes: int = Field(50, gt=0, le=10**9, description="centroids probed per query")
    points_per_probe: int = Field(5_000, gt=0, le=10**9, description="vectors scanned per probed centroid")
    dim: int = Field(768, gt=0, le=1_000_000, description="vector dimension")
    pq_code_bytes: int = Field(64, gt=0, le=1_000_000, description="bytes of one PQ code (sub-quantizers)")
    top_k: int = Field(20, gt=0, le=100_000, description="documents added to the prompt")
    doc_tokens: int = Field(512, gt=0, le=MAX_TOKENS, description="tokens per document")
    compute_efficiency: float = Field(0.3, gt=0, le=1, description="share of the device's peak the search reaches")
    memory_efficiency: float = Field(0.7, gt=0, le=1, description="share of the device's bandwidth it reaches")
    embed_link_gbps: float = Field(32.0, ge=MIN_GBPS, le=MAX_GBPS, description="GB/s from the embedding device "
                                                                            "to the retrieval device when they differ")
    context_bytes_per_token: float = Field(4.0, gt=0, le=1e9,
                                           description="bytes per retrieved-text token sent to prefill")
    max_query_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS, description="the embedder reads at most this "
                                         "many prompt tokens (default: the model's context length)")


class KVRetrievalConfig(FrozenModel):
    """Where a KV-retrieval client fetches stored KV: a memory backend over a hierarchy of levels."""

    levels: list[dict[str, Any]] = Field(min_length=1, description="MemoryLevel fields per level, nearest first "
                                                                  "(name, capacity_bytes, bandwidth_gbps, "
                                                                  "latency_ns, hit_rate, shared_by)")
    mode: Literal["predict", "time_synchronized"] = Field("predict", description="hit rates, or LRU contents "
                                                                               "with shared bandwidth")
    parallel_decode_transfer: bool = Field(False, description="disaggregated: fetch the KV to the decode client "
                                                              "at the same time as to the prefill client (MIST)")
