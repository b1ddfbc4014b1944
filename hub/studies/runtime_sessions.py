"""The runtime sessions of one run, each with its timing proxy, for :mod:`.simulation`.

Clients whose session specs differ only in the client's name share one session and its cache. A
run at an edge of the prediction intervals (``step_edge``, :mod:`.intervals`) scales every
session's steps to that edge of the step error its backend declared; the sessions remember each
declared error for the run's ``intervals`` block.
"""

from __future__ import annotations

from collections.abc import Mapping

from cosim.v1 import types_pb2 as pb

from ..backends import BackendClient, RuntimeClient
from ..config.scenario import ScenarioConfig
from ..errors import ScenarioError, open_or_blame
from ..timing.cache import BUCKETED_CACHE_SAFE, POOLED_DECODES, RuntimeSessionProxy, SharedTimings
from ..timing.step_error import Edge, edge_scale

Opened = tuple[RuntimeSessionProxy, pb.OpenSessionResponse]


def without_client(spec: pb.SessionSpec) -> bytes:
    """The spec's bytes less the client's name: what a backend's timings may depend on."""
    anonymous = pb.SessionSpec()
    anonymous.CopyFrom(spec)
    anonymous.ClearField("client")
    return anonymous.SerializeToString(deterministic=True)


class RuntimeSessions:
    """The runtime sessions a run opened, by backend and spec (less the client's name).

    Args:
        config: the scenario.
        backends: a connected client per backend name.
        shared_timings: step timings shared with earlier runs of this process (see
            :class:`~.simulation.Simulation`); None: this run's own.
        step_edge: ``low`` or ``high``: each session's steps scaled to that edge of its declared
            step error; None: as the backends answer.
    """

    def __init__(self, config: ScenarioConfig, backends: Mapping[str, BackendClient], *,
                 shared_timings: SharedTimings | None = None, step_edge: Edge | None = None) -> None:
        self.config, self.backends = config, backends
        self.shared_timings, self.step_edge = shared_timings, step_edge
        self.opened: dict[tuple[str, bytes], Opened] = {}
        # The step error each session's backend declared (None: none), by what it times: a client's
        # name, or "<client> draft" for its speculative drafter.
        self.step_errors: dict[str, pb.StepError | None] = {}

    def session(self, where: str, backend_name: str, spec: pb.SessionSpec, *, label: str) -> Opened:
        """The session of ``spec`` on ``backend_name`` and its timing proxy: opened now, or the one
        already open for another client of the same spec. ``label`` names what it times."""
        key = (backend_name, without_client(spec))
        if key not in self.opened:
            self.opened[key] = self._open(where, backend_name, spec, key[1])
        opened = self.opened[key][1]
        self.step_errors[label] = opened.step_error if opened.HasField("step_error") else None
        return self.opened[key]

    def proxies(self) -> list[RuntimeSessionProxy]:
        """Every session's timing proxy, in the order they were opened."""
        return [proxy for proxy, _ in self.opened.values()]

    def _open(self, where: str, backend_name: str, spec: pb.SessionSpec, anonymous: bytes) -> Opened:
        backend = self.backends[backend_name]
        assert isinstance(backend, RuntimeClient)
        opened = open_or_blame(where, backend_name, lambda: backend.open_session(spec))
        backend_config = self.config.backends[backend_name]
        bucket = backend_config.cache_bucket_tokens
        if bucket and BUCKETED_CACHE_SAFE not in opened.info.capabilities:
            raise ScenarioError(f"backends.{backend_name}.cache_bucket_tokens",
                                f"{bucket}: backend {opened.info.name!r} does not declare {BUCKETED_CACHE_SAFE!r} "
                                "(its timings may change within a bucket); use 0 for exact keys")
        scale = edge_scale(opened, self.step_edge, backend=backend_name) if self.step_edge else 1.0
        shared = None
        if self.shared_timings is not None and backend_config.cache:
            # The same backend (as configured, and as it describes itself), the same session spec and scale.
            shared = self.shared_timings.cache((backend_config.model_dump_json(exclude={"deadline_s", "reconnect_s"}),
                                                opened.info.SerializeToString(deterministic=True), anonymous, bucket,
                                                scale))
        proxy = RuntimeSessionProxy(backend, opened.session_id, client_name=spec.client, cache=backend_config.cache,
                                    lookahead=backend_config.lookahead, bucket_tokens=bucket,
                                    pooled_decodes=POOLED_DECODES in opened.info.capabilities, shared_cache=shared,
                                    scale=scale, native=backend.native_model(opened.session_id))
        return proxy, opened
