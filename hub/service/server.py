"""The hub as a gRPC service (``cosim hub``): HubService + health + reflection.

``Run`` runs a submitted config on a worker thread and streams the runner's
progress; the last update carries ``summary.json`` (or the error, and the
stream then ends with a status: INVALID_ARGUMENT for a bad config or a run
past ``--max-requests``, UNAVAILABLE for a backend that stayed down, CANCELLED
when the submitter went away). A run whose call ends (the submitter cancelled
or disconnected, the hub stops) is stopped between two events, whatever it is
doing (:class:`~cosim.hub.studies.interrupts.RunStop`), and writes its partial
folder. Each run gets its own folder under ``runs_dir``; ``GetReport`` returns
its files, partial ones included. Backend names resolve through the hub's
:class:`~cosim.hub.service.backend_registry.BackendRegistry`.

A submitted config is untrusted input: :mod:`cosim.hub.service.submitted` says what
the hub refuses (backends that launch, import or connect; options naming
files; paths outside ``--data-dir``; oversized runs), :mod:`cosim.hub.config.safe_yaml`
how its YAML is read. The hub also caps the size of incoming messages (the
upload limit plus :data:`RECEIVE_MARGIN_BYTES`), the runs in progress at once
(``max_runs``) and the run folders kept (``keep_runs``), refuses a port that is
already in use, and takes an optional bearer token and TLS (:mod:`cosim.hub.service.auth`).
"""

from __future__ import annotations

import json
import logging
import queue
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Collection, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cosim.v1 import hub_service_pb2 as hub_pb
from cosim.v1 import hub_service_pb2_grpc as hub_grpc
from cosim.v1 import memory_service_pb2_grpc as mem_grpc
from cosim.v1 import network_service_pb2_grpc as net_grpc
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb

from ..config import safe_yaml
from ..config.loading import apply_override, parse_config
from ..config.quoting import quoting_only_under
from ..config.scenario import ScenarioConfig
from ..errors import BackendError, CosimError, HubError, ScenarioError
from ..studies.interrupts import RunStop, Stopped
from ..studies.runner import run
from .auth import TokenInterceptor
from .backend_registry import BackendRegistry
from .submitted import (
    SubmitPolicy,
    check_backends,
    check_config_size,
    check_paths,
    check_request_count,
    request_cap,
)
from .uploads import (
    DEFAULT_MAX_UPLOAD_BYTES,
    DEFAULT_MAX_UPLOAD_FILES,
    TooManyUploads,
    UploadTooLarge,
    check_upload_count,
    place_uploads,
)

log = logging.getLogger(__name__)

SERVICE_NAME = "cosim.v1.HubService"
# Reports carry whole run folders (trace.json, plots): lift gRPC's 4 MB default for what a client
# receives and the hub sends. What the hub receives is capped by HubServer (see receive_limit).
MESSAGE_OPTIONS = [("grpc.max_send_message_length", 512 << 20), ("grpc.max_receive_message_length", 512 << 20)]
# Room in a RunRequest beside its uploaded files: the config (at most 1 MiB), overrides, framing.
RECEIVE_MARGIN_BYTES = 4 << 20
DEFAULT_MAX_RUNS = 8
DEFAULT_KEEP_RUNS = 200
_RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{8}$")
GONE = "the call ended: the submitter disconnected (or cancelled), or the hub stopped"
_STATUS = {ScenarioError: grpc.StatusCode.INVALID_ARGUMENT, BackendError: grpc.StatusCode.UNAVAILABLE,
           HubError: grpc.StatusCode.INTERNAL}


