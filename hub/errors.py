"""Errors, sorted by who must act.

- :class:`ScenarioError`: the user must fix the scenario (config, trace, CLI input);
  :class:`RunFolderTaken`, one that would replace an earlier run.
- :class:`BackendError`: a backend misbehaved or went away; carries its name, address
  and gRPC status code.
- :class:`HubError`: a bug in the hub itself.

:func:`open_or_blame` decides between the first two when a backend refuses a session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # the kernel imports this module and stays free of gRPC at run time
    import grpc

T = TypeVar("T")

# Statuses that mean the backend's own code failed (the SDK answers INTERNAL for an
# exception a backend raised; other gRPC servers answer UNKNOWN).
_FAULT_CODES = frozenset({"INTERNAL", "UNKNOWN", "DATA_LOSS"})


class CosimError(Exception):
    """Base of every error cosim raises on purpose."""


class ScenarioError(CosimError):
    """A problem in the user's input, located by ``where`` (a config path,
    ``file:line``, or a CLI option)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(where, message)
        self.where, self.message = where, message

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class RunFolderTaken(ScenarioError):
    """A run (or sweep) folder that exists and is not empty, refused without overwrite. The message
    names the Python API's remedy (``overwrite=True``); :meth:`on_command_line` the CLI's."""

    def __init__(self, folder: str) -> None:
        super().__init__(folder, "run folder exists and is not empty; pass overwrite=True to replace its files, "
                                 "or choose another output_dir")
        self.folder = folder

    def __reduce__(self) -> tuple[type[RunFolderTaken], tuple[str]]:
        return type(self), (self.folder,)  # rebuilt from its folder when it crosses a process pool

    def on_command_line(self) -> str:
        """The message in the command line's terms (``--overwrite``, ``-o``)."""
        return f"{self.folder}: run folder exists and is not empty; pass --overwrite to replace its files, or " \
               "choose another folder with -o"


class BackendError(CosimError):
    """A backend failed: unreachable, or answered with an error or nonsense.

    Attributes:
        backend: the backend's name in the config.
        address: where it was reached.
        rpc: the call that failed.
        client: the hub client the call was for, if any.
        sim_time_ns: simulated time of the failure, if known.
        code: the gRPC status the backend answered (a ``grpc.StatusCode``), or
            None where no status came back (a bad reply, a failed start).
    """

    def __init__(self, message: str, *, backend: str, address: str = "", rpc: str = "",
                 client: str = "", sim_time_ns: int | None = None,
                 code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.message, self.backend, self.address, self.rpc = message, backend, address, rpc
        self.client, self.sim_time_ns, self.code = client, sim_time_ns, code

    @property
    def is_rejection(self) -> bool:
        """The backend refused the input (INVALID_ARGUMENT): whoever wrote the input must act."""
        return self.code is not None and self.code.name == "INVALID_ARGUMENT"

    @property
    def is_fault(self) -> bool:
        """The backend's own code failed (INTERNAL, UNKNOWN, DATA_LOSS): its authors must act."""
        return self.code is not None and self.code.name in _FAULT_CODES

    def __str__(self) -> str:
        where = f"backend {self.backend!r}"
        if self.address:
            where += f" at {self.address}"
        if self.client:
            where = f"client {self.client!r}: " + where
        if self.rpc:
            where += f" ({self.rpc})"
        when = f" at t={self.sim_time_ns / 1e9:.6f}s" if self.sim_time_ns is not None else ""
        blame = "; this is a fault in the backend, not in the scenario: fix the backend or report it to its " \
            "authors" if self.is_fault else ""
        return f"{where}{when}: {self.message}{blame}"


class HubError(CosimError):
    """An internal inconsistency: a bug in cosim. Please report it."""


def open_or_blame(where: str, backend: str, call: Callable[[], T]) -> T:
    """Opens a session by ``call()``, blaming a backend's rejection on the scenario.

    Args:
        where: the scenario path the session's spec came from (e.g. ``clients[0]``).
        backend: the backend's name in the config.
        call: opens the session.

    Returns:
        What ``call`` returns.

    Raises:
        ScenarioError: the backend answered INVALID_ARGUMENT (the spec is bad), located at ``where``.
        BackendError: any other failure (a fault in the backend, an unreachable one), unchanged.
    """
    try:
        return call()
    except BackendError as err:
        if err.is_rejection:
            raise ScenarioError(where, f"backend {backend!r} rejected it: {err.message}") from None
        raise
