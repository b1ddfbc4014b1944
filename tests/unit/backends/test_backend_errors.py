"""Errors blamed on the right party: a backend's bug, a backend's rejection, a bad Advance reply."""

from __future__ import annotations

import fractions
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from cosim.adapters.sdk import BackendServer, InvalidArgument, MemoryBackend, RuntimeBackend, Session
from cosim.adapters.sdk.testing import SAMPLE_BATCHES, sample_session_spec
from cosim.hub.backends import MemoryClient, RuntimeClient
from cosim.hub.errors import BackendError, ScenarioError, open_or_blame
from cosim.hub.sim.kernel import Kernel
from cosim.hub.sim.timesync import TimeSync
from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import types_pb2 as pb


class DividingBackend(RuntimeBackend):
    """Divides by a difference that is always zero for a valid batch: a bug in it, not bad input."""

    name = "dividing"

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        divisor = len(batch.new_tokens) - len(batch.context_tokens)
        return pb.StepTiming(duration_ns=sum(batch.new_tokens) // divisor)  # the faulty line


class PickyBackend(DividingBackend):
    """Refuses sessions on purpose: InvalidArgument for one device, ValueError for another."""

    def open_session(self, spec: pb.SessionSpec) -> None:
        if spec.hardware.device == "TPU-v9":
            raise InvalidArgument("spec.hardware.device", spec.hardware.device, "is not a GPU")
        if spec.hardware.device == "NPU-x":
            raise ValueError("NPU-x is not supported")


def line_of(function: Callable[..., Any], marker: str) -> int:
    """The line of ``function``'s source holding ``marker``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if marker in line)


@pytest.fixture
def served() -> Iterator[Callable[[RuntimeBackend], RuntimeClient]]:
    """Serves backends over gRPC; yields a function returning a hub client named ``lab`` for one."""
    servers: list[BackendServer] = []
    clients: list[RuntimeClient] = []

    def serve(backend: RuntimeBackend) -> RuntimeClient:
        servers.append(BackendServer(backend).start())
        clients.append(RuntimeClient("lab", servers[-1].address, deadline_s=10, reconnect_s=0))
        return clients[-1]

    yield serve
    for client in clients:
        client.close()
    for server in servers:
        server.stop()


def open_and_predict(client: RuntimeClient, spec: pb.SessionSpec | None = None) -> list[pb.StepTiming]:
    session_id = client.open_session(spec or sample_session_spec()).session_id
    return client.predict_steps(session_id, SAMPLE_BATCHES[:1], sim_time_ns=1_500_000_000, client="c0")


def test_an_exception_in_predict_is_an_internal_fault_naming_backend_address_and_line(served) -> None:
    client = served(DividingBackend())
    with pytest.raises(BackendError) as info:
        open_and_predict(client)
    err = info.value
    assert err.code == grpc.StatusCode.INTERNAL and err.is_fault and not err.is_rejection
    assert (err.backend, err.address, err.client, err.sim_time_ns) == ("lab", client.address, "c0", 1_500_000_000)
    line = line_of(DividingBackend.predict, "the faulty line")
    assert "ZeroDivisionError: integer division or modulo by zero" in err.message
    assert f"test_backend_errors.py:{line} in predict" in err.message
    text = str(err)
    assert f"backend 'lab' at {client.address}" in text
    assert "this is a fault in the backend, not in the scenario" in text
    assert "rejected" not in text


def test_the_unary_call_reports_the_same_fault(served) -> None:
    client = served(DividingBackend())
    client._streaming = False  # PredictSteps, one RPC per call
    with pytest.raises(BackendError, match=r"INTERNAL: backend 'dividing' failed in PredictSteps: "
                                           r"ZeroDivisionError: .* in predict; this is a fault in the backend") as info:
        open_and_predict(client)
    assert info.value.code == grpc.StatusCode.INTERNAL


def test_a_type_error_in_predict_is_a_fault_not_a_rejection(served) -> None:
    class Sloppy(DividingBackend):
        def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
            return pb.StepTiming(duration_ns=1.5)  # type: ignore[arg-type]  # protobuf: TypeError

    with pytest.raises(BackendError) as info:
        open_and_predict(served(Sloppy()))
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert "TypeError: " in info.value.message
    assert f"test_backend_errors.py:{line_of(Sloppy.predict, 'duration_ns=1.5')} in predict" in info.value.message


def test_a_fault_deep_in_a_library_names_the_backends_line_and_where_it_arose(served) -> None:
    class Rational(DividingBackend):
        def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
            return pb.StepTiming(duration_ns=int(fractions.Fraction(1, 0)))  # library raises

    with pytest.raises(BackendError) as info:
        open_and_predict(served(Rational()))
    line = line_of(Rational.predict, "library raises")
    assert "ZeroDivisionError: Fraction(1, 0) at " in info.value.message
    assert f"test_backend_errors.py:{line} in predict (raised in " in info.value.message
    assert "fractions.py:" in info.value.message


def test_a_fault_opening_a_session_is_not_blamed_on_the_scenario(served) -> None:
    class Crashing(DividingBackend):
        def open_session(self, spec: pb.SessionSpec) -> None:
            raise KeyError("tables")

    client = served(Crashing())
    with pytest.raises(BackendError) as info:
        open_or_blame("clients[0]", "lab", lambda: client.open_session(sample_session_spec()))
    assert info.value.code == grpc.StatusCode.INTERNAL and info.value.rpc.endswith("/OpenSession")
    assert "KeyError: 'tables' at " in info.value.message and "in open_session" in info.value.message


@pytest.mark.parametrize(("device", "message"), [
    ("TPU-v9", "INVALID_ARGUMENT: spec.hardware.device='TPU-v9' is not a GPU"),
    ("NPU-x", "INVALID_ARGUMENT: ValueError: NPU-x is not supported at "),
])
def test_a_deliberate_rejection_keeps_invalid_argument_and_blames_the_scenario(served, device, message) -> None:
    client = served(PickyBackend())
    spec = sample_session_spec()
    spec.hardware.device = device
    with pytest.raises(BackendError) as info:
        client.open_session(spec)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT and info.value.is_rejection
    assert not info.value.is_fault and info.value.message.startswith(message)
    with pytest.raises(ScenarioError, match=r"^clients\[0\]: backend 'lab' rejected it: INVALID_ARGUMENT: "):
        open_or_blame("clients[0]", "lab", lambda: client.open_session(spec))


def test_open_or_blame_returns_what_the_call_returns() -> None:
    assert open_or_blame("network", "net", lambda: 42) == 42


class FakeSynced:
    """A time-synchronized backend client whose Advance replies are scripted."""

    name, address = "kv-store", "10.0.0.7:50051"

    def __init__(self, *replies: pb.AdvanceResponse) -> None:
        self.replies = list(replies)

    def advance(self, session_id: str, until_ns: int) -> pb.AdvanceResponse:
        return self.replies.pop(0)


def done(*completions: tuple[int, int], next_event_ns: int = -1) -> pb.AdvanceResponse:
    return pb.AdvanceResponse(completions=[pb.Completion(id=i, completion_ns=t) for i, t in completions],
                              next_event_ns=next_event_ns)


def run_sync(*replies: pb.AdvanceResponse, submit_at: tuple[int, ...] = (100,)) -> list[tuple[int, int]]:
    """Submits work 1, 2, ... at the given times (each provisionally done 50 ns later); runs the kernel."""
    kernel, finished = Kernel(), []
    sync = TimeSync(kernel, FakeSynced(*replies), "s1")
    for work_id, time_ns in enumerate(submit_at, start=1):
        kernel.call_at(time_ns, 0, lambda w=work_id: sync.submitted(
            w, kernel.now_ns + 50, lambda ns, w=w: finished.append((w, ns))))
    kernel.run()
    return finished


def test_a_well_behaved_backend_completes_the_work() -> None:
    assert run_sync(done(next_event_ns=170), done((1, 170))) == [(1, 70)]


@pytest.mark.parametrize(("replies", "message"), [
    ((done((7, 150)),), r"reported completion of id 7 to Advance\(until_ns=150\), which the hub never submitted"),
    ((done((1, 150), (1, 150)),), "reported completion of id 1 .* already reported done"),
    ((done((1, 90)),), r"done at completion_ns=90 .* submitted at 100 ns .* must lie in \[100, 150\]"),
    ((done((1, 400)),), r"completion_ns=400 to Advance\(until_ns=150\)"),
    ((done(next_event_ns=120),), r"answered next_event_ns=120 to Advance\(until_ns=150\); .* not be before now"),
])
def test_a_bad_advance_reply_is_a_backend_error_naming_the_backend(replies, message) -> None:
    with pytest.raises(BackendError, match=message) as info:
        run_sync(*replies)
    err = info.value
    assert (err.backend, err.address, err.rpc, err.sim_time_ns, err.code) == (
        "kv-store", "10.0.0.7:50051", "Advance", 150, None)
    assert str(err).startswith("backend 'kv-store' at 10.0.0.7:50051 (Advance) at t=0.000000s: ")


def test_a_completion_before_the_previous_advance_is_in_the_hubs_past() -> None:
    # Work 2 is submitted at 120 and provisionally done at 170; the backend then claims it
    # finished at 160, which the Advance to 165 (work 1's sync point) should have reported.
    with pytest.raises(BackendError, match=r"completion_ns=160 .* previous Advance reached 165 ns"):
        run_sync(done(next_event_ns=165), done((1, 165), next_event_ns=170), done((2, 160)),
                 submit_at=(100, 120))


def test_a_negative_duration_for_submitted_work_is_a_backend_error() -> None:
    kernel = Kernel()
    sync = TimeSync(kernel, FakeSynced(), "s1")
    kernel.now_ns = 500
    with pytest.raises(BackendError, match="provisional completion at 400 ns, before its submission at 500 ns"):
        sync.submitted(1, 400, lambda ns: None)


class ScriptedMemory(MemoryBackend):
    """Accepts every access (done in 10 ns); its Advance reports an id it was never given."""

    name = "scripted-memory"

    def access(self, session: Session[mem_pb.MemorySessionSpec],
               accesses: list[mem_pb.MemoryAccess]) -> list[mem_pb.AccessResult]:
        return [mem_pb.AccessResult(id=a.id, duration_ns=10) for a in accesses]

    def advance(self, session: Session[mem_pb.MemorySessionSpec], until_ns: int) -> pb.AdvanceResponse:
        return done((99, until_ns))


def test_an_unknown_completion_over_grpc_names_the_backend_and_its_address() -> None:
    spec = mem_pb.MemorySessionSpec(levels=[mem_pb.MemoryLevel(name="ddr", capacity_bytes=10**9, bandwidth_gbps=1.0)],
                                    mode=pb.SYNC_MODE_TIME_SYNCHRONIZED, kv_bytes_per_token=1000)
    with BackendServer(ScriptedMemory()) as server:
        client = MemoryClient("kv", server.address, deadline_s=10, reconnect_s=0)
        try:
            session_id = client.open_session(spec).session_id
            kernel = Kernel()
            sync = TimeSync(kernel, client, session_id)
            (result,) = client.access(session_id, [mem_pb.MemoryAccess(id=1, op=mem_pb.ACCESS_OP_LOOKUP, key="p",
                                                                        size_bytes=8)], stateful=True)
            sync.submitted(result.id, result.duration_ns, lambda ns: None)
            with pytest.raises(BackendError, match="completion of id 99 .* never submitted") as info:
                kernel.run()
        finally:
            client.close()
    assert (info.value.backend, info.value.address) == ("kv", server.address)
