"""The regression backend over a real gRPC channel: the four RPCs and INVALID_ARGUMENT cases."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cosim.adapters.regression import RegressionBackend
from cosim.adapters.sdk import BackendServer
from cosim.hub.backends import RuntimeClient
from cosim.hub.errors import BackendError
from cosim.v1 import types_pb2 as pb

LLAMA2_70B = pb.ModelSpec(name="meta-llama/Llama-2-70b-hf", num_layers=80, hidden_size=8192, num_attention_heads=64,
                          num_kv_heads=8, intermediate_size=28672, vocab_size=32000, bytes_per_param=2,
                          bytes_per_kv_element=2, gated_mlp=True)


def make_spec(device: str = "H100-SXM", tp: int = 2) -> pb.SessionSpec:
    return pb.SessionSpec(client="c0", model=LLAMA2_70B, hardware=pb.HardwareSpec(device=device, count=8),
                          parallelism=pb.Parallelism(tensor=tp))


@pytest.fixture(scope="module")
def client() -> Iterator[RuntimeClient]:
    server = BackendServer(RegressionBackend(), port=0).start()
    client = RuntimeClient("regression", server.address, deadline_s=10.0, reconnect_s=0)
    yield client
    client.close()
    server.stop(0)


def test_describe(client: RuntimeClient) -> None:
    info = client.describe()
    assert info.name == "regression" and info.kind == pb.BACKEND_KIND_RUNTIME
    assert info.fidelity == pb.FIDELITY_EMPIRICAL


def test_open_predict_close(client: RuntimeClient) -> None:
    session_id = client.open_session(make_spec()).session_id
    batches = [pb.StepBatch(new_tokens=[512], context_tokens=[0]),
               pb.StepBatch(new_tokens=[1, 1, 1], context_tokens=[512, 700, 900]),
               pb.StepBatch(new_tokens=[1], context_tokens=[50000])]
    timings = client.predict_steps(session_id, batches)
    assert len(timings) == 3 and all(t.duration_ns > 0 for t in timings)
    assert timings[0].duration_ns > timings[1].duration_ns
    assert [t.out_of_range for t in timings] == [False, False, True]
    assert "mlp_up_proj" in timings[0].breakdown
    client.close_session(session_id)
    with pytest.raises(BackendError, match="NOT_FOUND"):
        client.predict_steps(session_id, batches[:1])


@pytest.mark.parametrize("spec,message", [
    (make_spec(device="TPU-v5e"), r"INVALID_ARGUMENT: spec.hardware.device='TPU-v5e' .*known devices"),
    (make_spec(tp=3), r"INVALID_ARGUMENT: spec.parallelism.tensor=3 does not divide num_attention_heads=64"),
])
def test_bad_specs_are_invalid_argument(client: RuntimeClient, spec: pb.SessionSpec, message: str) -> None:
    with pytest.raises(BackendError, match=message):
        client.open_session(spec)


def test_mismatched_batch_arrays_are_invalid_argument(client: RuntimeClient) -> None:
    session_id = client.open_session(make_spec()).session_id
    with pytest.raises(BackendError, match=r"INVALID_ARGUMENT: batches\[0\].context_tokens"):
        client.predict_steps(session_id, [pb.StepBatch(new_tokens=[1, 1], context_tokens=[5])])
    client.close_session(session_id)
