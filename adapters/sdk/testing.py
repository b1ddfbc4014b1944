"""Conformance suite for runtime backends: ``python -m cosim.adapters.sdk.testing module:Class``.

Runs the checks the hub relies on over a real gRPC channel: Describe, health,
reflection, OpenSession, PredictSteps with several batches (one timing each,
durations >= 0, deterministic), PredictStepsStream answering the same where
offered (optional), INVALID_ARGUMENT naming the field for bad
input, NOT_FOUND for an unknown session, CloseSession. Passing it means the
backend works with the hub.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb

from .backend import RuntimeBackend, Session
from .server import BackendServer, load_backend


def sample_session_spec(**hardware: float) -> pb.SessionSpec:
    """A Llama-3-8B session on one H100-SXM (figures from the public model card and datasheet)."""
    return pb.SessionSpec(
        client="conformance",
        model=pb.ModelSpec(name="meta-llama/Meta-Llama-3-8B", num_layers=32, hidden_size=4096,
                           num_attention_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                           vocab_size=128256, bytes_per_param=2, bytes_per_kv_element=2, gated_mlp=True),
        hardware=pb.HardwareSpec(device="H100-SXM", count=1, peak_tflops=989.0, mem_bandwidth_gbps=3350.0,
                                 mem_capacity_bytes=80 * 10**9, intra_node_gbps=450.0, inter_node_gbps=50.0,
                                 devices_per_node=8, **hardware),
        parallelism=pb.Parallelism(tensor=1, pipeline=1))


SAMPLE_BATCHES = (
    pb.StepBatch(new_tokens=[512], context_tokens=[0]),  # one prefill
    pb.StepBatch(new_tokens=[1, 1, 1], context_tokens=[100, 900, 2000]),  # three decodes
    pb.StepBatch(new_tokens=[256, 1], context_tokens=[256, 64]),  # a chunk and a decode
)


def _expect_code(call: Callable[[], object], code: grpc.StatusCode, mentions: str) -> None:
    try:
        call()
    except grpc.RpcError as err:
        assert err.code() == code, f"expected {code.name}, got {err.code().name}: {err.details()}"  # type: ignore[attr-defined]
        assert mentions in (err.details() or ""), f"error should name {mentions!r}: {err.details()}"  # type: ignore[attr-defined]
        return
    raise AssertionError(f"expected {code.name} naming {mentions!r}, but the call succeeded")


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
        assert info.name and info.kind == pb.BACKEND_KIND_RUNTIME, f"Describe answered {info}"
        passed.append("describe")

        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="cosim.v1.RuntimeBackendService"), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        passed.append("health")

        replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        services = {s.name for reply in replies for s in reply.list_services_response.service}
        assert "cosim.v1.RuntimeBackendService" in services, f"reflection lists {services}"
        passed.append("reflection")

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
            if err.code() != grpc.StatusCode.UNIMPLEMENTED:  # type: ignore[attr-defined]
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


def run_conformance(backend: RuntimeBackend, spec: pb.SessionSpec | None = None) -> list[str]:
    """Serves ``backend`` on a free loopback port and runs :func:`check_runtime_backend`."""
    with BackendServer(backend) as server:
        return check_runtime_backend(server.address, spec)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cosim.adapters.sdk.testing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("backend", nargs="?", help="runtime backend class as package.module:ClassName")
    parser.add_argument("--address", help="check a backend already running at host:port instead")
    args = parser.parse_args(argv)
    if not (args.backend or args.address):
        parser.error("give a backend class or --address")
    try:
        if args.address:
            passed = check_runtime_backend(args.address)
        else:
            backend = load_backend(args.backend)
            if not isinstance(backend, RuntimeBackend):
                parser.error(f"{args.backend} is not a RuntimeBackend")
            passed = run_conformance(backend)
    except AssertionError as err:
        print(f"FAILED: {err}", file=sys.stderr)  # noqa: T201
        return 1
    print(f"{len(passed)} passed, 0 failed: {', '.join(passed)}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())


class LinearBackend(RuntimeBackend):
    """A test backend whose step time is linear in the batch, set by session options:

    ``duration_ns = step_ns + per_token_ns x new tokens + per_seq_ns x sequences
    + per_context_ns x context tokens``, each option defaulting to 0 (step_ns to 1000).
    Hand-computed scenarios use it as the "constant-time test backend".
    """

    name = "linear"
    version = "1.0.0"
    fidelity = pb.FIDELITY_ANALYTICAL
    description = "linear test backend (step_ns + per-token terms)"

    def open_session(self, spec: pb.SessionSpec) -> tuple[int, int, int, int]:
        options = dict(spec.options)
        return (int(options.get("step_ns", 1000)), int(options.get("per_token_ns", 0)),
                int(options.get("per_seq_ns", 0)), int(options.get("per_context_ns", 0)))

    def predict(self, session: Session[pb.SessionSpec], batch: pb.StepBatch) -> pb.StepTiming:
        step_ns, per_token_ns, per_seq_ns, per_context_ns = session.state
        duration = step_ns + per_token_ns * sum(batch.new_tokens) + per_seq_ns * len(batch.new_tokens) \
            + per_context_ns * sum(batch.context_tokens)
        return pb.StepTiming(duration_ns=duration, compute_ns=duration)
