"""Starting (or finding) backends: in-process, subprocess, container, address.

Every launcher returns a :class:`LaunchedBackend` with the address to dial
and a ``stop()``. The embedded default serves built-in backends in-process on
loopback through the same path a lab's ``python: module:Class`` takes, so the
hub reaches every backend over gRPC and never imports an adapter directly.
"""

from __future__ import annotations

import logging
import os
import shlex
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import tenacity
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ..errors import BackendError

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 60.0

@dataclass
class LaunchedBackend:
    """A backend the hub can dial.

    Attributes:
        name: the backend's name in the config.
        address: ``host:port`` to dial.
        how: how it was started (``in-process``, ``command``, ``image``, ``address``).
    """

    name: str
    address: str
    how: str
    _stop: Callable[[], None] = field(default=lambda: None, repr=False)
    _logs: Callable[[], str] = field(default=lambda: "", repr=False)
    _alive: Callable[[], bool] = field(default=lambda: True, repr=False)

    def stop(self) -> None:
        """Stops the backend if the hub started it; idempotent."""
        self._stop()
        self._stop = lambda: None

    def is_alive(self) -> bool:
        """False once the process or container the hub started has exited (it will not come back);
        True for a backend the hub did not start (it may)."""
        try:
            return self._alive()
        except Exception:  # noqa: BLE001 - a container engine that cannot say: assume it may come back
            return True

    def logs(self, max_chars: int = 4000) -> str:
        """Tail of the backend's output, for error messages (empty if unknown)."""
        return self._logs()[-max_chars:]


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(name: str, address: str, *, timeout_s: float = STARTUP_TIMEOUT_S,
                 is_alive: Callable[[], bool] = lambda: True, logs: Callable[[], str] = lambda: "") -> None:
    """Waits until ``address`` answers SERVING to the gRPC health check.

    Raises:
        BackendError: the process died, or the deadline passed.
    """
    def check() -> None:
        if not is_alive():
            raise BackendError(f"exited during start-up; its output:\n{logs()}", backend=name, address=address)
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2.0)
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            raise ConnectionError(f"health status {reply.status}")

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_exponential(multiplier=0.02, max=0.5),
        retry=tenacity.retry_if_exception_type((grpc.RpcError, ConnectionError)),
        reraise=True)
    try:
        retrying(check)
    except (grpc.RpcError, ConnectionError) as err:
        output = logs()
        raise BackendError(f"nothing answered its gRPC health check within {timeout_s:g} s ({_one_line(err)})" +
                           (f"; its output:\n{output}" if output else ""), backend=name, address=address) from err


def _one_line(err: Exception) -> str:
    """Why a health check failed, in a few words: a gRPC error's own text spans lines of debug strings."""
    if isinstance(err, grpc.Call):  # "failed to connect to all addresses; ...: Connection refused"
        cause = (err.details() or "").rsplit(": ", 1)[-1]
        return f"{err.code().name}: {cause}" if cause else err.code().name
    return str(err)


def launch_python(name: str, reference: str, *, options: dict[str, Any] | None = None,
                  search_paths: Sequence[str | os.PathLike[str]] = ()) -> LaunchedBackend:
    """Serves ``module:Class`` in this process on a free loopback port.

    Args:
        name: the backend's name in the config.
        reference: ``package.module:ClassName``.
        options: keyword arguments of the class.
        search_paths: folders the module may also be imported from (``load_backend``'s).
    """
    # The SDK is the one adapter module the hub touches: it serves the class.
    from cosim.adapters.sdk import BackendServer, load_backend

    try:
        backend = load_backend(reference, search_paths=search_paths, **(options or {}))
    except (ValueError, TypeError) as err:
        raise BackendError(str(err), backend=name) from err
    server = BackendServer(backend, host="127.0.0.1", port=0).start()
    return LaunchedBackend(name=name, address=server.address, how="in-process", _stop=lambda: server.stop(0))


def launch_command(name: str, command: Sequence[str], *, timeout_s: float = STARTUP_TIMEOUT_S) -> LaunchedBackend:
    """Runs ``command`` as a subprocess on a free port (``{port}`` in the
    command is replaced by it) and waits for its health check."""
    port = free_port()
    argv = [str(part).replace("{port}", str(port)).replace("{python}", sys.executable) for part in command]
    output = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (the backend's log; read when it fails, closed on stop)
    try:
        # Its own session: a Ctrl-C at the terminal reaches the hub alone, which stops the backend after
        # writing the partial run folder (a backend dying first would be reported as its fault).
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=dict(os.environ),
                                start_new_session=True)
    except OSError as err:
        raise BackendError(f"cannot start command {shlex.join(argv)}: {err}", backend=name) from err

    def logs() -> str:
        output.seek(0)
        return output.read()

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        output.close()

    address = f"127.0.0.1:{port}"
    launched = LaunchedBackend(name=name, address=address, how="command", _stop=stop, _logs=logs,
                               _alive=lambda: proc.poll() is None)
    try:
        wait_healthy(name, address, timeout_s=timeout_s, is_alive=launched.is_alive, logs=logs)
    except BaseException:  # its failure, Ctrl-C or SIGTERM while it starts: it must not outlive us
        launched.stop()
        raise
    log.info("backend %s started by command on %s", name, address)
    return launched


def launch_image(name: str, image: str, *, container_port: int = 50051, timeout_s: float = STARTUP_TIMEOUT_S,
                 command: Sequence[str] | None = None) -> LaunchedBackend:
    """Starts ``image`` with the Docker SDK, publishing its gRPC port on loopback."""
    import docker  # heavy import; only this launcher needs it
    from docker.errors import DockerException

    try:
        client = docker.from_env()
        container = client.containers.run(
            image, command=list(command) if command else None, detach=True,
            ports={f"{container_port}/tcp": ("127.0.0.1", None)}, labels={"cosim.backend": name})
        container.reload()
        host_port = container.attrs["NetworkSettings"]["Ports"][f"{container_port}/tcp"][0]["HostPort"]
    except DockerException as err:
        raise BackendError(f"cannot start image {image!r}: {err}", backend=name) from err

    def logs() -> str:
        try:
            return str(container.logs(tail=200).decode(errors="replace"))
        except DockerException:
            return ""

    def stop() -> None:
        try:
            container.stop(timeout=5)
            container.remove(force=True)
        except DockerException as err:
            log.warning("could not remove container of backend %s: %s", name, err)

    def is_alive() -> bool:
        container.reload()
        return str(container.status) in ("created", "running")

    address = f"127.0.0.1:{host_port}"
    launched = LaunchedBackend(name=name, address=address, how="image", _stop=stop, _logs=logs, _alive=is_alive)
    try:
        wait_healthy(name, address, timeout_s=timeout_s, is_alive=is_alive, logs=logs)
    except BaseException:  # its failure, Ctrl-C or SIGTERM while it starts: it must not outlive us
        launched.stop()
        raise
    return launched


def attach_address(name: str, address: str, *, timeout_s: float = 10.0) -> LaunchedBackend:
    """A backend that is already running at ``address``."""
    wait_healthy(name, address, timeout_s=timeout_s)
    return LaunchedBackend(name=name, address=address, how="address")
