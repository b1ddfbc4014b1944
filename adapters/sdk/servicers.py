"""gRPC servicers that wrap a backend object: sessions, validation, error mapping.

Exceptions map to statuses as :mod:`cosim.adapters.sdk.errors` documents:
a :class:`BackendFault` to its code, a ``ValueError`` to INVALID_ARGUMENT,
anything else to INTERNAL with where the backend's code raised it.

NOTE: every call into the backend holds one lock, so a lab's backend never
needs to be thread-safe, and a time-synchronized backend sees calls in order.
"""

from __future__ import annotations

import functools
import itertools
import logging
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import grpc

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import memory_service_pb2_grpc as mem_grpc
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import network_service_pb2_grpc as net_grpc
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb

from .backend import Backend, MemoryBackend, NetworkBackend, PlainBatch, RuntimeBackend, Session
from .errors import BackendFault, InvalidArgument, SessionNotFound, fault_summary
from .validation import validate_batches, validate_memory_spec, validate_network_spec, validate_session_spec

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
B = TypeVar("B", bound=Backend)


def _rpc(method: F) -> F:
    """Runs a servicer method under the lock and maps exceptions to statuses.

    A :class:`BackendFault` carries its own status, and a ``ValueError`` is a
    lab's rejection of the input (INVALID_ARGUMENT); anything else, a
    ``TypeError`` included, is a bug in the backend (INTERNAL, with the
    exception and the line of the backend's code it came from).
    """

    @functools.wraps(method)
    def wrapper(self: _Sessions[Any], request: Any, context: grpc.ServicerContext) -> Any:
        try:
            with self.lock:
                return method(self, request, context)
        except BackendFault as err:
            context.abort(err.code, str(err))
        except ValueError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, fault_summary(err, self.backend))
        except Exception as err:  # a backend bug must reach the caller, named
            log.exception("backend %s failed in %s", self.backend.name, method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"backend {self.backend.name!r} failed in "
                          f"{method.__name__}: {fault_summary(err, self.backend)}")

    return wrapper  # type: ignore[return-value]


class _Sessions(Generic[B]):
    """Session bookkeeping shared by the three backend servicers."""

    def __init__(self, backend: B) -> None:
        self.backend = backend
        self.lock = threading.Lock()
        self.sessions: dict[str, Session[Any]] = {}
        self._ids = itertools.count(1)
        # Ids never repeat across restarts, so a hub holding an id from before one gets NOT_FOUND
        # (and re-opens its session), never another hub's session that happens to get the same number.
        self._boot = secrets.token_hex(4)

    def _open(self, spec: Any) -> pb.OpenSessionResponse:
        session = Session(id=f"{self.backend.name}-{self._boot}-{next(self._ids)}", spec=spec)
        session.state = self.backend.open_session(spec)  # type: ignore[attr-defined]
        self.sessions[session.id] = session
        log.info("opened session %s for %s", session.id, getattr(spec, "client", "") or "-")
        info = self.backend.describe()
        info.capabilities.extend(self.backend.session_capabilities(session))
        return pb.OpenSessionResponse(session_id=session.id, info=info)

    def _get(self, session_id: str) -> Session[Any]:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise SessionNotFound(session_id) from None

    @_rpc
    def Describe(self, request: pb.DescribeRequest, context: grpc.ServicerContext) -> pb.DescribeResponse:
        return pb.DescribeResponse(info=self.backend.describe())

    @_rpc
    def CloseSession(self, request: pb.CloseSessionRequest, context: grpc.ServicerContext) -> pb.CloseSessionResponse:
        session = self._get(request.session_id)
        self.backend.close_session(session)
        del self.sessions[session.id]
        return pb.CloseSessionResponse()


@dataclass
class DirectPredict:
    """A PredictSteps request made in-process (:meth:`RuntimeServicer.predict_in_process`); its
    batches are :class:`PlainBatch` tuples where the backend takes them (``plain_batches``)."""

    session_id: str
    batches: Sequence[pb.StepBatch | PlainBatch]
    omit_breakdown: bool = False


