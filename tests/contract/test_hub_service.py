"""HubService in-process: Run streaming, GetReport, ListBackends, errors, and `cosim submit`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from cosim.adapters.sdk import BackendServer
from cosim.adapters.sdk.testing import LinearBackend
from cosim.hub.cli import main as cli_main
from cosim.hub.service.backend_registry import BackendRegistry
from cosim.hub.service.server import MESSAGE_OPTIONS, HubServer, HubServicer, summary_of
from cosim.hub.service.submitted import SubmitPolicy
from cosim.v1 import hub_service_pb2 as hub_pb
from cosim.v1 import hub_service_pb2_grpc as hub_grpc
from tests.waiting import wait_until

LINEAR = "cosim.adapters.sdk.testing:LinearBackend"
# These tests submit python: backends (LINEAR), which a hub imports only when allowed.
ALLOW_PYTHON = SubmitPolicy(allow_python=True)


def scenario(backend: dict[str, Any], requests: int = 60) -> dict[str, Any]:
    """A small single-client scenario timed by ``backend``."""
    return {
        "seed": 5,
        "models": {"m": {"preset": "meta-llama/Meta-Llama-3-8B"}},
        "hardware": {"h100": {"preset": "H100-SXM"}},
        "backends": {"lin": {**backend, "options": {"step_ns": 2_000_000, "per_token_ns": 10_000}}},
        "clients": [{"name": "c0", "model": "m", "role": "mixed", "backend": "lin",
                     "hardware": {"device": "h100", "count": 1}}],
        "workload": {"requests": requests, "arrival": {"process": "poisson", "rate_per_s": 20},
                     "input_tokens": {"dist": "uniform", "low": 64, "high": 512},
                     "output_tokens": {"dist": "fixed", "value": 16}},
        "output": {"plots": False},
    }


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubServer]:
    registry = BackendRegistry({})
    with HubServer(HubServicer(tmp_path / "runs", registry=registry, data_dir=tmp_path, policy=ALLOW_PYTHON)) as server:
        yield server


def run_request(config: dict[str, Any], *overrides: str) -> hub_pb.RunRequest:
    return hub_pb.RunRequest(config_yaml=yaml.safe_dump(config), overrides=list(overrides))


def test_run_streams_progress_then_summary_and_report(hub: HubServer) -> None:
    with grpc.insecure_channel(hub.address) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        updates = list(stub.Run(run_request(scenario({"python": LINEAR}), "workload.requests=80"), timeout=120))
        assert len(updates) >= 3  # the run id, progress, the end
        assert len({u.run_id for u in updates}) == 1 and updates[0].run_id
        done = [u.completed_requests for u in updates]
        assert done == sorted(done) and done[-1] == 80
        assert updates[-1].total_requests == 80 and updates[-1].sim_time_ns > 0 and not updates[-1].error
        summary = summary_of(updates[-1])
        assert summary["requests"]["completed"] == 80

        report = stub.GetReport(hub_pb.GetReportRequest(run_id=updates[0].run_id), timeout=30)
    assert {"summary.json", "requests.csv", "clients.csv", "trace.json"} <= set(report.files)
    assert json.loads(report.files["summary.json"]) == summary
    assert report.files["requests.csv"].count(b"\n") == 81  # header + one row per request


def test_get_report_of_a_run_still_going_says_so_then_returns_the_partial_folder(hub: HubServer) -> None:
    with grpc.insecure_channel(hub.address, options=MESSAGE_OPTIONS) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        call = stub.Run(run_request(scenario({"python": LINEAR}), "workload.requests=20000",
                                    "workload.arrival.rate_per_s=5000"), timeout=120)
        run_id = next(call).run_id
        with pytest.raises(grpc.RpcError) as err:  # its requests.csv is being written: no report yet
            stub.GetReport(hub_pb.GetReportRequest(run_id=run_id), timeout=10)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"run {run_id} is still going" in err.value.details()
        call.cancel()  # the hub stops the run between two events and writes what it has
        reports: list[hub_pb.GetReportResponse] = []

        def reported() -> bool:
            try:
                reports.append(stub.GetReport(hub_pb.GetReportRequest(run_id=run_id), timeout=60))
            except grpc.RpcError as err2:
                assert err2.code() == grpc.StatusCode.FAILED_PRECONDITION
            return bool(reports)

        wait_until(reported, 120, "the cancelled run's report", poll_s=0.2)
        report = reports[0]
    summary = json.loads(report.files["summary.json"])
    assert summary["requests"]["completed"] < 20_000 and "submitter disconnected" in summary["error"]


def test_invalid_config_is_invalid_argument_naming_the_path(hub: HubServer) -> None:
    with grpc.insecure_channel(hub.address) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Run(run_request(scenario({"python": LINEAR}), "workload.requests=-3"), timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "workload.requests" in err.value.details()


def test_hub_refuses_to_launch_commands_unless_allowed(hub: HubServer) -> None:
    config = scenario({"command": ["{python}", "-m", "cosim.adapters.sdk", LINEAR, "--port", "{port}"]})
    with grpc.insecure_channel(hub.address) as channel, pytest.raises(grpc.RpcError) as err:
        list(hub_grpc.HubServiceStub(channel).Run(run_request(config), timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "backends.lin.command" in err.value.details() and "--allow-launch" in err.value.details()


def test_get_report_of_unknown_run_is_not_found(hub: HubServer) -> None:
    with grpc.insecure_channel(hub.address) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        for run_id in ("20250101-000000-deadbeef", "../../etc"):
            with pytest.raises(grpc.RpcError) as err:
                stub.GetReport(hub_pb.GetReportRequest(run_id=run_id), timeout=10)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_list_backends_reports_health_and_describe(tmp_path: Path) -> None:
    with BackendServer(LinearBackend()) as backend:
        registry = BackendRegistry({"roofline": backend.address, "gone": "127.0.0.1:9"})
        with HubServer(HubServicer(tmp_path, registry=registry)) as hub, \
                grpc.insecure_channel(hub.address) as channel:
            reply = hub_grpc.HubServiceStub(channel).ListBackends(hub_pb.ListBackendsRequest(), timeout=30)
    statuses = {b.name: b for b in reply.backends}
    assert statuses["roofline"].healthy and statuses["roofline"].info.name == "linear"
    assert statuses["roofline"].address == backend.address
    assert not statuses["gone"].healthy and statuses["gone"].address == "127.0.0.1:9"


def test_registry_resolves_kinds_to_running_backends(tmp_path: Path) -> None:
    """A config saying `kind: roofline` runs on whatever the hub registered as roofline."""
    with BackendServer(LinearBackend()) as backend:
        servicer = HubServicer(tmp_path, registry=BackendRegistry({"roofline": backend.address}))
        with HubServer(servicer) as hub, grpc.insecure_channel(hub.address) as channel:
            updates = list(hub_grpc.HubServiceStub(channel).Run(run_request(scenario({"kind": "roofline"})),
                                                                timeout=120))
    # The linear backend answered (the roofline would give other times): its fixed step time shows.
    assert summary_of(updates[-1])["clients"]["c0"]["fidelity"] == "analytical"
    assert summary_of(updates[-1])["requests"]["completed"] == 60


def test_registry_from_file_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "backends.yaml"
    path.write_text("backends:\n  roofline: roofline:50051\n  lab: lab-host:7000\n")
    registry = BackendRegistry.load(path, environ={"COSIM_BACKEND_ROOFLINE": "other:1", "HOME": "/x"})
    assert registry.addresses == {"roofline": "other:1", "lab": "lab-host:7000"}
    assert registry.lookup("lab", None) == "lab-host:7000"  # by name, any source
    assert registry.lookup("analytical", "roofline") == "other:1"  # by kind
    assert registry.lookup("analytical", "memory") is None  # left as written: runs in-process
    with pytest.raises(Exception, match="backends.bad: expected host:port"):
        BackendRegistry.load(None, environ={"COSIM_BACKEND_BAD": "nohost"})


def test_backend_that_dies_mid_run_ends_the_stream_with_unavailable(tmp_path: Path) -> None:
    backend = BackendServer(LinearBackend()).start()
    servicer = HubServicer(tmp_path, registry=BackendRegistry({"lin": backend.address}))
    config = scenario({"kind": "roofline"}, requests=400)
    config["backends"]["lin"]["cache"] = False  # every step reaches the backend
    config["backends"]["lin"]["reconnect_s"] = 0.5  # it does not come back: no use waiting long
    updates: list[hub_pb.RunUpdate] = []
    with HubServer(servicer) as hub, grpc.insecure_channel(hub.address) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            for update in stub.Run(run_request(config), timeout=120):
                updates.append(update)
                if update.completed_requests > 0:
                    backend.stop()
        report = stub.GetReport(hub_pb.GetReportRequest(run_id=updates[0].run_id), timeout=30)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    for text in (err.value.details(), updates[-1].error):
        assert "client 'c0'" in text and "backend 'lin'" in text and backend.address in text
    partial = summary_of(updates[-1])
    assert 0 < partial["requests"]["completed"] < 400 and "error" in partial
    assert "summary.json" in report.files and "requests.csv" in report.files


def test_submit_writes_the_same_run_folder_as_run(hub: HubServer, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "scenario.yaml"
    config.write_text(yaml.safe_dump(scenario({"python": LINEAR})))
    local, remote = tmp_path / "local", tmp_path / "remote"
    assert cli_main(["run", str(config), "-o", str(local), "--no-progress", "--set", "seed=9"]) == 0
    assert cli_main(["submit", str(config), "--hub", hub.address, "-o", str(remote), "--no-progress",
                     "--set", "seed=9"]) == 0
    assert "run folder:" in capsys.readouterr().out
    assert sorted(p.name for p in local.rglob("*")) == sorted(p.name for p in remote.rglob("*"))
    assert (local / "requests.csv").read_bytes() == (remote / "requests.csv").read_bytes()
    drop_wall = lambda s: {k: v for k, v in s.items() if "wall" not in k}  # noqa: E731
    assert drop_wall(json.loads((local / "summary.json").read_text())) == \
        drop_wall(json.loads((remote / "summary.json").read_text()))


def test_submit_reports_an_unreachable_hub(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "scenario.yaml"
    config.write_text(yaml.safe_dump(scenario({"python": LINEAR})))
    assert cli_main(["submit", str(config), "--hub", "127.0.0.1:9", "--no-progress"]) == 1
    assert "cannot reach the hub at 127.0.0.1:9" in capsys.readouterr().err


def test_a_run_stops_when_the_submitter_goes_away(tmp_path: Path) -> None:
    servicer = HubServicer(tmp_path / "runs", policy=ALLOW_PYTHON)
    config = scenario({"python": LINEAR}, requests=3000)
    config["backends"]["lin"]["cache"] = False
    with HubServer(servicer) as hub, grpc.insecure_channel(hub.address) as channel:
        call = hub_grpc.HubServiceStub(channel).Run(run_request(config), timeout=120)
        run_id = next(call).run_id
        next(call)  # some progress
        call.cancel()
        summary = tmp_path / "runs" / run_id / "summary.json"
        wait_until(summary.exists, 120, "the abandoned run's summary.json")  # noticed between two events
    text = summary.read_text()
    assert "submitter disconnected" in text
    assert json.loads(text)["requests"]["completed"] < 3000
