"""The SDK serves a one-method backend over a real gRPC channel, validating input."""

from __future__ import annotations

import inspect
import signal
import subprocess
import sys
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cosim.adapters.sdk import BackendServer, RuntimeBackend, Session
from cosim.adapters.sdk.testing import SAMPLE_BATCHES, check_runtime_backend, sample_session_spec
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb
from tests.paths import REPO


class TokenCountBackend(RuntimeBackend):
    """10 ns per new token plus 1 ns per context token: easy to check by hand."""

    name = "token-count"
    version = "1.0.0"

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        return pb.StepTiming(duration_ns=10 * sum(batch.new_tokens) + sum(batch.context_tokens))


@pytest.fixture
def stub() -> Iterator[rt_grpc.RuntimeBackendServiceStub]:
    with BackendServer(TokenCountBackend()) as server, grpc.insecure_channel(server.address) as channel:
        yield rt_grpc.RuntimeBackendServiceStub(channel)


def test_conformance_suite_passes_for_a_one_method_backend() -> None:
    with BackendServer(TokenCountBackend()) as server:
        assert check_runtime_backend(server.address) == [
            "describe", "health", "reflection", "predict_steps", "predict_steps_stream", "errors", "close_session"]


def test_predict_steps_answers_each_batch_in_order(stub: rt_grpc.RuntimeBackendServiceStub) -> None:
    session_id = stub.OpenSession(rt_pb.OpenSessionRequest(spec=sample_session_spec())).session_id
    timings = stub.PredictSteps(rt_pb.PredictStepsRequest(session_id=session_id, batches=SAMPLE_BATCHES)).timings
    assert [t.duration_ns for t in timings] == [5120, 30 + 3000, 2570 + 320]


def test_the_stream_answers_each_request_in_order_and_ends_with_the_first_error() -> None:
    with BackendServer(TokenCountBackend()) as server, grpc.insecure_channel(server.address) as channel:
        stub, streams = rt_grpc.RuntimeBackendServiceStub(channel), rt_grpc.RuntimeStreamServiceStub(channel)
        session_id = stub.OpenSession(rt_pb.OpenSessionRequest(spec=sample_session_spec())).session_id
        requests = [rt_pb.PredictStepsRequest(session_id=session_id, batches=SAMPLE_BATCHES[i:]) for i in range(3)]
        replies = streams.PredictStepsStream(iter(requests))
        assert [[t.duration_ns for t in reply.timings] for reply in replies] == [
            [5120, 3030, 2890], [3030, 2890], [2890]]

        bad = rt_pb.PredictStepsRequest(session_id=session_id,
                                        batches=[pb.StepBatch(new_tokens=[1], context_tokens=[])])
        replies = streams.PredictStepsStream(iter([requests[2], bad, requests[2]]))
        assert next(replies).timings[0].duration_ns == 2890
        with pytest.raises(grpc.RpcError) as err:
            next(replies)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("batches[0].context_tokens")


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda s: (setattr(s.parallelism, "tensor", 3), setattr(s.hardware, "count", 4)), "spec.parallelism.tensor"),
    (lambda s: setattr(s.model, "num_layers", 0), "spec.model.num_layers"),
    (lambda s: setattr(s.hardware, "device", ""), "spec.hardware.device"),
    (lambda s: setattr(s.model, "num_kv_heads", 5), "spec.model.num_kv_heads"),
    (lambda s: setattr(s.parallelism, "tensor", 2), "spec.hardware.count"),
])
def test_invalid_specs_are_rejected_naming_the_field(stub: rt_grpc.RuntimeBackendServiceStub, mutate, field) -> None:
    spec = sample_session_spec()
    mutate(spec)
    with pytest.raises(grpc.RpcError) as err:
        stub.OpenSession(rt_pb.OpenSessionRequest(spec=spec))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field)


