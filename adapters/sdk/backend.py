"""Base classes a lab subclasses to put its simulator behind the contract.

A runtime backend implements one method, :meth:`RuntimeBackend.predict`;
memory and network backends implement ``access`` or ``transfer`` and
``collective``. Sessions, validation, batching and error mapping live in
:mod:`cosim.adapters.sdk.servicers`; serving in :mod:`cosim.adapters.sdk.server`.

To reject input, raise :class:`InvalidArgument` (or ``ValueError``): the caller
gets INVALID_ARGUMENT and the hub blames the scenario. Any other exception is a
bug in the backend: the caller gets INTERNAL naming the exception and the line
of the backend's code that raised it (:mod:`cosim.adapters.sdk.errors`).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from .errors import FailedPrecondition, InvalidArgument

SpecT = TypeVar("SpecT")


@dataclasses.dataclass
class Session(Generic[SpecT]):
    """One open session: its id, the spec it was opened with, and the state
    the backend's ``open_session`` hook returned (precomputed tables, caches).

    ``omit_breakdown`` is True while the servicer answers a PredictSteps call that asked to
    leave StepTiming.breakdown out: a backend may then skip computing it (the servicer clears
    it either way, so a backend that ignores the hint is still correct)."""

    id: str
    spec: SpecT
    state: Any = None
    omit_breakdown: bool = False


class PlainBatch(NamedTuple):
    """A StepBatch's fields as tuples: the batches an in-process caller hands a backend whose
    :attr:`RuntimeBackend.plain_batches` is True, with nothing to build or to read back.
    The fields and their meaning are cosim.v1.StepBatch's."""

    new_tokens: tuple[int, ...]
    context_tokens: tuple[int, ...]
    dp_rank_tokens: tuple[int, ...] = ()
    draft_tokens: tuple[int, ...] = ()
    lora_ranks: tuple[int, ...] = ()
    lora_ids: tuple[int, ...] = ()


class Backend(abc.ABC):
    """What every backend has: a name, a version and a fidelity level.

    The methods a backend kind must implement are abstract: a subclass that
    misses one fails when it is instantiated, naming the method."""

    name: ClassVar[str] = "backend"
    version: ClassVar[str] = "0.0.0"
    kind: ClassVar[pb.BackendKind.ValueType] = pb.BACKEND_KIND_UNSPECIFIED
    fidelity: ClassVar[pb.Fidelity.ValueType] = pb.FIDELITY_ANALYTICAL
    description: ClassVar[str] = ""
    capabilities: ClassVar[tuple[str, ...]] = ()
    # Session options that name an executable, its arguments or a file on the backend's machine: a
    # hub refuses them in submitted configs unless started with --allow-backend-files (cosim.hub.service.submitted).
    file_options: ClassVar[tuple[str, ...]] = ()

    def describe(self) -> pb.BackendInfo:
        """Identity of the backend; the default reads the class attributes."""
        return pb.BackendInfo(name=self.name, version=self.version, kind=self.kind,
                              fidelity=self.fidelity, description=self.description or self.name,
                              capabilities=list(self.capabilities))

    def session_capabilities(self, session: Session[Any]) -> tuple[str, ...]:
        """Capabilities of one open session, added to the class's in OpenSessionResponse.info: those
        that hold for some of a backend's sessions only (the aiconfigurator's ``pooled_decodes``, on
        devices whose mixed steps read each decode). The default adds none."""
        return ()

    def close_session(self, session: Session[Any]) -> None:
        """Hook called when a session closes; the default does nothing."""


