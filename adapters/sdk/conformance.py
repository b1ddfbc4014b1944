"""The conformance checks behind ``python -m cosim.adapters.sdk.testing``, with a verdict per check.

Every kind of backend: ``describe`` (its name and kind), ``health`` (SERVING), ``reflection`` (its
service listed). Runtime backends: ``predict_steps`` (OpenSession, then one timing per batch,
durations >= 0, deterministic), ``predict_steps_stream`` (answers as PredictSteps, in order; SKIP
where the optional stream service is not offered), ``errors`` (INVALID_ARGUMENT naming the field
for a bad batch and a bad spec, NOT_FOUND for an unknown session), ``close_session``. Memory
backends: ``access`` in predict mode, then ``errors`` (Advance refused in predict mode) and
``close_session``; network backends: ``transfer`` and ``collective`` likewise.

Each check runs whatever the ones before it did: a failing check is a ``FAIL`` verdict with the
reason (an assertion's message, the status code and details of a call, or the exception), and the
next check still runs. Checks that need the session a failed OpenSession did not give fail naming
that cause.

Main names: :class:`CheckResult`, :func:`check_results` (whatever serves at an address, found by
reflection), :func:`conformance_results` (serve a backend object and check it). The samples the
checks send (:func:`sample_session_spec`, :data:`SAMPLE_BATCHES`, ...) are in :mod:`.samples`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import memory_service_pb2_grpc as mem_grpc
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import network_service_pb2_grpc as net_grpc
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb

from .samples import (
    SAMPLE_ACCESSES,
    SAMPLE_BATCHES,
    SAMPLE_COLLECTIVES,
    SAMPLE_TRANSFERS,
    sample_memory_spec,
    sample_network_spec,
    sample_session_spec,
)

RUNTIME_SERVICE = "cosim.v1.RuntimeBackendService"
MEMORY_SERVICE = "cosim.v1.MemoryBackendService"
NETWORK_SERVICE = "cosim.v1.NetworkBackendService"

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict.

    Attributes:
        name: the check (``describe``, ``predict_steps``, ...).
        verdict: ``PASS``, ``FAIL``, or ``SKIP`` (an optional service the backend does not offer).
        detail: why it failed or was skipped; empty when it passed.
    """

    name: str
    verdict: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.verdict}  {self.name}" + (f": {self.detail}" if self.detail else "")


class Skipped(Exception):
    """Raised by an optional check that does not apply to this backend."""


def run_checks(checks: Sequence[tuple[str, Callable[[], object]]]) -> list[CheckResult]:
    """Runs each check in turn, whatever the ones before it did; a verdict per check."""
    results = []
    for name, check in checks:
        try:
            check()
        except Skipped as why:
            results.append(CheckResult(name, SKIP, str(why)))
        except AssertionError as err:
            results.append(CheckResult(name, FAIL, str(err) or "an assertion failed"))
        except grpc.RpcError as err:
            results.append(CheckResult(name, FAIL, f"a call answered {err.code().name}: {err.details()}"))
        except Exception as err:  # noqa: BLE001 - any failure of the backend is this check's verdict
            results.append(CheckResult(name, FAIL, f"{type(err).__name__}: {err}"))
        else:
            results.append(CheckResult(name, PASS))
    return results


def passed_or_raise(results: Sequence[CheckResult]) -> list[str]:
    """The names of the passed checks.

    Raises:
        AssertionError: a check failed (the message names each failed check and why).
    """
    failed = [r for r in results if r.verdict == FAIL]
    if failed:
        raise AssertionError("; ".join(f"{r.name}: {r.detail}" for r in failed))
    return [r.name for r in results if r.verdict == PASS]


def _expect_code(call: Callable[[], object], code: grpc.StatusCode, mentions: str) -> None:
    try:
        call()
    except grpc.RpcError as err:
        assert err.code() == code, f"expected {code.name}, got {err.code().name}: {err.details()}"
        assert mentions in (err.details() or ""), f"error should name {mentions!r}: {err.details()}"
        return
    raise AssertionError(f"expected {code.name} naming {mentions!r}, but the call succeeded")


