"""The memory-hierarchy backend over a real gRPC channel, in both modes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest

from cosim.adapters.memory import MemoryHierarchyBackend, levels_from_presets
from cosim.adapters.sdk import BackendServer
from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import memory_service_pb2_grpc as mem_grpc
from cosim.v1 import types_pb2 as pb

LOOKUP, STORE = mem_pb.ACCESS_OP_LOOKUP, mem_pb.ACCESS_OP_STORE
Stub = mem_grpc.MemoryBackendServiceStub


@pytest.fixture
def stub() -> Iterator[Stub]:
    with BackendServer(MemoryHierarchyBackend()) as server, grpc.insecure_channel(server.address) as channel:
        yield Stub(channel)


def make_spec(mode: int, **level_fields: object) -> mem_pb.MemorySessionSpec:
    level = mem_pb.MemoryLevel(name="ddr4", capacity_bytes=10**9, bandwidth_gbps=150.0, latency_ns=80,
                               hit_rate=1.0, **level_fields)  # type: ignore[arg-type]
    return mem_pb.MemorySessionSpec(client="c", levels=[level], mode=mode, kv_bytes_per_token=1000)


def open_session(stub: Stub, spec: mem_pb.MemorySessionSpec) -> str:
    return stub.OpenSession(mem_pb.OpenMemorySessionRequest(spec=spec)).session_id


def access(stub: Stub, session_id: str, *accesses: mem_pb.MemoryAccess) -> list[mem_pb.AccessResult]:
    return list(stub.Access(mem_pb.AccessRequest(session_id=session_id, accesses=accesses)).results)


def test_describe_names_a_memory_backend_with_both_modes(stub: Stub) -> None:
    info = stub.Describe(pb.DescribeRequest()).info
    assert (info.name, info.kind) == ("memory", pb.BACKEND_KIND_MEMORY)
    assert set(info.capabilities) >= {"predict", "time_synchronized"}


def test_predict_mode_answers_mists_formula(stub: Stub) -> None:
    levels = levels_from_presets(["ddr4", "nvme"], hit_rates=[0.5, 0.5])
    session_id = open_session(stub, mem_pb.MemorySessionSpec(levels=levels, mode=pb.SYNC_MODE_PREDICT,
                                                             kv_bytes_per_token=1000))
    (result,) = access(stub, session_id, mem_pb.MemoryAccess(id=3, op=LOOKUP, key="p", size_bytes=1_500_000))
    # 0.5 * (80 + 10_000) + 0.25 * (50_000 + 214_285.71...) = 5040 + 66_071.43 -> 71_112 (rounded up)
    assert (result.id, result.duration_ns, result.level, result.hit) == (3, 71_112, 0, True)
    assert result.recompute_tokens == 375  # 0.25 of 1500 tokens
    with pytest.raises(grpc.RpcError) as err:
        stub.Advance(pb.AdvanceRequest(session_id=session_id, until_ns=10))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_time_synchronized_mode_stores_looks_up_and_advances(stub: Stub) -> None:
    session_id = open_session(stub, make_spec(pb.SYNC_MODE_TIME_SYNCHRONIZED, shared_by=["a", "b"]))
    stored = access(stub, session_id, mem_pb.MemoryAccess(id=1, op=STORE, key="p", size_bytes=1_500_000, client="a"))
    assert (stored[0].level, stored[0].duration_ns) == (0, 80 + 10_000)
    reply = stub.Advance(pb.AdvanceRequest(session_id=session_id, until_ns=20_000))
    assert [(c.id, c.completion_ns) for c in reply.completions] == [(1, 10_080)]
    assert reply.next_event_ns == -1
    results = access(stub, session_id,
                     mem_pb.MemoryAccess(id=2, op=LOOKUP, key="p", size_bytes=1_500_000, client="a", now_ns=20_000),
                     mem_pb.MemoryAccess(id=3, op=LOOKUP, key="p", size_bytes=1_500_000, client="b", now_ns=20_000),
                     mem_pb.MemoryAccess(id=4, op=LOOKUP, key="q", size_bytes=1_500_000, client="b", now_ns=20_000))
    assert [(r.level, r.hit, r.duration_ns, r.recompute_tokens) for r in results] == [
        (0, True, 80 + 20_000, 0), (0, True, 80 + 20_000, 0), (-1, False, 0, 1500)]
    reply = stub.Advance(pb.AdvanceRequest(session_id=session_id, until_ns=50_000))
    assert [(c.id, c.completion_ns) for c in reply.completions] == [(4, 20_000), (2, 40_080), (3, 40_080)]


def test_time_synchronized_errors_carry_their_status(stub: Stub) -> None:
    session_id = open_session(stub, make_spec(pb.SYNC_MODE_TIME_SYNCHRONIZED, shared_by=["a"]))
    with pytest.raises(grpc.RpcError) as err:
        access(stub, session_id, mem_pb.MemoryAccess(id=1, op=LOOKUP, key="p", size_bytes=10, client="z"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "accesses[0].client='z'" in err.value.details()
    stub.Advance(pb.AdvanceRequest(session_id=session_id, until_ns=100))
    with pytest.raises(grpc.RpcError) as err:
        stub.Advance(pb.AdvanceRequest(session_id=session_id, until_ns=99))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "until_ns=99" in err.value.details()


def _set(field: str, value: object) -> Callable[[mem_pb.MemorySessionSpec], None]:
    def mutate(spec: mem_pb.MemorySessionSpec) -> None:
        if field.startswith("levels[0]."):
            target = spec.levels[0]
            name = field.removeprefix("levels[0].")
            if name == "shared_by":
                target.shared_by.extend(value)  # type: ignore[arg-type]
            else:
                setattr(target, name, value)
        elif field == "levels":
            del spec.levels[:]
        else:
            setattr(spec, field, value)
    return mutate


@pytest.mark.parametrize(("mode", "field", "value"), [
    (pb.SYNC_MODE_PREDICT, "levels[0].capacity_bytes", 0),
    (pb.SYNC_MODE_PREDICT, "levels[0].latency_ns", -1),
    (pb.SYNC_MODE_PREDICT, "levels[0].hit_rate", 1.5),
    (pb.SYNC_MODE_PREDICT, "levels[0].bandwidth_gbps", -2.0),
    (pb.SYNC_MODE_TIME_SYNCHRONIZED, "levels[0].bandwidth_gbps", 0.0),
    (pb.SYNC_MODE_TIME_SYNCHRONIZED, "levels[0].shared_by", ["a", "a"]),
    (pb.SYNC_MODE_TIME_SYNCHRONIZED, "levels", None),
    (pb.SYNC_MODE_UNSPECIFIED, "mode", pb.SYNC_MODE_UNSPECIFIED),
])
def test_bad_specs_are_invalid_arguments_naming_the_field(stub: Stub, mode: int, field: str, value: object) -> None:
    spec = make_spec(mode)
    _set(field, value)(spec)
    with pytest.raises(grpc.RpcError) as err:
        open_session(stub, spec)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"spec.{field}" in err.value.details()


def test_bad_accesses_and_unknown_sessions_are_refused(stub: Stub) -> None:
    session_id = open_session(stub, make_spec(pb.SYNC_MODE_PREDICT))
    with pytest.raises(grpc.RpcError) as err:
        access(stub, session_id, mem_pb.MemoryAccess(id=1, op=LOOKUP, key="p", size_bytes=0))
    assert (err.value.code(), "accesses[0].size_bytes" in err.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT, True)
    with pytest.raises(grpc.RpcError) as err:
        access(stub, "memory-404", mem_pb.MemoryAccess(id=1, op=LOOKUP, key="p", size_bytes=1))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    stub.CloseSession(pb.CloseSessionRequest(session_id=session_id))
