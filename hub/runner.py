"""Running a scenario: build the hub from a config, run it, report.

:func:`run` is the Python API (``cosim.run``) and what ``cosim run`` calls:
it resolves presets, starts the backends the config names, opens one session
per client, generates the workload, runs the event loop, and summarizes. A
run that fails part way still returns (and writes) what it has, then raises.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
from google.protobuf import struct_pb2

from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from . import presets
from .backends import (BUILTIN_BACKENDS, BackendClient, LaunchedBackend, NetworkClient, RuntimeClient,
                       attach_address, launch_command, launch_image, launch_python)
from .backends.inprocess import in_process_runtime_client
from .backends.proxy import RuntimeSessionProxy
from .clients.llm import LLMClient
from .config import BackendConfig, ClientConfig, ScenarioConfig, load_config, parse_config
from .coordinator import Coordinator
from .errors import BackendError, CosimError, HubError, ScenarioError
from .kernel import Kernel
from .metrics import ProgressBar, summarize, write_run_folder
from .records import ClientInfo, RequestRecord
from .router import Router
from .scheduling import BlockManager, Scheduler
from .transfers import LinkTransfers, NetworkTransfers
from .workload import generate_requests

log = logging.getLogger(__name__)

_DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0}
_FIDELITY = {v: k.removeprefix("FIDELITY_").lower() for k, v in pb.Fidelity.items()}


@dataclass
class RunResult:
    """What a run produced.

    Attributes:
        summary: the content of summary.json.
        requests: one record per request (finished or not).
        clients: static facts per client.
        output_dir: where the run folder was written, if anywhere.
        error: what stopped the run early, if anything.
    """

    summary: dict[str, Any]
    requests: list[RequestRecord]
    clients: list[ClientInfo]
    output_dir: Path | None = None
    error: CosimError | None = field(default=None, repr=False)


def resolve_model(config: ScenarioConfig, name: str) -> presets.ModelPreset:
    """The model preset of ``models[name]`` with the config's dtype and overrides applied."""
    entry = config.models[name]
    try:
        preset = presets.get_model(entry.preset)
    except presets.UnknownPreset as err:
        raise ScenarioError(f"models.{name}.preset", str(err)) from None
    unknown = set(entry.overrides) - set(presets.ModelPreset.model_fields)
    if unknown:
        raise ScenarioError(f"models.{name}.overrides", f"unknown fields {sorted(unknown)}")
    update = {"bytes_per_param": _DTYPE_BYTES[entry.dtype], **entry.overrides}
    return presets.ModelPreset.model_validate({**preset.model_dump(), **update})


def resolve_hardware(config: ScenarioConfig, client: ClientConfig, where: str) -> pb.HardwareSpec:
    """The HardwareSpec of a client's cluster: device preset, count, dtype, overrides."""
    entry = config.hardware[client.hardware.device]
    dtype = config.models[client.model].dtype
    try:
        spec = presets.hardware_spec(entry.preset, client.hardware.count, dtype)
    except presets.UnknownPreset as err:
        raise ScenarioError(f"hardware.{client.hardware.device}.preset", str(err)) from None
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


