"""Conformance suite for backends: ``python -m cosim.adapters.sdk.testing module:Class``.

Runs the checks the hub relies on over a real gRPC channel, for each kind of
backend. Every kind: Describe (its name and kind), health, reflection,
OpenSession, INVALID_ARGUMENT naming the field for a bad spec and bad input,
NOT_FOUND for an unknown session, CloseSession. Runtime backends:
PredictSteps with several batches (one timing each, durations >= 0,
deterministic), PredictStepsStream answering the same where offered
(optional). Memory backends: Access in predict mode (one result per access,
in order, durations >= 0, deterministic), Advance refused in predict mode.
Network backends: Transfer and Collective likewise. Passing it means the
backend works with the hub.

Main names: :func:`run_conformance` (serve a backend object and check it),
:func:`check_backend` (check whatever runs at an address).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cosim.v1 import memory_service_pb2 as mem_pb
from cosim.v1 import memory_service_pb2_grpc as mem_grpc
from cosim.v1 import network_service_pb2 as net_pb
from cosim.v1 import network_service_pb2_grpc as net_grpc
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb

from .backend import Backend, MemoryBackend, NetworkBackend, RuntimeBackend, Session
from .server import BackendServer, load_backend

RUNTIME_SERVICE = "cosim.v1.RuntimeBackendService"
MEMORY_SERVICE = "cosim.v1.MemoryBackendService"
NETWORK_SERVICE = "cosim.v1.NetworkBackendService"

Spec = pb.SessionSpec | mem_pb.MemorySessionSpec | net_pb.NetworkSessionSpec
SpecT = TypeVar("SpecT", pb.SessionSpec, mem_pb.MemorySessionSpec, net_pb.NetworkSessionSpec)


def sample_session_spec(*, extra: Mapping[str, float] | None = None) -> pb.SessionSpec:
    """A Llama-3-8B session on one H100-SXM (figures from the public model card and datasheet).

    Args:
        extra: figures for ``hardware.extra``, for backends that read some.
    """
    return pb.SessionSpec(
        client="conformance",
        model=pb.ModelSpec(name="meta-llama/Meta-Llama-3-8B", num_layers=32, hidden_size=4096,
                           num_attention_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                           vocab_size=128256, bytes_per_param=2, bytes_per_kv_element=2, gated_mlp=True),
        hardware=pb.HardwareSpec(device="H100-SXM", count=1, peak_tflops=989.0, mem_bandwidth_gbps=3350.0,
                                 mem_capacity_bytes=80 * 10**9, intra_node_gbps=450.0, inter_node_gbps=50.0,
                                 devices_per_node=8, extra=extra),
        parallelism=pb.Parallelism(tensor=1, pipeline=1))


SAMPLE_BATCHES = (
    pb.StepBatch(new_tokens=[512], context_tokens=[0]),  # one prefill
    pb.StepBatch(new_tokens=[1, 1, 1], context_tokens=[100, 900, 2000]),  # three decodes
    pb.StepBatch(new_tokens=[256, 1], context_tokens=[256, 64]),  # a chunk and a decode
)


def sample_memory_spec() -> mem_pb.MemorySessionSpec:
    """Host DRAM, then an SSD tier, in predict mode; KV of Llama-3-8B in fp16 (round figures)."""
    return mem_pb.MemorySessionSpec(
        client="conformance", mode=pb.SYNC_MODE_PREDICT, kv_bytes_per_token=131_072,
        levels=[mem_pb.MemoryLevel(name="dram", capacity_bytes=512 * 10**9, bandwidth_gbps=100.0, latency_ns=100,
                                   hit_rate=0.5),
                mem_pb.MemoryLevel(name="ssd", capacity_bytes=4 * 10**12, bandwidth_gbps=5.0, latency_ns=50_000,
                                   hit_rate=0.9)])


def sample_network_spec() -> net_pb.NetworkSessionSpec:
    """Two nodes of four NPUs behind switches, in predict mode; endpoints ``p`` (NPUs 0-1) and ``d`` (4-5)."""
    spec = net_pb.NetworkSessionSpec(client="conformance", mode=pb.SYNC_MODE_PREDICT,
                                     system=net_pb.SystemConfig(endpoint_delay_ns=10, local_mem_bandwidth_gbps=1000))
    spec.dims.add(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=4, bandwidth_gbps=100.0, latency_ns=500)
    spec.dims.add(kind=net_pb.TOPOLOGY_KIND_SWITCH, npus=2, bandwidth_gbps=25.0, latency_ns=2000)
    spec.endpoints.add(name="p", npu_ids=[0, 1])
    spec.endpoints.add(name="d", npu_ids=[4, 5])
    return spec


SAMPLE_ACCESSES = (
    mem_pb.MemoryAccess(id=1, op=mem_pb.ACCESS_OP_LOOKUP, key="prefix-0", size_bytes=64 * 131_072),
    mem_pb.MemoryAccess(id=2, op=mem_pb.ACCESS_OP_STORE, key="prefix-1", size_bytes=512 * 131_072),
)
SAMPLE_TRANSFERS = (net_pb.PointToPoint(id=1, src="p", dst="d", size_bytes=8_000_000),)
SAMPLE_COLLECTIVES = (net_pb.CollectiveOp(id=2, kind=net_pb.COLLECTIVE_KIND_ALL_REDUCE, size_bytes=1_000_000,
                                          endpoint="p"),)


def _expect_code(call: Callable[[], object], code: grpc.StatusCode, mentions: str) -> None:
    try:
        call()
    except grpc.RpcError as err:
        assert err.code() == code, f"expected {code.name}, got {err.code().name}: {err.details()}"
        assert mentions in (err.details() or ""), f"error should name {mentions!r}: {err.details()}"
        return
    raise AssertionError(f"expected {code.name} naming {mentions!r}, but the call succeeded")


def _check_served(channel: grpc.Channel, info: pb.BackendInfo, kind: int, service: str) -> list[str]:
    """Describe's answer, health and reflection: the checks every kind shares."""
    assert info.name and info.kind == kind, f"Describe answered {info}"
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
    services = {s.name for reply in replies for s in reply.list_services_response.service}
    assert service in services, f"reflection lists {services}"
    return ["describe", "health", "reflection"]


