"""Launchers (command, python, address) and the retries of backend clients.

The `image:` launcher needs a Docker engine: tests/integration/test_containers.py.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

import cosim
from cosim.adapters.sdk import BackendServer
from cosim.adapters.sdk.testing import LinearBackend
from cosim.hub.backends import RuntimeClient, attach_address, free_port, launch_command, launch_python, wait_healthy
from cosim.hub.errors import BackendError
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb

LINEAR = "cosim.adapters.sdk.testing:LinearBackend"
SERVE_LINEAR = ["{python}", "-m", "cosim.adapters.sdk", LINEAR, "--port", "{port}"]


def healthy(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def test_command_runs_a_subprocess_on_a_free_port() -> None:
    backend = launch_command("lin", SERVE_LINEAR)
    try:
        assert backend.how == "command" and backend.address.startswith("127.0.0.1:")
        assert healthy(backend.address)
        client = RuntimeClient("lin", backend.address)
        assert client.describe().name == "linear"
        client.close()
    finally:
        backend.stop()
    assert not healthy(backend.address)
    backend.stop()  # idempotent


def test_command_that_exits_reports_its_output() -> None:
    with pytest.raises(BackendError) as err:
        launch_command("broken", ["{python}", "-c", "import sys; print('no GPU model here'); sys.exit(3)"])
    assert "backend 'broken'" in str(err.value) and "no GPU model here" in str(err.value)


def test_command_that_cannot_start_names_the_command() -> None:
    with pytest.raises(BackendError, match="cannot start command /nonexistent/simulator"):
        launch_command("missing", ["/nonexistent/simulator", "--port", "{port}"])


def test_python_serves_the_class_in_process() -> None:
    backend = launch_python("lin", LINEAR)
    try:
        assert backend.how == "in-process" and healthy(backend.address)
    finally:
        backend.stop()
    with pytest.raises(BackendError, match="backend 'bad'"):
        launch_python("bad", "no.such.module:Backend")


def test_address_attaches_to_a_running_backend_or_names_it() -> None:
    with BackendServer(LinearBackend()) as server:
        backend = attach_address("lin", server.address)
        assert backend.how == "address" and backend.address == server.address
        backend.stop()  # not ours: stays up
        assert healthy(server.address)
    port = free_port()
    with pytest.raises(BackendError) as err:
        attach_address("lab", f"127.0.0.1:{port}", timeout_s=0.5)
    # one clean sentence naming the address, not gRPC's multi-line error with its debug string
    assert str(err.value) == (f"backend 'lab' at 127.0.0.1:{port}: nothing answered its gRPC health check within "
                              "0.5 s (UNAVAILABLE: Connection refused)")


def test_start_up_is_retried_until_the_backend_is_healthy() -> None:
    """wait_healthy keeps asking (tenacity) while a slow backend starts."""
    port = free_port()
    server = BackendServer(LinearBackend(), port=port)
    starter = threading.Timer(0.8, server.start)
    starter.start()
    began = time.monotonic()
    try:
        wait_healthy("slow", f"127.0.0.1:{port}", timeout_s=20)
        assert time.monotonic() - began >= 0.7
    finally:
        starter.join()
        server.stop()


class FlakyRuntime(rt_grpc.RuntimeBackendServiceServicer):
    """Answers Describe UNAVAILABLE ``failures`` times, then normally."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def Describe(self, request: pb.DescribeRequest, context: grpc.ServicerContext) -> pb.DescribeResponse:
        self.calls += 1
        if self.calls <= self.failures:
            context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
        return pb.DescribeResponse(info=pb.BackendInfo(name="flaky", kind=pb.BACKEND_KIND_RUNTIME))


