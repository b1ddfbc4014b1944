"""`cosim search --ray ADDRESS` on a real two-node Ray cluster (a head and a worker started with `ray start`, as
on real machines) ranks as the local run does."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cosim.hub.cli import main
from cosim.hub.studies.search import SearchResult

from .test_search import SPACE, ranking

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="ray is not installed (pip install 'cosim[ray]')")
RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ends a `ray start --block` we started, and the Ray processes it started (its own process group)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A head node and a worker node, one CPU each, as separate `ray start` processes; yields the address."""
    import ray

    port = free_port()
    address = f"127.0.0.1:{port}"
    temp = Path("/tmp") / f"cosim-ray-{os.getpid()}"  # short: Ray's socket paths must fit in 107 bytes
    logs = tmp_path_factory.mktemp("ray-logs")
    common = ["--num-cpus=1", "--block", "--disable-usage-stats"]
    # Token authentication off for this throwaway loopback cluster: a token in ~/.ray (another test's
    # ray.init may have written one) would otherwise be half-used. Real clusters keep it (docs/search.md).
    auth = {"RAY_AUTH_MODE": "disabled"}
    saved = {key: os.environ.get(key) for key in auth}
    os.environ.update(auth)  # the driver (this process) too
    env = {**os.environ, "RAY_raylet_start_wait_time_s": "120"}  # a busy 2-core machine starts slowly
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(subprocess.Popen(
            [RAY, "start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}", *common],
            stdout=(logs / "head.log").open("wb"), stderr=subprocess.STDOUT, start_new_session=True, env=env))
        deadline = time.monotonic() + 120
        while True:  # the worker joins once the head's GCS answers
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or started[0].poll() is not None:
                    pytest.fail(f"the Ray head did not start: {(logs / 'head.log').read_text()[-2000:]}")
                time.sleep(0.5)
        started.append(subprocess.Popen(
            [RAY, "start", f"--address={address}", *common],
            stdout=(logs / "worker.log").open("wb"), stderr=subprocess.STDOUT, start_new_session=True, env=env))
        ray.init(address=address, log_to_driver=False)
        deadline = time.monotonic() + 120
        while sum(1 for node in ray.nodes() if node["Alive"]) < 2:
            if time.monotonic() > deadline:
                pytest.fail(f"the worker did not join: {(logs / 'worker.log').read_text()[-2000:]}")
            time.sleep(0.5)
        ray.shutdown()  # the search connects by address itself, as `cosim search --ray ADDRESS` does
        yield address
    finally:
        ray.shutdown()
        for process in reversed(started):
            stop(process)
        shutil.rmtree(temp, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_search_on_a_two_node_ray_cluster_ranks_as_the_local_run(cluster: str, serial: SearchResult,
                                                                 tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    try:
        assert main(["search", str(space), "-o", str(tmp_path / "out"), "--ray", cluster, "--no-progress",
                     "--json"]) == 0
        nodes = [node for node in ray.nodes() if node["Alive"]]
        assert len(nodes) == 2 and sum(node["Resources"].get("CPU", 0) for node in nodes) == 2
    finally:
        ray.shutdown()
    rows = json.loads(capsys.readouterr().out)
    assert ranking(rows) == ranking(serial.rows)
    assert (tmp_path / "out" / "results.csv").read_text() == (serial.output_dir / "results.csv").read_text()
