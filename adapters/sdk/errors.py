"""Exceptions a backend raises; the SDK maps each to a gRPC status code.

The contract for a lab's code: raise :class:`InvalidArgument` (or a plain
``ValueError``) to reject input the backend cannot serve, which the hub blames
on the scenario; the other :class:`BackendFault` subclasses for their own
statuses. Any other exception is a fault in the backend: the SDK answers
INTERNAL with :func:`fault_summary` (the exception and the line of the
backend's code that raised it), and the hub stops the run naming the backend.
"""

from __future__ import annotations

import os
import sys
import traceback

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


_SDK_DIR = os.path.dirname(os.path.abspath(__file__))


def _code_roots(backend: object) -> tuple[str, ...]:
    """Where the backend's own code lives: the package folder (or the lone module
    file) of each class in its MRO above the SDK's base classes."""
    roots: list[str] = []
    for cls in type(backend).__mro__:
        path = getattr(sys.modules.get(cls.__module__), "__file__", None)
        if not path or os.path.dirname(os.path.abspath(path)) == _SDK_DIR:
            break  # the SDK's bases, and the stdlib's above them, are not the lab's code
        path = os.path.abspath(path)
        # A package's module: the whole package folder is the lab's; a top-level module: only its file.
        roots.append(os.path.join(os.path.dirname(path), "") if "." in cls.__module__ else path)
    return tuple(roots)


def _short_path(filename: str) -> str:
    """``filename`` relative to the working directory or an import root, whichever is shorter."""
    path = os.path.abspath(filename)
    bases = [os.getcwd(), *(entry for entry in sys.path if entry and os.path.isabs(entry))]
    relative = [os.path.relpath(path, base) for base in bases if path.startswith(os.path.join(base, ""))]
    return min(relative, key=len, default=path)


def fault_summary(err: BaseException, backend: object) -> str:
    """One line naming an unexpected exception and where the backend's code raised it.

    The site is the innermost traceback frame in the backend's own code (its
    package, or its module for a one-file backend), else the innermost frame
    outside the SDK; where the exception arose deeper (in a library), that
    frame follows in parentheses.

    Returns:
        e.g. ``ZeroDivisionError: division by zero at mylab/model.py:42 in predict``.
    """
    frames = traceback.extract_tb(err.__traceback__)
    text = f"{type(err).__name__}: {err}"
    if not frames:
        return text
    roots = _code_roots(backend)
    own = [f for f in frames if f.filename and os.path.abspath(f.filename).startswith(roots)] if roots else []
    outside_sdk = [f for f in frames if not os.path.abspath(f.filename).startswith(os.path.join(_SDK_DIR, ""))]
    site, raised = (own or outside_sdk or frames)[-1], frames[-1]
    text += f" at {_short_path(site.filename)}:{site.lineno} in {site.name}"
    if raised is not site:
        text += f" (raised in {_short_path(raised.filename)}:{raised.lineno} in {raised.name})"
    return text
