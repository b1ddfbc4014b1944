"""Serving a backend over gRPC: health, reflection, logging, graceful stop."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cosim.v1 import memory_service_pb2_grpc, network_service_pb2_grpc, runtime_service_pb2_grpc

from .backend import Backend, MemoryBackend, NetworkBackend, RuntimeBackend
from .extras import MissingExtra
from .servicers import MemoryServicer, NetworkServicer, RuntimeServicer

log = logging.getLogger(__name__)


def _add_runtime(servicer: RuntimeServicer, server: grpc.Server) -> None:
    runtime_service_pb2_grpc.add_RuntimeBackendServiceServicer_to_server(servicer, server)
    runtime_service_pb2_grpc.add_RuntimeStreamServiceServicer_to_server(servicer, server)


# Per backend kind: its service, the servicer, how to add it, and any companion service it also serves.
# Per backend base class: its service's full name, servicer, adder, and services served beside it.
_SERVICES: dict[type, tuple[str, Callable[[Any], Any], Callable[[Any, grpc.Server], None], tuple[str, ...]]] = {
    RuntimeBackend: ("cosim.v1.RuntimeBackendService", RuntimeServicer, _add_runtime,
                     ("cosim.v1.RuntimeStreamService",)),
    MemoryBackend: ("cosim.v1.MemoryBackendService", MemoryServicer,
                    memory_service_pb2_grpc.add_MemoryBackendServiceServicer_to_server, ()),
    NetworkBackend: ("cosim.v1.NetworkBackendService", NetworkServicer,
                     network_service_pb2_grpc.add_NetworkBackendServiceServicer_to_server, ()),
}


def service_name(backend: Backend) -> str:
    """Full gRPC service name a backend object is served as."""
    for base, (name, *_rest) in _SERVICES.items():
        if isinstance(backend, base):
            return name
    raise TypeError(f"{type(backend).__name__} is not a RuntimeBackend, MemoryBackend or NetworkBackend")


class BackendServer:
    """A running gRPC server for one backend.

    Attributes:
        backend: the served backend object.
        address: ``host:port`` the server listens on.
        port: the bound port (useful when 0 was asked for).
    """

    def __init__(self, backend: Backend, *, host: str = "127.0.0.1", port: int = 0, max_workers: int = 4) -> None:
        self.backend = backend
        name = service_name(backend)
        _, servicer_cls, add, companions = next(entry for base, entry in _SERVICES.items()
                                                if isinstance(backend, base))
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                                   options=[("grpc.so_reuseport", 0)])
        add(servicer_cls(backend), self._server)
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            (name, *companions, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server)
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"could not bind backend {backend.name!r} to {host}:{port}")
        self.address = f"{'127.0.0.1' if host in ('0.0.0.0', '[::]') else host}:{self.port}"
        self._service = name

    def start(self) -> BackendServer:
        """Starts serving and marks the service SERVING."""
        self._server.start()
        for service in ("", self._service):
            self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info("backend %s (%s) listening on %s", self.backend.name, self._service, self.address)
        return self

    def stop(self, grace: float | None = 0) -> None:
        """Marks the service NOT_SERVING, then stops, letting calls finish for ``grace`` s."""
        self._health.enter_graceful_shutdown()
        self._server.stop(grace).wait()
        log.info("backend %s on %s stopped", self.backend.name, self.address)

    def wait(self) -> None:
        """Blocks until the server stops."""
        self._server.wait_for_termination()

    def __enter__(self) -> BackendServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(backend: Backend, *, port: int = 0, host: str = "127.0.0.1", grace_s: float = 5.0) -> None:
    """Serves ``backend`` until SIGTERM or SIGINT, then stops gracefully.

    Args:
        backend: the backend object to serve.
        port: port to listen on; 0 picks a free port (logged and printed).
        host: interface to bind; ``0.0.0.0`` inside containers.
        grace_s: seconds in-flight calls get to finish on shutdown.
    """
    stopped = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received signal %d; shutting down", signum)
        stopped.set()

    # Before the address is printed: a launcher may signal as soon as it reads it.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    server = BackendServer(backend, host=host, port=port).start()
    # The bound port on stdout lets a launcher that asked for port 0 find it.
    print(f"cosim backend {backend.name} listening on {server.address}", flush=True)  # noqa: T201
    while not stopped.wait(0.5):  # a timed wait: the signal handler runs at the latest on its return
        pass
    server.stop(grace_s)


def load_backend(reference: str, *, search_paths: Sequence[str | os.PathLike[str]] = (), **kwargs: Any) -> Backend:
    """Imports ``module:Class`` and returns an instance.

    Args:
        reference: the backend class as ``package.module:ClassName``.
        search_paths: folders the module may also be imported from (a config's folder, the working
            directory). Each is added to ``sys.path`` for good, after the entries already there, so
            that the module's own later imports resolve too and installed packages keep precedence.
        **kwargs: passed to the class.

    Raises:
        ValueError: the reference is malformed, names no backend class, or its module (or an optional
            dependency of it: :class:`~cosim.adapters.sdk.extras.MissingExtra`) cannot be imported.
    """
    module_name, sep, class_name = reference.partition(":")
    if not sep or not module_name or not class_name:
        raise ValueError(f"backend reference {reference!r} must look like 'package.module:ClassName'")
    folders = [str(Path(p).resolve()) for p in search_paths]
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)
    if folders:
        importlib.invalidate_caches()  # files written a moment ago (FileFinder caches directory listings)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as err:
        searched = folders and not isinstance(err, MissingExtra)
        where = f" (looked in the installed packages and in {', '.join(folders)})" if searched else ""
        raise ValueError(f"cannot load backend {reference!r}: {err}{where}") from err
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise ValueError(f"backend {reference!r} is not a subclass of cosim.adapters.sdk backends")
    return cls(**kwargs)


def main(argv: Sequence[str] | None = None, *, backend: str | None = None) -> None:
    """``python -m cosim.adapters.sdk module:Class --port N``: serves any backend class.

    A backend package's ``__main__`` passes its own ``backend`` reference, so
    ``python -m cosim.adapters.roofline --port N`` needs no class argument.
    """
    parser = argparse.ArgumentParser(prog="python -m cosim.adapters.sdk", description=main.__doc__)
    if backend is None:
        parser.add_argument("backend", help="backend class as package.module:ClassName")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (0.0.0.0 in containers)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(load_backend(backend or args.backend), port=args.port, host=args.host)
