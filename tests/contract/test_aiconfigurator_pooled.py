"""Pooled decodes (the ``pooled_decodes`` capability): an aiconfigurator session times a batch as its
representative one, decodes at their mean context, exactly as the batch itself, and declares so only
where its mixed steps take no FA2 varlen scaling (adapters/aiconfigurator/mixed.py)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import grpc
import pytest

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed: pip install "
                    "'cosim[aiconfigurator]' (the dev extra includes it)")

from cosim.adapters.sdk import BackendServer, Session
from cosim.hub.timing.cache import POOLED_DECODES, RuntimeSessionProxy
from cosim.v1 import runtime_service_pb2 as rt_pb
from cosim.v1 import runtime_service_pb2_grpc as rt_grpc
from cosim.v1 import types_pb2 as pb
from tests.contract.test_aiconfigurator_contract import BACKEND, make_spec, open_session

Batch = tuple[list[int], list[int]]


class SessionClient:
    """Stands in for a RuntimeClient: the backend's own predict on one session, recording each batch."""

    def __init__(self, session: Session[pb.SessionSpec]) -> None:
        self.session, self.step_batch = session, pb.StepBatch
        self.sent: list[Batch] = []

    def predict_steps(self, session_id: str, batches: Sequence[pb.StepBatch], **_: object) -> list[pb.StepTiming]:
        self.sent += [(list(b.new_tokens), list(b.context_tokens)) for b in batches]
        return [BACKEND.predict(self.session, b) for b in batches]


def random_batches(rng: random.Random, *, chunks: int) -> list[Batch]:
    """Batches of 1 to 128 decodes (contexts up to 8,000) with up to ``chunks`` prefill chunks, shuffled."""
    batches = []
    for _ in range(30):
        seqs = [(1, rng.randint(1, 8000)) for _ in range(rng.randint(1, 128))]
        seqs += [(rng.randint(2, 2048), rng.randint(0, 4000)) for _ in range(rng.randint(chunks and 1, chunks))]
        rng.shuffle(seqs)
        batches.append(([n for n, _ in seqs], [c for _, c in seqs]))
    return batches


@pytest.mark.parametrize("chunks", [0, 3], ids=["decode-only", "mixed"])
def test_pooled_batches_time_as_the_exact_ones_on_h100(chunks: int) -> None:
    session = open_session(make_spec())
    session.omit_breakdown = True  # as the hub asks
    client = SessionClient(session)
    proxy = RuntimeSessionProxy(client, "s", cache=False, pooled_decodes=True)  # type: ignore[arg-type]
    batches = random_batches(random.Random(chunks), chunks=chunks)
    for new, context in batches:
        for ranks in ((), (sum(new), 2 * sum(new))):  # alone, and padded in a DP lock-step group
            exact = BACKEND.predict(session, pb.StepBatch(new_tokens=new, context_tokens=context,
                                                          dp_rank_tokens=ranks))
            pooled = proxy.step_time(new, context, now_ns=0, dp_rank_tokens=ranks)
            assert (pooled.duration_ns, pooled.compute_ns, pooled.communication_ns) == (
                exact.duration_ns, exact.compute_ns, exact.communication_ns), (new, context, ranks)
    assert sum(sent != exact for sent, exact in zip(client.sent[::2], batches)) > 25  # representative ones


def test_a_session_declares_pooled_decodes_unless_its_mixed_steps_read_each_decode_over_grpc() -> None:
    """H100 (FlashAttention-3) declares it; the RTX PRO 6000 (FA2's varlen call) does not; Describe, which
    speaks for every session, does not either."""
    with BackendServer(BACKEND) as server, grpc.insecure_channel(server.address) as channel:
        stub = rt_grpc.RuntimeBackendServiceStub(channel)
        declared = {device: POOLED_DECODES in stub.OpenSession(rt_pb.OpenSessionRequest(spec=make_spec(device=device)),
                                                               timeout=120).info.capabilities
                    for device in ("H100-SXM", "RTX-PRO-6000")}
        described = stub.Describe(pb.DescribeRequest(), timeout=60).info.capabilities
    assert declared == {"H100-SXM": True, "RTX-PRO-6000": False}
    assert POOLED_DECODES not in described and "mixed_batches" in described
