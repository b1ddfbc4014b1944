"""Validation up front: a scenario resolved as a run resolves it, every problem at once.

:func:`resolve_scenario` resolves every model and device preset, each
client's cluster (device x count in its model's dtype), parallelism, KV
capacity, RAG retrieval devices, KV-retrieval memory levels and the network
topology, with the functions a run uses (:mod:`cosim.hub.config.resolve`), and keeps
every :class:`ScenarioError`, each located by its config path; no backend
starts. :func:`validate_scenario` returns those errors, :func:`check_scenario`
raises them as one (the runner's check before it starts backends), and
:func:`validate` (``cosim.validate``) also reads and parses the config, asks the
built-in backends about the sessions a run opens on them
(:func:`session_problems`, in-process), and draws the workload as a run does,
refusing a request no client can ever serve (:func:`workload_problems`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from cosim.v1 import types_pb2 as pb

from ..config import presets
from ..config.loading import ScenarioProblems, load_config, parse_config, scenario_folder
from ..config.memory import KVMemory
from ..config.resolve import (
    device_spec,
    kv_capacity_blocks,
    kv_memory_report,
    memory_session_spec,
    network_session_spec,
    parallelism_problems,
    resolve_device,
    resolve_hardware,
    resolve_model,
    runtime_session_spec,
    weight_bytes_per_device,
)
from ..config.scenario import ScenarioConfig
from ..config.sections import ClientConfig
from ..errors import ScenarioError
from ..sim.admission import ClientLimits, check_requests
from ..sim.arrivals import scenario_requests
from ..sim.routing import routes
from .session_probe import BuiltinSessions

__all__ = ["ClientCapacity", "Resolution", "ScenarioProblems", "check_scenario", "resolve_scenario", "validate",
           "session_problems", "validate_scenario", "workload_problems"]

# The stages an LLM client of each role serves (as hub/studies/simulation.py's clients).
LLM_ROLE_STAGES = {"mixed": ("prefill", "decode"), "prefill": ("prefill",), "decode": ("decode",)}

T = TypeVar("T")


@dataclass(frozen=True)
class ClientCapacity:
    """What validation computed for one LLM client (``cosim validate`` prints it).

    Attributes:
        name: the client's name.
        role: mixed, prefill or decode.
        model: the model preset's name; dtype: its dtype.
        device: the device preset's name; count: devices in the cluster.
        tensor_parallel, pipeline_parallel, expert_parallel: the parallel degrees.
        weight_bytes_per_device: model weights one device holds (experts split by EP when EP > 1).
        kv_capacity_blocks: KV blocks, as a run sizes the client's block manager.
        block_size_tokens: tokens per block.
        from_num_gpu_blocks: the capacity was set by ``scheduler.num_gpu_blocks``, not computed.
        kv_memory: one device's memory as vLLM's profiling splits it (weights, activation peak,
            CUDA graphs, non-torch, KV) and the blocks it leaves; None when ``num_gpu_blocks`` is set
            and the computation fails.
    """

    name: str
    role: str
    model: str
    dtype: str
    device: str
    count: int
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: int
    weight_bytes_per_device: int
    kv_capacity_blocks: int
    block_size_tokens: int
    from_num_gpu_blocks: bool
    kv_memory: KVMemory | None = None

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the KV cache holds: blocks x block size."""
        return self.kv_capacity_blocks * self.block_size_tokens


@dataclass
class Resolution:
    """A scenario resolved without backends: its problems, and the capacity of each LLM client resolved."""

    errors: list[ScenarioError] = field(default_factory=list)
    clients: list[ClientCapacity] = field(default_factory=list)

    def attempt(self, call: Callable[[], T]) -> T | None:
        """``call()``, or None with its ScenarioError kept (once: clients sharing a bad entry repeat it)."""
        try:
            return call()
        except ScenarioError as err:
            self.add([err])
            return None

    def add(self, errors: Sequence[ScenarioError]) -> None:
        """Keeps ``errors``, less those already kept."""
        seen = {(e.where, e.message) for e in self.errors}
        self.errors += [e for e in errors if (e.where, e.message) not in seen]


def resolve_scenario(config: ScenarioConfig) -> Resolution:
    """Resolves everything a run resolves before it starts backends; collects every problem.

    Args:
        config: a parsed scenario (pydantic checks already passed).

    Returns:
        The problems in config order (entries first, then clients, then the network), and the
        capacity of every LLM client that resolved.
    """
    found = Resolution()
    models = {name: found.attempt(functools.partial(resolve_model, config, name)) for name in config.models}
    devices = {name: found.attempt(functools.partial(resolve_device, config, name)) for name in config.hardware}
    if not any(c.kind == "llm" for c in config.clients):
        found.add([ScenarioError("clients", "needs an llm client: every request's prefill runs on one")])
    hardware: dict[str, pb.HardwareSpec] = {}  # of the clients with a runtime session, as the simulation's
    for index, client in enumerate(config.clients):
        _resolve_client(config, index, client, models, devices, hardware, found)
    found.add(_dp_group_problems(config))
    sessions = {c.name for c in config.clients if c.model is not None and c.hardware is not None}
    if config.network.backend is not None and set(hardware) == sessions:
        found.attempt(lambda: network_session_spec(config, hardware))  # once every cluster resolved
    return found


