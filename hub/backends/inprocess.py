"""Calling a backend's servicer directly, without gRPC.

Used by ``cosim bench`` to measure what the gRPC boundary costs, by the
goodput search's replications, and by ``cosim run --in-process``: the same
backend, the same servicer code (sessions, validation), no channel. ``cosim
run`` goes over gRPC otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import grpc

from cosim.v1 import types_pb2 as pb

from .rpc import LocalRpcError, RuntimeClient

if TYPE_CHECKING:  # the hub imports no adapter at load time
    from cosim.adapters.sdk import PlainBatch
    from cosim.adapters.sdk.servicers import DirectPredict, RuntimeServicer


class _Context:
    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise LocalRpcError(code, details)


class DirectStub:
    """Looks like a generated stub; each method calls the servicer in this thread."""

    def __init__(self, servicer: Any) -> None:
        self._servicer = servicer

    def __getattr__(self, rpc: str) -> Callable[..., Any]:
        method = getattr(self._servicer, rpc)

        def call(request: Any, timeout: float | None = None) -> Any:
            return method(request, _Context())

        call._method = rpc  # type: ignore[attr-defined]
        return call


class InProcessRuntimeClient(RuntimeClient):
    """A RuntimeClient whose calls go straight to a servicer in this process. Step timings skip
    the request and response messages (:meth:`RuntimeServicer.predict_in_process`): the same
    checks, errors and timings, without copying every batch and timing twice; a backend that
    takes plain batches (``RuntimeBackend.plain_batches``) gets no StepBatch message at all."""

    def __init__(self, name: str, servicer: RuntimeServicer) -> None:
        from cosim.adapters.sdk import PlainBatch
        from cosim.adapters.sdk.servicers import DirectPredict

        super().__init__(name, "in-process", stub=DirectStub(servicer))
        self._servicer, self._request = servicer, DirectPredict
        if servicer.backend.plain_batches:
            self.step_batch = PlainBatch

    def predict_steps(self, session_id: str, batches: Sequence[pb.StepBatch | PlainBatch], *,
                      sim_time_ns: int | None = None, client: str = "",
                      omit_breakdown: bool = False) -> list[pb.StepTiming]:
        request = self._request(session_id, list(batches), omit_breakdown)
        return self.call(self._predict_direct, request, sim_time_ns=sim_time_ns, client=client)

    def native_model(self, session_id: str) -> object | None:
        """The backend's compiled model of the session (``RuntimeBackend.native_model``), which the
        hub's timing cache calls in place of :meth:`predict_steps`, counting each call as one."""
        session = self.sessions.get(session_id)
        live = self._servicer.sessions.get(session.live_id) if session is not None and session.live_id else None
        return None if live is None else self._servicer.backend.native_model(live)

    def _predict_direct(self, request: DirectPredict, timeout: float | None = None) -> list[pb.StepTiming]:
        return self._servicer.predict_in_process(request, cast(grpc.ServicerContext, _Context()))

    _predict_direct._method = "PredictSteps"  # type: ignore[attr-defined]


def in_process_runtime_client(name: str, reference: str, *,
                              search_paths: Sequence[str | os.PathLike[str]] = ()) -> RuntimeClient:
    """A RuntimeClient whose calls go straight to a fresh ``module:Class`` backend's servicer
    (``search_paths``: folders the module may also be imported from, as ``launch_python``'s)."""
    from cosim.adapters.sdk import RuntimeBackend, load_backend
    from cosim.adapters.sdk.servicers import RuntimeServicer

    backend = load_backend(reference, search_paths=search_paths)
    assert isinstance(backend, RuntimeBackend)  # the runtime clients' backends (runner.client_kind)
    return InProcessRuntimeClient(name, RuntimeServicer(backend))
