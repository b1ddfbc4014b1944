"""The KV memory-hierarchy backend (MIST §IV-A3), in both modes.

- ``SYNC_MODE_PREDICT``: MIST's recursive formula over the levels' hit rates
  (:mod:`cosim.adapters.memory.formula`); stateless, Advance is refused.
- ``SYNC_MODE_TIME_SYNCHRONIZED``: LRU contents and shared bandwidth
  (:mod:`cosim.adapters.memory.hierarchy`); hits follow the workload.

Main name: :class:`MemoryHierarchyBackend`.
"""

from __future__ import annotations

from typing import Any

from cosim.adapters.sdk import FailedPrecondition, InvalidArgument, MemoryBackend, Session
from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import types_pb2 as pb

from .formula import EXPECTED, SAMPLINGS, predict_lookup, predict_store
from .hierarchy import Hierarchy


class MemoryHierarchyBackend(MemoryBackend):
    """Times KV lookups and stores in a hierarchy of memory levels.

    Args:
        sampling: predict-mode answer to one lookup: ``"expected"`` (the
            formula's expectation, as MIST reports it) or ``"sampled"`` (one
            outcome drawn from the hit rates, deterministic in ``seed``, key
            and access id). See :mod:`cosim.adapters.memory.formula`.
        seed: seed of the ``"sampled"`` draws.

    Raises:
        ValueError: ``sampling`` is neither of the two.
    """

    name = "memory"
    version = "0.1.0"
    fidelity = pb.FIDELITY_ANALYTICAL
    description = "KV memory hierarchy: MIST recursive formula; LRU contents and shared bandwidth when synchronized"
    capabilities = ("predict", "time_synchronized")

    def __init__(self, sampling: str = EXPECTED, seed: int = 0) -> None:
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling={sampling!r} must be one of {list(SAMPLINGS)}")
        self.sampling, self.seed = sampling, seed

    def open_session(self, spec: mem_pb.MemorySessionSpec) -> Hierarchy | None:
        """Checks what the SDK does not, and builds the state of a synchronized session."""
        if spec.mode not in (pb.SYNC_MODE_PREDICT, pb.SYNC_MODE_TIME_SYNCHRONIZED):
            raise InvalidArgument("spec.mode", spec.mode, "must be PREDICT or TIME_SYNCHRONIZED")
        for i, level in enumerate(spec.levels):
            if len(set(level.shared_by)) != len(level.shared_by) or "" in level.shared_by:
                raise InvalidArgument(f"spec.levels[{i}].shared_by", list(level.shared_by),
                                      "must name distinct, non-empty clients")
        return Hierarchy(spec) if spec.mode == pb.SYNC_MODE_TIME_SYNCHRONIZED else None

    def access(self, session: Session[mem_pb.MemorySessionSpec],
               accesses: list[mem_pb.MemoryAccess]) -> list[mem_pb.AccessResult]:
        """Times accesses: by contents when synchronized, by hit rates otherwise."""
        state: Any = session.state
        if isinstance(state, Hierarchy):
            return state.access(accesses)
        levels = list(session.spec.levels)
        results = []
        for access in accesses:
            if access.op == mem_pb.ACCESS_OP_LOOKUP:
                results.append(predict_lookup(levels, access, kv_bytes_per_token=session.spec.kv_bytes_per_token,
                                              sampling=self.sampling, seed=self.seed))
            elif access.op == mem_pb.ACCESS_OP_STORE:
                results.append(predict_store(levels, access))
            else:  # EVICT: predict mode keeps no contents, so there is nothing to drop
                results.append(mem_pb.AccessResult(id=access.id, level=-1))
        return results

    def advance(self, session: Session[mem_pb.MemorySessionSpec], until_ns: int) -> pb.AdvanceResponse:
        """Reports completions up to ``until_ns``; FAILED_PRECONDITION in predict mode."""
        if not isinstance(session.state, Hierarchy):
            raise FailedPrecondition(f"session {session.id!r} is in predict mode; Advance needs "
                                     "spec.mode=SYNC_MODE_TIME_SYNCHRONIZED")
        return session.state.advance(until_ns)