class HubServicer(hub_grpc.HubServiceServicer):
    """Runs submitted scenarios on the hub's backends.

    Args:
        runs_dir: where run folders go (one per run, named by run id).
        registry: addresses of backends named in submitted configs.
        data_dir: the only folder files named by submitted configs (traces, presets) are read from,
            unless uploaded.
        policy: what submitted configs may do (:class:`~cosim.hub.service.submitted.SubmitPolicy`; the
            default allows no launches, imports, addresses or file options, and 1,000,000 requests a run).
        max_upload_bytes: most bytes of files one request may upload (``RunRequest.files``).
        max_upload_files: most files one request may upload.
        max_runs: runs in progress at once; more are refused with RESOURCE_EXHAUSTED.
        keep_runs: run folders kept in ``runs_dir``; a new run deletes the oldest beyond it (0: keep all).
    """

    def __init__(self, runs_dir: str | Path, *, registry: BackendRegistry | None = None,
                 data_dir: str | Path = ".", policy: SubmitPolicy | None = None,
                 max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES, max_upload_files: int = DEFAULT_MAX_UPLOAD_FILES,
                 max_runs: int = DEFAULT_MAX_RUNS, keep_runs: int = DEFAULT_KEEP_RUNS) -> None:
        self.runs_dir = Path(runs_dir)
        self.registry = registry or BackendRegistry()
        self.data_dir = Path(data_dir)
        self.policy = policy or SubmitPolicy()
        self.max_upload_bytes, self.max_upload_files = max_upload_bytes, max_upload_files
        self.max_runs, self.keep_runs = max_runs, keep_runs
        self._slots = threading.BoundedSemaphore(max_runs)
        self._active: set[str] = set()
        self._lock = threading.Lock()

    @property
    def receive_limit(self) -> int:
        """Most bytes of one incoming message: the upload limit, the config's and a margin."""
        return self.max_upload_bytes + self.policy.max_config_bytes + RECEIVE_MARGIN_BYTES

    def prepare(self, request: hub_pb.RunRequest, upload_dir: Path | None = None) -> ScenarioConfig:
        """Parses, overrides, checks and resolves a submitted config; its uploaded files are
        written under ``upload_dir`` (:mod:`cosim.hub.service.uploads`).

        Raises:
            UploadTooLarge, TooManyUploads: the uploaded files exceed ``max_upload_bytes`` or ``max_upload_files``.
            ScenarioError: invalid or oversized YAML or config, or something this hub's policy refuses
                (:mod:`cosim.hub.service.submitted`), named by its config key.
        """
        check_config_size(request.config_yaml, self.policy)
        try:
            data = safe_yaml.load(request.config_yaml)
        except yaml.YAMLError as err:
            raise ScenarioError("config", f"not valid YAML: {safe_yaml.describe(err)}") from None
        if not isinstance(data, dict):
            raise ScenarioError("config", "a config is a YAML mapping with keys models, hardware, backends, ...")
        for assignment in request.overrides:
            apply_override(data, assignment)
        if safe_yaml.nesting_depth(data) > safe_yaml.MAX_DEPTH:
            raise ScenarioError("config", f"nested deeper than {safe_yaml.MAX_DEPTH} levels (with --set overrides)")
        check_upload_count(request.files, self.max_upload_files)  # before check_paths walks their names
        check_paths(data, self.data_dir, request.files.keys())
        if request.files:
            place_uploads(data, request.files, upload_dir or self.runs_dir / ".uploads",
                          max_bytes=self.max_upload_bytes, max_files=self.max_upload_files)
        config = parse_config(data, folder=self.data_dir)
        check_backends(config, self.registry, self.policy)  # before anything is imported or connected to
        check_request_count(config, self.data_dir, self.policy)
        return self.registry.resolve(config)

    def Run(self, request: hub_pb.RunRequest, context: grpc.ServicerContext) -> Iterator[hub_pb.RunUpdate]:
        if not self._slots.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"this hub is running its limit of {self.max_runs} runs at once (cosim hub --max-runs); "
                          f"submit again when one has finished")
        uploads = Path(tempfile.mkdtemp(prefix="cosim-upload-")) if request.files else None
        # Errors quote the contents of uploaded files only, never of the hub's own (cosim.hub.config.quoting).
        quotable = [uploads] if uploads is not None else []
        try:
            with quoting_only_under(quotable):
                config = self.prepare(request, uploads)
        except BaseException as err:
            self._slots.release()
            if uploads is not None:
                shutil.rmtree(uploads, ignore_errors=True)
            if not isinstance(err, ScenarioError):
                raise
            too_large = isinstance(err, (UploadTooLarge, TooManyUploads))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED if too_large else grpc.StatusCode.INVALID_ARGUMENT,
                          str(err))
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        folder = self.runs_dir / run_id
        with self._lock:
            self._active.add(run_id)
            active = set(self._active)
        prune_runs(self.runs_dir, self.keep_runs, keep_ids=active)
        log.info("run %s: %d clients, %s requests", run_id, len(config.clients), config.workload.num_requests)
        updates: queue.Queue[hub_pb.RunUpdate | BaseException | None] = queue.Queue()
        last = hub_pb.RunUpdate(run_id=run_id, total_requests=config.workload.num_requests or 0)

        # The call ends (cancelled, disconnected, the hub stopping): the run stops between two events.
        stop = RunStop()
        if not context.add_callback(lambda: stop.stop(GONE)):
            stop.stop(GONE)  # before the callback could be added

        def on_progress(completed: int, total: int, sim_ns: int) -> None:
            updates.put(hub_pb.RunUpdate(run_id=run_id, completed_requests=completed, total_requests=total,
                                         sim_time_ns=sim_ns))

        def work() -> None:
            outcome: BaseException | None = None
            try:
                with quoting_only_under(quotable):
                    run(config, output_dir=folder, base_dir=self.data_dir, on_progress=on_progress,
                        on_request=request_cap(config, self.policy), stop=stop,
                        command=["cosim", "submit", "CONFIG", *(f"--set={o}" for o in request.overrides)])
            except BaseException as err:  # noqa: BLE001 - handed to the RPC thread, which reports it
                outcome = err
            finally:
                if uploads is not None:
                    shutil.rmtree(uploads, ignore_errors=True)
                with self._lock:
                    self._active.discard(run_id)
                self._slots.release()
                # Last, so a submitter told the run ended finds its whole folder (GetReport).
                updates.put(outcome)

        threading.Thread(target=work, name=f"run-{run_id}", daemon=True).start()
        yield last  # the run id, at once
        while isinstance(item := updates.get(), hub_pb.RunUpdate):
            last = item
            yield item
        final = hub_pb.RunUpdate(run_id=run_id, completed_requests=last.completed_requests,
                                 total_requests=last.total_requests, sim_time_ns=last.sim_time_ns,
                                 summary_json=_read(folder / "summary.json"))
        if item is None:
            log.info("run %s finished", run_id)
            yield final
            return
        final.error = str(item)
        code = next((c for t, c in _STATUS.items() if isinstance(item, t)), grpc.StatusCode.INTERNAL)
        if isinstance(item, Stopped):
            code = grpc.StatusCode.CANCELLED
        if code == grpc.StatusCode.INTERNAL and not isinstance(item, CosimError):
            log.error("run %s failed", run_id, exc_info=item)
        else:
            log.warning("run %s failed: %s", run_id, item)
        yield final
        context.set_code(code)
        context.set_details(str(item))

    def GetReport(self, request: hub_pb.GetReportRequest, context: grpc.ServicerContext) -> hub_pb.GetReportResponse:
        folder = self.runs_dir / request.run_id
        with self._lock:
            running = request.run_id in self._active
        if running:  # its folder is being written (requests stream to requests.csv): not a report yet
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"run {request.run_id} is still going; its folder is complete when it ends")
        if not _RUN_ID.match(request.run_id) or not folder.is_dir():
            context.abort(grpc.StatusCode.NOT_FOUND, f"run_id={request.run_id!r}: no such run on this hub")
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        return hub_pb.GetReportResponse(files=files)

    def ListBackends(self, request: hub_pb.ListBackendsRequest,
                     context: grpc.ServicerContext) -> hub_pb.ListBackendsResponse:
        entries = sorted(self.registry.addresses.items())
        with futures.ThreadPoolExecutor(max_workers=max(1, min(8, len(entries)))) as pool:
            statuses = list(pool.map(lambda item: probe_backend(*item), entries))
        return hub_pb.ListBackendsResponse(backends=statuses)