def check_runtime_backend(address: str, spec: pb.SessionSpec | None = None) -> list[str]:
    """Runs every check against the runtime backend at ``address``; returns their names.

    Raises:
        AssertionError: a check failed (the message says which and why).
    """
    spec = spec or sample_session_spec()
    passed: list[str] = []
    with grpc.insecure_channel(address) as channel:
        stub = rt_grpc.RuntimeBackendServiceStub(channel)
        info = stub.Describe(pb.DescribeRequest(), timeout=10).info
        passed += _check_served(channel, info, pb.BACKEND_KIND_RUNTIME, RUNTIME_SERVICE)

        session_id = stub.OpenSession(rt_pb.OpenSessionRequest(spec=spec), timeout=30).session_id
        request = rt_pb.PredictStepsRequest(session_id=session_id, batches=SAMPLE_BATCHES)
        first = stub.PredictSteps(request, timeout=30).timings
        assert len(first) == len(SAMPLE_BATCHES), f"{len(first)} timings for {len(SAMPLE_BATCHES)} batches"
        assert all(t.duration_ns >= 0 for t in first), "durations must be >= 0"
        assert list(stub.PredictSteps(request, timeout=30).timings) == list(first), "answers must be deterministic"
        passed.append("predict_steps")

        # Optional: the stream answers each request as PredictSteps does, in order.
        try:
            streams = rt_grpc.RuntimeStreamServiceStub(channel)
            streamed = [reply.timings for reply in streams.PredictStepsStream(iter([request, request]), timeout=30)]
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise AssertionError(f"PredictStepsStream failed: {err}") from err
        else:
            assert streamed == [first, first], "PredictStepsStream must answer as PredictSteps, in order"
            passed.append("predict_steps_stream")

        bad = pb.StepBatch(new_tokens=[1, 1], context_tokens=[5])
        _expect_code(lambda: stub.PredictSteps(rt_pb.PredictStepsRequest(session_id=session_id, batches=[bad])),
                     grpc.StatusCode.INVALID_ARGUMENT, "batches[0].context_tokens")
        bad_spec = pb.SessionSpec()
        bad_spec.CopyFrom(spec)
        bad_spec.parallelism.tensor = 3
        bad_spec.hardware.count = 3
        _expect_code(lambda: stub.OpenSession(rt_pb.OpenSessionRequest(spec=bad_spec)),
                     grpc.StatusCode.INVALID_ARGUMENT, "spec.parallelism.tensor")
        _expect_code(lambda: stub.PredictSteps(rt_pb.PredictStepsRequest(session_id="nope", batches=SAMPLE_BATCHES)),
                     grpc.StatusCode.NOT_FOUND, "nope")
        passed.append("errors")

        stub.CloseSession(pb.CloseSessionRequest(session_id=session_id), timeout=10)
        _expect_code(lambda: stub.CloseSession(pb.CloseSessionRequest(session_id=session_id)),
                     grpc.StatusCode.NOT_FOUND, session_id)
        passed.append("close_session")
    return passed