def _dp_group_problems(config: ScenarioConfig) -> list[ScenarioError]:
    """Ranks of one data-parallel group must be the same engine: model, backend, cluster, scheduler."""
    problems: list[ScenarioError] = []
    first: dict[str, tuple[str, tuple[object, ...]]] = {}
    for index, client in enumerate(config.clients):
        if client.dp_group is None:
            continue
        same = (client.model, client.backend, client.hardware, client.scheduler)
        name, shape = first.setdefault(client.dp_group, (client.name, same))
        if shape != same:
            problems.append(ScenarioError(f"clients[{index}].dp_group", f"{client.dp_group!r}: {client.name!r} differs "
                                          f"from {name!r} in model, backend, hardware or scheduler; the ranks of "
                                          "one data-parallel deployment are the same engine"))
    return problems


def _resolve_client(config: ScenarioConfig, index: int, client: ClientConfig,
                    models: Mapping[str, presets.ModelPreset | None],
                    devices: Mapping[str, presets.DevicePreset | None],
                    hardware: dict[str, pb.HardwareSpec], found: Resolution) -> None:
    """One client as the simulation builds it: its cluster, parallelism, KV capacity, stage devices."""
    where = f"clients[{index}]"
    if client.kind == "kv_retrieval" and client.memory is not None:
        # Only the levels are checked here; the KV size per token does not change their validity.
        found.attempt(lambda: memory_session_spec(client, 1.0, where=f"{where}.memory.levels"))
    if client.rag is not None and devices.get(retrieval := client.rag.retrieval_device) is not None:
        found.attempt(lambda: device_spec(config, retrieval, 1, "fp32", where=f"{where}.rag.retrieval_device"))
    if client.model is None or client.hardware is None:
        return  # no runtime session: the cluster times nothing
    model = models[client.model]
    problems = parallelism_problems(client, model, where)
    found.add(problems)
    if model is None or devices.get(client.hardware.device) is None:
        return  # the entry's own problem is reported once, at models.* or hardware.*
    spec = found.attempt(lambda: resolve_hardware(config, client, where))
    if spec is None:
        return
    hardware[client.name] = spec
    if client.kind != "llm" or problems:
        return
    blocks = found.attempt(lambda: kv_capacity_blocks(client, model, spec, where))
    if blocks is not None:
        hw = client.hardware
        found.clients.append(ClientCapacity(
            name=client.name, role=client.role, model=model.name, dtype=config.models[client.model].dtype,
            device=spec.device, count=hw.count, tensor_parallel=hw.tensor_parallel,
            pipeline_parallel=hw.pipeline_parallel, expert_parallel=hw.expert_parallel,
            weight_bytes_per_device=int(weight_bytes_per_device(model, hw)), kv_capacity_blocks=blocks,
            block_size_tokens=client.scheduler.block_size,
            from_num_gpu_blocks=client.scheduler.num_gpu_blocks is not None,
            kv_memory=kv_memory_report(client, model, spec, where)))


def validate_scenario(config: ScenarioConfig) -> list[ScenarioError]:
    """Every problem a run of ``config`` would meet while resolving it, each located by its config path.

    Presets (models, devices, RAG retrieval devices), overrides, parallelism
    against devices and model shape, KV capacity, memory levels and the network
    topology, through the functions a run uses; no backend is needed.

    Returns:
        The problems (``clients[1].hardware.count: ...``), [] when the scenario resolves.
    """
    return resolve_scenario(config).errors + output_problems(config)


def output_problems(config: ScenarioConfig) -> list[ScenarioError]:
    """What the run folder asked for cannot be written here: requests.parquet without pyarrow."""
    if config.output.requests_format == "parquet":
        from ..metrics.parquet import require_pyarrow

        try:
            require_pyarrow()
        except ImportError as err:
            return [ScenarioError("output.requests_format", str(err))]
    return []


def check_scenario(config: ScenarioConfig, *, source: str = "") -> None:
    """Raises every problem :func:`validate_scenario` finds as one error.

    Args:
        config: the scenario.
        source: where it came from (a file name), shown before a list of problems.

    Raises:
        ScenarioProblems: one problem reads as itself (``path: message``); several, one per line.
    """
    errors = validate_scenario(config)
    if errors:
        raise ScenarioProblems(source, errors)


