"""The runtime session proxy: a miss carries the caller's predictions and the other riders' top-ups."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Sequence

from cosim.hub.sim.scheduling import Signature
from cosim.hub.timing.cache import RuntimeSessionProxy
from cosim.v1 import types_pb2 as pb


class RecordingClient:
    """Stands in for a RuntimeClient: times a batch as 1 + the sum of its contexts (out of range past
    1,000), and records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Signature]]] = []
        self.step_batch = pb.StepBatch

    def predict_steps(self, session_id: str, batches: Sequence[pb.StepBatch], *, sim_time_ns: int, client: str,
                      omit_breakdown: bool) -> list[pb.StepTiming]:
        self.calls.append((client, [(tuple(b.new_tokens), tuple(b.context_tokens)) for b in batches]))
        return [pb.StepTiming(duration_ns=1 + sum(b.context_tokens), out_of_range=sum(b.context_tokens) > 1000)
                for b in batches]


class Rider:
    def __init__(self, name: str, top_ups: list[Signature]) -> None:
        self.name, self.top_ups, self.asked = name, top_ups, 0

    def top_up(self, now_ns: int, depth: int) -> list[Signature]:
        self.asked += 1
        return self.top_ups


def test_a_miss_carries_the_callers_predictions_and_the_other_riders_top_ups() -> None:
    backend = RecordingClient()
    proxy = RuntimeSessionProxy(backend, "s", client_name="a")  # type: ignore[arg-type]
    a = Rider("a", [((1,), (999,))])
    b = Rider("b", [((1, 1), (10, 20)), ((1, 1), (11, 21))])
    proxy.join(a)
    proxy.join(b)
    timing = proxy.step_time([1], [5], now_ns=0, ahead=lambda depth: [((1,), (6,))], rider=a)
    assert timing.duration_ns == 6
    assert backend.calls == [("a", [((1,), (5,)), ((1,), (6,)), ((1, 1), (10, 20)), ((1, 1), (11, 21))])]
    assert (a.asked, b.asked) == (0, 1)  # the caller's own predictions come from ``ahead``
    assert proxy.step_time([1, 1], [11, 21], now_ns=1, rider=b).duration_ns == 33
    assert len(backend.calls) == 1  # b's step was answered by a's call
    b.top_ups = [((1, 1), (12, 22))]
    proxy.step_time([1], [7], now_ns=2, rider=a)
    assert backend.calls[1] == ("a", [((1,), (7,)), ((1, 1), (12, 22))])  # cached batches are not asked again


def test_top_ups_are_bucketed_like_the_callers_batches() -> None:
    backend = RecordingClient()
    proxy = RuntimeSessionProxy(backend, "s", bucket_tokens=64)  # type: ignore[arg-type]
    proxy.join(Rider("b", [((1,), (70,))]))
    proxy.step_time([1], [5], now_ns=0)
    assert backend.calls == [("", [((1,), (64,)), ((1,), (128,))])]


def test_out_of_range_counts_the_steps_run_not_the_batches_predicted() -> None:
    proxy = RuntimeSessionProxy(RecordingClient(), "s")  # type: ignore[arg-type]
    proxy.step_time([1], [5], now_ns=0, ahead=lambda depth: [((1,), (2000,)), ((1,), (3000,))])
    assert proxy.num_out_of_range == 0
    proxy.step_time([1], [2000], now_ns=1)
    assert proxy.num_out_of_range == 1


def test_a_miss_sends_each_batchs_further_fields_and_plain_batches_without() -> None:
    """Predicted batches of two arrays and batches with further StepBatch fields (LoRA adapters)
    ride in one call; each reaches the backend with exactly its own fields, and is cached under them."""
    sent: list[pb.StepBatch] = []
    backend = RecordingClient()
    record = backend.predict_steps

    def predict_steps(session_id: str, batches: Sequence[pb.StepBatch], **kwargs: object) -> list[pb.StepTiming]:
        sent.extend(batches)
        return record(session_id, batches, **kwargs)  # type: ignore[arg-type]

    backend.predict_steps = predict_steps  # type: ignore[method-assign]
    proxy = RuntimeSessionProxy(backend, "s")  # type: ignore[arg-type]
    lora = ((1,), (6,), ("lora_ranks", (8,)), ("lora_ids", (3,)))
    proxy.step_time([1], [5], now_ns=0, ahead=lambda depth: [lora, ((1,), (7,))])
    assert [(list(b.new_tokens), list(b.context_tokens), list(b.lora_ranks), list(b.lora_ids)) for b in sent] == [
        ([1], [5], [], []), ([1], [6], [8], [3]), ([1], [7], [], [])]
    assert proxy.peek(lora) is not None and proxy.peek(((1,), (6,))) is None  # keyed with its fields


def test_the_cache_drops_the_oldest_stored_past_its_bound_and_a_lookup_does_not_renew_it() -> None:
    backend = RecordingClient()
    proxy = RuntimeSessionProxy(backend, "s", lookahead=False, max_cache_entries=2)  # type: ignore[arg-type]
    for context in (1, 2, 1, 3):  # the second look at (1,) is a hit, which keeps its place
        proxy.step_time([1], [context], now_ns=0)
    assert proxy.cached() == [((1,), (2,)), ((1,), (3,))]
    assert (proxy.num_lookups, proxy.num_hits, len(backend.calls)) == (4, 1, 3)


def test_a_proxy_and_a_rider_holding_it_are_collected_together() -> None:
    """A step timer holds its session, which holds its riders: the garbage collector sees the cycle."""
    proxy = RuntimeSessionProxy(RecordingClient(), "s")  # type: ignore[arg-type]
    rider = Rider("a", [])
    rider.session = proxy  # type: ignore[attr-defined]
    proxy.join(rider)
    gone = weakref.ref(rider)
    del proxy, rider
    gc.collect()
    assert gone() is None


def test_a_pooled_session_times_each_batch_as_its_representative_one() -> None:
    """Decodes go last at their mean context, rounded as Python's round (10.5: 10, 11.5: 12): the step
    and the predicted batches alike, so batches of equal pools share one entry. A batch with a
    per-sequence field (drafts) stays exact; an unpooled session's batches do too."""
    backend = RecordingClient()
    proxy = RuntimeSessionProxy(backend, "s", pooled_decodes=True)  # type: ignore[arg-type]
    assert proxy.pooled_decodes and not RuntimeSessionProxy(backend, "s").pooled_decodes  # type: ignore[arg-type]
    proxy.join(Rider("b", [((1, 1), (10, 13))]))
    proxy.step_time([1, 64, 1], [9, 0, 12], now_ns=0, ahead=lambda depth: [((1, 1), (12, 9)), ((1, 1), (11, 10))])
    assert backend.calls == [("", [((64, 1, 1), (0, 10, 10)), ((1, 1), (10, 10)), ((1, 1), (12, 12))])]
    assert proxy.step_time([1, 1], [9, 11], now_ns=1).duration_ns == 21 and len(backend.calls) == 1
    drafts = (("draft_tokens", (2, 0)),)
    proxy.step_time([1, 1], [1, 2], now_ns=2, fields=drafts)
    assert backend.calls[1][1][0] == ((1, 1), (1, 2))
