"""The roofline backend over a real gRPC channel: the whole session lifecycle and its errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cosim.adapters.roofline import RooflineBackend
from cosim.adapters.sdk import BackendServer
from cosim.hub.backends import RuntimeClient
from cosim.hub.errors import BackendError
from cosim.v1 import types_pb2 as pb
from tests.unit.adapters.roofline.roofline_helpers import make_spec


@pytest.fixture(scope="module")
def client() -> Iterator[RuntimeClient]:
    server = BackendServer(RooflineBackend(), port=0).start()
    client = RuntimeClient("roofline", server.address, reconnect_s=0)
    yield client
    client.close()
    server.stop(0)


def test_describe_names_the_backend(client: RuntimeClient) -> None:
    info = client.describe()
    assert info.name == "roofline" and info.fidelity == pb.FIDELITY_ANALYTICAL
    assert "mixed_batches" in info.capabilities


def test_session_lifecycle_with_several_batches(client: RuntimeClient) -> None:
    session_id = client.open_session(make_spec(tp=4)).session_id
    batches = [pb.StepBatch(new_tokens=[2048], context_tokens=[0]),
               pb.StepBatch(new_tokens=[1] * 8, context_tokens=[900] * 8),
               pb.StepBatch(new_tokens=[512, 1, 1], context_tokens=[1024, 300, 4000])]
    timings = client.predict_steps(session_id, batches)
    assert len(timings) == 3
    assert all(t.duration_ns > 0 and t.breakdown for t in timings)
    assert timings[0].duration_ns > timings[1].duration_ns
    assert timings[0].communication_ns > 0
    client.close_session(session_id)
    with pytest.raises(BackendError, match="NOT_FOUND"):
        client.predict_steps(session_id, batches[:1])


def test_omit_breakdown_leaves_the_timings_and_the_backends_cache_as_they_were(client: RuntimeClient) -> None:
    session_id = client.open_session(make_spec(tp=4)).session_id
    batch = [pb.StepBatch(new_tokens=[1] * 8, context_tokens=[900] * 8)]
    slim = client.predict_steps(session_id, batch, omit_breakdown=True)[0]
    full = client.predict_steps(session_id, batch)[0]  # the same batch, now from the backend's cache
    assert not slim.breakdown and full.breakdown and sum(full.breakdown.values()) > 0
    assert (slim.duration_ns, slim.communication_ns, slim.energy_j) == \
        (full.duration_ns, full.communication_ns, full.energy_j)


def test_unknown_device_is_invalid_argument(client: RuntimeClient) -> None:
    spec = make_spec(hardware=dict(device="mystery-npu", peak_tflops=0, mem_bandwidth_gbps=1000))
    with pytest.raises(BackendError, match=r"INVALID_ARGUMENT: spec\.hardware\.peak_tflops=0\.0 .*mystery-npu"):
        client.open_session(spec)


def test_tp_not_dividing_heads_is_invalid_argument(client: RuntimeClient) -> None:
    with pytest.raises(BackendError, match=r"INVALID_ARGUMENT: spec\.parallelism\.tensor=3"):
        client.open_session(make_spec(tp=3))


def test_batch_arrays_of_different_lengths_are_invalid_argument(client: RuntimeClient) -> None:
    session_id = client.open_session(make_spec()).session_id
    bad = pb.StepBatch(new_tokens=[1, 1], context_tokens=[10])
    with pytest.raises(BackendError, match=r"INVALID_ARGUMENT: batches\[0\]\.context_tokens"):
        client.predict_steps(session_id, [bad])
    client.close_session(session_id)


def test_bad_option_is_invalid_argument(client: RuntimeClient) -> None:
    with pytest.raises(BackendError, match=r"INVALID_ARGUMENT: spec\.options\.mfu_prefill=2\.0"):
        client.open_session(make_spec(options={"mfu_prefill": 2.0}))