def workload_problems(config: ScenarioConfig, resolution: Resolution, base_dir: Path) -> list[ScenarioError]:
    """The workload's problems: its requests drawn as a run draws them (traces read, lengths and arrival
    times sampled), and the first request no LLM client can ever serve (:mod:`cosim.hub.sim.admission`).

    Args:
        config: a scenario that resolved (``resolution`` has no errors).
        resolution: its resolution, for each LLM client's KV capacity.
        base_dir: the folder its relative trace paths resolve against.

    Returns:
        The problem ([] or one ScenarioError): a run stops at the first too.
    """
    capacities = {c.name: c for c in resolution.clients}
    limits = []
    for client in config.clients:
        capacity = capacities.get(client.name)
        if client.kind == "llm" and capacity is not None and client.model is not None:
            limits.append(ClientLimits.of(client.name, client.model, LLM_ROLE_STAGES[client.role], client.scheduler,
                                          max(capacity.kv_capacity_blocks - 1, 1)))
    try:
        specs, pipelines = scenario_requests(config, np.random.default_rng(config.seed), base_dir)
        retrieved = [c.rag.top_k * c.rag.doc_tokens for c in config.clients if c.kind == "rag" and c.rag]
        check_requests(limits, specs, pipelines, retrieved_tokens=min(retrieved, default=0),
                       route=routes(config.router))
    except ScenarioError as err:
        return [err]
    return []


# The largest step validation times: larger budgets are timed at this many tokens (a backend's cost
# of timing one step may grow with its tokens).
_MAX_PROBE_TOKENS = 8192


def session_problems(config: ScenarioConfig) -> list[ScenarioError]:
    """What the built-in backends say of the sessions a run opens on them (:mod:`.session_check`):
    each client's runtime session (once per distinct spec, as a run shares them), each KV-retrieval
    client's memory session and the network session, located as a run reports them.

    Args:
        config: a scenario that resolved (no problems from :func:`resolve_scenario`).
    """
    sessions = BuiltinSessions(config)
    problems: list[ScenarioError] = []
    hardware: dict[str, pb.HardwareSpec] = {}
    asked: set[tuple[str, bytes]] = set()
    for index, client in enumerate(config.clients):
        if client.model is None or client.hardware is None or client.backend is None:
            continue
        spec = runtime_session_spec(config, client, resolve_model(config, client.model),
                                    resolve_hardware(config, client, f"clients[{index}]"))
        hardware[client.name] = spec.hardware
        anonymous = pb.SessionSpec()
        anonymous.CopyFrom(spec)
        anonymous.ClearField("client")
        key = (client.backend, anonymous.SerializeToString(deterministic=True))
        if key not in asked:
            asked.add(key)
            step = client.scheduler.max_num_batched_tokens if client.kind == "llm" else 1
            ranks = sum(c.dp_group == client.dp_group for c in config.clients) if client.dp_group else 1
            problems += filter(None, [sessions.problem(client.backend, spec, f"clients[{index}]",
                                                       probe_tokens=min(step, _MAX_PROBE_TOKENS), dp_ranks=ranks)])
    llm = next((c for c in config.clients if c.kind == "llm" and c.model is not None), None)
    for index, client in enumerate(config.clients):
        if client.kind == "kv_retrieval" and client.backend is not None and llm is not None:
            kv_bytes = float(resolve_model(config, str(llm.model)).kv_bytes_per_token())
            memory = memory_session_spec(client, kv_bytes, config.backends[client.backend].options)
            problems += filter(None, [sessions.problem(client.backend, memory, f"clients[{index}].memory")])
    if config.network.backend is not None:
        network = network_session_spec(config, hardware)
        problems += filter(None, [sessions.problem(config.network.backend, network, "network")])
    return problems


def _parse_any(config: ScenarioConfig | Mapping[str, Any] | str | Path, *,
              overrides: Sequence[str] = ()) -> tuple[ScenarioConfig, Path]:
    """A parsed scenario from a path, a mapping or a parsed config, with ``overrides`` applied, and
    the folder its relative paths resolve against (as :func:`cosim.run` takes them).

    Raises:
        ScenarioError: unreadable YAML or a bad ``--set``; ScenarioProblems: every pydantic problem.
    """
    if isinstance(config, (str, Path)):
        return load_config(config, overrides=overrides)
    if isinstance(config, ScenarioConfig):
        parsed = parse_config(config.model_dump(), overrides=overrides) if overrides else config
    else:
        parsed = parse_config(config, overrides=overrides)
    return parsed, scenario_folder(parsed, Path.cwd())


def validate(config: ScenarioConfig | Mapping[str, Any] | str | Path, *,
             overrides: Sequence[str] = ()) -> list[ScenarioError]:
    """Checks a scenario without running it (``cosim.validate``, the Python side of ``cosim validate``).

    Args:
        config: a path to a YAML file, a mapping, or a parsed config.
        overrides: ``key=value`` assignments, as ``cosim run --set``.

    Returns:
        Every problem, each a ScenarioError whose ``where`` is its config path; [] when the
        scenario parses, resolves and its workload can be served. Parse problems come alone:
        resolving needs a parsed config; the workload is drawn (as a run draws it) only once
        the rest resolved.
    """
    try:
        scenario, folder = _parse_any(config, overrides=overrides)
    except ScenarioProblems as err:
        return list(err.problems)
    except ScenarioError as err:
        return [err]
    resolution = resolve_scenario(scenario)
    return resolution.errors or session_problems(scenario) or workload_problems(scenario, resolution, folder)
