"""Sessions of built-in backends opened in-process, so that validation refuses what a backend would.

A run opens each client's session on its backend, and a backend refuses a spec it cannot time (an
option out of range, a device it has no figures for) with INVALID_ARGUMENT. For the built-in kinds
(``backends.*.kind``) validation can ask the same question without starting anything: it calls the
backend's servicer in this process, as the run's gRPC call would, opens the session and closes it.
Other backends (``python:``, ``command:``, ``image:``, ``address:``) are only asked when a run starts
them.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import types_pb2 as pb

from ..config.scenario import ScenarioConfig
from ..errors import ScenarioError

log = logging.getLogger(__name__)

#: Longest a single step may take (11.6 days): a step of the largest batch beyond it means the
#: backend's options (an efficiency of 1e-300) would push a run past the int64 nanoseconds it counts in.
MAX_STEP_S = 1e6

#: Built-in kinds whose sessions are opened but no step is timed: a cycle-level simulator's step costs
#: what a run's step does, which its own options leave unbounded (SCALE-Sim's max_stream: 0 = all).
UNPROBED_KINDS = frozenset({"scalesim"})

class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Context:
    """The part of a ``grpc.ServicerContext`` the SDK's servicers use: abort."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)


class BuiltinSessions:
    """In-process servicers of a scenario's built-in backends, each loaded when first asked.

    Args:
        config: the scenario whose ``backends`` are asked.
    """

    def __init__(self, config: ScenarioConfig) -> None:
        self.config = config
        self._servicers: dict[str, Any] = {}

    def problem(self, backend: str, spec: pb.SessionSpec | mem_pb.MemorySessionSpec | net_pb.NetworkSessionSpec,
                where: str, *, probe_tokens: int = 0, dp_ranks: int = 1) -> ScenarioError | None:
        """What ``backend`` says of opening a session of ``spec``, located at ``where`` (as a run
        reports it), or None: it opens, or the backend is not a built-in one (nothing to ask).

        ``probe_tokens`` (runtime sessions): also time a step that prefills this many tokens (the
        largest step the client's scheduler forms), which must take at most :data:`MAX_STEP_S`:
        options that make every step overflow, or last for years, are refused here, not mid-run
        (not on :data:`UNPROBED_KINDS`). ``dp_ranks``: the ranks of the client's ``dp_group`` (1: none);
        the probe then carries every rank's tokens, as a lock-step run's steps do (``dp_rank_tokens``),
        so a backend that sizes the MoE layers by the ranks (aiconfigurator's EP over DP x TP) is asked
        what a run asks it.
        """
        servicer = self._servicer(backend, spec)
        if servicer is None:
            return None
        request: Any
        if isinstance(spec, pb.SessionSpec):
            request = rt_pb.OpenSessionRequest(spec=spec)
        elif isinstance(spec, mem_pb.MemorySessionSpec):
            request = mem_pb.OpenMemorySessionRequest(spec=spec)
        else:
            request = net_pb.OpenNetworkSessionRequest(spec=spec)
        if self.config.backends[backend].kind in UNPROBED_KINDS:
            probe_tokens = 0
        step = f"a step of {probe_tokens} prompt tokens"
        try:
            reply = servicer.OpenSession(request, _Context())
            try:
                if probe_tokens and isinstance(spec, pb.SessionSpec):
                    batch = pb.StepBatch(new_tokens=[probe_tokens], context_tokens=[0],
                                         dp_rank_tokens=[probe_tokens] * dp_ranks if dp_ranks > 1 else [])
                    timing = servicer.PredictSteps(rt_pb.PredictStepsRequest(session_id=reply.session_id,
                                                                             batches=[batch]), _Context()).timings[0]
                    if not 0 <= timing.duration_ns <= MAX_STEP_S * 1e9:
                        return ScenarioError(where, f"backend {backend!r} times {step} at "
                                                    f"{timing.duration_ns / 1e9:.4g} s, more than the {MAX_STEP_S:.0e} "
                                                    "s a step may take: its options are out of all proportion")
            finally:
                servicer.CloseSession(pb.CloseSessionRequest(session_id=reply.session_id), _Context())
        except _Aborted as err:
            if err.code == grpc.StatusCode.INVALID_ARGUMENT:
                return ScenarioError(where, f"backend {backend!r} rejected it: {err.details}")
            return ScenarioError(where, f"backend {backend!r} cannot open the session or time {step}: "
                                        f"{err.code.name}: {err.details}")
        return None

    def _servicer(self, backend: str, spec: Any) -> Any:
        kind = self.config.backends[backend].kind
        if kind is None:
            return None
        key = f"{backend}/{type(spec).__name__}"
        if key not in self._servicers:
            from cosim.adapters.sdk import load_backend
            from cosim.adapters.sdk.servicers import MemoryServicer, NetworkServicer, RuntimeServicer

            from ..backends.kinds import BUILTIN_BACKENDS

            try:
                instance = load_backend(BUILTIN_BACKENDS[kind])
            except ValueError as err:  # a missing extra: the run says how to install it when it starts
                log.debug("validation cannot load backend %r (%s): %s", backend, kind, err)
                self._servicers[key] = None
                return None
            servicer = {pb.SessionSpec: RuntimeServicer, mem_pb.MemorySessionSpec: MemoryServicer,
                        net_pb.NetworkSessionSpec: NetworkServicer}[type(spec)]
            self._servicers[key] = servicer(instance)
        return self._servicers[key]