def test_unknown_device_is_rejected_when_the_backend_lists_devices() -> None:
    class H100Only(TokenCountBackend):
        known_devices = frozenset({"H100-SXM"})

    spec = sample_session_spec()
    spec.hardware.device = "TPU-v9"
    with BackendServer(H100Only()) as server, grpc.insecure_channel(server.address) as channel, \
            pytest.raises(grpc.RpcError) as err:
        rt_grpc.RuntimeBackendServiceStub(channel).OpenSession(rt_pb.OpenSessionRequest(spec=spec))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.hardware.device='TPU-v9'" in err.value.details()


def test_batches_with_uneven_arrays_or_zero_tokens_are_rejected(stub: rt_grpc.RuntimeBackendServiceStub) -> None:
    session_id = stub.OpenSession(rt_pb.OpenSessionRequest(spec=sample_session_spec())).session_id
    for batch, field in [(pb.StepBatch(new_tokens=[1, 1], context_tokens=[3]), "batches[1].context_tokens"),
                         (pb.StepBatch(new_tokens=[4, 0], context_tokens=[3, 3]), "batches[1].new_tokens[1]"),
                         (pb.StepBatch(), "batches[1].new_tokens")]:
        request = rt_pb.PredictStepsRequest(session_id=session_id, batches=[SAMPLE_BATCHES[0], batch])
        with pytest.raises(grpc.RpcError) as err:
            stub.PredictSteps(request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith(field)


def test_negative_duration_from_a_backend_is_an_internal_error() -> None:
    class Broken(TokenCountBackend):
        def predict(self, session, batch):  # type: ignore[no-untyped-def]
            return pb.StepTiming(duration_ns=-5)

    with BackendServer(Broken()) as server, grpc.insecure_channel(server.address) as channel:
        stub = rt_grpc.RuntimeBackendServiceStub(channel)
        session_id = stub.OpenSession(rt_pb.OpenSessionRequest(spec=sample_session_spec())).session_id
        with pytest.raises(grpc.RpcError) as err:
            stub.PredictSteps(rt_pb.PredictStepsRequest(session_id=session_id, batches=SAMPLE_BATCHES[:1]))
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "duration_ns=-5" in err.value.details()


@pytest.mark.parametrize(("error", "code"), [
    (ZeroDivisionError("division by zero"), grpc.StatusCode.INTERNAL),  # a bug in the backend
    (TypeError("unsupported operand"), grpc.StatusCode.INTERNAL),  # a bug too: the hub sends typed protos
    (ValueError("batch too long for my tables"), grpc.StatusCode.INVALID_ARGUMENT),  # a lab's rejection
])
def test_exceptions_in_predict_map_to_a_fault_or_a_rejection_naming_the_line(error: Exception, code) -> None:
    class Raising(TokenCountBackend):
        def predict(self, session, batch):  # type: ignore[no-untyped-def]
            raise error

    line = inspect.getsourcelines(Raising.predict)[1] + 1
    with BackendServer(Raising()) as server, grpc.insecure_channel(server.address) as channel:
        stub = rt_grpc.RuntimeBackendServiceStub(channel)
        session_id = stub.OpenSession(rt_pb.OpenSessionRequest(spec=sample_session_spec())).session_id
        with pytest.raises(grpc.RpcError) as err:
            stub.PredictSteps(rt_pb.PredictStepsRequest(session_id=session_id, batches=SAMPLE_BATCHES[:1]))
    assert err.value.code() == code
    assert f"{type(error).__name__}: {error} at " in err.value.details()
    assert f"test_sdk.py:{line} in predict" in err.value.details()


def test_served_process_logs_its_address_and_stops_gracefully_on_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "cosim.adapters.sdk", "tests.contract.test_sdk:TokenCountBackend"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=str(REPO))
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert "listening on 127.0.0.1:" in line
        address = line.rsplit(" ", 1)[-1].strip()
        with grpc.insecure_channel(address) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()


def test_a_backend_missing_its_method_fails_when_built_naming_it() -> None:
    class Forgetful(RuntimeBackend):
        name = "forgetful"

    with pytest.raises(TypeError, match="predict"):
        Forgetful()
