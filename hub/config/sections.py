"""The sections of a scenario config: backends, clients, network, router and output.

The whole scenario, and the checks across its sections, are :mod:`.scenario`'s.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from ..backends.kinds import BUILTIN_KINDS
from .autoscale import ReplicasConfig
from .bench_report import DEFAULT_METRICS, DEFAULT_PERCENTILES, percentile_metrics, percentiles
from .bounds import MAX_DEVICES, MAX_GBPS, MAX_TOKENS, MIN_GBPS
from .choices import BaseRouterName, LoadMetricName, RouterName
from .frozen import FieldProblem, FrozenModel
from .scheduler import LoraConfig, SchedulerConfig
from .speculative import SpeculativeConfig
from .stages import KVRetrievalConfig, RagConfig, ServiceTimeConfig

# The sessions each built-in backend kind serves.
BACKEND_SERVICES = {kind: spec.service for kind, spec in BUILTIN_KINDS.items()}

if TYPE_CHECKING:  # the Literal is the model's business at run time; mypy reads str
    BackendKind = str
else:
    BackendKind = Literal[tuple(BUILTIN_KINDS)]


class BackendConfig(FrozenModel):
    """Where a backend runs: exactly one of kind, python, command, image, address."""

    kind: BackendKind | None = Field(
        None, description="a built-in backend, served in-process on loopback")
    python: str | None = Field(None, description="a backend class as package.module:Class, served in-process")
    command: list[str] | None = Field(None, description="a command that serves a backend; {port} is replaced")
    image: str | None = Field(None, description="a container image started with the Docker SDK")
    address: str | None = Field(None, description="host:port of a backend that is already running")
    reconnect_s: float = Field(30.0, ge=0, le=86_400, description="how long a call waits for the backend to come "
                               "back when it goes away (docs/faults.md; 0: not at all)")
    options: dict[str, Any] = Field(default_factory=dict, description="session options passed to the backend")
    deadline_s: float = Field(30.0, gt=0, le=86_400, description="deadline of each call (at most a day)")
    cache: bool = Field(True, description="cache step timings by exact batch signature")
    lookahead: bool = Field(True, description="send predicted decode batches along with each step (needs cache)")
    cache_bucket_tokens: int = Field(
        0, ge=0, le=MAX_TOKENS, description="time steps with context tokens rounded up to a multiple of this, "
        "so nearby batches share a cache entry (approximate; only for backends declaring bucketed_cache_safe; "
        "0: exact)")

    @model_validator(mode="after")
    def _exactly_one_source(self) -> BackendConfig:
        given = [k for k in ("kind", "python", "command", "image", "address") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(f"give exactly one of kind, python, command, image, address; got {given or 'none'}")
        module, colon, name = (self.python or "").partition(":")
        if self.python is not None and not (module and colon and name):  # as the SDK's load_backend reads it
            raise FieldProblem("python", f"a backend class as package.module:Class (the class after a colon), "
                                         f"got {self.python!r}")
        bad = _non_finite(self.options, "options")
        if bad is not None:  # options travel as a protobuf Struct, JSON numbers: no NaN or infinity
            raise FieldProblem(bad[0], f"input should be a finite number, got {bad[1]!r}")
        return self

    @property
    def source(self) -> str:
        return next(k for k in ("kind", "python", "command", "image", "address") if getattr(self, k))


def _non_finite(node: Any, path: str) -> tuple[str, float] | None:
    """The path and value of the first float below ``node`` that is NaN or infinite, or None."""
    if isinstance(node, float):
        return None if math.isfinite(node) else (path, node)
    items: Any = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found = _non_finite(value, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
        if found is not None:
            return found
    return None


class ClientHardware(FrozenModel):
    """The cluster one client runs on."""

    device: str = Field(description="a key of `hardware`")
    count: int = Field(1, gt=0, le=MAX_DEVICES, description="devices in the cluster")
    tensor_parallel: int = Field(1, gt=0, le=MAX_DEVICES, description="tensor-parallel degree")
    pipeline_parallel: int = Field(1, gt=0, le=MAX_DEVICES, description="pipeline-parallel degree")
    expert_parallel: int = Field(1, gt=0, le=MAX_DEVICES, description="expert-parallel degree (MoE)")


Role = Literal["mixed", "prefill", "decode"]


ClientKind = Literal["llm", "preprocess", "postprocess", "rag", "kv_retrieval"]


class ClientConfig(FrozenModel):
    """One serving instance: a scheduler and a cluster, timed by one backend.

    ``kind: llm`` (the default) serves prefill/decode/reason; the other kinds
    serve one pipeline stage on ``servers`` FIFO servers: ``preprocess`` and
    ``postprocess`` (``service`` times, plus a prefill of ``model`` when set,
    e.g. a toxicity filter or reward model), ``rag`` (embedding = prefill of
    ``model`` on ``backend``, then ``rag`` retrieval), ``kv_retrieval``
    (``memory`` on the memory backend ``backend``).
    """

    name: str = Field(description="unique client name")
    kind: ClientKind = Field("llm", description="the stage kind the client serves")
    model: str | None = Field(None, description="a key of `models` (llm: served; rag: embedder; "
                                                "pre/postprocess: classifier or reward model)")
    role: Role = Field("mixed", description="mixed serves prefill and decode; prefill/decode disaggregate")
    backend: str | None = Field(None, description="a key of `backends` (runtime; memory for kv_retrieval)")
    hardware: ClientHardware | None = None
    dp_group: str | None = Field(None, description="llm: clients naming the same group are the data-parallel ranks "
                                                   "of one MoE deployment and step in lock-step, as vLLM's do")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    speculative: SpeculativeConfig | None = Field(
        None, description="llm: speculative decoding: drafts proposed and verified each step (docs/speculative.md)")
    servers: int = Field(1, gt=0, le=MAX_DEVICES, description="non-llm kinds: stages served at once (cores)")
    service: ServiceTimeConfig = Field(default_factory=ServiceTimeConfig)
    rag: RagConfig | None = None
    memory: KVRetrievalConfig | None = None
    lora: LoraConfig | None = Field(None, description="llm: serve LoRA adapters (vLLM --enable-lora; docs/lora.md)")
    replicas: ReplicasConfig | None = Field(
        None, description="llm: an autoscaled pool of clones of this client, <name>-0, <name>-1, ... "
                          "(docs/autoscaling.md)")

    @property
    def forms_one_step_ahead(self) -> bool:
        """Whether the client forms each step as vLLM's async scheduling does: ``scheduler.async_scheduling``
        when set; else its scheduler's default (chunked batching), unless it drafts with ngram or a draft
        model, with which vLLM leaves async scheduling off by default (only EAGLE/MTP drafters turn it on:
        vLLM PR #31998)."""
        if self.scheduler.async_scheduling is not None:
            return self.scheduler.async_scheduling
        drafts_alone = self.speculative is not None and self.speculative.method in ("ngram", "draft_model")
        return self.scheduler.forms_one_step_ahead and not drafts_alone

    @model_validator(mode="after")
    def _check_kind(self) -> ClientConfig:
        needs = {"llm": ("model", "backend", "hardware"), "rag": ("model", "backend", "hardware", "rag"),
                 "kv_retrieval": ("backend", "memory")}.get(self.kind, ())
        missing = [field for field in needs if getattr(self, field) is None]
        if missing:
            raise ValueError(f"a {self.kind} client needs {', '.join(missing)}")
        if self.model is not None and self.kind in ("preprocess", "postprocess") and \
                (self.backend is None or self.hardware is None):
            raise ValueError(f"a model-based {self.kind} client needs backend and hardware")
        if self.dp_group is not None and (self.kind != "llm" or self.role != "mixed" or
                                          (self.hardware is not None and self.hardware.pipeline_parallel > 1)):
            raise ValueError("dp_group: only mixed-role llm clients without pipeline parallelism step in lock-step")
        if self.speculative is not None and self.kind != "llm":
            raise ValueError("speculative: only llm clients decode")
        if self.speculative is not None and self.speculative.method in ("draft_model", "mtp") and \
                self.hardware is not None:
            for degree in ("pipeline_parallel", "expert_parallel"):
                if getattr(self.hardware, degree) > 1:  # a drafter model has its own layers and no experts
                    raise FieldProblem("speculative.method", f"{self.speculative.method} drafts with a model of its "
                                       f"own, which cosim runs without pipeline or expert parallelism; this client "
                                       f"has hardware.{degree}: {getattr(self.hardware, degree)} (use ngram, or "
                                       f"{degree}: 1)")
        return self


class LinkConfig(FrozenModel):
    """A plain link for inter-client transfers when no network backend is named."""

    bandwidth_gbps: float = Field(50.0, ge=MIN_GBPS, le=MAX_GBPS,
                                  description="GB/s (decimal); default: one 400 Gb/s NIC")
    latency_s: float = Field(10e-6, ge=0, le=3600, description="fixed latency per transfer, seconds")


class TopologyDimConfig(FrozenModel):
    """One dimension of the network topology (ASTRA-sim network.yml)."""

    kind: Literal["ring", "fully_connected", "switch"] = Field(description="basic topology of the dimension")
    npus: int = Field(gt=1, le=MAX_DEVICES, description="NPUs in the dimension")
    bandwidth_gbps: float = Field(ge=MIN_GBPS, le=MAX_GBPS, description="link bandwidth, GB/s (decimal)")
    latency_ns: float = Field(0.0, ge=0, le=3.6e12, description="latency per hop, ns (at most an hour)")


class NetworkConfig(FrozenModel):
    """How data moves between clients (KV caches, retrieved context).

    With a network ``backend``, each client's devices become NPUs of
    ``topology`` (in client order), and every transfer is timed by the backend:
    ``predict`` is congestion-unaware; ``congestion_aware`` runs the backend
    time-synchronized, so concurrent transfers slow each other down. Without
    one, transfers take ``link`` latency plus size over bandwidth.
    """

    backend: str | None = Field(None, description="a key of `backends` of a network backend; none = `link`")
    mode: Literal["predict", "congestion_aware"] = Field("predict", description="how the backend is run")
    topology: list[TopologyDimConfig] | None = Field(
        None, description="dimensions, dim 0 first; default: each client's devices on nodes of their own "
                          "(devices_per_node, the preset's intra-node link at NCCL's bus bandwidth and hop "
                          "latency), the nodes on one switch at the slowest device's inter-node bandwidth")
    kv_layers: int = Field(1, ge=1, description="KV sent as this many back-to-back messages (layer by layer)")
    collectives: bool = Field(False, description="time each step's tensor-parallel all-reduces on the network "
                                                 "backend (predict mode) in place of the runtime backend's own")
    link: LinkConfig = Field(default_factory=LinkConfig)


class RouterConfig(FrozenModel):
    """How the coordinator picks a client for a stage."""

    policy: RouterName = Field(
        "round_robin", description="vllm_dp: vLLM's data-parallel load balancer (4 x waiting + running, "
                                   "counts published every 100 ms); lora_affinity: a client holding the "
                                   "request's LoRA adapter, then least load; prefix_aware: Dynamo's KV router "
                                   "(docs/routing.md); sticky: a session's turns to the client of its first "
                                   "(docs/sessions.md)")
    sticky_base: BaseRouterName = Field(
        "least_outstanding", description="sticky: the policy of a session's first turn, of requests in no "
                                         "session, and of a turn whose client is gone or over sticky_max_load")
    sticky_max_load: float = Field(
        2.0, ge=1, le=1e6, description="sticky: a session leaves its client when that client holds more than "
                                       "this many times (the least loaded candidate's sequences + 1)")
    overlap_score_weight: float = Field(
        1.0, ge=0, le=1e6, description="prefix_aware: weight of the prefill blocks against the KV blocks in use "
                                       "(Dynamo's kv_overlap_score_weight, default 1)")
    load_metric: LoadMetricName = Field(
        "remaining_tokens", description="load of load_based and heavy_light")
    heavy_threshold_tokens: int = Field(2048, gt=0, le=MAX_TOKENS,
                                        description="heavy_light: prompts this long are heavy")
    heavy_clients: list[str] = Field(default_factory=list,
                                     description="heavy_light: clients for heavy requests (default: first half)")


class OutputConfig(FrozenModel):
    """Where and what a run writes."""

    dir: str | None = Field(None, description="run folder; none writes nothing (Python API) ")
    plots: bool = Field(True, description="write plots/*.png")
    requests_format: Literal["csv", "parquet"] = Field(
        "csv", description="requests.csv, or requests.parquet (typed columns, row groups; needs pyarrow: "
        "pip install 'cosim[parquet]')")
    intervals: bool = Field(
        False, description="prediction intervals (also `cosim run --intervals`): after the run, rerun it twice with "
        "every step scaled to the low and the high edge of the step error its backend declares (the fitted "
        "roofline: its cross-validated step MAPE), and give each headline metric's [low, high] in summary.json "
        "`intervals`, report.html and the printed table; step-model error only, not workload randomness "
        "(docs/intervals.md). Three runs' time")
    metric_percentiles: str | list[float] = Field(
        DEFAULT_PERCENTILES, description="vllm bench serve's --metric-percentiles: the percentiles summary.json "
        "`benchmark` and its printed block give, comma-separated (\"50,90,99\") or a list")
    percentile_metrics: str | list[str] = Field(
        DEFAULT_METRICS, description="vllm bench serve's --percentile-metrics: the metrics (ttft, tpot, itl, e2el) "
        "whose mean, median, std and percentiles summary.json `benchmark` and its printed block give")

    benchmark_details: bool = Field(
        False, description="vllm bench serve's --save-detailed: summary.json `benchmark` also lists each request's "
        "input_lens, output_lens, ttfts, itls (every gap between its tokens), start_times, generated_texts and "
        "errors; as large as the run's tokens, and decode runs are taken step by step (slower, same results)")

    @field_validator("metric_percentiles")
    @classmethod
    def _percentiles(cls, value: str | list[float]) -> str | list[float]:
        percentiles(value)
        return value

    @field_validator("percentile_metrics")
    @classmethod
    def _metrics(cls, value: str | list[str]) -> str | list[str]:
        percentile_metrics(value)
        return value