def kv_capacity_blocks(client: ClientConfig, model: presets.ModelPreset, hardware: pb.HardwareSpec,
                       where: str) -> int:
    """KV blocks of one client: device memory x utilization - weight shard - reserve, per TP/PP shard."""
    sched = client.scheduler
    if sched.num_gpu_blocks is not None:
        return sched.num_gpu_blocks
    tp, pp = client.hardware.tensor_parallel, client.hardware.pipeline_parallel
    weights = model.weight_bytes() / (tp * pp)
    free = hardware.mem_capacity_bytes * sched.gpu_memory_utilization - weights - sched.reserve_bytes
    if free <= 0:
        raise ScenarioError(
            f"{where}.hardware", f"model {model.name} needs {weights / 1e9:.1f} GB of weights per device at "
            f"TP={tp} PP={pp}, more than {hardware.device}'s usable "
            f"{hardware.mem_capacity_bytes * sched.gpu_memory_utilization / 1e9:.1f} GB; raise tensor_parallel "
            f"or pick a larger device")
    kv_heads_per_device = max(1, model.num_kv_heads // tp)
    per_token = 2 * (model.num_layers // pp) * kv_heads_per_device * model.effective_head_dim \
        * model.bytes_per_kv_element
    blocks = int(free // (per_token * sched.block_size))
    if blocks < 1:
        raise ScenarioError(f"{where}.hardware", f"no memory left for even one KV block on {hardware.device}")
    return blocks


def network_session_spec(config: ScenarioConfig, hardware: Mapping[str, pb.HardwareSpec]) -> net_pb.NetworkSessionSpec:
    """The network session of a scenario: its topology, and each client's devices as consecutive NPUs."""
    endpoints, offset = [], 0
    for client in config.clients:
        endpoints.append(net_pb.Endpoint(name=client.name, npu_ids=range(offset, offset + client.hardware.count)))
        offset += client.hardware.count
    network = config.network
    if network.topology:
        dims = [net_pb.TopologyDim(kind=_TOPOLOGY_KINDS[d.kind], npus=d.npus, bandwidth_gbps=d.bandwidth_gbps,
                                   latency_ns=d.latency_ns) for d in network.topology]
    else:
        slowest = min(spec.inter_node_gbps for spec in hardware.values())
        dims = [net_pb.TopologyDim(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=max(2, offset), bandwidth_gbps=slowest,
                                   latency_ns=network.link.latency_s * 1e9 / 2)]
    mode = pb.SYNC_MODE_TIME_SYNCHRONIZED if network.mode == "congestion_aware" else pb.SYNC_MODE_PREDICT
    return net_pb.NetworkSessionSpec(client="hub", dims=dims, endpoints=endpoints, mode=mode)


_TOPOLOGY_KINDS = {"ring": net_pb.TOPOLOGY_KIND_RING, "fully_connected": net_pb.TOPOLOGY_KIND_FULLY_CONNECTED,
                   "switch": net_pb.TOPOLOGY_KIND_SWITCH}


def _session_options(options: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(options))
    return struct


def _launch(name: str, backend: BackendConfig) -> LaunchedBackend:
    if backend.kind:
        return launch_python(name, BUILTIN_BACKENDS[backend.kind])
    if backend.python:
        return launch_python(name, backend.python)
    if backend.command:
        return launch_command(name, backend.command)
    if backend.image:
        return launch_image(name, backend.image)
    return attach_address(name, str(backend.address))


@contextlib.contextmanager
def started_backends(config: ScenarioConfig, names: Sequence[str], *,
                     in_process: bool = False) -> Iterator[dict[str, BackendClient]]:
    """Starts (or attaches to) each named backend; stops what it started on exit.

    The network backend named in ``network.backend`` gets a NetworkClient,
    every other one a RuntimeClient. ``in_process`` calls built-in and
    ``python:`` runtime backends without gRPC (for ``cosim bench``'s measure
    of the gRPC boundary; runs never use it).
    """
    launched: list[LaunchedBackend] = []
    clients: dict[str, BackendClient] = {}
    try:
        for name in names:
            backend = config.backends[name]
            kind = NetworkClient if name == config.network.backend else RuntimeClient
            reference = BUILTIN_BACKENDS[backend.kind] if backend.kind else backend.python
            if in_process and reference and kind is RuntimeClient:
                clients[name] = in_process_runtime_client(name, reference)
                continue
            handle = _launch(name, backend)
            launched.append(handle)
            clients[name] = kind(name, handle.address, deadline_s=backend.deadline_s)
        yield clients
    finally:
        for client in clients.values():
            client.close()
        for handle in reversed(launched):
            handle.stop()


def backend_names(config: ScenarioConfig) -> list[str]:
    """The backends a scenario uses, clients' first."""
    names = [c.backend for c in config.clients]
    if config.network.backend:
        names.append(config.network.backend)
    return list(dict.fromkeys(names))


class Simulation:
    """One scenario, built and ready to run (see :func:`run`)."""

    def __init__(self, config: ScenarioConfig, base_dir: Path, backends: Mapping[str, BackendClient]) -> None:
        self.config, self.base_dir = config, base_dir
        self.rng = np.random.default_rng(config.seed)
        self.kernel = Kernel()
        self.proxies: dict[str, RuntimeSessionProxy] = {}
        self.infos: list[ClientInfo] = []
        self.hardware_specs: dict[str, pb.HardwareSpec] = {}
        clients = [self._build_client(i, c, backends[c.backend]) for i, c in enumerate(config.clients)]  # type: ignore[arg-type]
        models = {c.model for c in config.clients}
        kv_bytes = {name: float(resolve_model(config, name).kv_bytes_per_token()) for name in models}
        self.coordinator = Coordinator(kernel=self.kernel, clients=clients, router=Router(config.router, self.rng),
                                       transfers=self._transfers(backends), kv_bytes_per_token=kv_bytes)
        self.clients = clients

    def _transfers(self, backends: Mapping[str, BackendClient]) -> LinkTransfers | NetworkTransfers:
        """The transfer service: the network backend's session, or the plain link."""
        network = self.config.network
        if network.backend is None:
            return LinkTransfers(self.kernel, network.link)
        client = backends[network.backend]
        assert isinstance(client, NetworkClient)
        time_synchronized = network.mode == "congestion_aware"
        spec = network_session_spec(self.config, self.hardware_specs)
        try:
            opened = client.open_session(spec)
        except BackendError as err:
            if "INVALID_ARGUMENT" in err.message:
                raise ScenarioError("network", f"backend {network.backend!r} rejected the topology: "
                                               f"{err.message}") from None
            raise
        return NetworkTransfers(self.kernel, client, opened.session_id, time_synchronized=time_synchronized,
                                layers=network.kv_layers)

    def _build_client(self, index: int, cfg: ClientConfig, backend: RuntimeClient) -> LLMClient:
        where = f"clients[{index}]"
        model = resolve_model(self.config, cfg.model)
        hardware = resolve_hardware(self.config, cfg, where)
        self.hardware_specs[cfg.name] = hardware
        spec = pb.SessionSpec(
            client=cfg.name, model=model.to_model_spec(), hardware=hardware,
            parallelism=pb.Parallelism(tensor=cfg.hardware.tensor_parallel, pipeline=cfg.hardware.pipeline_parallel,
                                       expert=cfg.hardware.expert_parallel),
            options=_session_options(self.config.backends[cfg.backend].options))
        try:
            opened = backend.open_session(spec)
        except BackendError as err:
            if "INVALID_ARGUMENT" in err.message:
                raise ScenarioError(where, f"backend {cfg.backend!r} rejected the client: {err.message}") from None
            raise
        proxy = RuntimeSessionProxy(backend, opened.session_id, client_name=cfg.name,
                                    cache=self.config.backends[cfg.backend].cache)
        self.proxies[cfg.name] = proxy
        blocks = kv_capacity_blocks(cfg, model, hardware, where)
        info = ClientInfo(name=cfg.name, role=cfg.role, model=cfg.model, backend=cfg.backend,
                          fidelity=_FIDELITY.get(opened.info.fidelity, "unspecified"), device=hardware.device,
                          num_devices=cfg.hardware.count,
                          price_per_hour_usd=float(hardware.extra.get("price_per_hour_usd", 0.0)),
                          kv_capacity_blocks=blocks, block_size_tokens=cfg.scheduler.block_size)
        self.infos.append(info)
        kv = BlockManager(blocks, cfg.scheduler.block_size, enable_prefix_caching=cfg.scheduler.enable_prefix_caching)
        scheduler = Scheduler(cfg.scheduler, kv, kv_bytes_per_token=model.kv_bytes_per_token())
        serves = {"mixed": frozenset({"prefill", "decode"}), "prefill": frozenset({"prefill"}),
                  "decode": frozenset({"decode"})}[cfg.role]
        return LLMClient(info=info, kernel=self.kernel, scheduler=scheduler, timing=proxy,
                         on_stage_done=lambda seq, now: None, serves=serves,
                         host_bandwidth_gbps=cfg.scheduler.host_bandwidth_gbps)

    def run(self, *, progress: bool | None = None,
            on_progress: Callable[[int, int, int], None] | None = None) -> CosimError | None:
        """Generates the workload and runs the event loop; returns the error that stopped it, if any."""
        specs = generate_requests(self.config.workload, self.rng, base_dir=self.base_dir)
        self.coordinator.schedule_arrivals(specs, default_model=self.config.clients[0].model)
        total = len(specs)
        bar = ProgressBar(total, enabled=progress)
        state = {"last": 0}

        def report(_request: RequestRecord) -> None:
            done = self.coordinator.num_finished
            if done - state["last"] >= max(1, total // 200) or done == total:
                state["last"] = done
                bar.update(done, self.kernel.now_ns)
                if on_progress:
                    on_progress(done, total, self.kernel.now_ns)

        self.coordinator.on_request_done = report
        try:
            self.kernel.run()
        except CosimError as err:
            return err
        finally:
            bar.close()
        unfinished = [r for r in self.coordinator.requests if not r.is_finished]
        if unfinished:
            first = unfinished[0]
            return HubError(f"{len(unfinished)} requests never finished (first: request {first.id} with "
                            f"{first.input_tokens} prompt tokens); a prompt may not fit any client's KV cache")
        return None

    def summarize(self, wall_time_s: float) -> dict[str, Any]:
        """summary.json content, with backend statistics."""
        lookups = sum(p.num_lookups for p in self.proxies.values())
        hits = sum(p.num_hits for p in self.proxies.values())
        rpcs = sum(client.num_calls for client in {id(p.client): p.client for p in self.proxies.values()}.values())
        extra = {
            "backends": {"steps_timed": lookups, "cache_hit_rate": round(hits / lookups, 6) if lookups else 0.0,
                         "rpcs": rpcs,
                         "out_of_range_steps": sum(p.num_out_of_range for p in self.proxies.values())},
            "kv_transfer_bytes": self.coordinator.transfer_bytes,
            "seed": self.config.seed,
        }
        timelines = {c.name: c.timeline for c in self.clients}
        return summarize(self.coordinator.requests, self.infos, timelines, slo=self.config.slo,
                         sim_time_ns=self.kernel.now_ns, wall_time_s=wall_time_s, extra=extra)


def run(config: ScenarioConfig | Mapping[str, Any] | str | Path, *, overrides: Sequence[str] = (),
        output_dir: str | Path | None = None, progress: bool | None = False,
        base_dir: str | Path | None = None,
        on_progress: Callable[[int, int, int], None] | None = None) -> RunResult:
    """Runs a scenario and returns its result.

    Args:
        config: a path to a YAML file, a mapping, or a parsed config.
        overrides: ``key=value`` assignments, as ``cosim run --set``.
        output_dir: write the run folder here (default: the config's ``output.dir``, if any).
        progress: show a progress bar (None: when stderr is a terminal).
        base_dir: folder relative paths in the config resolve against.
        on_progress: called with (completed requests, total requests, simulated ns) now and then.

    Raises:
        ScenarioError: the config is invalid.
        BackendError: a backend failed (the partial run folder is written first).
    """
    if isinstance(config, (str, Path)):
        scenario, folder = load_config(config, overrides=overrides)
    elif isinstance(config, ScenarioConfig):
        scenario = parse_config(config.model_dump(), overrides=overrides) if overrides else config
        folder = Path.cwd()
    else:
        scenario, folder = parse_config(config, overrides=overrides), Path.cwd()
    folder = Path(base_dir) if base_dir is not None else folder
    out = output_dir if output_dir is not None else scenario.output.dir
    started = time.perf_counter()
    with started_backends(scenario, backend_names(scenario)) as backends:
        simulation = Simulation(scenario, folder, backends)
        error = simulation.run(progress=progress, on_progress=on_progress)
        summary = simulation.summarize(time.perf_counter() - started)
    if error is not None:
        summary["error"] = str(error)
    result = RunResult(summary=summary, requests=simulation.coordinator.requests, clients=simulation.infos,
                       error=error)
    if out is not None:
        timelines = {c.name: c.timeline for c in simulation.clients}
        result.output_dir = write_run_folder(Path(out), summary, result.requests, result.clients, timelines,
                                             plots=scenario.output.plots)
    if error is not None:
        raise error
    return result
