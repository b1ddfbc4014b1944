"""The scenario config: the whole YAML a user writes, and the checks across its sections.

Top-level keys: ``seed``, ``models``, ``hardware``, ``backends``, ``network``,
``clients``, ``router``, ``workload``, ``slo``, ``frontend``, ``output`` (the sections:
:mod:`.sections`, :mod:`.workload`, :mod:`.templates`, :mod:`.frontend`). Reading a file, with
``--set`` overrides and every problem at once: :mod:`.loading`.
"""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from .bounds import MAX_SEED
from .frontend import FrontendConfig
from .frozen import FrozenModel, Problems
from .presets.user import HardwareConfig, ModelConfig, UserPresets
from .sections import BACKEND_SERVICES, BackendConfig, ClientConfig, NetworkConfig, OutputConfig, RouterConfig
from .slo import slo_problems
from .templates import LLM_STAGES, TemplateConfig, resolve_templates
from .workload import DEFAULT_LORA_RANK, WorkloadConfig


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
    frontend: FrontendConfig | None = Field(
        None, description="vLLM's API server in front of each serving instance: request handling, tokenization, "
                          "detokenization and streaming, so the summary also has client-side latencies "
                          "(client_latency; docs/frontend.md); none: latencies end at the engine")
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
            draft = client.speculative.draft_model if client.speculative else None
            if draft is not None and draft not in self.models:
                problems.append((f"{where}.speculative.draft_model",
                                 f"unknown model {draft!r}; defined: {sorted(self.models)}"))
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
        problems += _replica_problems(self)
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
            raise Problems(problems)
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


def _replica_problems(config: ScenarioConfig) -> list[tuple[str, str]]:
    """(config path, problem) of every pool that its scenario cannot run."""
    problems: list[tuple[str, str]] = []
    names = [c.name for c in config.clients]
    for i, client in enumerate(config.clients):
        replicas = client.replicas
        if replicas is None:
            continue
        where = f"clients[{i}].replicas"
        if client.kind != "llm":
            problems.append((where, f"only llm clients scale; this one is kind {client.kind!r}"))
        if client.dp_group is not None:
            problems.append((where, "the ranks of a dp_group step in lock-step and do not scale alone; remove "
                                    "dp_group or replicas"))
        if config.network.backend is not None:
            problems.append((where, "a network backend's topology is fixed when the run starts; replicas come "
                                    "and go (use network.link)"))
        if replicas.policy == "slo" and not any(config.slo.values()):
            problems.append((f"{where}.policy", "slo scales on the scenario's slo, which is empty; give one, e.g. "
                                                "slo: {ttft_s: {p90: 2.0}, tpot_s: {p90: 0.1}}"))
        clone = re.compile(rf"{re.escape(client.name)}-\d+")
        taken = [n for n in names if clone.fullmatch(n)]
        if taken:
            problems.append((f"clients[{i}].name", f"{client.name!r} names replicas {client.name}-0, "
                                                    f"{client.name}-1, ...; another client is called {taken[0]!r}"))
        if client.name in config.router.heavy_clients:
            problems.append(("router.heavy_clients", f"{client.name!r} is a pool of replicas, not one client"))
    return problems