def check_memory_backend(address: str, spec: mem_pb.MemorySessionSpec | None = None) -> list[str]:
    """Runs every check against the memory backend at ``address``; returns their names.

    Args:
        address: ``host:port`` of the backend.
        spec: a predict-mode hierarchy the backend serves; default :func:`sample_memory_spec`.

    Raises:
        AssertionError: a check failed (the message says which and why).
    """
    spec = spec or sample_memory_spec()
    with grpc.insecure_channel(address) as channel:
        stub = mem_grpc.MemoryBackendServiceStub(channel)
        info = stub.Describe(pb.DescribeRequest(), timeout=10).info
        passed = _check_served(channel, info, pb.BACKEND_KIND_MEMORY, MEMORY_SERVICE)

        session_id = stub.OpenSession(mem_pb.OpenMemorySessionRequest(spec=spec), timeout=30).session_id
        request = mem_pb.AccessRequest(session_id=session_id, accesses=SAMPLE_ACCESSES)
        first = stub.Access(request, timeout=30).results
        assert [r.id for r in first] == [a.id for a in SAMPLE_ACCESSES], "one result per access, in order"
        assert all(r.duration_ns >= 0 for r in first), "durations must be >= 0"
        assert list(stub.Access(request, timeout=30).results) == list(first), "answers must be deterministic"
        passed.append("access")

        bad = mem_pb.MemoryAccess(id=3, key="prefix-0", size_bytes=1)
        _expect_code(lambda: stub.Access(mem_pb.AccessRequest(session_id=session_id, accesses=[bad])),
                     grpc.StatusCode.INVALID_ARGUMENT, "accesses[0].op")
        bad_spec = mem_pb.MemorySessionSpec()
        bad_spec.CopyFrom(spec)
        bad_spec.levels[0].hit_rate = 1.5
        _expect_code(lambda: stub.OpenSession(mem_pb.OpenMemorySessionRequest(spec=bad_spec)),
                     grpc.StatusCode.INVALID_ARGUMENT, "spec.levels[0].hit_rate")
        _expect_code(lambda: stub.Advance(pb.AdvanceRequest(session_id=session_id, until_ns=1)),
                     grpc.StatusCode.FAILED_PRECONDITION, "")
        _expect_code(lambda: stub.Access(mem_pb.AccessRequest(session_id="nope", accesses=SAMPLE_ACCESSES)),
                     grpc.StatusCode.NOT_FOUND, "nope")
        passed.append("errors")

        _check_close(stub, session_id)
        passed.append("close_session")
    return passed


