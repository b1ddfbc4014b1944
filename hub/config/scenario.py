"""The scenario config: pydantic models of the YAML a user writes.

Top-level keys: ``seed``, ``models``, ``hardware``, ``backends``, ``network``,
``clients``, ``router``, ``workload``, ``slo``, ``output``. :func:`load_config`
reads a file, applies ``--set key=value`` overrides and reports every problem
at once, each located by its path (``clients[1].scheduler.chunk_size: must be
> 0, got -5``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from ..errors import ScenarioError
from ..metrics.slo import slo_problems
from ..sim.pipelines import LLM_STAGES, TemplateConfig, resolve_templates
from ..sim.scheduling.speculative import SpeculativeConfig
from ..sim.workload import WorkloadConfig
from . import safe_yaml
from .autoscale import ReplicasConfig, replica_problems
from .bounds import MAX_DEVICES, MAX_GBPS, MAX_SEED, MAX_TOKENS, MIN_GBPS
from .frozen import FieldProblem, FrozenModel
from .presets.user import HardwareConfig, ModelConfig, UserPresets, inline_files
from .scheduler import LoraConfig, SchedulerConfig
from .stages import KVRetrievalConfig, RagConfig, ServiceTimeConfig
from .workload import DEFAULT_LORA_RANK


class ScenarioProblems(ScenarioError):
    """Every problem found in one scenario, each a ScenarioError located by its own path.

    Reads as one error (``source: path: message``, or one problem per indented
    line); ``problems`` keeps them apart for ``cosim validate``.
    """

    def __init__(self, source: str, problems: Sequence[ScenarioError]) -> None:
        self.source, self.problems = source, list(problems)
        if len(self.problems) == 1:
            only = self.problems[0]
            where, message = (source, str(only)) if source else (only.where, only.message)
        else:
            where = source or f"{len(self.problems)} problems"
            message = "\n  " + "\n  ".join(map(str, self.problems))
        super().__init__(where, message)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its parts when it crosses a process pool (goodput's workers).
        return type(self), (self.source, self.problems)


class _Problems(ValueError):
    """Cross-field problems of one model, each already located by its path (see _pydantic_problems)."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{where}: {what}" for where, what in problems))
        self.problems = list(problems)


# The sessions each built-in backend kind serves (hub/backends/launchers.py: BUILTIN_BACKENDS).
BACKEND_SERVICES = {"roofline": "runtime", "regression": "runtime", "genz": "runtime", "scalesim": "runtime",
                    "aiconfigurator": "runtime",
                    "memory": "memory", "network": "network", "astrasim": "network"}


