"""One scenario assembled for a run: clients, coordinator, kernel; then run and summarize.

:class:`Simulation` opens the backend sessions its clients need (LLM clients and
model-based stage clients on runtime backends, one session for the clients whose
specs differ only in their names; KV-retrieval clients on memory backends;
transfers on the network backend), generates the workload with its pipelines,
and runs the event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cosim.v1 import types_pb2 as pb

from ..backends import BackendClient, MemoryClient, NetworkClient
from ..config.presets import ModelPreset
from ..config.resolve import (
    FIDELITY,
    device_spec,
    kv_capacity_blocks,
    kv_memory_report,
    memory_session_spec,
    network_session_spec,
    resolve_hardware,
    resolve_model,
    session_options,
    weight_bytes_per_device,
)
from ..config.scenario import ScenarioConfig
from ..config.sections import ClientConfig
from ..errors import CosimError, HubError, open_or_blame
from ..metrics import ProgressBar
from ..metrics.autoscaling_block import autoscaling_block
from ..metrics.benchmark_setup import benchmark_setup
from ..metrics.request_table import RequestTable
from ..metrics.summary import judged_figures, summarize_table
from ..sim.admission import ClientLimits
from ..sim.arrivals import scenario_requests
from ..sim.autoscale import Autoscaler, ReplicaPool, provisioning_ns
from ..sim.clients.drafter import Drafter
from ..sim.clients.host import HostTime
from ..sim.clients.llm import LLMClient
from ..sim.clients.lockstep import LockStepGroup
from ..sim.clients.service import ServiceClient
from ..sim.clients.stages import KVRetrievalTimer, LinearStageTimer, RagStageTimer
from ..sim.conversations import SessionDriver, SessionPlan, SessionSource
from ..sim.coordinator import Coordinator
from ..sim.frontend import FrontEnd
from ..sim.kernel import Kernel
from ..sim.pipelines import Pipeline, session_pipeline
from ..sim.power import StepEnergy, device_power, model_intensity
from ..sim.records import ClientInfo, ClientTimeline, RequestRecord
from ..sim.request_log import KEEP_IN_MEMORY
from ..sim.routing import Router, make_router
from ..sim.scheduling import BlockManager, Scheduler
from ..sim.scheduling.speculative import Speculation
from ..sim.transfers import LinkTransfers, NetworkTransfers
from ..sim.workload import RequestSpecs
from ..sim.workload.inference_perf import InferencePerfSessions
from ..timing.cache import RuntimeSessionProxy, SharedTimings
from ..timing.step_error import Edge
from ..timing.step_timer import StepTimer
from .client_parts import frontends, lora_slots, offload_tier
from .interrupts import RunStop, held_between_events
from .runtime_sessions import RuntimeSessions

# Speculative acceptance draws come from a stream of the run's seed of their own (see _speculation).
SPECULATION_STREAM = 0x5BEC
_SERVES = {"mixed": frozenset({"prefill", "decode"}), "prefill": frozenset({"prefill"}),
           "decode": frozenset({"decode"})}


class Simulation:
    """One scenario, built and ready to run (see :func:`cosim.hub.studies.runner.run`).

    Args:
        config: the scenario.
        base_dir: where its relative paths resolve.
        backends: a connected client per backend name.
        log_events: how many of the first events the kernel keeps (``kernel.log``).
        spill_requests: whether finished requests' records go to a temporary file rather than memory
            (:mod:`cosim.hub.sim.request_log`); None: for runs of more than
            :data:`~cosim.hub.sim.request_log.KEEP_IN_MEMORY` requests.
        shared_timings: step timings shared with earlier runs of this process that opened equal
            sessions (a search's replications); None: this run's own.
        step_edge: ``low`` or ``high``: every runtime session's steps scaled to that edge of the
            step error its backend declares (a prediction interval's rerun,
            :mod:`cosim.hub.studies.intervals`); None: as the backends answer.
    """

    def __init__(self, config: ScenarioConfig, base_dir: Path, backends: Mapping[str, BackendClient], *,
                 log_events: int = 0, spill_requests: bool | None = None,
                 shared_timings: SharedTimings | None = None, step_edge: Edge | None = None) -> None:
        self.config, self.base_dir, self.backends = config, base_dir, backends
        self.spill_requests = spill_requests
        # Runtime sessions by backend and spec (less the client's name), each with its timing proxy.
        self.runtime = RuntimeSessions(config, backends, shared_timings=shared_timings, step_edge=step_edge)
        self._table: tuple[int, RequestTable] | None = None  # (events handled, the table then)
        self.rng = np.random.default_rng(config.seed)
        self.kernel = Kernel(log_limit=log_events)
        self.infos: list[ClientInfo] = []
        # The clusters of the clients timed by a runtime backend (LLM, RAG embedding, model-based stages).
        self.hardware_specs = {cfg.name: resolve_hardware(config, cfg, f"clients[{i}]")
                               for i, cfg in enumerate(config.clients) if cfg.hardware and cfg.model}
        llm_models = {c.model for c in config.clients if c.kind == "llm" and c.model}
        self.kv_bytes = {name: float(resolve_model(config, name).kv_bytes_per_token()) for name in llm_models}
        self._progress: Callable[[RequestRecord], None] | None = None  # set while running
        self.transfers = self._transfers()
        router = make_router(config.router, self.rng, clock=lambda: self.kernel.now_ns)
        self.coordinator = Coordinator(kernel=self.kernel, router=router,
                                       transfers=self.transfers, kv_bytes_per_token=self.kv_bytes,
                                       on_request_done=self._request_done)
        self.session_driver = self._session_driver(router)
        self.kv_timers: list[KVRetrievalTimer] = []
        self.clients: list[LLMClient] = []
        self.services: list[ServiceClient] = []
        self.groups = {name: LockStepGroup(name, self.kernel) for name in dict.fromkeys(
            c.dp_group for c in config.clients if c.dp_group is not None)}
        self.pools: list[ReplicaPool] = []
        self.frontends = frontends(config, self.kernel)  # the API servers, by client (a group's share one)
        for index, cfg in enumerate(config.clients):
            if cfg.replicas is not None:  # an autoscaled pool (hub/sim/autoscale): replicas built as it scales
                self.pools.append(self._build_pool(index, cfg))
            elif cfg.kind == "llm":
                llm = self._build_llm(index, cfg)
                self.clients.append(llm)
                self.coordinator.register(llm)
            else:
                service = self._build_service(index, cfg)
                self.services.append(service)
                self.coordinator.register(service)

    # -- assembly ------------------------------------------------------------
    def _runtime_session(self, where: str, cfg: ClientConfig, model: ModelPreset | None = None
                         ) -> tuple[RuntimeSessionProxy, pb.OpenSessionResponse]:
        """The runtime session for a client's model (or ``model``, a speculative drafter) on its
        cluster, and its timing proxy: opened for it, or the one already open for another client
        of the same backend and spec."""
        assert cfg.model and cfg.backend and cfg.hardware
        spec = pb.SessionSpec(
            client=cfg.name, model=(model or resolve_model(self.config, cfg.model)).to_model_spec(),
            hardware=self.hardware_specs[cfg.name],
            parallelism=pb.Parallelism(tensor=cfg.hardware.tensor_parallel, pipeline=cfg.hardware.pipeline_parallel,
                                       expert=cfg.hardware.expert_parallel),
            options=session_options(self.config.backends[cfg.backend].options))
        return self.runtime.session(where, cfg.backend, spec, label=cfg.name if model is None else f"{cfg.name} draft")

    def _info(self, cfg: ClientConfig, opened: pb.OpenSessionResponse | None, **extra: Any) -> ClientInfo:
        hardware = self.hardware_specs.get(cfg.name)
        info = ClientInfo(name=cfg.name, role=cfg.role if cfg.kind == "llm" else cfg.kind, model=cfg.model or "",
                          backend=cfg.backend or "-",
                          fidelity=FIDELITY.get(opened.info.fidelity, "unspecified") if opened else "analytical",
                          device=hardware.device if hardware else "-",
                          num_devices=cfg.hardware.count if cfg.hardware else 0,
                          price_per_hour_usd=float(hardware.extra.get("price_per_hour_usd", 0.0)) if hardware else 0.0,
                          **extra)
        self.infos.append(info)
        return info

    def _build_llm(self, index: int, cfg: ClientConfig) -> LLMClient:
        where = f"clients[{index}]"
        proxy, opened = self._runtime_session(where, cfg)
        model = resolve_model(self.config, cfg.model)  # type: ignore[arg-type]
        blocks = kv_capacity_blocks(cfg, model, self.hardware_specs[cfg.name], where)
        split = kv_memory_report(cfg, model, self.hardware_specs[cfg.name], where)
        energy = self._energy(cfg, model.to_model_spec(), model.active_param_count())
        info = self._info(cfg, opened, kv_capacity_blocks=blocks, block_size_tokens=cfg.scheduler.block_size,
                          kv_memory=split.as_dict() if split is not None else None, meters_energy=True,
                          power=energy.power)
        # vLLM's block count holds its null block, which no request gets
        usable = max(blocks - 1, 1)
        kv = BlockManager(usable, cfg.scheduler.block_size,
                          enable_prefix_caching=cfg.scheduler.enable_prefix_caching)
        speculation, drafter = self._speculation(index, cfg)
        offload = offload_tier(where, self.config, cfg, model, kv, lambda: self.kernel.now_ns)
        scheduler = Scheduler(cfg.scheduler, kv, kv_bytes_per_token=model.kv_bytes_per_token(),
                              micro_batches=cfg.hardware.pipeline_parallel,  # type: ignore[union-attr]
                              hold_finished_kv=cfg.role == "prefill", lora=lora_slots(cfg, model),
                              speculation=speculation, offload=offload, lock_step=cfg.dp_group is not None,
                              one_step_ahead=cfg.forms_one_step_ahead)
        keep_itls = self.config.output.benchmark_details  # every token gap of every request: steps one by one
        # A backend's lookahead off (or its cache) times every step one by one: the reference run. (A
        # session timed natively looks nothing ahead either way, and takes decode runs.)
        backend = self.config.backends[cfg.backend]  # type: ignore[index]
        clock = functools.partial(
            StepTimer, name=cfg.name, session=proxy, collectives_ns=self._collectives_ns(cfg), energy=energy,
            host_bandwidth_gbps=cfg.scheduler.host_bandwidth_gbps, drafter=drafter,
            decode_runs=backend.lookahead and backend.cache and speculation is None and offload is None
            and cfg.name not in self.frontends and not keep_itls,
            host_time=HostTime.from_config(cfg.scheduler, model.num_layers // scheduler.micro_batches,
                                           async_scheduling=cfg.forms_one_step_ahead))
        group = self.groups[cfg.dp_group] if cfg.dp_group is not None else None
        return LLMClient(info=info, kernel=self.kernel, scheduler=scheduler, clock=clock, sink=self.coordinator,
                         serves=_SERVES[cfg.role], group=group,
                         limits=ClientLimits.of(cfg.name, str(cfg.model), _SERVES[cfg.role], cfg.scheduler, usable),
                         frontend=self.frontends.get(cfg.name), keep_itls=keep_itls)

    def _build_pool(self, index: int, cfg: ClientConfig) -> ReplicaPool:
        """The autoscaled pool of ``cfg``'s replicas: each a client of its own, built as ``cfg`` but
        named ``<name>-<k>``, ready after its weights load (device shard / load bandwidth)."""
        assert cfg.replicas is not None and cfg.hardware is not None
        template = self.hardware_specs[cfg.name]

        def build(name: str) -> LLMClient:
            self.hardware_specs[name] = template
            if self.config.frontend is not None:  # each replica is a vllm serve of its own
                self.frontends[name] = FrontEnd(self.config.frontend, self.kernel, name)
            client = self._build_llm(index, cfg.model_copy(update={"name": name, "replicas": None}))
            self.clients.append(client)
            return client
        weights = weight_bytes_per_device(resolve_model(self.config, str(cfg.model)), cfg.hardware)
        bandwidth = cfg.replicas.load_bandwidth_gbps or cfg.scheduler.host_bandwidth_gbps
        return ReplicaPool(name=cfg.name, config=cfg.replicas, kernel=self.kernel, coordinator=self.coordinator,
                           build=build, load_ns=provisioning_ns(weights, bandwidth, cfg.replicas.startup_s),
                           slo=self.config.slo)

    def _energy(self, cfg: ClientConfig, model: pb.ModelSpec, active_params: int) -> StepEnergy:
        """The energy model of a client's steps (:mod:`cosim.hub.sim.power`): its device's power (none
        without a power figure), over its pipeline stages, and the model's intensity for backends
        that split no step into compute and memory time."""
        assert cfg.hardware is not None
        spec = self.hardware_specs[cfg.name]
        power = device_power(spec, f"hardware.{cfg.hardware.device}")
        return StepEnergy(power=power, num_devices=spec.count, stages=cfg.hardware.pipeline_parallel,
                          intensity=model_intensity(model, active_params, spec))

    def _speculation(self, index: int, cfg: ClientConfig) -> tuple[Speculation | None, Drafter | None]:
        """A client's speculative decoding: its acceptance draws (a stream of the run's seed of its
        own, so that other draws do not move) and the timing of its drafter."""
        spec = cfg.speculative
        if spec is None:
            return None, None
        session = None
        if spec.method == "draft_model":
            where = f"clients[{index}].speculative.draft_model"  # a key of models (ScenarioConfig checks it)
            session, _ = self._runtime_session(where, cfg, resolve_model(self.config, str(spec.draft_model)))
        elif spec.method == "mtp":  # the target's dimensions, its MTP module's layers
            target = resolve_model(self.config, str(cfg.model))
            mtp = target.model_copy(update={"name": f"{target.name} MTP", "num_layers": spec.mtp_layers})
            session, _ = self._runtime_session(f"clients[{index}].speculative", cfg, mtp)
        rng = np.random.default_rng([self.config.seed, SPECULATION_STREAM, index])
        return Speculation(spec, rng), Drafter(spec, session)

    def _build_service(self, index: int, cfg: ClientConfig) -> ServiceClient:
        where = f"clients[{index}]"
        opened = None
        if cfg.kind == "kv_retrieval":
            memory = self.backends[cfg.backend]  # type: ignore[index]
            assert isinstance(memory, MemoryClient) and cfg.memory is not None
            # One KV size per session: the first LLM client's model (pipelines of one model per tier).
            first_llm = next(c.model for c in self.config.clients if c.kind == "llm")
            spec = memory_session_spec(cfg, self.kv_bytes[str(first_llm)],
                                       self.config.backends[str(cfg.backend)].options)
            session = open_or_blame(f"{where}.memory", str(cfg.backend), lambda: memory.open_session(spec))
            timer: Any = KVRetrievalTimer(self.kernel, cfg.name, cfg.memory, memory, session.session_id,
                                          self.kv_bytes)
            self.kv_timers.append(timer)
        elif cfg.kind == "rag":
            proxy, opened = self._runtime_session(where, cfg)
            assert cfg.rag is not None and cfg.hardware is not None
            retrieval = device_spec(self.config, cfg.rag.retrieval_device, 1, "fp32")
            timer = RagStageTimer(self.kernel, cfg.name, cfg.rag, proxy, embed_device=cfg.hardware.device,
                                  retrieval_peak_tflops=retrieval.peak_tflops,
                                  retrieval_bandwidth_gbps=retrieval.mem_bandwidth_gbps,
                                  max_query_tokens=resolve_model(self.config, str(cfg.model)).max_position_embeddings
                                  or None)
        else:
            proxy = None
            if cfg.model is not None:
                proxy, opened = self._runtime_session(where, cfg)
            timer = LinearStageTimer(self.kernel, cfg.kind, cfg.service, proxy)
        return ServiceClient(info=self._info(cfg, opened), kernel=self.kernel, kind=cfg.kind, servers=cfg.servers,
                             timer=timer, on_stage_done=self.coordinator.on_service_done)

    def _transfers(self) -> LinkTransfers | NetworkTransfers:
        """The transfer service: the network backend's session, or the plain link."""
        network = self.config.network
        if network.backend is None:
            return LinkTransfers(self.kernel, network.link)
        client = self.backends[network.backend]
        assert isinstance(client, NetworkClient)
        spec = network_session_spec(self.config, self.hardware_specs)
        opened = open_or_blame("network", network.backend, lambda: client.open_session(spec))
        return NetworkTransfers(self.kernel, client, opened.session_id,
                                time_synchronized=network.mode == "congestion_aware", layers=network.kv_layers)

    def _collectives_ns(self, cfg: ClientConfig) -> Callable[[int], int] | None:
        """The network backend's time of a tensor-parallel step's all-reduces, by its tokens: two per
        layer (after attention and after the MLP), each of the step's activations (tokens x hidden x
        2 bytes); None where the network backend does not time collectives."""
        assert cfg.hardware is not None and cfg.model is not None
        transfers = self.transfers
        if not self.config.network.collectives or cfg.hardware.tensor_parallel < 2:
            return None
        assert isinstance(transfers, NetworkTransfers)
        model = resolve_model(self.config, cfg.model)
        layers, per_token, name = model.num_layers, model.hidden_size * 2, cfg.name
        return lambda tokens: 2 * layers * transfers.all_reduce_ns(name, tokens * per_token)

    def _session_driver(self, router: Router) -> SessionDriver | None:
        """The driver of the workload's multi-turn sessions (hub/sim/conversations.py), if it has them."""
        workload = self.config.workload
        if workload.sessions is None and workload.inference_perf is None:
            return None
        model = next(str(c.model) for c in self.config.clients if c.kind == "llm")
        plan: SessionPlan = InferencePerfSessions(workload.inference_perf, self.config.seed) \
            if workload.inference_perf is not None else SessionSource(workload, self.config.seed, self.base_dir)
        return SessionDriver(plan,
                             kernel=self.kernel, pipeline=session_pipeline(model), release=self.coordinator.release,
                             on_session_end=router.end_session)

    # -- running -------------------------------------------------------------
    def _request_done(self, request: RequestRecord) -> None:
        for pool in self.pools:
            pool.on_request_done(request)
        if self._progress is not None:
            self._progress(request)

    def workload(self) -> tuple[RequestSpecs, list[Pipeline]]:
        """The requests and their pipelines (templates drawn by weight when the workload mixes them;
        with sessions, every turn known before the run, for the admission checks)."""
        if self.session_driver is not None:
            turns = self.session_driver.source.check_specs()
            return turns, [self.session_driver.pipeline] * len(turns)
        return scenario_requests(self.config, self.rng, self.base_dir)

    def run(self, *, progress: bool | None = None,
            on_progress: Callable[[int, int, int], None] | None = None,
            on_request: Callable[[RequestRecord], None] | None = None,
            stop: RunStop | None = None) -> CosimError | None:
        """Generates the workload and runs the event loop; returns the error that stopped it, if any
        (``on_request``, called with each finished request, may stop the run by raising a CosimError).
        ``stop`` (another thread's) raises its Stopped between two events, as Ctrl-C does."""
        specs, pipelines = self.workload()
        total = len(specs)
        spill = self.spill_requests if self.spill_requests is not None else total > KEEP_IN_MEMORY
        if self.session_driver is not None:
            self.coordinator.schedule_sessions(self.session_driver, specs, pipelines, spill=spill)
        else:
            self.coordinator.schedule_arrivals(specs, pipelines, spill=spill)
        if self.pools:  # one chain of samples and decisions for every pool
            Autoscaler(self.kernel, self.pools).start()
        del specs, pipelines  # the coordinator keeps them as columns (hub/sim/arrivals.py)
        bar = ProgressBar(total, enabled=progress)
        state = {"last": 0}

        def report(request: RequestRecord) -> None:
            if on_request is not None:
                on_request(request)
            done = self.coordinator.num_finished
            if done - state["last"] >= max(1, total // 200) or done == total:
                state["last"] = done
                bar.update(done, self.kernel.now_ns)
                if on_progress:
                    on_progress(done, total, self.kernel.now_ns)

        self._progress = report
        # Pools' sampling would go on: their run ends when the last request finishes (sessions: when the
        # last session ends; a closed loop run for a time has more turns than are known before the run).
        done = self.session_driver.idle if self.session_driver is not None else \
            lambda: self.coordinator.num_finished >= total
        try:
            with held_between_events(stop) as held:  # Ctrl-C stops between events: a partial run's records are whole
                self.kernel.run(flag=held.flag, stop=done if self.pools else None)
            if held.interrupt is not None:
                raise held.interrupt
        except CosimError as err:
            return err
        finally:
            for client in self.clients:
                client.settle()  # pending decode-run tokens belong in the records, also of a failed run
            bar.close()
        unfinished = self.coordinator.unfinished()
        if unfinished:
            first = unfinished[0]
            where = first.stages[-1].client if first.stages else "no client"
            # Requests that can never fit are refused before the run (cosim.hub.sim.admission): this is cosim's.
            return HubError(f"{len(unfinished)} requests never finished (first: request {first.id}, prompt "
                            f"{first.input_tokens} tokens, {first.generated_tokens} of {first.output_tokens} output "
                            f"tokens, last at {where}) although each fits its clients")
        return None

    def timelines(self) -> dict[str, ClientTimeline]:
        """Each client's steps, by name."""
        clients: list[LLMClient | ServiceClient] = [*self.clients, *self.services]
        return {c.name: c.timeline for c in clients}

    def close(self) -> None:
        """Removes the temporary files of the clients' steps and the finished requests' numbers (once
        the summary and the run folder are written). The finished records stay: a run's result reads them."""
        for timeline in self.timelines().values():
            timeline.close()
        self.coordinator.columns.close()

    def request_table(self) -> RequestTable:
        """Every request's numbers (:meth:`Coordinator.table`), read once per state of the run: the
        summary and the run folder share it."""
        if self._table is None or self._table[0] != self.kernel.num_events:
            self._table = self.kernel.num_events, self.coordinator.table()
        return self._table[1]

    def _record_lifetimes(self) -> None:
        for pool in self.pools:  # each replica is paid for while it exists
            pool.record_lifetimes(self.kernel.now_ns)

    def judged(self) -> dict[str, Any]:
        """What a goodput search judges the run by, as :meth:`summarize` has it (:func:`judged_figures`)."""
        self._record_lifetimes()
        return judged_figures(self.request_table(), self.infos, self.timelines(), slo=self.config.slo,
                              sim_time_ns=self.kernel.now_ns)

    def summarize(self, wall_time_s: float) -> dict[str, Any]:
        """summary.json content, with backend statistics."""
        proxies = self.runtime.proxies()
        lookups = sum(p.num_lookups for p in proxies)
        hits = sum(p.num_hits for p in proxies)
        # calls the backends answered, and those their compiled models answered in their place
        rpcs = sum(client.num_calls for client in self.backends.values()) + sum(p.num_native_calls for p in proxies)
        extra: dict[str, Any] = {
            "backends": {"steps_timed": lookups, "cache_hit_rate": round(hits / lookups, 6) if lookups else 0.0,
                         "rpcs": rpcs, "out_of_range_steps": sum(p.num_out_of_range for p in proxies)},
            "kv_transfer_bytes": self.coordinator.transfer_bytes,
            "seed": self.config.seed,
        }
        if self.kv_timers:
            lookups_kv = sum(t.num_lookups for t in self.kv_timers)
            extra["kv_retrieval"] = {"lookups": lookups_kv,
                                     "hit_rate": round(sum(t.num_hits for t in self.kv_timers) / lookups_kv, 6)
                                     if lookups_kv else 0.0}
        lora = [c.timeline.lora.summary() for c in self.clients if c.timeline.lora is not None]
        if lora:  # every client's adapter loads together (each client's are in its block)
            extra["lora"] = {key: sum(block[key] for block in lora) for key in lora[0]}
        self._record_lifetimes()
        if self.pools:
            extra["autoscaling"] = {pool.name: autoscaling_block(pool, self.kernel.now_ns) for pool in self.pools}
        if self.session_driver is not None:
            extra["sessions"] = self.session_driver.summary(self.request_table())
        servers = list({id(f): f for f in self.frontends.values()}.values())
        if servers:
            extra["frontend"] = {f.name: f.summary(self.kernel.now_ns) for f in servers}
        return summarize_table(self.request_table(), self.infos, self.timelines(), slo=self.config.slo,
                               sim_time_ns=self.kernel.now_ns, wall_time_s=wall_time_s, extra=extra,
                               client_gaps=[f.token_gaps for f in servers],
                               client_token_times=[f.token_times for f in servers],
                               benchmark=benchmark_setup(self.config))