def prune_runs(runs_dir: Path, keep: int, *, keep_ids: Collection[str] = ()) -> list[str]:
    """Deletes the oldest run folders of ``runs_dir`` (by run id, which starts with the time) until at most
    ``keep`` - 1 remain, leaving room for a new one; ``keep_ids`` (runs in progress) are never deleted.
    ``keep`` 0 keeps all. Returns the run ids deleted."""
    if keep <= 0 or not runs_dir.is_dir():
        return []
    runs = sorted(p.name for p in runs_dir.iterdir() if _RUN_ID.match(p.name) and p.is_dir())
    excess = len(runs) - (keep - 1)
    deleted = []
    for run_id in runs:
        if excess <= 0:
            break
        if run_id in keep_ids:
            continue
        shutil.rmtree(runs_dir / run_id, ignore_errors=True)
        deleted.append(run_id)
        excess -= 1
    if deleted:
        log.info("deleted %d old run folders (cosim hub --keep-runs %d): %s", len(deleted), keep, ", ".join(deleted))
    return deleted


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def probe_backend(name: str, address: str, *, timeout_s: float = 2.0) -> hub_pb.BackendStatus:
    """Health and Describe of the backend at ``address`` (whichever service it serves)."""
    status = hub_pb.BackendStatus(name=name, address=address)
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError as err:
            log.info("backend %s at %s: health check failed: %s", name, address, err.code())
            return status
        status.healthy = reply.status == health_pb2.HealthCheckResponse.SERVING
        if not status.healthy:
            return status
        for stub in (rt_grpc.RuntimeBackendServiceStub, mem_grpc.MemoryBackendServiceStub,
                     net_grpc.NetworkBackendServiceStub):
            try:
                status.info.CopyFrom(stub(channel).Describe(pb.DescribeRequest(), timeout=timeout_s).info)
                break
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                    break
    return status


