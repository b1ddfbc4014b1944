"""The compose deployment: build, bring up, submit through the hub, survive a dead backend.

One stack for the whole module (see conftest.py); runs are kept small with --set.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from cosim.hub.backends import launch_image
from cosim.hub.errors import BackendError
from cosim.hub.service.server import summary_of
from cosim.v1 import hub_service_pb2 as hub_pb
from cosim.v1 import hub_service_pb2_grpc as hub_grpc
from tests.paths import REPO

from .conftest import HUB_GID, HUB_UID, Stack, build_image

pytestmark = [pytest.mark.container, pytest.mark.slow]


def submit(stack: Stack, config: Path, out: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """`cosim submit` as a user types it."""
    sets = [arg for o in overrides for arg in ("--set", o)]
    return subprocess.run([str(Path(sys.executable).parent / "cosim"), "submit", str(config), "--hub", stack.hub,
                           "-o", str(out), "--no-progress", *sets],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_stack_lists_every_backend_with_health(compose_stack: Stack) -> None:
    statuses = compose_stack.backends()
    assert set(statuses) >= {"roofline", "regression", "memory", "network", "genz", "scalesim", "aiconfigurator"}
    for name in ("roofline", "regression", "memory", "network"):
        assert statuses[name].healthy and statuses[name].address == f"{name}:50051"
        assert statuses[name].info.name
    ps = compose_stack.compose("ps").stdout.decode()
    assert "healthy" in ps or "health: starting" in ps  # the compose health checks are wired


def test_submit_quickstart_and_a_two_fidelity_run(compose_stack: Stack, tmp_path: Path) -> None:
    quick = submit(compose_stack, REPO / "examples" / "quickstart.yaml", tmp_path / "quick", "workload.requests=60")
    assert quick.returncode == 0, quick.stderr
    summary = json.loads((tmp_path / "quick" / "summary.json").read_text())
    assert summary["requests"]["completed"] == 60
    assert summary["clients"]["c0"]["fidelity"] == "analytical"
    assert {"requests.csv", "clients.csv", "trace.json"} <= {p.name for p in (tmp_path / "quick").iterdir()}

    two = submit(compose_stack, REPO / "tests" / "integration" / "data" / "two_fidelities.yaml", tmp_path / "two")
    assert two.returncode == 0, two.stderr
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["requests"]["completed"] == 60
    assert summary["clients"]["prefill-0"]["fidelity"] == "analytical"
    assert summary["clients"]["decode-0"]["fidelity"] == "empirical"
    # The hub kept its own copy in the mounted runs volume.
    assert any(p.name == "summary.json" for p in compose_stack.runs_dir.rglob("summary.json"))


def test_submit_mixed_fidelity_run(compose_stack: Stack, tmp_path: Path) -> None:
    """Prefill on SCALE-Sim, decode on regression, a GenZ client, KV over the network backend: all in containers."""
    compose_stack.wait_healthy(("genz", "scalesim", "network"))
    mixed = submit(compose_stack, REPO / "examples" / "mixed-fidelity.yaml", tmp_path / "mixed", "workload.requests=12")
    assert mixed.returncode == 0, mixed.stderr
    summary = json.loads((tmp_path / "mixed" / "summary.json").read_text())
    assert summary["requests"]["completed"] == 12
    fidelity = {name: client["fidelity"] for name, client in summary["clients"].items()}
    assert fidelity == {"p0": "cycle_level", "p1": "cycle_level", "d0": "empirical", "d1": "empirical",
                        "g0": "external_analytical"}


def test_killed_backend_fails_the_run_by_name_and_the_next_run_succeeds(compose_stack: Stack,
                                                                         tmp_path: Path) -> None:
    config = (REPO / "examples" / "quickstart.yaml").read_text()
    request = hub_pb.RunRequest(config_yaml=config, overrides=[
        "workload.requests=1500", "backends.analytical.cache=false", "backends.analytical.deadline_s=3"])
    updates: list[hub_pb.RunUpdate] = []
    killed = False
    with grpc.insecure_channel(compose_stack.hub) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            for update in stub.Run(request, timeout=600):
                updates.append(update)
                if update.completed_requests > 0 and not killed:
                    compose_stack.compose("kill", "roofline")  # SIGKILL: no restart by policy
                    killed = True
        report = stub.GetReport(hub_pb.GetReportRequest(run_id=updates[0].run_id), timeout=60)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    text = err.value.details()
    assert "client 'c0'" in text and "backend 'analytical'" in text and "roofline:50051" in text, text
    assert "retried" in text
    partial = summary_of(updates[-1])
    assert 0 < partial["requests"]["completed"] < 1500 and "roofline:50051" in partial["error"]
    assert "requests.csv" in report.files

    compose_stack.compose("start", "roofline")
    compose_stack.wait_healthy(("roofline",))
    again = submit(compose_stack, REPO / "examples" / "quickstart.yaml", tmp_path / "again", "workload.requests=40")
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["requests"]["completed"] == 40


def test_submit_naming_an_address_is_refused_by_the_hub(compose_stack: Stack, tmp_path: Path) -> None:
    """A submitted config may not make the hub connect to a host:port of its choosing (issue 23)."""
    result = submit(compose_stack, REPO / "examples" / "quickstart.yaml", tmp_path / "out", "workload.requests=20",
                    "backends.analytical.kind=null", "backends.analytical.address=lab:50051")
    assert result.returncode == 2
    assert "backends.analytical.address" in result.stderr and "--allow-address" in result.stderr, result.stderr


def test_image_launcher_starts_waits_and_removes_the_container(cosim_image: str, docker_engine: object) -> None:
    backend = launch_image("roofline", cosim_image, command=["serve", "roofline", "--host", "0.0.0.0",
                                                             "--port", "50051"])
    try:
        assert backend.how == "image" and backend.address.startswith("127.0.0.1:")
        assert "listening" in backend.logs()
    finally:
        backend.stop()
    assert not docker_engine.containers.list(all=True, filters={"label": "cosim.backend=roofline"})  # type: ignore[attr-defined]


def test_image_that_fails_attaches_its_logs(cosim_image: str) -> None:
    with pytest.raises(BackendError) as err:
        launch_image("nope", cosim_image, command=["serve", "no.such:Backend", "--host", "0.0.0.0",
                                                   "--port", "50051"], timeout_s=60)
    assert "backend 'nope'" in str(err.value) and "cannot load backend" in str(err.value)


def test_base_image_is_local_and_has_python_311(cosim_image: str) -> None:
    out = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python3", cosim_image, "-c",
                          "import sys, cosim.hub; print(sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert out.stdout.strip() == "(3, 11)", out.stderr


def test_the_image_builds_from_a_quickstart_venv(cosim_image: str, quickstart_python: Path,
                                                docker_engine: object) -> None:
    """The README's order: `make quickstart`, then containers/build.sh with that venv's old setuptools."""
    version = subprocess.run([str(quickstart_python), "-c", "import setuptools; print(setuptools.__version__)"],
                             capture_output=True, text=True)
    if version.returncode == 0:  # Python >= 3.12 bundles none, which needs build isolation just as much
        assert int(version.stdout.split(".")[0]) < 77, f"this venv's setuptools {version.stdout} is recent enough"
    labels = docker_engine.images.get(cosim_image).labels  # type: ignore[attr-defined]
    assert labels.get("cosim.build"), labels


def test_the_build_removes_only_images_of_its_own_builds(cosim_image: str, quickstart_python: Path,
                                                         docker_engine: object) -> None:
    """Dependency stages of other projects (and of other checkouts) survive a rebuild; of this build's own,
    only the newest (its cache) is kept."""
    client = docker_engine
    own = client.images.get(cosim_image).labels["cosim.build"]  # type: ignore[attr-defined]
    planted = []
    try:
        for labels in ({"cosim.stage": "deps", "planted": "1"}, {"cosim.stage": "deps", "planted": "2"},
                       {"cosim.stage": "deps", "cosim.build": "another-checkout"}):
            image, _ = client.images.build(  # type: ignore[attr-defined]
                fileobj=io.BytesIO(b"FROM cosim/base:local\n"), labels=labels, rm=True)
            planted.append(image.id)
        proc = build_image(quickstart_python)
        assert proc.returncode == 0, proc.stderr[-3000:]
        left = {image.id for image in client.images.list(filters={"label": "cosim.stage=deps"})}  # type: ignore
        assert set(planted) <= left
        mine = client.images.list(filters={"label": ["cosim.stage=deps", f"cosim.build={own}"]})  # type: ignore
        assert len(mine) == 1
    finally:
        for image_id in planted:
            subprocess.run(["docker", "rmi", image_id], capture_output=True)


def test_run_folders_belong_to_the_hubs_user_and_the_stack_to_its_project(compose_stack: Stack,
                                                                          tmp_path: Path) -> None:
    """COSIM_UID/COSIM_GID own what the hub writes (containers/compose.sh: the invoking user);
    COSIM_PROJECT names the stack."""
    result = submit(compose_stack, REPO / "examples" / "quickstart.yaml", tmp_path / "q", "workload.requests=20",
                    "output.plots=false")
    assert result.returncode == 0, result.stderr
    summary = next(compose_stack.runs_dir.rglob("summary.json"))
    for path in (compose_stack.runs_dir, summary.parent, summary):
        assert (path.stat().st_uid, path.stat().st_gid) == (HUB_UID, HUB_GID), path
    containers = subprocess.run(["docker", "ps", "-q", "--filter",
                                 f"label=com.docker.compose.project={compose_stack.project}"],
                                capture_output=True, text=True, check=True).stdout.split()
    assert len(containers) >= 7  # the hub and six backends
