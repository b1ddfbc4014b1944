"""The genz backend's errors over a real gRPC channel (test_builtin_conformance.py runs the SDK suite on it)."""

from __future__ import annotations

import grpc
import pytest

pytest.importorskip("GenZ")

from cosim.adapters.genz import GenzBackend
from cosim.adapters.sdk import BackendServer
from cosim.adapters.sdk.testing import sample_session_spec
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc


def test_bad_option_is_invalid_argument_naming_it() -> None:
    spec = sample_session_spec()
    spec.options.update({"memory_efficiency": 0})
    with (BackendServer(GenzBackend()) as server, grpc.insecure_channel(server.address) as channel,
          pytest.raises(grpc.RpcError) as err):
        rt_grpc.RuntimeBackendServiceStub(channel).OpenSession(rt_pb.OpenSessionRequest(spec=spec), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.options.memory_efficiency" in err.value.details()