def check_network_backend(address: str, spec: net_pb.NetworkSessionSpec | None = None) -> list[str]:
    """Runs every check against the network backend at ``address``; returns their names.

    Args:
        address: ``host:port`` of the backend.
        spec: a predict-mode topology with endpoints ``p`` and ``d``; default :func:`sample_network_spec`.

    Raises:
        AssertionError: a check failed (the message says which and why).
    """
    spec = spec or sample_network_spec()
    with grpc.insecure_channel(address) as channel:
        stub = net_grpc.NetworkBackendServiceStub(channel)
        info = stub.Describe(pb.DescribeRequest(), timeout=10).info
        passed = _check_served(channel, info, pb.BACKEND_KIND_NETWORK, NETWORK_SERVICE)

        session_id = stub.OpenSession(net_pb.OpenNetworkSessionRequest(spec=spec), timeout=30).session_id
        transfers = net_pb.TransferRequest(session_id=session_id, transfers=SAMPLE_TRANSFERS)
        collectives = net_pb.CollectiveRequest(session_id=session_id, collectives=SAMPLE_COLLECTIVES)
        for name, call, items in (("transfer", lambda: stub.Transfer(transfers, timeout=60).results,
                                   SAMPLE_TRANSFERS),
                                  ("collective", lambda: stub.Collective(collectives, timeout=60).results,
                                   SAMPLE_COLLECTIVES)):
            first = list(call())
            assert [r.id for r in first] == [i.id for i in items], f"{name}: one result per item, in order"
            assert all(r.duration_ns >= 0 for r in first), f"{name}: durations must be >= 0"
            assert list(call()) == first, f"{name}: answers must be deterministic"
            passed.append(name)

        bad = net_pb.PointToPoint(id=3, src="p", dst="nowhere", size_bytes=1)
        _expect_code(lambda: stub.Transfer(net_pb.TransferRequest(session_id=session_id, transfers=[bad])),
                     grpc.StatusCode.INVALID_ARGUMENT, "transfers[0].dst")
        bad_spec = net_pb.NetworkSessionSpec()
        bad_spec.CopyFrom(spec)
        bad_spec.dims[0].npus = 1
        _expect_code(lambda: stub.OpenSession(net_pb.OpenNetworkSessionRequest(spec=bad_spec)),
                     grpc.StatusCode.INVALID_ARGUMENT, "spec.dims[0].npus")
        _expect_code(lambda: stub.Advance(pb.AdvanceRequest(session_id=session_id, until_ns=1)),
                     grpc.StatusCode.FAILED_PRECONDITION, "")
        _expect_code(lambda: stub.Transfer(net_pb.TransferRequest(session_id="nope", transfers=SAMPLE_TRANSFERS)),
                     grpc.StatusCode.NOT_FOUND, "nope")
        passed.append("errors")

        _check_close(stub, session_id)
        passed.append("close_session")
    return passed


def _check_close(stub: mem_grpc.MemoryBackendServiceStub | net_grpc.NetworkBackendServiceStub,
                 session_id: str) -> None:
    stub.CloseSession(pb.CloseSessionRequest(session_id=session_id), timeout=10)
    _expect_code(lambda: stub.CloseSession(pb.CloseSessionRequest(session_id=session_id)),
                 grpc.StatusCode.NOT_FOUND, session_id)


def check_backend(address: str) -> list[str]:
    """Runs the checks for whichever kind of backend serves at ``address`` (found by reflection)."""
    checks: dict[str, Callable[[str], list[str]]] = {
        RUNTIME_SERVICE: check_runtime_backend, MEMORY_SERVICE: check_memory_backend,
        NETWORK_SERVICE: check_network_backend}
    with grpc.insecure_channel(address) as channel:
        replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        services = {s.name for reply in replies for s in reply.list_services_response.service}
    served = sorted(services & set(checks))
    assert len(served) == 1, f"reflection lists {sorted(services)}; expected one of {sorted(checks)}"
    return checks[served[0]](address)


