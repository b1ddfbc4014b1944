"""Calling a backend's servicer directly, without gRPC.

Used by ``cosim bench`` to measure what the gRPC boundary costs: the same
backend, the same servicer code (sessions, validation), no channel. Runs
always go over gRPC.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from .clients import LocalRpcError, RuntimeClient


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


def in_process_runtime_client(name: str, reference: str, *,
                              search_paths: Sequence[str | os.PathLike[str]] = ()) -> RuntimeClient:
    """A RuntimeClient whose calls go straight to a fresh ``module:Class`` backend's servicer
    (``search_paths``: folders the module may also be imported from, as ``launch_python``'s)."""
    from cosim.adapters.sdk import RuntimeBackend, load_backend
    from cosim.adapters.sdk.servicers import RuntimeServicer

    backend = load_backend(reference, search_paths=search_paths)
    assert isinstance(backend, RuntimeBackend)  # the runtime clients' backends (runner.client_kind)
    return RuntimeClient(name, "in-process", stub=DirectStub(RuntimeServicer(backend)))
