"""gRPC clients of the three backend services, with deadlines, retries and session re-opening.

Statuses map back to :class:`BackendError` carrying the status code and the
backend's own message. Step timings go over one PredictStepsStream per backend
(a unary RPC per call costs about 1.5x as much in Python), or PredictSteps
where a backend does not offer the stream.

Faults survived (docs/faults.md). Only idempotent calls are retried (Describe,
OpenSession, PredictSteps, predict-mode Access/Transfer/Collective):

- UNAVAILABLE (the backend went away, or says it is not ready): the call waits
  for the channel to be ready again and retries, for up to ``reconnect_s``
  (:data:`RECONNECT_S`) from the first failure. The channel redials a lost
  backend every 50 ms to 1 s (gRPC's default backoff grows to 2 minutes), so a
  restart is seen within about a second of the backend listening again.
- DEADLINE_EXCEEDED (no answer within ``deadline_s``: a hung backend): retried
  once, so a hang costs at most two deadlines before the run stops.
- NOT_FOUND for a session this client opened (a backend that restarted lost
  it): every session is re-opened with its spec before its next call and the
  call is retried (:mod:`.sessions` says what that gives back).

Errors state the real time waited, and the backend's name and address.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import memory_service_pb2_grpc as mem_grpc
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import network_service_pb2_grpc as net_grpc
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb

from ..errors import BackendError
from .sessions import OpenSession, OpenSessions

T = TypeVar("T")

# How long a call waits for a backend that went away (UNAVAILABLE) to come back: a restart of a
# simulator that loads its tables takes seconds, not minutes.
RECONNECT_S = 30.0
# The default deadline of one call (a scenario's backends.<name>.deadline_s).
DEADLINE_S = 30.0
# Pauses before waiting for the backend again: 50 ms, doubling up to 1 s (a backend may answer
# UNAVAILABLE itself while it is serving).
FIRST_PAUSE_S, MAX_PAUSE_S = 0.05, 1.0
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
    # Redial a lost backend soon and often (gRPC's defaults: after 1 s, growing to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 50), ("grpc.max_reconnect_backoff_ms", 1000),
]


def _method_name(rpc: Callable[..., Any]) -> str:
    method = getattr(rpc, "_method", b"")
    return method.decode() if isinstance(method, bytes) else str(method)


class BackendClient:
    """One channel to one backend.

    Args:
        name: the backend's name in the config (used in every error).
        address: ``host:port``.
        deadline_s: per-call deadline; a call that runs out of it is retried once.
        reconnect_s: how long a call waits for an unavailable backend to come back (0: not at all).
        alive: False once the backend's process is known to have exited (a ``command:`` backend the
            hub started): no use waiting for it.
        stub: calls go to this stub instead of a channel (see inprocess.py).
    """

    def __init__(self, name: str, address: str, *, deadline_s: float = DEADLINE_S, reconnect_s: float = RECONNECT_S,
                 alive: Callable[[], bool] = lambda: True, stub: Any = None) -> None:
        self.name, self.address, self.deadline_s, self.reconnect_s = name, address, deadline_s, reconnect_s
        self.alive = alive
        # A given stub (see inprocess.py) replaces the channel.
        self.channel: grpc.Channel | None = None if stub is not None else grpc.insecure_channel(
            address, options=CHANNEL_OPTIONS)
        self._health = health_pb2_grpc.HealthStub(self.channel) if self.channel is not None else None
        self.sessions = OpenSessions()
        self.num_calls = 0
        self.num_reopened = 0  # sessions re-opened after the backend lost them

    def call(self, rpc: Callable[..., T], request: Any, *, idempotent: bool = True,
             sim_time_ns: int | None = None, client: str = "") -> T:
        """Calls ``rpc(request)`` with the deadline, retrying faults as the module says if idempotent.

        A ``request.session_id`` this client opened is replaced by the backend's live id of that
        session (re-opening it first where the backend lost it). ``client`` names the hub client the
        call is for, in the error if it fails.
        """
        self.num_calls += 1
        session = self.sessions.get(request.session_id) if hasattr(request, "session_id") else None
        began = time.monotonic()
        down_since: float | None = None  # first UNAVAILABLE of this call
        pause, hung, lost = FIRST_PAUSE_S, False, False
        while True:
            try:
                if session is not None:
                    request.session_id = self._live_id(session, sim_time_ns=sim_time_ns, client=client)
                reply = rpc(request, timeout=self.deadline_s)
                if session is not None and not idempotent:
                    session.stateful = True  # from now on a re-opened session would not be the same
                return reply
            except grpc.RpcError as err:
                code = err.code()
                if code == grpc.StatusCode.NOT_FOUND and session is not None and not lost:
                    # The backend lost the session: it restarted, so it lost all of them.
                    self.sessions.lose_all()
                    lost = True
                    continue
                if idempotent and code == grpc.StatusCode.DEADLINE_EXCEEDED and not hung:
                    hung = True
                    continue
                if idempotent and code == grpc.StatusCode.UNAVAILABLE:
                    now = time.monotonic()
                    down_since = now if down_since is None else down_since
                    until = down_since + self.reconnect_s
                    if now < until and self.alive() and self._wait_ready(min(pause, until - now), until):
                        pause = min(2 * pause, MAX_PAUSE_S)
                        continue
                waited_s = time.monotonic() - began
                raise BackendError(self._describe(err, idempotent=idempotent, waited_s=waited_s),
                                   backend=self.name, address=self.address, rpc=_method_name(rpc),
                                   client=client, sim_time_ns=sim_time_ns, code=code) from err

    def _describe(self, err: grpc.RpcError, *, idempotent: bool, waited_s: float) -> str:
        """What went wrong, with what was tried and the time it took."""
        code, details = err.code(), err.details()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            if not idempotent:
                return (f"DEADLINE_EXCEEDED: no answer within deadline_s={self.deadline_s:g} s ({waited_s:.1f} s "
                        "waited); not retried, since the call changes the session's state")
            return (f"DEADLINE_EXCEEDED: no answer within deadline_s={self.deadline_s:g} s, retried once: "
                    f"{waited_s:.1f} s waited in all; is the backend hung?")
        if code == grpc.StatusCode.UNAVAILABLE:
            if not idempotent:
                return (f"UNAVAILABLE: {details}; not retried, since the call changes the session's state "
                        "and may have been applied")
            if not self.alive():
                return f"UNAVAILABLE: {details}; its process has exited ({waited_s:.1f} s waited)"
            if self.reconnect_s <= 0:
                return f"UNAVAILABLE: {details}; not retried (reconnect_s=0); is it still running?"
            return (f"UNAVAILABLE: {details}; retried for up to reconnect_s={self.reconnect_s:g} s: {waited_s:.1f} s "
                    "waited in all; is it still running?")
        return f"{code.name}: {details}"

    def _wait_ready(self, pause_s: float, until: float) -> bool:
        """Pauses, then waits until ``until`` (monotonic) at most for the backend to answer its health
        check SERVING; whether it did. The check waits for the channel to connect (wait_for_ready),
        so a restarted backend is seen as soon as the channel redials it."""
        time.sleep(pause_s)
        if self._health is None:
            return True
        while (left := until - time.monotonic()) > 0 and self.alive():  # alive: asked again each second
            try:
                reply = self._health.Check(health_pb2.HealthCheckRequest(), timeout=min(left, 1.0),
                                           wait_for_ready=True)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return True  # no health service: ready when it answers at all; the retry tells
                if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:  # (that: not connected within the second)
                    time.sleep(min(FIRST_PAUSE_S, max(0.0, until - time.monotonic())))
                continue
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return True
            time.sleep(min(FIRST_PAUSE_S, max(0.0, until - time.monotonic())))  # starting up, or shutting down
        return False

    def _live_id(self, session: OpenSession, *, sim_time_ns: int | None, client: str) -> str:
        """The backend's id of ``session``, re-opening it first where the backend lost it."""
        if session.live_id is not None:
            return session.live_id
        if session.stateful:
            raise BackendError(
                f"lost session {session.id!r} (did it restart?): the session is time-synchronized and held "
                "contents and in-flight work that the hub cannot replay, so the run stops here (predict-mode "
                "sessions are re-opened and the run goes on)", backend=self.name, address=self.address,
                client=client, sim_time_ns=sim_time_ns, code=grpc.StatusCode.NOT_FOUND)
        reply = self.call(session.open_rpc, session.open_request, sim_time_ns=sim_time_ns, client=client)
        session.live_id = reply.session_id
        session.reopened += 1
        self.num_reopened += 1
        return session.live_id

    def _open(self, rpc: Callable[..., pb.OpenSessionResponse], request: Any) -> pb.OpenSessionResponse:
        """Opens a session and remembers how, so that it can be re-opened; its id is the callers'."""
        reply = self.call(rpc, request)
        caller_id = self.sessions.add(reply.session_id, rpc, request)
        if caller_id != reply.session_id:
            renamed = pb.OpenSessionResponse()
            renamed.CopyFrom(reply)  # the backend's info and step error, under the callers' id
            renamed.session_id = caller_id
            reply = renamed
        return reply

    stub: Any  # the service's generated stub, set by each subclass

    def describe(self) -> pb.BackendInfo:
        """The backend's identity (Describe)."""
        response: pb.DescribeResponse = self.call(self.stub.Describe, pb.DescribeRequest())
        return response.info

    def close_session(self, session_id: str) -> None:
        """Closes a session (CloseSession)."""
        self.call(self.stub.CloseSession, pb.CloseSessionRequest(session_id=session_id))
        self.sessions.remove(session_id)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()


