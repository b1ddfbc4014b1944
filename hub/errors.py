"""Errors, sorted by who must act.

- :class:`ScenarioError`: the user must fix the scenario (config, trace, CLI input).
- :class:`BackendError`: a backend misbehaved or went away; carries its name and address.
- :class:`HubError`: a bug in the hub itself.
"""

from __future__ import annotations


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


class BackendError(CosimError):
    """A backend failed: unreachable, or answered with an error or nonsense.

    Attributes:
        backend: the backend's name in the config.
        address: where it was reached.
        rpc: the call that failed.
        client: the hub client the call was for, if any.
        sim_time_ns: simulated time of the failure, if known.
    """

    def __init__(self, message: str, *, backend: str, address: str = "", rpc: str = "",
                 client: str = "", sim_time_ns: int | None = None) -> None:
        super().__init__(message)
        self.message, self.backend, self.address, self.rpc = message, backend, address, rpc
        self.client, self.sim_time_ns = client, sim_time_ns

    def __str__(self) -> str:
        where = f"backend {self.backend!r}"
        if self.address:
            where += f" at {self.address}"
        if self.client:
            where = f"client {self.client!r}: " + where
        if self.rpc:
            where += f" ({self.rpc})"
        when = f" at t={self.sim_time_ns / 1e9:.6f}s" if self.sim_time_ns is not None else ""
        return f"{where}{when}: {self.message}"


class HubError(CosimError):
    """An internal inconsistency: a bug in cosim. Please report it."""
