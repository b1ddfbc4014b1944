"""Plain batches: a backend that takes them (``RuntimeBackend.plain_batches``) gets PlainBatch tuples
from the hub's in-process calls, and times them exactly as the StepBatch messages sent over gRPC."""

from __future__ import annotations

import pytest

from cosim.adapters.sdk import BackendServer, PlainBatch, load_backend
from cosim.adapters.sdk.samples import SAMPLE_BATCHES
from cosim.adapters.sdk.servicers import RuntimeServicer
from cosim.adapters.sdk.testing import LinearBackend, sample_session_spec
from cosim.hub.backends import BUILTIN_BACKENDS, RuntimeClient
from cosim.hub.backends.inprocess import InProcessRuntimeClient, in_process_runtime_client
from cosim.hub.errors import BackendError
from cosim.v1 import types_pb2 as pb

from .test_regression_contract import make_spec as regression_spec

BATCHES = [
    *SAMPLE_BATCHES,
    pb.StepBatch(new_tokens=[1] * 40, context_tokens=list(range(100, 4100, 100))),  # decodes: the backends' fast path
    pb.StepBatch(new_tokens=[1, 1], context_tokens=[0, 700]),  # a one-token prompt is no decode
    pb.StepBatch(new_tokens=[1, 1], context_tokens=[300, 400], dp_rank_tokens=[2, 9]),  # DP lock-step padding
]


def test_plain_batch_has_the_fields_of_step_batch_in_order() -> None:
    assert PlainBatch._fields == tuple(field.name for field in pb.StepBatch.DESCRIPTOR.fields)


def _fields(timing: pb.StepTiming) -> tuple[object, ...]:
    return (timing.duration_ns, timing.compute_ns, timing.memory_ns, timing.communication_ns, timing.dispatch_ns,
            timing.energy_j, timing.out_of_range)


@pytest.mark.parametrize("name", ["roofline", "regression"])
def test_in_process_plain_batches_time_as_messages_over_grpc(name: str) -> None:
    spec = regression_spec() if name == "regression" else sample_session_spec()
    batches = BATCHES if name == "regression" else [  # LoRA adapters: the roofline's
        *BATCHES, pb.StepBatch(new_tokens=[64, 1], context_tokens=[0, 50], lora_ranks=[16, 0])]
    server = BackendServer(load_backend(BUILTIN_BACKENDS[name]), port=0).start()
    remote = RuntimeClient(name, server.address, reconnect_s=0)
    local = in_process_runtime_client(name, BUILTIN_BACKENDS[name])
    try:
        assert local.step_batch is PlainBatch and remote.step_batch is pb.StepBatch
        plain = [local.step_batch(**{f.name: tuple(v) for f, v in b.ListFields()}) for b in batches]
        for omit in (True, False):
            over_grpc = remote.predict_steps(remote.open_session(spec).session_id, batches, omit_breakdown=omit)
            in_process = local.predict_steps(local.open_session(spec).session_id, plain, omit_breakdown=omit)
            assert [_fields(t) for t in in_process] == [_fields(t) for t in over_grpc]
            if not omit:
                assert [dict(t.breakdown) for t in in_process] == [dict(t.breakdown) for t in over_grpc]
    finally:
        remote.close()
        server.stop(0)


def test_a_bad_plain_batch_is_invalid_argument_as_a_message_would_be() -> None:
    local = in_process_runtime_client("roofline", BUILTIN_BACKENDS["roofline"])
    session_id = local.open_session(sample_session_spec()).session_id
    with pytest.raises(BackendError, match=r"INVALID_ARGUMENT: batches\[1\]\.context_tokens"):
        local.predict_steps(session_id, [PlainBatch((1,), (5,)), PlainBatch((1, 1), (5,))])
    with pytest.raises(BackendError, match=r"INVALID_ARGUMENT: batches\[0\]\.new_tokens\[1\]=0"):
        local.predict_steps(session_id, [PlainBatch((4, 0), (5, 6))])


def test_a_backend_that_reads_messages_gets_messages_in_process() -> None:
    assert not LinearBackend.plain_batches
    assert InProcessRuntimeClient("linear", RuntimeServicer(LinearBackend())).step_batch is pb.StepBatch
