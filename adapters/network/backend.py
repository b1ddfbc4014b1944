"""``AnalyticalNetworkBackend``: the ASTRA-sim-style network behind the contract.

A session's ``mode`` picks the model: SYNC_MODE_PREDICT answers final,
congestion-unaware durations (:mod:`.model`); SYNC_MODE_TIME_SYNCHRONIZED
runs the congestion-aware link simulation (:mod:`.congestion`) under the
protocol described in the package docstring.
"""

from __future__ import annotations

import dataclasses

from cosim.adapters.sdk import FailedPrecondition, InvalidArgument, NetworkBackend, Session
from cosim.adapters.sdk.validation import validate_network_spec
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import types_pb2 as pb

from .collectives import DBT_ALG, HD_ALG, UnsupportedCollective
from .congestion import Stage, SynchronizedNetwork
from .model import NetworkModel, layer_sizes, shard_pairs

NetSession = Session[net_pb.NetworkSessionSpec]

_KINDS = (net_pb.TOPOLOGY_KIND_RING, net_pb.TOPOLOGY_KIND_FULLY_CONNECTED, net_pb.TOPOLOGY_KIND_SWITCH)
_COLLECTIVES = (net_pb.COLLECTIVE_KIND_ALL_REDUCE, net_pb.COLLECTIVE_KIND_ALL_GATHER,
                net_pb.COLLECTIVE_KIND_REDUCE_SCATTER, net_pb.COLLECTIVE_KIND_ALL_TO_ALL)
_ALGORITHM_FIELDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclasses.dataclass
class NetworkState:
    """Per-session state: the model, and the link simulation when time-synchronized."""

    model: NetworkModel
    sync: SynchronizedNetwork | None


def validate_system(spec: net_pb.NetworkSessionSpec, *, field: str = "spec") -> None:
    """Checks what the SDK leaves to the backend: topology kinds, the system
    layer's algorithm lists and figures, and NPUs listed twice."""
    for i, dim in enumerate(spec.dims):
        if dim.kind not in _KINDS:
            raise InvalidArgument(f"{field}.dims[{i}].kind", dim.kind, "is not a known topology kind "
                                  "(RING=1, FULLY_CONNECTED=2, SWITCH=3)")
    system = spec.system
    for name in _ALGORITHM_FIELDS:
        algorithms = list(getattr(system, name))
        if algorithms and len(algorithms) != len(spec.dims):
            raise InvalidArgument(f"{field}.system.{name}", algorithms,
                                  f"must list one algorithm per dimension ({len(spec.dims)}) or none")
        for d, algorithm in enumerate(algorithms):
            where = f"{field}.system.{name}[{d}]"
            if algorithm not in net_pb.CollectiveAlgorithm.values() or algorithm == 0:
                raise InvalidArgument(where, algorithm, "must be RING, DIRECT, HALVING_DOUBLING or DOUBLE_BINARY_TREE")
            if algorithm == DBT_ALG and name != "all_reduce":
                raise InvalidArgument(where, "DOUBLE_BINARY_TREE", "is only implemented for all_reduce")
            if algorithm == HD_ALG and name == "all_to_all":
                raise InvalidArgument(where, "HALVING_DOUBLING", "does not run all_to_all (ASTRA-sim has no "
                                      "halving-doubling all-to-all and exits on it); use RING or DIRECT")
            npus = spec.dims[d].npus
            if algorithm == HD_ALG and npus & (npus - 1):
                raise InvalidArgument(where, "HALVING_DOUBLING",
                                      f"needs a power-of-two dimension, dims[{d}] has {npus}")
    if (DBT_ALG in system.all_reduce and len(spec.dims) > 1
            and system.collective_optimization == net_pb.COLLECTIVE_OPTIMIZATION_LOCAL_BW_AWARE):
        raise InvalidArgument(f"{field}.system.all_reduce", "DOUBLE_BINARY_TREE",
                              "cannot run the reduce-scatter and all-gather phases of a localBWAware all-reduce "
                              "(ASTRA-sim runs its tree all-reduce on a ring there); use BASELINE or another algorithm")
    for name in ("endpoint_delay_ns", "local_mem_bandwidth_gbps"):
        if getattr(system, name) < 0:
            raise InvalidArgument(f"{field}.system.{name}", getattr(system, name), "must be >= 0")
    for i, endpoint in enumerate(spec.endpoints):
        if len(set(endpoint.npu_ids)) != len(endpoint.npu_ids):
            raise InvalidArgument(f"{field}.endpoints[{i}].npu_ids", list(endpoint.npu_ids), "lists an NPU twice")


