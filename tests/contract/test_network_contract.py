"""The network backend over a real gRPC channel, in both modes."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from cosim.adapters.network import AnalyticalNetworkBackend
from cosim.adapters.sdk import BackendServer
from cosim.hub.backends import NetworkClient
from cosim.hub.errors import BackendError
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

MODES = [pb.SYNC_MODE_PREDICT, pb.SYNC_MODE_TIME_SYNCHRONIZED]


@pytest.fixture(scope="module")
def client() -> Iterator[NetworkClient]:
    server = BackendServer(AnalyticalNetworkBackend()).start()
    client = NetworkClient("network", server.address, reconnect_s=0)
    yield client
    client.close()
    server.stop(0)


def make_spec(mode: int) -> net_pb.NetworkSessionSpec:
    """Two 4-NPU nodes (switch 4 x switch 2); prefill clients p0, p1 and decode d on other NPUs."""
    spec = net_pb.NetworkSessionSpec(client="test", mode=mode,
                                     system=net_pb.SystemConfig(endpoint_delay_ns=10, local_mem_bandwidth_gbps=1000))
    spec.dims.add(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=4, bandwidth_gbps=100.0, latency_ns=500)
    spec.dims.add(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=2, bandwidth_gbps=25.0, latency_ns=2000)
    spec.endpoints.add(name="p0", npu_ids=[0, 1])
    spec.endpoints.add(name="p1", npu_ids=[2, 3])
    spec.endpoints.add(name="d", npu_ids=[4, 5])
    return spec


@pytest.mark.parametrize("mode", MODES)
def test_describe_and_collective(client: NetworkClient, mode: int) -> None:
    assert client.describe().name == "network"
    session = client.open_session(make_spec(mode)).session_id
    op = net_pb.CollectiveOp(id=7, kind=net_pb.COLLECTIVE_KIND_ALL_REDUCE, size_bytes=1_000_000, endpoint="p0")
    (result,) = client.collective(session, [op], stateful=mode != pb.SYNC_MODE_PREDICT)
    # 2 NPUs on a switch, msg 500000 B: unaware 2 x (floor(2x500 + 5000) + 10) + 3 x 500 + 10;
    # store-and-forward counts the 5000 ns serialization on both hops.
    wire = 6000 if mode == pb.SYNC_MODE_PREDICT else 11000
    assert (result.id, result.duration_ns) == (7, 2 * (wire + 10) + 1500 + 10)
    client.close_session(session)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mutate, field", [
    (lambda s: setattr(s.dims[0], "bandwidth_gbps", -1.0), "spec.dims[0].bandwidth_gbps"),
    (lambda s: setattr(s.dims[1], "kind", 9), "spec.dims[1].kind"),
    (lambda s: s.endpoints[2].npu_ids.append(8), "spec.endpoints[2].npu_ids"),
    (lambda s: s.endpoints[0].npu_ids.append(0), "spec.endpoints[0].npu_ids"),
    (lambda s: s.system.all_reduce.append(net_pb.COLLECTIVE_ALGORITHM_RING), "spec.system.all_reduce"),
])
def test_bad_spec_is_invalid_argument_naming_the_field(client: NetworkClient, mode: int, mutate: object,
                                                        field: str) -> None:
    spec = make_spec(mode)
    mutate(spec)  # type: ignore[operator]
    with pytest.raises(BackendError, match="INVALID_ARGUMENT: " + re.escape(field)):
        client.open_session(spec)


@pytest.mark.parametrize("mode", MODES)
def test_unknown_endpoint_is_invalid_argument(client: NetworkClient, mode: int) -> None:
    session = client.open_session(make_spec(mode)).session_id
    stateful = mode != pb.SYNC_MODE_PREDICT
    with pytest.raises(BackendError, match=r"INVALID_ARGUMENT: transfers\[0\].dst='nowhere'"):
        client.transfer(session, [net_pb.PointToPoint(id=1, src="p0", dst="nowhere", size_bytes=10)],
                        stateful=stateful)
    with pytest.raises(BackendError, match=r"INVALID_ARGUMENT: collectives\[0\].endpoint='nowhere'"):
        client.collective(session, [net_pb.CollectiveOp(id=1, kind=net_pb.COLLECTIVE_KIND_ALL_GATHER,
                                                        size_bytes=10, endpoint="nowhere")], stateful=stateful)


def test_advance_in_predict_mode_is_failed_precondition(client: NetworkClient) -> None:
    session = client.open_session(make_spec(pb.SYNC_MODE_PREDICT)).session_id
    with pytest.raises(BackendError, match="FAILED_PRECONDITION"):
        client.advance(session, 0)


def kv(job: int, src: str, now_ns: int = 0) -> net_pb.PointToPoint:
    return net_pb.PointToPoint(id=job, src=src, dst="d", size_bytes=64 << 20, layers=32, now_ns=now_ns)


def test_concurrent_kv_transfers_congest_only_in_congestion_aware_mode(client: NetworkClient) -> None:
    """Two prefill clients send their KV caches to one decode client at once."""
    for mode in MODES:
        stateful = mode != pb.SYNC_MODE_PREDICT
        alone = []
        for job, src in ((1, "p0"), (2, "p1")):
            session = client.open_session(make_spec(mode)).session_id
            alone.append(client.transfer(session, [kv(job, src)], stateful=stateful)[0].duration_ns)
        shared = client.open_session(make_spec(mode)).session_id
        both = [r.duration_ns for r in client.transfer(shared, [kv(1, "p0"), kv(2, "p1")], stateful=stateful)]
        if mode == pb.SYNC_MODE_PREDICT:
            assert both == alone  # no state, no contention
        else:
            assert both[0] >= alone[0] and both[1] > alone[1]
            assert max(both) > 1.8 * max(alone)  # the decode NPUs' inter-node links are shared


def test_time_synchronized_protocol_over_grpc(client: NetworkClient) -> None:
    session = client.open_session(make_spec(pb.SYNC_MODE_TIME_SYNCHRONIZED)).session_id
    (first,) = client.transfer(session, [kv(1, "p0")], stateful=True)
    (second,) = client.transfer(session, [kv(2, "p1", now_ns=1000)], stateful=True)
    reply = client.advance(session, 1500)
    assert list(reply.completions) == [] and reply.next_event_ns == first.duration_ns
    reply = client.advance(session, 10**12)
    assert [(c.id, c.completion_ns) for c in reply.completions] == [
        (1, first.duration_ns), (2, 1000 + second.duration_ns)]
    assert reply.next_event_ns == -1
    with pytest.raises(BackendError, match="FAILED_PRECONDITION"):
        client.advance(session, 10)
