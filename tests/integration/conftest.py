"""Fixtures of the container tests: the cosim image and one compose stack per session.

Tests that need Docker skip, with the reason, only where no Docker engine answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from cosim.hub.backends import free_port
from cosim.v1 import hub_service_pb2 as hub_pb
from cosim.v1 import hub_service_pb2_grpc as hub_grpc
from tests.paths import REPO

IMAGE = "cosim:local"
# Backends every stack must bring up healthy (genz and scalesim are reported, not required).
CORE_BACKENDS = ("roofline", "regression", "memory", "network")


def _tail(text: str | bytes | None, chars: int = 3000) -> str:
    text = text.decode(errors="replace") if isinstance(text, bytes) else (text or "")
    return text[-chars:]


@pytest.fixture(scope="session")
def docker_engine() -> object:
    """A Docker SDK client; skips the test where no engine answers."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as err:  # noqa: BLE001 - any failure means: no engine here
        pytest.skip(f"no Docker engine reachable ({type(err).__name__}: {err}); container tests need one")
    return client


@pytest.fixture(scope="session")
def quickstart_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python of a venv as `make quickstart` leaves it: made by `python -m venv`, with the setuptools
    that Python bundles (older than cosim's build needs) and not cosim's dev extras."""
    root = tmp_path_factory.mktemp("quickstart-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, capture_output=True, timeout=300)
    return root / "bin" / "python"


# Generous bounds on waits that end at an event (a build done, a stack healthy): a first build on a busy
# 2-core machine, with no image cached, took over 30 minutes.
BUILD_TIMEOUT_S = 3600
STACK_TIMEOUT_S = 600


def build_image(python: Path) -> subprocess.CompletedProcess[bytes]:
    """containers/build.sh as the README runs it after `make quickstart` (PYTHON: that venv's)."""
    return subprocess.run([str(REPO / "containers" / "build.sh")], cwd=REPO, capture_output=True,
                          timeout=BUILD_TIMEOUT_S, env={**os.environ, "PYTHON": str(python)})


@pytest.fixture(scope="session")
def cosim_image(docker_engine: object, quickstart_python: Path) -> str:
    """cosim:local, (re)built by containers/build.sh from the local base image and host wheels."""
    began = time.monotonic()
    proc = build_image(quickstart_python)
    if proc.returncode != 0:
        pytest.fail(f"containers/build.sh failed ({proc.returncode}):\n{_tail(proc.stdout)}\n{_tail(proc.stderr)}")
    print(f"cosim image built in {time.monotonic() - began:.0f}s")  # noqa: T201 - shown with -s
    return IMAGE


def compose_command() -> list[str] | None:
    """`docker-compose` (v1) or `docker compose` (v2), whichever is installed."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return None


@dataclass
class Stack:
    """A running compose stack: the hub's address and a way to drive compose."""

    base: list[str]
    env: dict[str, str]
    hub: str
    runs_dir: Path
    project: str

    def compose(self, *args: str, timeout: float = STACK_TIMEOUT_S) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run([*self.base, *args], env=self.env, capture_output=True, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed:\n{_tail(proc.stderr)}")
        return proc

    def backends(self) -> dict[str, hub_pb.BackendStatus]:
        with grpc.insecure_channel(self.hub) as channel:
            reply = hub_grpc.HubServiceStub(channel).ListBackends(hub_pb.ListBackendsRequest(), timeout=20)
        return {b.name: b for b in reply.backends}

    def wait_healthy(self, names: tuple[str, ...] = CORE_BACKENDS, timeout_s: float = STACK_TIMEOUT_S) -> None:
        deadline, last = time.monotonic() + timeout_s, "hub unreachable"
        while time.monotonic() < deadline:
            try:
                statuses = self.backends()
                sick = [n for n in names if not (n in statuses and statuses[n].healthy)]
                if not sick:
                    return
                last = f"not healthy yet: {sick}"
            except grpc.RpcError as err:
                last = f"hub: {err.code().name}"  # type: ignore[attr-defined]
            time.sleep(2)
        logs = _tail(self.compose("logs", "--tail", "20").stdout, 6000)
        raise AssertionError(f"compose stack not ready after {timeout_s:.0f}s ({last}); logs:\n{logs}")


# The user the test stack's hub runs as (COSIM_UID, COSIM_GID): not the tests' own, which may be root.
HUB_UID, HUB_GID = 4321, 4322


@pytest.fixture(scope="session")
def compose_stack(cosim_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The hub and every backend of containers/docker-compose.yml, up for the session through
    containers/compose.sh, with every COSIM_* setting its own (a second stack could run beside it)."""
    if compose_command() is None:
        pytest.skip("neither docker-compose nor `docker compose` is installed")
    port, project = free_port(), f"cosimtest{os.getpid()}"
    runs = tmp_path_factory.mktemp("compose") / "runs"  # compose.sh creates it, for the hub's user
    env = {**os.environ, "COSIM_PROJECT": project, "COSIM_HUB_PORT": str(port), "COSIM_RUNS_DIR": str(runs),
           "COSIM_IMAGE": cosim_image, "COSIM_UID": str(HUB_UID), "COSIM_GID": str(HUB_GID)}
    base = [str(REPO / "containers" / "compose.sh")]
    stack = Stack(base, env, f"127.0.0.1:{port}", runs, project)
    try:
        stack.compose("up", "-d")
        stack.wait_healthy()
        yield stack
    finally:
        subprocess.run([*base, "down", "-v", "--remove-orphans", "-t", "5"], env=env, capture_output=True,
                       timeout=STACK_TIMEOUT_S)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cosim's wheel, built as `pip wheel` builds it from a fresh clone; its build prints no warning."""
    from .wheels import build_wheel, clean_copy

    built, printed = build_wheel(clean_copy(tmp_path_factory.mktemp("src")), tmp_path_factory.mktemp("dist"))
    # setuptools' warnings (e.g. a data folder "absent from the `packages` configuration") come through pip.
    assert "Warning" not in printed, printed
    return built


@pytest.fixture(scope="session")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (not editable); the runtime dependencies are this venv's."""
    from .wheels import install_wheel

    return install_wheel(wheel, tmp_path_factory.mktemp("venv") / "venv")
