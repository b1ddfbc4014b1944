"""Congestion-aware mode: store-and-forward links, FIFO queues, the Advance protocol."""

from __future__ import annotations

import pytest

from cosim.adapters.network import AnalyticalNetworkBackend
from cosim.adapters.sdk import FailedPrecondition, Session
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

SYNC = pb.SYNC_MODE_TIME_SYNCHRONIZED


def open_session(kind: int, npus: int, bw: float, lat: float, *, mode: int = SYNC, ep: int = 0) -> Session:
    spec = net_pb.NetworkSessionSpec(mode=mode, system=net_pb.SystemConfig(endpoint_delay_ns=ep))
    spec.dims.add(kind=kind, npus=npus, bandwidth_gbps=bw, latency_ns=lat)
    for i in range(npus):
        spec.endpoints.add(name=f"n{i}", npu_ids=[i])
    session: Session = Session("s", spec)
    session.state = AnalyticalNetworkBackend().open_session(spec)
    return session


def send(session: Session, job: int, src: str, dst: str, size: int, now: int = 0) -> int:
    t = net_pb.PointToPoint(id=job, src=src, dst=dst, size_bytes=size, now_ns=now)
    return AnalyticalNetworkBackend().transfer(session, [t])[0].duration_ns


def test_uncontended_ring_all_reduce_matches_the_unaware_model() -> None:
    """Ring with the ring algorithm: one hop, no contention, same as unaware."""
    session = open_session(net_pb.TOPOLOGY_KIND_RING, 8, 50 * 2**30 / 1e9, 500, ep=1)
    op = net_pb.CollectiveOp(id=1, kind=net_pb.COLLECTIVE_KIND_ALL_REDUCE, size_bytes=1 << 20)
    assert AnalyticalNetworkBackend().collective(session, [op])[0].duration_ns == 41189


def test_switch_counts_serialization_per_hop() -> None:
    assert send(open_session(net_pb.TOPOLOGY_KIND_SWITCH, 4, 100.0, 1000, mode=pb.SYNC_MODE_PREDICT),
                1, "n0", "n1", 1_000_000) == 12000
    assert send(open_session(net_pb.TOPOLOGY_KIND_SWITCH, 4, 100.0, 1000), 1, "n0", "n1", 1_000_000) == 22000


def test_shared_down_link_queues_fifo_and_advance_reports_completions() -> None:
    session = open_session(net_pb.TOPOLOGY_KIND_SWITCH, 4, 100.0, 1000)
    backend = AnalyticalNetworkBackend()
    assert send(session, 1, "n0", "n1", 1_000_000) == 22000
    # Up-link of n2 delivers at 16000, but n1's down-link is busy until 21000.
    assert send(session, 2, "n2", "n1", 1_000_000, now=5000) == 32000 - 5000
    reply = backend.advance(session, 15000)
    assert list(reply.completions) == [] and reply.next_event_ns == 22000
    reply = backend.advance(session, 25000)
    assert [(c.id, c.completion_ns) for c in reply.completions] == [(1, 22000)]
    assert reply.next_event_ns == 32000
    reply = backend.advance(session, 40000)
    assert [(c.id, c.completion_ns) for c in reply.completions] == [(2, 32000)]
    assert reply.next_event_ns == -1


def test_time_must_not_go_back() -> None:
    session = open_session(net_pb.TOPOLOGY_KIND_SWITCH, 4, 100.0, 1000)
    AnalyticalNetworkBackend().advance(session, 1000)
    with pytest.raises(FailedPrecondition, match="until_ns=500"):
        AnalyticalNetworkBackend().advance(session, 500)
    with pytest.raises(FailedPrecondition, match="now_ns=10"):
        send(session, 1, "n0", "n1", 100, now=10)


def test_advance_in_predict_mode_is_a_failed_precondition() -> None:
    session = open_session(net_pb.TOPOLOGY_KIND_RING, 4, 100.0, 1000, mode=pb.SYNC_MODE_PREDICT)
    with pytest.raises(FailedPrecondition):
        AnalyticalNetworkBackend().advance(session, 0)


def test_layers_pipeline_over_store_and_forward_hops() -> None:
    """Layer by layer, a 2-hop switch path serializes the whole once plus one layer."""
    whole = send(open_session(net_pb.TOPOLOGY_KIND_SWITCH, 2, 100.0, 0), 1, "n0", "n1", 1_000_000)
    session = open_session(net_pb.TOPOLOGY_KIND_SWITCH, 2, 100.0, 0)
    t = net_pb.PointToPoint(id=1, src="n0", dst="n1", size_bytes=1_000_000, layers=10)
    layered = AnalyticalNetworkBackend().transfer(session, [t])[0].duration_ns
    assert (whole, layered) == (20000, 11000)