class AnalyticalNetworkBackend(NetworkBackend):
    """ASTRA-sim 2.0 analytical network and system layer, congestion-unaware
    (predict) or congestion-aware (time-synchronized)."""

    name = "network"
    version = "0.1.0"
    fidelity = pb.FIDELITY_ANALYTICAL
    description = "ASTRA-sim-style analytical network (congestion-unaware or store-and-forward congestion-aware)"
    capabilities = ("predict", "time_synchronized", "congestion_aware", "collectives", "point_to_point")

    def open_session(self, spec: net_pb.NetworkSessionSpec) -> NetworkState:
        validate_network_spec(spec)
        validate_system(spec)
        model = NetworkModel(spec)
        is_sync = spec.mode == pb.SYNC_MODE_TIME_SYNCHRONIZED
        return NetworkState(model, SynchronizedNetwork(model.topology) if is_sync else None)

    def transfer(self, session: NetSession, transfers: list[net_pb.PointToPoint]) -> list[net_pb.NetworkResult]:
        state: NetworkState = session.state
        self._check_endpoints(state.model, [(f"transfers[{i}].{f}", getattr(t, f))
                                            for i, t in enumerate(transfers) for f in ("src", "dst")])
        if state.sync is None:
            return [net_pb.NetworkResult(id=t.id, duration_ns=state.model.transfer_ns(t.src, t.dst, t.size_bytes,
                                                                                    t.layers))
                    for t in transfers]
        ep = state.model.costs.endpoint_delay_ns
        jobs = []
        for t in transfers:
            messages = tuple((s, d, m) for s, d, shard in shard_pairs(state.model.endpoints[t.src],
                                                                    state.model.endpoints[t.dst], t.size_bytes)
                             if s != d for m in layer_sizes(shard, t.layers))
            jobs.append((t.id, t.now_ns, [[Stage(messages, ep)]] if messages else []))
        return self._submit(state.sync, jobs, "transfers")

    def collective(self, session: NetSession, collectives: list[net_pb.CollectiveOp]) -> list[net_pb.NetworkResult]:
        state: NetworkState = session.state
        model = state.model
        self._check_endpoints(model, [(f"collectives[{i}].endpoint", c.endpoint)
                                      for i, c in enumerate(collectives) if c.endpoint])
        results, jobs = [], []
        for i, c in enumerate(collectives):
            if c.kind not in _COLLECTIVES:
                raise InvalidArgument(f"collectives[{i}].kind", c.kind,
                                      "must be ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER or ALL_TO_ALL")
            try:
                if state.sync is None:
                    results.append(net_pb.NetworkResult(
                        id=c.id, duration_ns=model.collective_ns(c.kind, c.size_bytes, c.endpoint)))
                else:
                    jobs.append((c.id, c.now_ns, self._chains(model, c)))
            except UnsupportedCollective as err:
                raise InvalidArgument(f"collectives[{i}].endpoint", c.endpoint,
                                      f"cannot run {net_pb.CollectiveKind.Name(c.kind)} on its NPUs: {err}") from err
        if state.sync is None:
            return results
        return self._submit(state.sync, jobs, "collectives")

    def advance(self, session: NetSession, until_ns: int) -> pb.AdvanceResponse:
        sync = session.state.sync
        if sync is None:
            raise FailedPrecondition(f"session {session.id!r} is in predict mode; Advance needs "
                                     "SYNC_MODE_TIME_SYNCHRONIZED")
        if until_ns < sync.clock_ns:
            raise FailedPrecondition(f"until_ns={until_ns} goes back before the session clock {sync.clock_ns} ns")
        done, next_ns = sync.advance(until_ns)
        return pb.AdvanceResponse(completions=[pb.Completion(id=job, completion_ns=t) for t, job in done],
                                  next_event_ns=next_ns)

    @staticmethod
    def _chains(model: NetworkModel, op: net_pb.CollectiveOp) -> list[list[Stage]]:
        """One chain of stages per chunk; each round of the plan is a stage.

        In one dimension, ASTRA-sim runs ``active_chunks_per_dimension`` chunks
        at a time: chunk i then follows chunk i - active on the same chain.
        Across several dimensions (which ASTRA-sim's congestion-aware backend
        does not model) every chunk starts at once and the links arbitrate.
        """
        group = model.group(op.endpoint)
        ep = model.costs.endpoint_delay_ns
        chains = []
        for chunk in model.chunks(op.kind, op.size_bytes, group):
            stages: list[Stage] = []
            for phase in model.plan(op.kind, chunk, group):
                for r in phase.rounds:
                    messages = tuple((s, d, r.size_bytes) for s, d in r.pairs)
                    stages += [Stage(messages, r.delay_ns)] * r.repeat
                stages[-1] = Stage(stages[-1].messages, stages[-1].delay_ns + ep)  # the phase's closing delay
            chains.append(stages)
        if len(model.topology.dims) == 1 and len(chains) > model.active_chunks:
            return [[stage for chain in chains[first::model.active_chunks] for stage in chain]
                    for first in range(model.active_chunks)]
        return chains

    @staticmethod
    def _submit(sync: SynchronizedNetwork, jobs: list[tuple[int, int, list[list[Stage]]]],
                field: str) -> list[net_pb.NetworkResult]:
        clock = sync.clock_ns
        seen: set[int] = set()
        for i, (job, now_ns, _) in enumerate(jobs):
            if now_ns < clock:
                raise FailedPrecondition(f"{field}[{i}].now_ns={now_ns} is before {clock} ns; time-synchronized "
                                         "calls must arrive in nondecreasing time")
            if sync.is_pending(job) or job in seen:
                raise InvalidArgument(f"{field}[{i}].id", job, "is already in flight in this session")
            clock = now_ns
            seen.add(job)
        provisional = sync.submit(jobs)
        return [net_pb.NetworkResult(id=job, duration_ns=provisional[job] - now_ns) for job, now_ns, _ in jobs]

    @staticmethod
    def _check_endpoints(model: NetworkModel, named: list[tuple[str, str]]) -> None:
        for field, name in named:
            if name not in model.endpoints:
                raise InvalidArgument(field, name, f"is not an endpoint of the session; "
                                      f"endpoints: {sorted(model.endpoints)}")
