"""The genz backend passes the SDK conformance suite over a real gRPC channel."""

from __future__ import annotations

import grpc
import pytest

pytest.importorskip("GenZ")

from cosim.adapters.genz import GenzBackend  # noqa: E402
from cosim.adapters.sdk import BackendServer  # noqa: E402
from cosim.adapters.sdk.testing import run_conformance, sample_session_spec  # noqa: E402
from cosim.v1 import runtime_service_pb2 as rt_pb  # noqa: E402
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc  # noqa: E402


def test_conformance() -> None:
    assert run_conformance(GenzBackend()) == ["describe", "health", "reflection", "predict_steps",
                                              "predict_steps_stream", "errors", "close_session"]


def test_bad_option_is_invalid_argument_naming_it() -> None:
    spec = sample_session_spec()
    spec.options.update({"memory_efficiency": 0})
    with BackendServer(GenzBackend()) as server, grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            rt_grpc.RuntimeBackendServiceStub(channel).OpenSession(rt_pb.OpenSessionRequest(spec=spec), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.options.memory_efficiency" in err.value.details()
