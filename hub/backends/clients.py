"""gRPC clients of the three backend services, with deadlines and retries.

Statuses map back to :class:`BackendError` carrying the backend's own
message. Only idempotent calls are retried (Describe, OpenSession,
PredictSteps, predict-mode Access/Transfer/Collective), on UNAVAILABLE and
DEADLINE_EXCEEDED, with capped exponential backoff.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

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
    return isinstance(err, grpc.RpcError) and err.code() in TRANSIENT  # type: ignore[attr-defined]


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
        self.channel = None if stub is not None else grpc.insecure_channel(address, options=[
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
            code = err.code()  # type: ignore[attr-defined]
            details = err.details()  # type: ignore[attr-defined]
            hint = " (retried; is it still running?)" if code in TRANSIENT else ""
            method = getattr(rpc, "_method", b"")
            raise BackendError(f"{code.name}: {details}{hint}", backend=self.name, address=self.address,
                               rpc=method.decode() if isinstance(method, bytes) else str(method),
                               client=client, sim_time_ns=sim_time_ns) from err

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


class RuntimeClient(BackendClient):
    """Client of ``RuntimeBackendService``."""

    def __init__(self, name: str, address: str, **kwargs: Any) -> None:
        super().__init__(name, address, **kwargs)
        self.stub = kwargs["stub"] if kwargs.get("stub") is not None else \
            rt_grpc.RuntimeBackendServiceStub(self.channel)


    def open_session(self, spec: pb.SessionSpec) -> pb.OpenSessionResponse:
        return self.call(self.stub.OpenSession, rt_pb.OpenSessionRequest(spec=spec))

    def predict_steps(self, session_id: str, batches: Sequence[pb.StepBatch],
                      *, sim_time_ns: int | None = None, client: str = "") -> list[pb.StepTiming]:
        reply = self.call(self.stub.PredictSteps, rt_pb.PredictStepsRequest(session_id=session_id, batches=batches),
                          sim_time_ns=sim_time_ns, client=client)
        if len(reply.timings) != len(batches):
            raise BackendError(f"returned {len(reply.timings)} timings for {len(batches)} batches",
                               backend=self.name, address=self.address, rpc="PredictSteps", client=client,
                               sim_time_ns=sim_time_ns)
        return list(reply.timings)



class MemoryClient(BackendClient):
    """Client of ``MemoryBackendService``."""

    def __init__(self, name: str, address: str, **kwargs: Any) -> None:
        super().__init__(name, address, **kwargs)
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