def _spec_of(spec: Spec | None, cls: type[SpecT]) -> SpecT | None:
    if spec is not None and not isinstance(spec, cls):
        raise TypeError(f"a {type(spec).__name__} given where the backend takes a {cls.__name__}")
    return spec


def run_conformance(backend: Backend, spec: Spec | None = None) -> list[str]:
    """Serves ``backend`` on a free loopback port and runs the checks for its kind.

    Args:
        backend: a runtime, memory or network backend object.
        spec: the session spec to check with; default the kind's sample spec.

    Returns:
        The names of the checks, all passed.

    Raises:
        AssertionError: a check failed (the message says which and why).
        TypeError: ``spec`` is not of the backend's kind.
    """
    with BackendServer(backend) as server:
        if isinstance(backend, RuntimeBackend):
            return check_runtime_backend(server.address, _spec_of(spec, pb.SessionSpec))
        if isinstance(backend, MemoryBackend):
            return check_memory_backend(server.address, _spec_of(spec, mem_pb.MemorySessionSpec))
        assert isinstance(backend, NetworkBackend)  # BackendServer serves no other kind
        return check_network_backend(server.address, _spec_of(spec, net_pb.NetworkSessionSpec))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cosim.adapters.sdk.testing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("backend", nargs="?", help="backend class (runtime, memory or network) as "
                                                   "package.module:ClassName")
    parser.add_argument("--address", help="check a backend already running at host:port instead")
    args = parser.parse_args(argv)
    if not (args.backend or args.address):
        parser.error("give a backend class or --address")
    try:
        if args.address:
            passed = check_backend(args.address)
        else:
            try:
                backend = load_backend(args.backend)
            except ValueError as err:
                parser.error(str(err))
            passed = run_conformance(backend)
    except AssertionError as err:
        print(f"FAILED: {err}", file=sys.stderr)  # noqa: T201
        return 1
    except grpc.RpcError as err:
        print(f"FAILED: a call answered {err.code().name}: {err.details()}", file=sys.stderr)  # noqa: T201
        return 1
    print(f"{len(passed)} passed, 0 failed: {', '.join(passed)}")  # noqa: T201
    return 0


class LinearBackend(RuntimeBackend):
    """A test backend whose step time is linear in the batch, set by session options:

    ``duration_ns = step_ns + per_token_ns x new tokens + per_seq_ns x sequences
    + per_context_ns x context tokens``, each option defaulting to 0 (step_ns to 1000).
    In data-parallel lock-step the new tokens are padded to the most of any rank
    (``StepBatch.dp_rank_tokens``), as vLLM pads. Hand-computed scenarios use it as
    the "constant-time test backend".
    """

    name = "linear"
    version = "1.0.0"
    fidelity = pb.FIDELITY_ANALYTICAL
    description = "linear test backend (step_ns + per-token terms)"

    def open_session(self, spec: pb.SessionSpec) -> tuple[int, int, int, int]:
        options: dict[str, Any] = dict(spec.options)
        return (int(options.get("step_ns", 1000)), int(options.get("per_token_ns", 0)),
                int(options.get("per_seq_ns", 0)), int(options.get("per_context_ns", 0)))

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        step_ns, per_token_ns, per_seq_ns, per_context_ns = session.state
        tokens = max(sum(batch.new_tokens), max(batch.dp_rank_tokens, default=0))
        duration = step_ns + per_token_ns * tokens + per_seq_ns * len(batch.new_tokens) \
            + per_context_ns * sum(batch.context_tokens)
        return pb.StepTiming(duration_ns=duration, compute_ns=duration)


if __name__ == "__main__":
    sys.exit(main())