class HubServer:
    """A running hub: HubService, health and reflection on one port.

    Args:
        servicer: the HubService implementation.
        host: interface to bind (``0.0.0.0`` in containers).
        port: port to listen on; 0 picks a free one. A port in use is an error (no SO_REUSEPORT, so a
            second hub cannot silently share the first one's traffic).
        max_workers: threads serving calls; default ``servicer.max_runs`` + 4, so reports, listings and
            refusals are answered while every run slot is busy.
        token: when given, every call but health checks must carry ``authorization: Bearer <token>``.
        credentials: TLS credentials (:func:`cosim.hub.service.auth.server_credentials`); none: plaintext.

    Raises:
        OSError: the port cannot be bound (in use, or not an address of this machine).
    """

    def __init__(self, servicer: HubServicer, *, host: str = "127.0.0.1", port: int = 0,
                 max_workers: int | None = None, token: str | None = None,
                 credentials: grpc.ServerCredentials | None = None) -> None:
        self.servicer = servicer
        options = [("grpc.so_reuseport", 0), ("grpc.max_send_message_length", 512 << 20),
                   ("grpc.max_receive_message_length", servicer.receive_limit)]
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers or servicer.max_runs + 4),
                                   options=options, interceptors=[TokenInterceptor(token)] if token else None)
        hub_grpc.add_HubServiceServicer_to_server(servicer, self._server)
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
                                            self._server)
        where = f"{host}:{port}"
        try:
            self.port = (self._server.add_secure_port(where, credentials) if credentials is not None
                         else self._server.add_insecure_port(where))
        except RuntimeError:  # grpcio >= 1.50 raises where older versions returned 0
            self.port = 0
        if self.port == 0:
            raise OSError(f"cannot listen on {host}:{port}: the port is in use (another hub?) or {host} is not "
                          f"an address of this machine")
        self.tls = credentials is not None
        self.address = f"{'127.0.0.1' if host in ('0.0.0.0', '[::]') else host}:{self.port}"

    def start(self) -> HubServer:
        """Starts serving and marks the hub SERVING."""
        self._server.start()
        for service in ("", SERVICE_NAME):
            self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info("hub listening on %s (runs in %s)", self.address, self.servicer.runs_dir)
        return self

    def stop(self, grace: float | None = 0) -> None:
        """Marks the hub NOT_SERVING and stops, letting calls finish for ``grace`` s."""
        self._health.enter_graceful_shutdown()
        self._server.stop(grace).wait()

    def wait(self) -> None:
        """Blocks until the server stops."""
        self._server.wait_for_termination()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def summary_of(update: hub_pb.RunUpdate) -> dict[str, Any]:
    """The summary a final RunUpdate carries (empty if none)."""
    return dict(json.loads(update.summary_json)) if update.summary_json else {}