class LocalRpcError(grpc.RpcError):
    """A failed call whose status arises on this side of the channel (a stream
    request unanswered in time, a servicer called in-process)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


_END = object()  # ends a stream's request iterator


class StepStream:
    """One open PredictStepsStream: a request in, its answer out, in order.

    A stream has no per-message deadline, so a watchdog thread cancels it when
    a request waits longer than ``deadline_s`` (a hung backend); the caller
    then sees DEADLINE_EXCEEDED, as with a unary call.
    """

    def __init__(self, method: Callable[..., Any], deadline_s: float) -> None:
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._responses = method(iter(self._requests.get, _END))
        self._deadline_s = deadline_s
        self._sent_at: float | None = None
        self._expired = False
        self._closed = threading.Event()
        threading.Thread(target=self._watch, name="cosim-stream-watchdog", daemon=True).start()

    def __call__(self, request: rt_pb.PredictStepsRequest, timeout: float | None = None) -> rt_pb.PredictStepsResponse:
        self._sent_at = time.monotonic()
        self._requests.put(request)
        try:
            response: rt_pb.PredictStepsResponse = next(self._responses)
            return response
        except grpc.RpcError:
            if self._expired:
                raise LocalRpcError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                    f"Deadline Exceeded (no answer within {self._deadline_s:g} s)") from None
            raise
        except StopIteration:
            raise LocalRpcError(grpc.StatusCode.UNAVAILABLE, "the stream ended without an answer") from None
        finally:
            self._sent_at = None

    def _watch(self) -> None:
        period = min(1.0, self._deadline_s / 4)
        while not self._closed.wait(period):
            sent = self._sent_at
            if sent is not None and time.monotonic() - sent > self._deadline_s:
                self._expired = True
                self._responses.cancel()
                return

    def close(self) -> None:
        self._closed.set()
        self._requests.put(_END)
        self._responses.cancel()


class RuntimeClient(BackendClient):
    """Client of ``RuntimeBackendService``.

    Step timings go over one :class:`StepStream` (``RuntimeStreamService``), opened
    at the first call and reopened after a transient fault; a backend that answers
    UNIMPLEMENTED to the stream is asked with PredictSteps from then on.
    """

    #: Makes a batch for :meth:`predict_steps` from StepBatch's fields, given as keywords.
    step_batch: Callable[..., Any] = pb.StepBatch

    def __init__(self, name: str, address: str, **kwargs: Any) -> None:
        super().__init__(name, address, **kwargs)
        channel = self.channel
        self.stub = kwargs["stub"] if channel is None else rt_grpc.RuntimeBackendServiceStub(channel)
        self._stream_stub = rt_grpc.RuntimeStreamServiceStub(channel) if channel is not None else None
        self._streaming = self._stream_stub is not None
        self._stream: StepStream | None = None

    def native_model(self, session_id: str) -> object | None:
        """The backend's compiled model of session ``session_id`` where the hub may call it directly
        (an in-process backend's ``RuntimeBackend.native_model``); None over gRPC."""
        return None

    def open_session(self, spec: pb.SessionSpec) -> pb.OpenSessionResponse:
        """Opens a session (OpenSession), re-opened with ``spec`` if the backend loses it."""
        return self._open(self.stub.OpenSession, rt_pb.OpenSessionRequest(spec=spec))

    def _predict_on_stream(self, request: rt_pb.PredictStepsRequest, timeout: float) -> rt_pb.PredictStepsResponse:
        if self._stream is None:
            assert self._stream_stub is not None  # streaming only where there is a channel
            self._stream = StepStream(self._stream_stub.PredictStepsStream, timeout)
        try:
            return self._stream(request)
        except grpc.RpcError:
            self._stream.close()  # a stream ends with its first error: the retry opens a new one
            self._stream = None
            raise

    _predict_on_stream._method = b"/cosim.v1.RuntimeStreamService/PredictStepsStream"  # type: ignore[attr-defined]

    def _predict(self, request: rt_pb.PredictStepsRequest, *, sim_time_ns: int | None,
                 client: str) -> rt_pb.PredictStepsResponse:
        if self._streaming:
            try:
                streamed: rt_pb.PredictStepsResponse = self.call(self._predict_on_stream, request,
                                                                 sim_time_ns=sim_time_ns, client=client)
                return streamed
            except BackendError as err:
                if err.code != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._streaming = False  # the backend has no stream: one RPC per call from now on
        response: rt_pb.PredictStepsResponse = self.call(self.stub.PredictSteps, request, sim_time_ns=sim_time_ns,
                                                         client=client)
        return response

    def predict_steps(self, session_id: str, batches: Sequence[pb.StepBatch], *, sim_time_ns: int | None = None,
                      client: str = "", omit_breakdown: bool = False) -> list[pb.StepTiming]:
        """Timings of ``batches`` (PredictSteps); ``omit_breakdown`` lets the backend leave
        StepTiming.breakdown empty."""
        request = rt_pb.PredictStepsRequest(session_id=session_id, batches=batches, omit_breakdown=omit_breakdown)
        reply = self._predict(request, sim_time_ns=sim_time_ns, client=client)
        if len(reply.timings) != len(batches):
            raise BackendError(f"returned {len(reply.timings)} timings for {len(batches)} batches",
                               backend=self.name, address=self.address, rpc="PredictSteps", client=client,
                               sim_time_ns=sim_time_ns)
        return list(reply.timings)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        super().close()



class MemoryClient(BackendClient):
    """Client of ``MemoryBackendService``."""

    def __init__(self, name: str, address: str, *, deadline_s: float = DEADLINE_S, reconnect_s: float = RECONNECT_S,
                 alive: Callable[[], bool] = lambda: True) -> None:
        super().__init__(name, address, deadline_s=deadline_s, reconnect_s=reconnect_s, alive=alive)
        assert self.channel is not None
        self.stub = mem_grpc.MemoryBackendServiceStub(self.channel)


    def open_session(self, spec: mem_pb.MemorySessionSpec) -> pb.OpenSessionResponse:
        """Opens a session (OpenSession), re-opened with ``spec`` if the backend loses it before
        its first time-synchronized call."""
        return self._open(self.stub.OpenSession, mem_pb.OpenMemorySessionRequest(spec=spec))

    def access(self, session_id: str, accesses: Sequence[mem_pb.MemoryAccess], *, stateful: bool,
               sim_time_ns: int | None = None) -> list[mem_pb.AccessResult]:
        reply = self.call(self.stub.Access, mem_pb.AccessRequest(session_id=session_id, accesses=accesses),
                          idempotent=not stateful, sim_time_ns=sim_time_ns)
        return list(reply.results)

    def advance(self, session_id: str, until_ns: int) -> pb.AdvanceResponse:
        response: pb.AdvanceResponse = self.call(
            self.stub.Advance, pb.AdvanceRequest(session_id=session_id, until_ns=until_ns), idempotent=False,
            sim_time_ns=until_ns)
        return response



class NetworkClient(BackendClient):
    """Client of ``NetworkBackendService``."""

    def __init__(self, name: str, address: str, *, deadline_s: float = DEADLINE_S, reconnect_s: float = RECONNECT_S,
                 alive: Callable[[], bool] = lambda: True) -> None:
        super().__init__(name, address, deadline_s=deadline_s, reconnect_s=reconnect_s, alive=alive)
        assert self.channel is not None
        self.stub = net_grpc.NetworkBackendServiceStub(self.channel)


    def open_session(self, spec: net_pb.NetworkSessionSpec) -> pb.OpenSessionResponse:
        """Opens a session (OpenSession), re-opened with ``spec`` if the backend loses it before
        its first time-synchronized call."""
        return self._open(self.stub.OpenSession, net_pb.OpenNetworkSessionRequest(spec=spec))

    def transfer(self, session_id: str, transfers: Sequence[net_pb.PointToPoint], *, stateful: bool,
                 sim_time_ns: int | None = None) -> list[net_pb.NetworkResult]:
        reply = self.call(self.stub.Transfer, net_pb.TransferRequest(session_id=session_id, transfers=transfers),
                          idempotent=not stateful, sim_time_ns=sim_time_ns)
        return list(reply.results)

    def collective(self, session_id: str, collectives: Sequence[net_pb.CollectiveOp], *, stateful: bool,
                   sim_time_ns: int | None = None) -> list[net_pb.NetworkResult]:
        reply = self.call(self.stub.Collective,
                          net_pb.CollectiveRequest(session_id=session_id, collectives=collectives),
                          idempotent=not stateful, sim_time_ns=sim_time_ns)
        return list(reply.results)

    def advance(self, session_id: str, until_ns: int) -> pb.AdvanceResponse:
        response: pb.AdvanceResponse = self.call(
            self.stub.Advance, pb.AdvanceRequest(session_id=session_id, until_ns=until_ns), idempotent=False,
            sim_time_ns=until_ns)
        return response