class BackendConfig(FrozenModel):
    """Where a backend runs: exactly one of kind, python, command, image, address."""

    kind: Literal["roofline", "regression", "memory", "network", "genz", "scalesim", "astrasim",
                  "aiconfigurator"] | None = Field(
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
        return self

    @property
    def source(self) -> str:
        return next(k for k in ("kind", "python", "command", "image", "address") if getattr(self, k))


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

    policy: Literal["round_robin", "random", "least_outstanding", "load_based", "heavy_light", "vllm_dp",
                    "lora_affinity", "prefix_aware", "sticky"] = Field(
        "round_robin", description="vllm_dp: vLLM's data-parallel load balancer (4 x waiting + running, "
                                   "counts published every 100 ms); lora_affinity: a client holding the "
                                   "request's LoRA adapter, then least load; prefix_aware: Dynamo's KV router "
                                   "(docs/routing.md); sticky: a session's turns to the client of its first "
                                   "(docs/sessions.md)")
    sticky_base: Literal["round_robin", "random", "least_outstanding", "load_based", "heavy_light", "vllm_dp",
                         "lora_affinity", "prefix_aware"] = Field(
        "least_outstanding", description="sticky: the policy of a session's first turn, of requests in no "
                                         "session, and of a turn whose client is gone or over sticky_max_load")
    sticky_max_load: float = Field(
        2.0, ge=1, le=1e6, description="sticky: a session leaves its client when that client holds more than "
                                       "this many times (the least loaded candidate's sequences + 1)")
    overlap_score_weight: float = Field(
        1.0, ge=0, le=1e6, description="prefix_aware: weight of the prefill blocks against the KV blocks in use "
                                       "(Dynamo's kv_overlap_score_weight, default 1)")
    load_metric: Literal["input_tokens", "kv_tokens", "remaining_tokens"] = Field(
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


class ScenarioConfig(FrozenModel):
    """A whole scenario."""

    seed: int = Field(0, ge=0, le=MAX_SEED, description="seed of every random draw")
    base_dir: str | None = Field(
        None, description="folder relative paths (traces) resolve against; default: the config file's folder "
        "(the config.yaml of a run folder names the original one)")
    presets: UserPresets | None = Field(None, description="a file of model/device presets beside the built-in ones")
    models: dict[str, ModelConfig]
    hardware: dict[str, HardwareConfig]
    backends: dict[str, BackendConfig]
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    clients: list[ClientConfig] = Field(min_length=1)
    router: RouterConfig = Field(default_factory=RouterConfig)
    workload: WorkloadConfig
    templates: dict[str, TemplateConfig] = Field(default_factory=dict,
                                                 description="request pipelines beside the built-in ones")
    slo: dict[str, dict[str, float]] = Field(default_factory=dict,
                                             description="e.g. {ttft_s: {p90: 2.0}, tpot_s: {p90: 0.1}}")
    output: OutputConfig = Field(default_factory=OutputConfig)

    @model_validator(mode="after")
    def _check_references(self) -> ScenarioConfig:
        problems: list[tuple[str, str]] = []
        names: set[str] = set()
        for i, client in enumerate(self.clients):
            where = f"clients[{i}]"
            if client.name in names:
                problems.append((f"{where}.name", f"duplicate client name {client.name!r}"))
            names.add(client.name)
            for field, table in (("model", self.models), ("backend", self.backends)):
                value = getattr(client, field)
                if value is not None and value not in table:
                    problems.append((f"{where}.{field}", f"unknown {field} {value!r}; defined: {sorted(table)}"))
            devices = [("hardware.device", client.hardware.device)] if client.hardware else []
            if client.rag:
                devices.append(("rag.retrieval_device", client.rag.retrieval_device))
            for field, device in devices:
                if device not in self.hardware:
                    problems.append((f"{where}.{field}",
                                     f"unknown device {device!r}; defined: {sorted(self.hardware)}"))
        problems += self._check_pipelines()
        problems += self._check_backend_kinds()
        problems += self._check_lora()
        problems += replica_problems(self)
        roles = {c.role for c in self.clients if c.kind == "llm"}
        for needed, role in (("prefill", "decode"), ("decode", "prefill")):
            if role in roles and needed not in roles and "mixed" not in roles:
                problems.append(("clients", f"a {role} client needs a {needed} (or mixed) client to pair with"))
        served = {c.model for c in self.clients if c.kind == "llm" and c.role in ("mixed", "prefill")}
        for model in self.workload.models or {}:
            if model not in self.models:
                problems.append((f"workload.models.{model}", f"unknown model; defined: {sorted(self.models)}"))
            elif model not in served:
                problems.append((f"workload.models.{model}", "no client serves stage 'prefill' of this model"))
        if self.network.collectives and (self.network.backend is None or self.network.mode != "predict"):
            problems.append(("network.collectives", "needs a network backend in predict mode"))
        if self.network.backend is not None and self.network.backend not in self.backends:
            problems.append(("network.backend", f"unknown backend {self.network.backend!r}"))
        problems += [(err.where, err.message) for err in slo_problems(self.slo)]
        for router_client in self.router.heavy_clients:
            if router_client not in names:
                problems.append(("router.heavy_clients", f"unknown client {router_client!r}"))
        if problems:
            raise _Problems(problems)
        return self

    def _check_lora(self) -> list[tuple[str, str]]:
        """Requests naming LoRA adapters need LLM clients serving LoRA, with ranks that fit (vLLM
        refuses a LoRA request without --enable-lora, and an adapter above --max-lora-rank)."""
        lora, problems = self.workload.lora, []
        source = self.workload.trace_source("input_tokens")
        traced = source is not None and source.lora_column is not None
        if lora is None and not traced:
            return []
        ranks = list(lora.ranks().values()) if lora is not None else []
        if traced:  # a trace's unlisted adapters get the default rank
            ranks.append(lora.rank if lora is not None else DEFAULT_LORA_RANK)
        largest = max(ranks)
        for i, client in enumerate(self.clients):
            if client.kind != "llm":
                continue
            if client.lora is None:
                problems.append((f"clients[{i}].lora", "requests name LoRA adapters (workload.lora): give the "
                                                       "client a lora section (max_loras, max_lora_rank)"))
            elif largest > client.lora.max_lora_rank:
                problems.append((f"clients[{i}].lora.max_lora_rank",
                                 f"{client.lora.max_lora_rank} is below the rank {largest} of an adapter in "
                                 "workload.lora"))
        return problems

    def _check_backend_kinds(self) -> list[tuple[str, str]]:
        """Each backend serves one kind of session, the kind its users need: runtime (llm, rag and
        model-based stage clients), memory (kv_retrieval clients) or network (``network.backend``);
        a built-in kind must serve that one (a memory backend cannot time an LLM's steps)."""
        users: dict[str, list[tuple[str, str]]] = {}  # backend -> (service, config path) of each user
        for i, client in enumerate(self.clients):
            if client.backend is not None:
                service = "memory" if client.kind == "kv_retrieval" else "runtime"
                users.setdefault(client.backend, []).append((service, f"clients[{i}].backend"))
        if self.network.backend is not None:
            users.setdefault(self.network.backend, []).append(("network", "network.backend"))
        problems = []
        for name, used in users.items():
            backend = self.backends.get(name)
            if backend is None:
                continue  # reported as unknown
            first_service, first_where = used[0]
            for service, where in used:
                if service != first_service:
                    problems.append((where, f"backend {name!r} would serve {service} sessions here and "
                                            f"{first_service} sessions at {first_where}; give each its own backend"))
                elif backend.kind is not None and BACKEND_SERVICES[backend.kind] != service:
                    fitting = ", ".join(k for k, s in BACKEND_SERVICES.items() if s == service)
                    problems.append((where, f"backend {name!r} is kind {backend.kind!r}, which serves "
                                            f"{BACKEND_SERVICES[backend.kind]} sessions; this needs a {service} "
                                            f"backend ({fitting})"))
        return problems

    def _check_pipelines(self) -> list[tuple[str, str]]:
        """Every stage of every template in use has a client (of the template's model, for LLM stages)."""
        problems = []
        templates = resolve_templates(self.templates)
        llm_models = {c.model for c in self.clients if c.kind == "llm"}
        kinds = {c.kind for c in self.clients}
        for name in self.workload.templates or {}:
            where = f"workload.templates.{name}"
            if name not in templates:
                problems.append((where, f"unknown template; defined: {sorted(templates)}"))
                continue
            template = templates[name]
            model = template.model or next((c.model for c in self.clients if c.kind == "llm"), None)
            if template.model is not None and template.model not in self.models:
                problems.append((f"templates.{name}.model", f"unknown model {template.model!r}"))
            elif model not in llm_models:
                problems.append((where, f"no llm client serves model {model!r} for stage 'prefill'"))
            for stage in template.stages:
                if stage not in LLM_STAGES and stage not in kinds:
                    problems.append((where, f"stage {stage!r} has no client of kind {stage!r}"))
        return problems


def _format_location(loc: Sequence[int | str], data: Any = None, *, missing: bool = False) -> str:
    """The config path of a pydantic error location, without pydantic's own parts: validator
    names, union tags (``poisson``, ``lognormal``) and the member types of a scalar union
    (``float``, ``int``): only the keys and indexes the user wrote (``data``) are kept."""
    text, node = "", data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int):
            text += f"[{part}]"
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        elif part.startswith(("function-after", "function-before")) or part in ("literal", "none"):
            continue
        elif data is not None and (not isinstance(node, Mapping) or part not in node) and not \
                (last and missing and isinstance(node, Mapping)):
            continue  # a tag of pydantic's, not a key the user wrote (a missing key is kept)
        else:
            text += f".{part}" if text else part
            node = node.get(part) if isinstance(node, Mapping) else None
    return text


def _pydantic_problems(err: ValidationError, data: Any = None) -> list[ScenarioError]:
    problems: list[ScenarioError] = []
    seen: set[str] = set()
    for item in err.errors():
        cause = item.get("ctx", {}).get("error")
        if isinstance(cause, _Problems):
            problems.extend(ScenarioError(where, what) for where, what in cause.problems)
            continue  # cross-field checks already name their paths
        where = _format_location(item["loc"], data, missing=item["type"] == "missing")
        if isinstance(cause, FieldProblem):  # a model-level check of one field: located at the field
            problems.append(ScenarioError(f"{where}.{cause.field}" if where else cause.field, cause.message))
            continue
        message = str(item["msg"]).removeprefix("Value error, ")
        got = item.get("input")
        shown = "" if item["type"] in ("missing", "extra_forbidden") or isinstance(got, dict) else f", got {got!r}"
        if item["type"] in ("finite_number", "bool_type") and where in seen:
            continue  # one problem per place: a scalar union (float | int | bool) fails in each member
        seen.add(where)
        problems.append(ScenarioError(where, f"{message.lower()}{shown}"))
    return problems


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Applies ``a.b[0].c=value`` (value parsed as YAML) to ``data`` in place."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ScenarioError(f"--set {assignment}", "expected key=value, e.g. clients[0].scheduler.max_num_seqs=64")
    parts = [p for p in re.split(r"\.|\[(\d+)\]", key) if p]
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        index: int | str = int(part) if part.isdigit() else part
        if isinstance(node, list):
            if not isinstance(index, int) or index >= len(node):
                raise ScenarioError(f"--set {key}", f"{part!r} is not an index of a list of {len(node)}")
        elif isinstance(node, dict):
            if not last and index not in node:
                node[index] = {}
        else:
            raise ScenarioError(f"--set {key}", f"cannot set {part!r} inside a {type(node).__name__}")
        if last:
            try:
                node[index] = safe_yaml.load(raw)
            except yaml.YAMLError as err:
                raise ScenarioError(f"--set {key}", f"not valid YAML: {safe_yaml.describe(err)}") from None
        else:
            node = node[index]


def _yaml_copy(value: Any) -> Any:
    """A deep copy of a YAML-like value as a YAML round trip gives it (mappings as dicts with sorted
    keys, sequences as lists), without the round trip's cost (a search parses a config per run)."""
    if isinstance(value, Mapping):
        items = [(key, _yaml_copy(item)) for key, item in value.items()]
        with contextlib.suppress(TypeError):  # keys of mixed types keep their order, as yaml.safe_dump's
            items.sort(key=lambda pair: pair[0])
        return dict(items)
    if isinstance(value, list | tuple):
        return [_yaml_copy(item) for item in value]
    return value


def parse_config(data: Mapping[str, Any], *, overrides: Sequence[str] = (), source: str = "config",
                 folder: Path | None = None) -> ScenarioConfig:
    """Validates a config mapping (after overrides), the files it names for presets read in (from
    ``folder``, default the working directory, when relative; see :mod:`cosim.hub.config.presets.user`).

    Raises:
        ScenarioError: a bad ``--set``.
        ScenarioProblems: listing every problem of the config, each with its path.
    """
    copied: dict[str, Any] = _yaml_copy(data)  # a deep copy the overrides may change
    for assignment in overrides:
        apply_override(copied, assignment)
    root = Path.cwd() if folder is None else folder
    files = inline_files(copied, root / copied["base_dir"] if isinstance(copied.get("base_dir"), str) else root)
    try:
        config = ScenarioConfig.model_validate(copied)
    except ValidationError as err:
        raise ScenarioProblems(source, [ScenarioError(*p) for p in files] + _pydantic_problems(err, copied)) from None
    if files:
        raise ScenarioProblems(source, [ScenarioError(*p) for p in files])
    return config


def load_config(path: str | Path, *, overrides: Sequence[str] = ()) -> tuple[ScenarioConfig, Path]:
    """Reads and validates a YAML scenario; returns it and the folder relative paths resolve against."""
    path = Path(path)
    try:
        data = safe_yaml.load(path.read_text())
    except OSError as err:
        raise ScenarioError(str(path), f"cannot read config: {err.strerror}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ScenarioError(where, f"not valid YAML: {getattr(err, 'problem', err)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(str(path), "a config is a YAML mapping with keys models, hardware, backends, clients, ...")
    config = parse_config(data, overrides=overrides, source=str(path), folder=path.resolve().parent)
    return config, scenario_folder(config, path.resolve().parent)


def scenario_folder(config: ScenarioConfig, default: Path) -> Path:
    """The folder relative paths of ``config`` resolve against: its ``base_dir`` (itself relative to
    ``default``), else ``default`` (the config file's folder)."""
    return default / config.base_dir if config.base_dir is not None else default