class _Checks:
    """What every kind shares: the channel, Describe, health and reflection, and the open session."""

    kind: pb.BackendKind.ValueType
    service: str

    def __init__(self, channel: grpc.Channel, stub: Any) -> None:
        self.channel, self.stub = channel, stub
        self.session_id: str | None = None
        self.session_error = "OpenSession was not reached"

    def describe(self) -> None:
        info = self.stub.Describe(pb.DescribeRequest(), timeout=10).info
        assert info.name, f"Describe answered no name: {info}"
        assert info.kind == self.kind, (f"Describe answered kind {pb.BackendKind.Name(info.kind)}, expected "
                                        f"{pb.BackendKind.Name(self.kind)}")

    def health(self) -> None:
        reply = health_pb2_grpc.HealthStub(self.channel).Check(
            health_pb2.HealthCheckRequest(service=self.service), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, \
            f"health of {self.service} is {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"

    def reflection(self) -> None:
        services = reflected_services(self.channel)
        assert self.service in services, f"reflection lists {sorted(services)}, not {self.service}"

    def open(self, call: Callable[[], str]) -> str:
        """Opens the session the later checks share (remembering why, if it failed)."""
        try:
            self.session_id = call()
        except grpc.RpcError as err:
            self.session_error = f"OpenSession answered {err.code().name}: {err.details()}"
            raise
        return self.session_id

    def session(self) -> str:
        if self.session_id is None:
            raise AssertionError(f"needs an open session; {self.session_error}")
        return self.session_id

    def close_session(self) -> None:
        session_id = self.session()
        self.stub.CloseSession(pb.CloseSessionRequest(session_id=session_id), timeout=10)
        _expect_code(lambda: self.stub.CloseSession(pb.CloseSessionRequest(session_id=session_id)),
                     grpc.StatusCode.NOT_FOUND, session_id)


def reflected_services(channel: grpc.Channel) -> set[str]:
    """The services a server lists by reflection."""
    replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
    return {s.name for reply in replies for s in reply.list_services_response.service}


class _RuntimeChecks(_Checks):
    kind, service = pb.BACKEND_KIND_RUNTIME, RUNTIME_SERVICE

    def __init__(self, channel: grpc.Channel, spec: pb.SessionSpec) -> None:
        super().__init__(channel, rt_grpc.RuntimeBackendServiceStub(channel))
        self.spec = spec
        self.first: list[pb.StepTiming] | None = None

    def request(self) -> rt_pb.PredictStepsRequest:
        return rt_pb.PredictStepsRequest(session_id=self.session(), batches=SAMPLE_BATCHES)

    def predict_steps(self) -> None:
        self.open(lambda: self.stub.OpenSession(rt_pb.OpenSessionRequest(spec=self.spec), timeout=30).session_id)
        first = list(self.stub.PredictSteps(self.request(), timeout=30).timings)
        assert len(first) == len(SAMPLE_BATCHES), f"{len(first)} timings for {len(SAMPLE_BATCHES)} batches"
        assert all(t.duration_ns >= 0 for t in first), \
            f"durations must be >= 0, got {[t.duration_ns for t in first]}"
        assert list(self.stub.PredictSteps(self.request(), timeout=30).timings) == first, \
            "answers must be deterministic: the same batches were timed differently"
        self.first = first

    def predict_steps_stream(self) -> None:
        request = self.request()
        try:
            streams = rt_grpc.RuntimeStreamServiceStub(self.channel)
            streamed = [list(r.timings) for r in streams.PredictStepsStream(iter([request, request]), timeout=30)]
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise Skipped("the optional RuntimeStreamService is not offered") from err
            raise
        expected = self.first or list(self.stub.PredictSteps(request, timeout=30).timings)
        assert streamed == [expected, expected], "PredictStepsStream must answer as PredictSteps, in order"

    def errors(self) -> None:
        bad = pb.StepBatch(new_tokens=[1, 1], context_tokens=[5])
        _expect_code(lambda: self.stub.PredictSteps(rt_pb.PredictStepsRequest(session_id=self.session(),
                                                                              batches=[bad]), timeout=30),
                     grpc.StatusCode.INVALID_ARGUMENT, "batches[0].context_tokens")
        bad_spec = pb.SessionSpec()
        bad_spec.CopyFrom(self.spec)
        bad_spec.parallelism.tensor = 3
        bad_spec.hardware.count = 3
        _expect_code(lambda: self.stub.OpenSession(rt_pb.OpenSessionRequest(spec=bad_spec), timeout=30),
                     grpc.StatusCode.INVALID_ARGUMENT, "spec.parallelism.tensor")
        _expect_code(lambda: self.stub.PredictSteps(
            rt_pb.PredictStepsRequest(session_id="nope", batches=SAMPLE_BATCHES), timeout=30),
            grpc.StatusCode.NOT_FOUND, "nope")

    def all(self) -> list[tuple[str, Callable[[], object]]]:
        return [("describe", self.describe), ("health", self.health), ("reflection", self.reflection),
                ("predict_steps", self.predict_steps), ("predict_steps_stream", self.predict_steps_stream),
                ("errors", self.errors), ("close_session", self.close_session)]


class _MemoryChecks(_Checks):
    kind, service = pb.BACKEND_KIND_MEMORY, MEMORY_SERVICE

    def __init__(self, channel: grpc.Channel, spec: mem_pb.MemorySessionSpec) -> None:
        super().__init__(channel, mem_grpc.MemoryBackendServiceStub(channel))
        self.spec = spec

    def access(self) -> None:
        session_id = self.open(lambda: self.stub.OpenSession(mem_pb.OpenMemorySessionRequest(spec=self.spec),
                                                             timeout=30).session_id)
        request = mem_pb.AccessRequest(session_id=session_id, accesses=SAMPLE_ACCESSES)
        first = list(self.stub.Access(request, timeout=30).results)
        assert [r.id for r in first] == [a.id for a in SAMPLE_ACCESSES], "one result per access, in order"
        assert all(r.duration_ns >= 0 for r in first), "durations must be >= 0"
        assert list(self.stub.Access(request, timeout=30).results) == first, "answers must be deterministic"

    def errors(self) -> None:
        session_id = self.session()
        bad = mem_pb.MemoryAccess(id=3, key="prefix-0", size_bytes=1)
        _expect_code(lambda: self.stub.Access(mem_pb.AccessRequest(session_id=session_id, accesses=[bad])),
                     grpc.StatusCode.INVALID_ARGUMENT, "accesses[0].op")
        bad_spec = mem_pb.MemorySessionSpec()
        bad_spec.CopyFrom(self.spec)
        bad_spec.levels[0].hit_rate = 1.5
        _expect_code(lambda: self.stub.OpenSession(mem_pb.OpenMemorySessionRequest(spec=bad_spec)),
                     grpc.StatusCode.INVALID_ARGUMENT, "spec.levels[0].hit_rate")
        _expect_code(lambda: self.stub.Advance(pb.AdvanceRequest(session_id=session_id, until_ns=1)),
                     grpc.StatusCode.FAILED_PRECONDITION, "")
        _expect_code(lambda: self.stub.Access(mem_pb.AccessRequest(session_id="nope", accesses=SAMPLE_ACCESSES)),
                     grpc.StatusCode.NOT_FOUND, "nope")

    def all(self) -> list[tuple[str, Callable[[], object]]]:
        return [("describe", self.describe), ("health", self.health), ("reflection", self.reflection),
                ("access", self.access), ("errors", self.errors), ("close_session", self.close_session)]


class _NetworkChecks(_Checks):
    kind, service = pb.BACKEND_KIND_NETWORK, NETWORK_SERVICE

    def __init__(self, channel: grpc.Channel, spec: net_pb.NetworkSessionSpec) -> None:
        super().__init__(channel, net_grpc.NetworkBackendServiceStub(channel))
        self.spec = spec

    def _items(self, name: str, call: Callable[[], Any], items: Sequence[Any]) -> None:
        first = list(call())
        assert [r.id for r in first] == [i.id for i in items], f"{name}: one result per item, in order"
        assert all(r.duration_ns >= 0 for r in first), f"{name}: durations must be >= 0"
        assert list(call()) == first, f"{name}: answers must be deterministic"

    def transfer(self) -> None:
        session_id = self.open(lambda: self.stub.OpenSession(net_pb.OpenNetworkSessionRequest(spec=self.spec),
                                                             timeout=30).session_id)
        request = net_pb.TransferRequest(session_id=session_id, transfers=SAMPLE_TRANSFERS)
        self._items("transfer", lambda: self.stub.Transfer(request, timeout=60).results, SAMPLE_TRANSFERS)

    def collective(self) -> None:
        request = net_pb.CollectiveRequest(session_id=self.session(), collectives=SAMPLE_COLLECTIVES)
        self._items("collective", lambda: self.stub.Collective(request, timeout=60).results, SAMPLE_COLLECTIVES)

    def errors(self) -> None:
        session_id = self.session()
        bad = net_pb.PointToPoint(id=3, src="p", dst="nowhere", size_bytes=1)
        _expect_code(lambda: self.stub.Transfer(net_pb.TransferRequest(session_id=session_id, transfers=[bad])),
                     grpc.StatusCode.INVALID_ARGUMENT, "transfers[0].dst")
        bad_spec = net_pb.NetworkSessionSpec()
        bad_spec.CopyFrom(self.spec)
        bad_spec.dims[0].npus = 1
        _expect_code(lambda: self.stub.OpenSession(net_pb.OpenNetworkSessionRequest(spec=bad_spec)),
                     grpc.StatusCode.INVALID_ARGUMENT, "spec.dims[0].npus")
        _expect_code(lambda: self.stub.Advance(pb.AdvanceRequest(session_id=session_id, until_ns=1)),
                     grpc.StatusCode.FAILED_PRECONDITION, "")
        _expect_code(lambda: self.stub.Transfer(net_pb.TransferRequest(session_id="nope",
                                                                       transfers=SAMPLE_TRANSFERS)),
                     grpc.StatusCode.NOT_FOUND, "nope")

    def all(self) -> list[tuple[str, Callable[[], object]]]:
        return [("describe", self.describe), ("health", self.health), ("reflection", self.reflection),
                ("transfer", self.transfer), ("collective", self.collective), ("errors", self.errors),
                ("close_session", self.close_session)]


def runtime_results(address: str, spec: pb.SessionSpec | None = None) -> list[CheckResult]:
    """The verdict of every check of the runtime backend at ``address`` (spec: default the sample's)."""
    with grpc.insecure_channel(address) as channel:
        return run_checks(_RuntimeChecks(channel, spec or sample_session_spec()).all())


def memory_results(address: str, spec: mem_pb.MemorySessionSpec | None = None) -> list[CheckResult]:
    """The verdict of every check of the memory backend at ``address`` (a predict-mode hierarchy)."""
    with grpc.insecure_channel(address) as channel:
        return run_checks(_MemoryChecks(channel, spec or sample_memory_spec()).all())


def network_results(address: str, spec: net_pb.NetworkSessionSpec | None = None) -> list[CheckResult]:
    """The verdict of every check of the network backend at ``address`` (endpoints ``p`` and ``d``)."""
    with grpc.insecure_channel(address) as channel:
        return run_checks(_NetworkChecks(channel, spec or sample_network_spec()).all())


RESULTS: dict[str, Callable[[str], list[CheckResult]]] = {
    RUNTIME_SERVICE: runtime_results, MEMORY_SERVICE: memory_results, NETWORK_SERVICE: network_results}


def check_results(address: str) -> list[CheckResult]:
    """The verdicts for whichever kind of backend serves at ``address`` (found by reflection); one
    ``reflection`` FAIL when reflection does not name exactly one backend service."""
    try:
        with grpc.insecure_channel(address) as channel:
            services = reflected_services(channel)
    except grpc.RpcError as err:
        return [CheckResult("reflection", FAIL, f"listing the services at {address} answered "
                                                f"{err.code().name}: {err.details()}")]
    served = sorted(services & set(RESULTS))
    if len(served) != 1:
        return [CheckResult("reflection", FAIL, f"reflection lists {sorted(services)}; expected one of "
                                                f"{sorted(RESULTS)}")]
    return RESULTS[served[0]](address)