class RuntimeServicer(_Sessions[RuntimeBackend], rt_grpc.RuntimeBackendServiceServicer,
                      rt_grpc.RuntimeStreamServiceServicer):
    """Serves a :class:`RuntimeBackend` as ``cosim.v1.RuntimeBackendService`` and its
    companion ``cosim.v1.RuntimeStreamService`` (the same sessions)."""

    @_rpc
    def OpenSession(self, request: rt_pb.OpenSessionRequest, context: grpc.ServicerContext) -> pb.OpenSessionResponse:
        validate_session_spec(request.spec)
        self.backend.check_device(request.spec)
        reply = self._open(request.spec)
        band = self.backend.step_error(self.sessions[reply.session_id])
        if band is not None:
            reply.step_error.CopyFrom(band)
        return reply

    @_rpc
    def PredictSteps(self, request: rt_pb.PredictStepsRequest,
                     context: grpc.ServicerContext) -> rt_pb.PredictStepsResponse:
        timings = self._predict(request.session_id, list(request.batches), request.omit_breakdown)
        response = rt_pb.PredictStepsResponse(timings=timings)
        if request.omit_breakdown:
            for timing in response.timings:  # the response holds copies: a backend's cached timings stay whole
                timing.ClearField("breakdown")
        return response

    @_rpc
    def predict_in_process(self, request: DirectPredict, context: grpc.ServicerContext) -> list[pb.StepTiming]:
        """PredictSteps for a caller in this process (``cosim.hub.backends.inprocess``): the same
        checks and timings, without copying the batches into a request and the timings into a
        response. The timings may be the backend's own (cached) messages: read them, never change them."""
        return self._predict(request.session_id, request.batches, request.omit_breakdown)

    def _predict(self, session_id: str, batches: Sequence[pb.StepBatch | PlainBatch],
                 omit_breakdown: bool) -> list[pb.StepTiming]:
        session = self._get(session_id)
        if not batches:
            raise InvalidArgument("batches", [], "must hold at least one batch")
        validate_batches(batches)
        session.omit_breakdown = omit_breakdown
        try:
            # Plain batches come only for a backend that declared it takes them (plain_batches).
            timings = self.backend.predict_many(session, cast(list[pb.StepBatch], batches))
        finally:
            session.omit_breakdown = False
        for i, timing in enumerate(timings):
            if timing.duration_ns < 0:
                raise BackendFault(f"backend {self.backend.name!r} returned duration_ns={timing.duration_ns} "
                                   f"for batches[{i}]; durations must be >= 0")
        return timings

    def PredictStepsStream(self, requests: Iterator[rt_pb.PredictStepsRequest],
                           context: grpc.ServicerContext) -> Iterator[rt_pb.PredictStepsResponse]:
        # One stream replaces an RPC per step; each request is answered as PredictSteps would,
        # and a failing one ends the stream with its status (context.abort raises).
        for request in requests:
            yield self.PredictSteps(request, context)


class MemoryServicer(_Sessions[MemoryBackend], mem_grpc.MemoryBackendServiceServicer):
    """Serves a :class:`MemoryBackend` as ``cosim.v1.MemoryBackendService``."""

    @_rpc
    def OpenSession(self, request: mem_pb.OpenMemorySessionRequest,
                    context: grpc.ServicerContext) -> pb.OpenSessionResponse:
        validate_memory_spec(request.spec)
        return self._open(request.spec)

    @_rpc
    def Access(self, request: mem_pb.AccessRequest, context: grpc.ServicerContext) -> mem_pb.AccessResponse:
        session = self._get(request.session_id)
        for i, access in enumerate(request.accesses):
            if access.op == mem_pb.ACCESS_OP_UNSPECIFIED:
                raise InvalidArgument(f"accesses[{i}].op", "ACCESS_OP_UNSPECIFIED", "must be LOOKUP, STORE or EVICT")
            if access.op != mem_pb.ACCESS_OP_EVICT and access.size_bytes == 0:
                raise InvalidArgument(f"accesses[{i}].size_bytes", 0, "must be > 0")
        return mem_pb.AccessResponse(results=self.backend.access(session, list(request.accesses)))

    @_rpc
    def Advance(self, request: pb.AdvanceRequest, context: grpc.ServicerContext) -> pb.AdvanceResponse:
        return self.backend.advance(self._get(request.session_id), request.until_ns)


class NetworkServicer(_Sessions[NetworkBackend], net_grpc.NetworkBackendServiceServicer):
    """Serves a :class:`NetworkBackend` as ``cosim.v1.NetworkBackendService``."""

    @_rpc
    def OpenSession(self, request: net_pb.OpenNetworkSessionRequest,
                    context: grpc.ServicerContext) -> pb.OpenSessionResponse:
        validate_network_spec(request.spec)
        return self._open(request.spec)

    @_rpc
    def Transfer(self, request: net_pb.TransferRequest, context: grpc.ServicerContext) -> net_pb.TransferResponse:
        session = self._get(request.session_id)
        names = {endpoint.name for endpoint in session.spec.endpoints}
        for i, t in enumerate(request.transfers):
            for field in ("src", "dst"):
                if getattr(t, field) not in names:
                    raise InvalidArgument(f"transfers[{i}].{field}", getattr(t, field),
                                          f"is not an endpoint of the session; endpoints: {sorted(names)}")
            if t.size_bytes == 0:
                raise InvalidArgument(f"transfers[{i}].size_bytes", 0, "must be > 0")
        return net_pb.TransferResponse(results=self.backend.transfer(session, list(request.transfers)))

    @_rpc
    def Collective(self, request: net_pb.CollectiveRequest, context: grpc.ServicerContext) -> net_pb.CollectiveResponse:
        session = self._get(request.session_id)
        names = {endpoint.name for endpoint in session.spec.endpoints}
        for i, c in enumerate(request.collectives):
            if c.kind == net_pb.COLLECTIVE_KIND_UNSPECIFIED:
                raise InvalidArgument(f"collectives[{i}].kind", "COLLECTIVE_KIND_UNSPECIFIED",
                                      "must be ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER or ALL_TO_ALL")
            if c.endpoint and c.endpoint not in names:
                raise InvalidArgument(f"collectives[{i}].endpoint", c.endpoint,
                                      f"is not an endpoint of the session; endpoints: {sorted(names)}")
            if c.size_bytes == 0:
                raise InvalidArgument(f"collectives[{i}].size_bytes", 0, "must be > 0")
        return net_pb.CollectiveResponse(results=self.backend.collective(session, list(request.collectives)))

    @_rpc
    def Advance(self, request: pb.AdvanceRequest, context: grpc.ServicerContext) -> pb.AdvanceResponse:
        return self.backend.advance(self._get(request.session_id), request.until_ns)