def serve_flaky(failures: int) -> tuple[grpc.Server, FlakyRuntime, str]:
    servicer = FlakyRuntime(failures)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    rt_grpc.add_RuntimeBackendServiceServicer_to_server(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, servicer, f"127.0.0.1:{port}"


def test_transient_unavailable_is_retried() -> None:
    server, servicer, address = serve_flaky(failures=2)
    try:
        client = RuntimeClient("flaky", address, reconnect_s=5)
        assert client.describe().name == "flaky"
        assert servicer.calls == 3
        client.close()
    finally:
        server.stop(0)


def test_backend_that_stays_down_is_reported_by_client_backend_address_and_time_waited() -> None:
    server, servicer, address = serve_flaky(failures=1000)
    try:
        client = RuntimeClient("lab", address, reconnect_s=0.6)
        began = time.monotonic()
        with pytest.raises(BackendError) as err:
            client.call(client.stub.Describe, pb.DescribeRequest(), client="prefill-0")
        waited = time.monotonic() - began
        client.close()
    finally:
        server.stop(0)
    # The budget, not a count of quick tries: pauses of 50 ms doubling (a busy machine makes fewer calls,
    # never more; the wall time has no upper bound for the same reason).
    assert 2 <= servicer.calls <= 8
    text = str(err.value)
    assert "client 'prefill-0'" in text and "backend 'lab'" in text and address in text
    assert "UNAVAILABLE" in text and "retried for up to reconnect_s=0.6 s" in text
    said = float(re.search(r"([\d.]+) s waited in all", text).group(1))  # type: ignore[union-attr]
    assert 0.6 <= said <= round(waited, 1)  # the time really waited, to the message's one decimal


def scenario(address: str, requests: int) -> dict[str, Any]:
    return {
        "seed": 1,
        "models": {"m": {"preset": "meta-llama/Meta-Llama-3-8B"}},
        "hardware": {"h100": {"preset": "H100-SXM"}},
        "backends": {"lab": {"address": address, "cache": False, "deadline_s": 2, "reconnect_s": 0.5,
                             "options": {"step_ns": 2_000_000, "per_token_ns": 10_000}}},
        "clients": [{"name": "c0", "model": "m", "role": "mixed", "backend": "lab",
                     "hardware": {"device": "h100", "count": 1}}],
        "workload": {"requests": requests, "arrival": {"process": "poisson", "rate_per_s": 20},
                     "input_tokens": {"dist": "fixed", "value": 256},
                     "output_tokens": {"dist": "fixed", "value": 32}},
        "output": {"plots": False},
    }


def test_backend_dying_mid_run_fails_the_run_by_name_and_keeps_partial_results(tmp_path: Path) -> None:
    server = BackendServer(LinearBackend()).start()
    address = server.address

    def kill_after_first(completed: int, total: int, sim_ns: int) -> None:
        if completed >= 5:
            server.stop(0)

    with pytest.raises(BackendError) as err:
        cosim.run(scenario(address, 300), output_dir=tmp_path / "run", on_progress=kill_after_first)
    text = str(err.value)
    assert "client 'c0'" in text and "backend 'lab'" in text and address in text
    assert "retried for up to reconnect_s=0.5 s" in text  # it did not come back within the budget
    rows = (tmp_path / "run" / "requests.csv").read_text().splitlines()
    assert len(rows) == 301  # every request is listed, finished or not
    summary = (tmp_path / "run" / "summary.json").read_text()
    assert '"error"' in summary and address in summary


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


class UnaryOnly(rt_grpc.RuntimeBackendServiceServicer):
    """A backend from another toolkit: PredictSteps, no RuntimeStreamService (UNIMPLEMENTED)."""

    def __init__(self) -> None:
        self.calls = 0

    def PredictSteps(self, request: rt_pb.PredictStepsRequest,
                     context: grpc.ServicerContext) -> rt_pb.PredictStepsResponse:
        self.calls += 1
        timings = [pb.StepTiming(duration_ns=sum(b.new_tokens)) for b in request.batches]
        return rt_pb.PredictStepsResponse(timings=timings)


class StreamOnce(rt_grpc.RuntimeStreamServiceServicer):
    """Its first stream fails UNAVAILABLE mid-way; later streams answer."""

    def __init__(self) -> None:
        self.streams = 0

    def PredictStepsStream(self, requests: Any, context: grpc.ServicerContext) -> Any:
        self.streams += 1
        for request in requests:
            if self.streams == 1:
                context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
            yield rt_pb.PredictStepsResponse(timings=[pb.StepTiming(duration_ns=7) for _ in request.batches])


class Hung(rt_grpc.RuntimeStreamServiceServicer):
    def PredictStepsStream(self, requests: Any, context: grpc.ServicerContext) -> Any:
        for _ in requests:
            time.sleep(2.0)
            yield rt_pb.PredictStepsResponse()


@contextlib.contextmanager
def serving(servicer: Any, **client_options: Any) -> Iterator[RuntimeClient]:
    """A client of ``servicer`` served on a loopback port (its runtime and/or stream service)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    if isinstance(servicer, rt_grpc.RuntimeBackendServiceServicer):
        rt_grpc.add_RuntimeBackendServiceServicer_to_server(servicer, server)
    if isinstance(servicer, rt_grpc.RuntimeStreamServiceServicer):
        rt_grpc.add_RuntimeStreamServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = RuntimeClient("lab", f"127.0.0.1:{port}", **client_options)
    try:
        yield client
    finally:
        client.close()
        server.stop(0)


BATCH = pb.StepBatch(new_tokens=[3, 1], context_tokens=[0, 5])


def test_a_backend_without_the_stream_is_asked_one_call_at_a_time() -> None:
    servicer = UnaryOnly()
    with serving(servicer) as client:
        for _ in range(3):
            assert [t.duration_ns for t in client.predict_steps("s", [BATCH, BATCH])] == [4, 4]
    assert servicer.calls == 3


def test_a_failed_stream_is_reopened_and_the_request_retried() -> None:
    servicer = StreamOnce()
    with serving(servicer) as client:
        assert [t.duration_ns for t in client.predict_steps("s", [BATCH])] == [7]
        assert [t.duration_ns for t in client.predict_steps("s", [BATCH, BATCH])] == [7, 7]
    assert servicer.streams == 2


def test_a_hung_stream_times_out_at_the_deadline_and_is_reported() -> None:
    with serving(Hung(), deadline_s=0.3) as client:
        address = client.address
        began = time.monotonic()
        with pytest.raises(BackendError) as err:
            client.predict_steps("s", [BATCH], client="c0")
    # One deadline and one retry, each wait ended by the watchdog ("retried once"; no upper bound on the
    # wall time, which a busy machine stretches).
    assert time.monotonic() - began >= 0.6
    text = str(err.value)
    assert "DEADLINE_EXCEEDED: no answer within deadline_s=0.3 s, retried once" in text
    assert "client 'c0'" in text and address in text