class RuntimeBackend(Backend):
    """Times steps of a model on a cluster. Override :meth:`predict`.

    ``known_devices``, when set, lists the device names the backend can time;
    any other ``hardware.device`` is rejected with INVALID_ARGUMENT.

    ``plain_batches``: set it where :meth:`predict` reads a batch's fields alone (by name, as
    sequences of ints) and no message method; the hub's in-process calls then hand it
    :class:`PlainBatch` tuples, which cost nothing to build, instead of StepBatch messages.
    """

    kind = pb.BACKEND_KIND_RUNTIME
    known_devices: ClassVar[frozenset[str] | None] = None
    plain_batches: ClassVar[bool] = False

    def open_session(self, spec: pb.SessionSpec) -> Any:
        """Hook for precomputation; its return value becomes ``session.state``.

        Raise :class:`InvalidArgument` for a spec the backend cannot serve.
        """
        return None

    @abc.abstractmethod
    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        """Returns the timing of one step of ``session``."""

    def step_error(self, session: Session[pb.SessionSpec]) -> pb.StepError | None:
        """How far the session's step durations may be off, where the backend knows (e.g. from its
        cross-validation): ``pb.StepError(low=-0.1, high=0.1, basis="...")``, relative, low <= 0 <=
        high. The hub's prediction intervals (``cosim run --intervals``) rerun a scenario with the
        session's steps scaled by 1 + low and 1 + high. The default declares none."""
        return None

    def predict_many(self, session: Session[pb.SessionSpec],
                     batches: list[pb.StepBatch]) -> list[pb.StepTiming]:
        """Times consecutive steps; override to vectorize over batches."""
        return [self.predict(session, batch) for batch in batches]

    def native_model(self, session: Session[pb.SessionSpec]) -> object | None:
        """A compiled model the hub's timing cache may call in place of :meth:`predict` when it runs
        this backend in process (the in-process client hands it over; over gRPC it is never asked):
        one the compiled core knows (``cosim_core.RooflineModel``), whose answers, checks and cache
        are :meth:`predict`'s. None (the default): every step goes through :meth:`predict`."""
        return None

    def check_device(self, spec: pb.SessionSpec) -> None:
        if self.known_devices is not None and spec.hardware.device not in self.known_devices:
            raise InvalidArgument("spec.hardware.device", spec.hardware.device,
                                  f"is unknown to backend {self.name!r}; known: {sorted(self.known_devices)}")


class MemoryBackend(Backend):
    """Times KV accesses in a memory hierarchy. Override :meth:`access`,
    and :meth:`advance` for time-synchronized mode."""

    kind = pb.BACKEND_KIND_MEMORY

    def open_session(self, spec: mem_pb.MemorySessionSpec) -> Any:
        """Hook for per-session state (level contents, queues)."""
        return None

    @abc.abstractmethod
    def access(self, session: Session[mem_pb.MemorySessionSpec],
               accesses: list[mem_pb.MemoryAccess]) -> list[mem_pb.AccessResult]:
        """Times accesses, one result per access in order."""

    def advance(self, session: Session[mem_pb.MemorySessionSpec], until_ns: int) -> pb.AdvanceResponse:
        """Reports completions up to ``until_ns`` (time-synchronized mode)."""
        raise FailedPrecondition(f"backend {self.name!r} has no time-synchronized mode")


class NetworkBackend(Backend):
    """Times transfers and collectives. Override :meth:`transfer` and
    :meth:`collective`, and :meth:`advance` for time-synchronized mode."""

    kind = pb.BACKEND_KIND_NETWORK

    def open_session(self, spec: net_pb.NetworkSessionSpec) -> Any:
        """Hook for per-session state (topology tables, link queues)."""
        return None

    @abc.abstractmethod
    def transfer(self, session: Session[net_pb.NetworkSessionSpec],
                 transfers: list[net_pb.PointToPoint]) -> list[net_pb.NetworkResult]:
        """Times point-to-point transfers, one result per transfer in order."""

    @abc.abstractmethod
    def collective(self, session: Session[net_pb.NetworkSessionSpec],
                   collectives: list[net_pb.CollectiveOp]) -> list[net_pb.NetworkResult]:
        """Times collectives, one result per collective in order."""

    def advance(self, session: Session[net_pb.NetworkSessionSpec], until_ns: int) -> pb.AdvanceResponse:
        """Reports completions up to ``until_ns`` (time-synchronized mode)."""
        raise FailedPrecondition(f"backend {self.name!r} has no time-synchronized mode")
