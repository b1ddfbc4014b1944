"""Exceptions a backend raises; the SDK maps each to a gRPC status code."""

from __future__ import annotations

import grpc


class BackendFault(Exception):
    """Base of the exceptions the SDK turns into gRPC statuses."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidArgument(BackendFault):
    """A request field has a bad value (INVALID_ARGUMENT).

    Args:
        field: dotted path of the field, e.g. ``spec.parallelism.tensor``.
        value: the offending value.
        reason: what is wrong and, where useful, what would be right.
    """

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, field: str, value: object, reason: str) -> None:
        super().__init__(field, value, reason)
        self.field, self.value, self.reason = field, value, reason

    def __str__(self) -> str:
        return f"{self.field}={self.value!r} {self.reason}"


class SessionNotFound(BackendFault):
    """The session id names no open session (NOT_FOUND)."""

    code = grpc.StatusCode.NOT_FOUND

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id

    def __str__(self) -> str:
        return f"session_id={self.session_id!r} names no open session; call OpenSession first"


class FailedPrecondition(BackendFault):
    """The call does not fit the session's state or mode (FAILED_PRECONDITION)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(BackendFault):
    """The backend cannot answer now; the caller may retry (UNAVAILABLE)."""

    code = grpc.StatusCode.UNAVAILABLE
