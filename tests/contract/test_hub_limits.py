"""Sessions count against a hub's --max-requests, and a run whose submitter is gone stops (issue 36, item 12).

Each turn of a session is a request: the turns a config gives before the run are refused at
``prepare``; a closed loop for a time, which starts sessions as it goes, is stopped at its request
past the limit; a run whose call ended stops between two events, in its prediction intervals'
reruns too. The last two run a real hub on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from cosim.hub.errors import ScenarioError
from cosim.hub.service.server import HubServer, HubServicer
from cosim.hub.service.submitted import SubmitPolicy
from cosim.v1 import hub_service_pb2 as hub_pb
from cosim.v1 import hub_service_pb2_grpc as hub_grpc
from tests.contract.test_hub_service import LINEAR, scenario
from tests.waiting import wait_until

LIMIT = 1000
# The linear backend (a python: backend) times the runs: fast, and the same on every machine.
POLICY = SubmitPolicy(allow_python=True, max_requests=LIMIT)


def capped(max_requests: int) -> SubmitPolicy:
    return SubmitPolicy(allow_python=True, max_requests=max_requests)


def sessions(**spec: Any) -> dict[str, Any]:
    """A scenario of sessions (``workload.sessions`` = ``spec``) on the linear backend."""
    config = scenario({"python": LINEAR})
    config["workload"] = {"arrival": {"process": "poisson", "rate_per_s": 50},
                          "input_tokens": {"dist": "fixed", "value": 32},
                          "output_tokens": {"dist": "fixed", "value": 2},
                          "sessions": spec}
    return config


def session_file(folder: Path, sessions_turns: list[int]) -> str:
    """An llmservingsim session file of sessions with these many turns each; returns its name."""
    call = '{"input_toks": 40, "output_toks": 4, "tool_duration_ns": 1000000}'
    (folder / "sessions.jsonl").write_text("".join(
        f'{{"arrival_time_ns": {i * 10**6}, "sub_requests": [{", ".join([call] * n)}]}}\n'
        for i, n in enumerate(sessions_turns)))
    return "sessions.jsonl"


def refusal(servicer: HubServicer, config: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as err:
        servicer.prepare(hub_pb.RunRequest(config_yaml=yaml.safe_dump(config)))
    return str(err.value)


@pytest.fixture
def servicer(tmp_path: Path) -> HubServicer:
    return HubServicer(tmp_path / "runs", data_dir=tmp_path, policy=POLICY)


def test_drawn_sessions_count_their_turns(servicer: HubServicer) -> None:
    # The case: under a cap of LIMIT requests, 300 sessions of 4 turns are 1,200.
    assert refusal(servicer, sessions(count=300, turns={"dist": "fixed", "value": 4})) == (
        "workload.sessions.count: 300 sessions of 4 turns on average are 1,200 turns, each a request: more than "
        "this hub's limit of 1,000 requests per run (cosim hub --max-requests)")
    servicer.prepare(hub_pb.RunRequest(config_yaml=yaml.safe_dump(
        sessions(count=250, turns={"dist": "fixed", "value": 4}))))  # 1,000: at the limit
    # Uniform 2..8 turns: 5 on average, so 201 sessions are 1,005 turns.
    assert "201 sessions of 5 turns on average are 1,005 turns" in refusal(
        servicer, sessions(count=201, turns={"dist": "uniform", "low": 2, "high": 8}))
    # A lognormal clipped at its max counts the max.
    assert "500 sessions of 3 turns on average are 1,500 turns" in refusal(
        servicer, sessions(count=500, turns={"dist": "lognormal", "mean": 20, "sigma": 1, "max": 3}))


def test_a_closed_loop_for_a_time_counts_its_users_first_sessions(servicer: HubServicer) -> None:
    message = refusal(servicer, sessions(users=300, duration_s=60, turns={"dist": "fixed", "value": 4}))
    assert message.startswith("workload.sessions.users: 300 sessions of 4 turns on average are 1,200 turns")


def test_a_session_file_counts_its_turns(tmp_path: Path) -> None:
    servicer = HubServicer(tmp_path / "runs", data_dir=tmp_path, policy=capped(10))
    config = sessions(trace={"path": session_file(tmp_path, [3, 3, 3, 3]), "format": "llmservingsim"})
    config["workload"]["input_tokens"] = config["workload"]["output_tokens"] = {"dist": "trace"}
    assert refusal(servicer, config).startswith(
        "workload.sessions.trace.path: the 4 sessions of sessions.jsonl have 12 turns, each a request")
    config["workload"]["sessions"]["count"] = 3  # 9 turns
    servicer.prepare(hub_pb.RunRequest(config_yaml=yaml.safe_dump(config)))


def test_a_closed_loop_for_a_time_stops_at_the_limit(tmp_path: Path) -> None:
    """8 users for 10^5 simulated seconds would run millions of turns: the hub stops at its 201st request."""
    servicer = HubServicer(tmp_path / "runs", data_dir=tmp_path, policy=capped(200))
    config = sessions(users=8, duration_s=100_000, turns={"dist": "fixed", "value": 2})
    updates: list[hub_pb.RunUpdate] = []
    with HubServer(servicer) as hub, grpc.insecure_channel(hub.address) as channel:
        stub = hub_grpc.HubServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            for update in stub.Run(hub_pb.RunRequest(config_yaml=yaml.safe_dump(config)), timeout=120):
                updates.append(update)
        report = stub.GetReport(hub_pb.GetReportRequest(run_id=updates[0].run_id), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("workload.sessions.duration_s: the run went past this hub's limit of "
                                          "200 requests per run (cosim hub --max-requests")
    summary = json.loads(report.files["summary.json"])
    assert summary["requests"]["completed"] == 201 and "error" in summary


def test_a_run_stops_in_its_intervals_reruns_when_the_submitter_goes_away(tmp_path: Path) -> None:
    """Progress is reported by the run, not by its reruns at the edges of the step error: the cancel
    reaches them all the same."""
    servicer = HubServicer(tmp_path / "runs", data_dir=tmp_path, policy=SubmitPolicy(allow_python=True))
    config = scenario({"python": LINEAR}, requests=4000)
    config["backends"]["lin"]["options"]["step_error"] = 0.25
    config["backends"]["lin"]["cache"] = False  # every step reaches the backend: reruns of a few seconds
    config["workload"]["arrival"]["rate_per_s"] = 2000
    config["output"]["intervals"] = True
    with HubServer(servicer) as hub, grpc.insecure_channel(hub.address) as channel:
        call = hub_grpc.HubServiceStub(channel).Run(hub_pb.RunRequest(config_yaml=yaml.safe_dump(config)),
                                                    timeout=300)
        run_id = next(call).run_id
        for update in call:
            if update.completed_requests == 4000:  # the run is done: its reruns start
                break
        call.cancel()
        summary = tmp_path / "runs" / run_id / "summary.json"
        wait_until(summary.exists, 120, "the abandoned run's summary.json")
    written = json.loads(summary.read_text())
    assert written["requests"]["completed"] == 4000
    assert written["error"] == ("stopped: the call ended: the submitter disconnected (or cancelled), or the hub "
                                "stopped in the prediction intervals' reruns")
    assert "intervals" not in written
