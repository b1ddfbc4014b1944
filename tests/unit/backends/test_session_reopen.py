"""Sessions a restarted backend lost: re-opened where that gives the same answers, an error where not."""

from __future__ import annotations

import grpc
import pytest

from cosim.adapters.memory import MemoryHierarchyBackend
from cosim.adapters.sdk import BackendServer
from cosim.adapters.sdk.testing import SAMPLE_BATCHES, LinearBackend, sample_session_spec
from cosim.hub.backends import MemoryClient, RuntimeClient, free_port
from cosim.hub.backends.sessions import OpenSessions
from cosim.hub.errors import BackendError
from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import types_pb2 as pb


def memory_spec(mode: pb.SyncMode.ValueType) -> mem_pb.MemorySessionSpec:
    return mem_pb.MemorySessionSpec(
        levels=[mem_pb.MemoryLevel(name="ddr", capacity_bytes=10**9, bandwidth_gbps=10.0, hit_rate=0.5)],
        mode=mode, kv_bytes_per_token=1000)


LOOKUP = mem_pb.MemoryAccess(id=1, op=mem_pb.ACCESS_OP_LOOKUP, key="p", size_bytes=4096)


def test_a_runtime_session_is_reopened_after_a_restart_under_the_id_callers_hold() -> None:
    port = free_port()
    server = BackendServer(LinearBackend(), port=port).start()
    client = RuntimeClient("lab", f"127.0.0.1:{port}", reconnect_s=10)
    try:
        first = client.open_session(sample_session_spec()).session_id
        second = client.open_session(sample_session_spec()).session_id
        before = client.predict_steps(first, SAMPLE_BATCHES, client="c0")
        server.stop(0)
        server = BackendServer(LinearBackend(), port=port).start()  # the restart: no sessions
        assert client.predict_steps(first, SAMPLE_BATCHES, client="c0") == before
        assert client.predict_steps(second, SAMPLE_BATCHES, client="c1") == before
        assert client.num_reopened == 2
        reopened = {client.sessions.get(first).live_id, client.sessions.get(second).live_id}  # type: ignore[union-attr]
        assert len(reopened) == 2 and not reopened & {first, second}  # new ids, never the old ones
    finally:
        client.close()
        server.stop(0)


def test_a_predict_mode_memory_session_is_reopened_a_time_synchronized_one_is_reported_lost() -> None:
    port = free_port()
    server = BackendServer(MemoryHierarchyBackend(), port=port).start()
    client = MemoryClient("kv", f"127.0.0.1:{port}", reconnect_s=10)
    try:
        predict = client.open_session(memory_spec(pb.SYNC_MODE_PREDICT)).session_id
        synced = client.open_session(memory_spec(pb.SYNC_MODE_TIME_SYNCHRONIZED)).session_id
        fresh = client.open_session(memory_spec(pb.SYNC_MODE_TIME_SYNCHRONIZED)).session_id
        before = client.access(predict, [LOOKUP], stateful=False)
        client.access(synced, [LOOKUP], stateful=True)  # contents and in-flight work: state
        server.stop(0)
        server = BackendServer(MemoryHierarchyBackend(), port=port).start()
        assert client.access(predict, [LOOKUP], stateful=False) == before
        with pytest.raises(BackendError) as err:
            client.advance(synced, 1_000_000)
        assert err.value.code == grpc.StatusCode.NOT_FOUND
        assert f"lost session {synced!r}" in str(err.value) and "time-synchronized" in str(err.value)
        assert f"backend 'kv' at 127.0.0.1:{port}" in str(err.value)
        # A session that took no state-changing call yet is re-opened like any other.
        assert len(client.access(fresh, [LOOKUP], stateful=True)) == 1
    finally:
        client.close()
        server.stop(0)


def test_an_id_a_restarted_backend_hands_out_again_gets_a_caller_id_of_its_own() -> None:
    sessions = OpenSessions()
    assert sessions.add("lab-1", print, "spec-a") == "lab-1"
    sessions.lose_all()
    assert sessions.add("lab-1", print, "spec-b") == "lab-1~2"  # a backend whose ids restart from 1
    assert sessions.get("lab-1").open_request == "spec-a"  # type: ignore[union-attr]
    assert sessions.get("lab-1").live_id is None  # type: ignore[union-attr]
    assert sessions.get("lab-1~2").live_id == "lab-1"  # type: ignore[union-attr]
