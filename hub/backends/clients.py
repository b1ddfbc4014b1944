"""gRPC clients of the three backend services, with deadlines and retries.

Statuses map back to :class:`BackendError` carrying the status code and the
backend's own message. Only idempotent calls are retried (Describe, OpenSession,
PredictSteps, predict-mode Access/Transfer/Collective), on UNAVAILABLE and
DEADLINE_EXCEEDED, with capped exponential backoff. Step timings go over one
PredictStepsStream per backend (a unary RPC per call costs about 1.5x as much in
Python), or PredictSteps where a backend does not offer the stream.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc
import tenacity

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import memory_service_pb2_grpc as mem_grpc
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import network_service_pb2_grpc as net_grpc
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb

from ..errors import BackendError

T = TypeVar("T")

TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def _is_transient(err: BaseException) -> bool:
    return isinstance(err, grpc.RpcError) and err.code() in TRANSIENT


class BackendClient:
    """One channel to one backend.

    Args:
        name: the backend's name in the config (used in every error).
        address: ``host:port``.
        deadline_s: per-call deadline.
        attempts: tries for idempotent calls before giving up.
    """

    def __init__(self, name: str, address: str, *, deadline_s: float = 30.0, attempts: int = 5,
                 stub: Any = None) -> None:
        self.name, self.address, self.deadline_s = name, address, deadline_s
        # A given stub (see inprocess.py) replaces the channel.
        self.channel: grpc.Channel | None = None if stub is not None else grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)])
        self._retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_exponential(multiplier=0.05, max=2.0),
            retry=tenacity.retry_if_exception(_is_transient), reraise=True)
        self.num_calls = 0

    def call(self, rpc: Callable[..., T], request: Any, *, idempotent: bool = True,
             sim_time_ns: int | None = None, client: str = "") -> T:
        """Calls ``rpc(request)`` with the deadline, retrying transient faults if idempotent.

        ``client`` names the hub client the call is for, in the error if it fails.
        """
        self.num_calls += 1
        try:
            if idempotent:
                return self._retrying(rpc, request, timeout=self.deadline_s)
            return rpc(request, timeout=self.deadline_s)
        except grpc.RpcError as err:
            code = err.code()
            details = err.details()
            hint = " (retried; is it still running?)" if code in TRANSIENT else ""
            method = getattr(rpc, "_method", b"")
            raise BackendError(f"{code.name}: {details}{hint}", backend=self.name, address=self.address,
                               rpc=method.decode() if isinstance(method, bytes) else str(method),
                               client=client, sim_time_ns=sim_time_ns, code=code) from err

    stub: Any  # the service's generated stub, set by each subclass

    def describe(self) -> pb.BackendInfo:
        """The backend's identity (Describe)."""
        return self.call(self.stub.Describe, pb.DescribeRequest()).info

    def close_session(self, session_id: str) -> None:
        """Closes a session (CloseSession)."""
        self.call(self.stub.CloseSession, pb.CloseSessionRequest(session_id=session_id))

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
            return next(self._responses)
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

    def __init__(self, name: str, address: str, **kwargs: Any) -> None:
        super().__init__(name, address, **kwargs)
        channel = self.channel
        self.stub = kwargs["stub"] if channel is None else rt_grpc.RuntimeBackendServiceStub(channel)
        self._stream_stub = rt_grpc.RuntimeStreamServiceStub(channel) if channel is not None else None
        self._streaming = self._stream_stub is not None
        self._stream: StepStream | None = None

    def open_session(self, spec: pb.SessionSpec) -> pb.OpenSessionResponse:
        return self.call(self.stub.OpenSession, rt_pb.OpenSessionRequest(spec=spec))

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
                return self.call(self._predict_on_stream, request, sim_time_ns=sim_time_ns, client=client)
            except BackendError as err:
                if err.code != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._streaming = False  # the backend has no stream: one RPC per call from now on
        return self.call(self.stub.PredictSteps, request, sim_time_ns=sim_time_ns, client=client)

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

    def __init__(self, name: str, address: str, **kwargs: Any) -> None:
        super().__init__(name, address, **kwargs)
        assert self.channel is not None
        self.stub = mem_grpc.MemoryBackendServiceStub(self.channel)


    def open_session(self, spec: mem_pb.MemorySessionSpec) -> pb.OpenSessionResponse:
        return self.call(self.stub.OpenSession, mem_pb.OpenMemorySessionRequest(spec=spec))

    def access(self, session_id: str, accesses: Sequence[mem_pb.MemoryAccess], *, stateful: bool,
               sim_time_ns: int | None = None) -> list[mem_pb.AccessResult]:
        reply = self.call(self.stub.Access, mem_pb.AccessRequest(session_id=session_id, accesses=accesses),
                          idempotent=not stateful, sim_time_ns=sim_time_ns)
        return list(reply.results)

    def advance(self, session_id: str, until_ns: int) -> pb.AdvanceResponse:
        return self.call(self.stub.Advance, pb.AdvanceRequest(session_id=session_id, until_ns=until_ns),
                         idempotent=False, sim_time_ns=until_ns)



class NetworkClient(BackendClient):
    """Client of ``NetworkBackendService``."""

    def __init__(self, name: str, address: str, **kwargs: Any) -> None:
        super().__init__(name, address, **kwargs)
        assert self.channel is not None
        self.stub = net_grpc.NetworkBackendServiceStub(self.channel)


    def open_session(self, spec: net_pb.NetworkSessionSpec) -> pb.OpenSessionResponse:
        return self.call(self.stub.OpenSession, net_pb.OpenNetworkSessionRequest(spec=spec))

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
        return self.call(self.stub.Advance, pb.AdvanceRequest(session_id=session_id, until_ns=until_ns),
                         idempotent=False, sim_time_ns=until_ns)

