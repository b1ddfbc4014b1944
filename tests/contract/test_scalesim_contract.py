"""The scalesim backend passes the SDK conformance suite over a real gRPC channel (tiny array)."""

from __future__ import annotations

import grpc
import pytest

pytest.importorskip("scalesim")

from cosim.adapters.scalesim import ScaleSimBackend  # noqa: E402
from cosim.adapters.sdk import BackendServer  # noqa: E402
from cosim.adapters.sdk.testing import run_conformance, sample_session_spec  # noqa: E402
from cosim.v1 import runtime_service_pb2 as rt_pb  # noqa: E402
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc  # noqa: E402

TINY_OPTIONS = {"rows": 8, "cols": 8, "num_arrays": 1, "max_folds": 2, "max_stream": 16,
                "ifmap_sram_kb": 64, "filter_sram_kb": 64, "ofmap_sram_kb": 32}


def test_conformance() -> None:
    spec = sample_session_spec()
    spec.options.update(TINY_OPTIONS)
    assert run_conformance(ScaleSimBackend(), spec)[-1] == "close_session"


def test_bad_dataflow_is_invalid_argument_naming_it() -> None:
    spec = sample_session_spec()
    spec.options.update({"dataflow": "diagonal"})
    with BackendServer(ScaleSimBackend()) as server, grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            rt_grpc.RuntimeBackendServiceStub(channel).OpenSession(rt_pb.OpenSessionRequest(spec=spec), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.options.dataflow" in err.value.details()
