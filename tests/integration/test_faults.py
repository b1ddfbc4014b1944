"""Faults survived, with real processes: a backend killed and restarted mid-run, a hung backend,
SIGTERM and Ctrl-C on the command line, a bad run folder, and a hub run's folder fetched later."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import cosim
from cosim.adapters.sdk import RuntimeBackend, Session
from cosim.hub.backends import free_port, wait_healthy
from cosim.hub.cli import main
from cosim.hub.errors import BackendError, ScenarioError
from cosim.hub.service.server import HubServer, HubServicer
from cosim.v1 import types_pb2 as pb
from tests.waiting import wait_until

from .processes import children_of, running
from .terminal import Terminal

COSIM = [sys.executable, "-m", "cosim"]


def scenario(backend: dict[str, Any], *, requests: int = 400, rate: float = 50.0) -> dict[str, Any]:
    """One client on ``backend``; every step asks it (no cache), so a fault mid-run is met mid-run."""
    return {
        "seed": 3,
        "models": {"m": {"preset": "meta-llama/Meta-Llama-3-8B"}},
        "hardware": {"h100": {"preset": "H100-SXM"}},
        "backends": {"lab": {"cache": False, **backend}},
        "clients": [{"name": "c0", "model": "m", "role": "mixed", "backend": "lab",
                     "hardware": {"device": "h100", "count": 1}}],
        "workload": {"requests": requests, "arrival": {"process": "poisson", "rate_per_s": rate},
                     "input_tokens": {"dist": "uniform", "low": 64, "high": 512},
                     "output_tokens": {"dist": "uniform", "low": 16, "high": 128}},
        "output": {"plots": False},
    }


def serve_roofline(port: int) -> subprocess.Popen[bytes]:
    """``cosim serve roofline --port PORT`` as a process of its own, once healthy."""
    proc = subprocess.Popen([*COSIM, "serve", "roofline", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_healthy("roofline", f"127.0.0.1:{port}", timeout_s=120, is_alive=lambda: proc.poll() is None)
    return proc


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[Any]]]:
    """Processes a test starts, killed at its end whatever happened."""
    started: list[subprocess.Popen[Any]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_backend_killed_and_restarted_mid_run_gives_the_uninterrupted_results(
        tmp_path: Path, processes: list[subprocess.Popen[Any]]) -> None:
    port = free_port()
    processes.append(serve_roofline(port))
    # The run waits for the restarted backend as long as it takes to start on a busy machine (30 s by default).
    config = scenario({"address": f"127.0.0.1:{port}", "reconnect_s": 300})
    steady = cosim.run(config, output_dir=tmp_path / "steady")
    restarts: list[float] = []

    def kill_and_restart(completed: int, total: int, sim_ns: int) -> None:
        if completed >= total // 3 and not restarts:
            processes[0].kill()  # SIGKILL: the backend's sessions are gone with it
            assert processes[0].wait() == -signal.SIGKILL
            restarts.append(time.monotonic())
            # The same port, in the background: the run meets the backend down, then back without its session.
            processes.append(subprocess.Popen([*COSIM, "serve", "roofline", "--port", str(port)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    survived = cosim.run(config, output_dir=tmp_path / "survived", on_progress=kill_and_restart)
    assert restarts, "the run ended before the backend was killed"
    assert processes[1].poll() is None  # the restarted backend answered the rest of the run
    assert survived.summary["requests"]["completed"] == steady.summary["requests"]["completed"] == 400
    assert (tmp_path / "survived" / "requests.csv").read_bytes() == (tmp_path / "steady" / "requests.csv").read_bytes()
    assert "error" not in survived.summary


class Hung(RuntimeBackend):
    """Opens sessions, then never answers a step (until the test releases it)."""

    name = "hung"
    release = threading.Event()

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        self.release.wait(60)
        return pb.StepTiming(duration_ns=1)


def test_a_hung_backend_is_declared_after_one_deadline_and_one_retry(tmp_path: Path) -> None:
    config = scenario({"python": f"{__name__}:Hung", "deadline_s": 1.0}, requests=20)
    began = time.monotonic()
    try:
        with pytest.raises(BackendError) as err:
            cosim.run(config, output_dir=tmp_path / "run")
        waited = time.monotonic() - began
    finally:
        Hung.release.set()
    text = str(err.value)
    assert re.search(r"backend 'lab' at 127\.0\.0\.1:\d+", text)
    assert "DEADLINE_EXCEEDED: no answer within deadline_s=1 s, retried once" in text
    said = float(re.search(r"([\d.]+) s waited in all", text).group(1))  # type: ignore[union-attr]
    # Two deadlines at least, and the time really waited, to the message's one decimal (no upper bound: a
    # busy machine adds to any wait; "retried once" says that it gave up after the second deadline).
    assert 2.0 <= said <= round(waited, 1)
    assert "error" in json.loads((tmp_path / "run" / "summary.json").read_text())


def test_sigterm_on_cosim_run_writes_the_partial_run_folder_and_stops_its_command_backend(tmp_path: Path) -> None:
    config = scenario({"command": ["{python}", "-m", "cosim", "serve", "roofline", "--port", "{port}"]},
                      requests=5_000, rate=1000.0)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    terminal = Terminal()  # stderr: the progress bar says when requests have finished
    run = subprocess.Popen([*COSIM, "run", str(path), "-o", str(out)], stdout=subprocess.PIPE,
                           stderr=terminal.slave, text=True)
    terminal.started()
    backends: list[int] = []

    def started_or_ended() -> bool:
        backends[:] = children_of(run.pid)
        return bool(backends) or run.poll() is not None

    try:
        wait_until(started_or_ended, 120, "the command backend to start")
        assert backends, f"the command backend never started: {terminal.finished()}"
        terminal.wait_for(r"\| *[1-9]\d*/5000 ", 120)  # the hub's session is open, requests have finished
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=120)
    finally:
        for pid in [run.pid, *backends]:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        run.wait()
    stderr = terminal.finished()
    assert run.returncode == 143, stderr
    assert "interrupted by SIGTERM" in stderr and f"partial run folder: {out}" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["error"].startswith("interrupted by SIGTERM at t=")
    assert 0 < summary["requests"]["completed"] < 5_000
    assert (out / "requests.csv").read_text().count("\n") == 5_001  # every request, finished or not
    assert (out / "config.yaml").exists() and (out / "run.json").exists()
    assert not any(running(pid) for pid in backends), "the command backend outlived cosim run"


def test_the_run_folder_is_checked_before_the_simulation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A backend that exits at once: a run that reached it would fail with a BackendError instead.
    config = scenario({"command": [sys.executable, "-c", "raise SystemExit(3)"]})
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "summary.json").write_text("{}")
    for out, message in ((tmp_path / "file" / "run", "is a file, so the run folder cannot be made there"),
                         (tmp_path / "taken", "run folder exists and is not empty; pass overwrite=True")):
        with pytest.raises(ScenarioError, match=re.escape(message)) as err:
            cosim.run(config, output_dir=out)
        assert err.value.where == str(out)
    assert (tmp_path / "taken" / "summary.json").read_text() == "{}"
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path), "-o", str(tmp_path / "file" / "run")]) == 2
    assert "is a file, so the run folder cannot be made there" in capsys.readouterr().err


def wait_for_line(stream: Any, pattern: str, timeout_s: float) -> re.Match[str]:
    """The first line of ``stream`` matching ``pattern`` (read on a thread, so a silent process times out)."""
    found: list[re.Match[str]] = []

    def read() -> None:
        for line in stream:
            if match := re.search(pattern, line):
                found.append(match)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert found, f"no line matching {pattern!r} within {timeout_s} s"
    return found[0]


def test_ctrl_c_on_submit_names_the_run_and_cosim_fetch_brings_its_folder_back(
        tmp_path: Path, processes: list[subprocess.Popen[Any]]) -> None:
    port = free_port()
    hub_address = f"127.0.0.1:{port}"
    hub = subprocess.Popen([*COSIM, "hub", "--port", str(port), "--runs-dir", str(tmp_path / "hub-runs")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    processes.append(hub)
    wait_healthy("hub", hub_address, timeout_s=120, is_alive=lambda: hub.poll() is None)
    path = tmp_path / "scenario.yaml"

    # A short run: `cosim fetch` writes the very folder `cosim submit` wrote.
    path.write_text(yaml.safe_dump(scenario({"kind": "roofline"}, requests=50)))
    done = subprocess.run([*COSIM, "submit", str(path), "--hub", hub_address, "-o", str(tmp_path / "submitted"),
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    run_id = re.fullmatch(rf"run (\S+) on {re.escape(hub_address)}", first).group(1)  # type: ignore[union-attr]
    fetched = subprocess.run([*COSIM, "fetch", run_id, "--hub", hub_address, "-o", str(tmp_path / "fetched")],
                             capture_output=True, text=True, timeout=120)
    assert fetched.returncode == 0, fetched.stderr
    assert f"run folder: {tmp_path / 'fetched'}" in fetched.stdout
    names = sorted(p.relative_to(tmp_path / "submitted").as_posix() for p in (tmp_path / "submitted").rglob("*"))
    assert names == sorted(p.relative_to(tmp_path / "fetched").as_posix()
                           for p in (tmp_path / "fetched").rglob("*"))
    for name in names:
        if (tmp_path / "submitted" / name).is_file():
            assert (tmp_path / "submitted" / name).read_bytes() == (tmp_path / "fetched" / name).read_bytes(), name

    # A long run, interrupted: the run id comes first, and the message says how to fetch the folder.
    path.write_text(yaml.safe_dump(scenario({"kind": "roofline"}, requests=5_000, rate=1000.0)))
    terminal = Terminal()  # stderr: the progress bar says when requests have finished
    submit = subprocess.Popen([*COSIM, "submit", str(path), "--hub", hub_address], stdout=subprocess.PIPE,
                              stderr=terminal.slave, text=True)
    terminal.started()
    processes.append(submit)
    run_id = wait_for_line(submit.stdout, rf"^run (\S+) on {re.escape(hub_address)}$", 120).group(1)
    terminal.wait_for(r"\| *[1-9]\d*/5000 ", 120)
    submit.send_signal(signal.SIGINT)
    submit.wait(timeout=120)
    stderr = terminal.finished()
    assert submit.returncode == 130, stderr
    assert f"cosim fetch {run_id} --hub {hub_address}" in stderr and f"stops run {run_id}" in stderr
    fetches: list[subprocess.CompletedProcess[str]] = []

    def fetched_partial() -> bool:  # the hub stops the run at its next progress report, then writes the folder
        fetches.append(subprocess.run([*COSIM, "fetch", run_id, "--hub", hub_address, "-o",
                                       str(tmp_path / "partial")], capture_output=True, text=True, timeout=120))
        return fetches[-1].returncode == 0

    wait_until(fetched_partial, 120, "the interrupted run's folder", poll_s=0.5)
    fetched = fetches[-1]
    summary = json.loads((tmp_path / "partial" / "summary.json").read_text())
    assert "disconnected" in summary["error"] and 0 < summary["requests"]["completed"] < 5_000
    assert f"run {run_id} failed" in fetched.stderr


def test_fetch_names_an_unknown_run_and_refuses_a_taken_folder(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("mine")
    unknown = "20250101-000000-deadbeef"
    assert main(["fetch", unknown, "--hub", "127.0.0.1:9", "-o", str(tmp_path / "taken")]) == 2
    assert "run folder exists and is not empty" in capsys.readouterr().err  # before reaching out
    with HubServer(HubServicer(tmp_path / "hub-runs")) as hub:
        assert main(["fetch", unknown, "--hub", hub.address, "-o", str(tmp_path / "none")]) == 1
    assert "no such run on this hub" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


if os.name != "posix":  # /proc, signals
    pytestmark = pytest.mark.skip(reason="POSIX only")
