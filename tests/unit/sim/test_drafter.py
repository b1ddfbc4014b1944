"""A drafter model's forwards: what they are, and that a step's are asked in one backend call, with
those of the steps predicted to follow."""

from __future__ import annotations

import numpy as np
from cosim_core import Forecast

from cosim.hub.config.speculative import SpeculativeConfig
from cosim.hub.sim.clients.drafter import Drafter
from cosim.hub.sim.scheduling import ScheduledBatch
from cosim.hub.sim.scheduling.speculative import Speculation
from cosim.hub.timing.cache import RuntimeSessionProxy
from tests.unit.sim.test_scheduler import scheduler, seq
from tests.unit.timing.test_proxy import RecordingClient

DRAFT = SpeculativeConfig(method="draft_model", draft_model="d", num_speculative_tokens=3, acceptance_rate=0.7)


def batch() -> ScheduledBatch:
    """A decode verifying 3 drafts (context 40), a prompt's last chunk (20 of 50 tokens, from 30)
    and a prompt's first chunk (8 of 60)."""
    decoding, last_chunk, first_chunk = seq(37, 9, rid=0), seq(50, 5, rid=1), seq(60, 5, rid=2)
    decoding.num_computed, decoding.num_tokens = 40, 41  # its last token sampled, not yet computed
    last_chunk.num_computed = 30
    b = ScheduledBatch()
    b.add(decoding, 4)  # its token and 3 drafts
    b.add(last_chunk, 20)
    b.add(first_chunk, 8)
    return b


def test_the_forwards_are_one_over_the_step_then_one_token_per_proposer() -> None:
    """The decode and the finished prompt sample, then propose; the first chunk does not."""
    assert Drafter(DRAFT).forwards(batch()) == [((4, 20, 8), (40, 30, 0)),
                                                ((1, 1), (44, 50)),   # each one past what the step computed
                                                ((1, 1), (45, 51))]


def test_a_steps_forwards_are_asked_in_one_call_with_those_predicted() -> None:
    """A miss asks for the step's 3 forwards and the predicted ones at once: the step costs one
    call, and a predicted step's proposals none (RecordingClient: 1 + the sum of the contexts)."""
    backend = RecordingClient()
    drafter = Drafter(DRAFT, RuntimeSessionProxy(backend, "draft"))  # type: ignore[arg-type]
    predicted = [((1,), (69,)), ((1,), (70,)), ((1,), (71,))]  # the next step's
    total = drafter.propose_ns(batch(), 0, ahead=lambda depth: predicted)
    assert total == (1 + 70) + (1 + 94) + (1 + 96)
    assert backend.calls == [("", drafter.forwards(batch()) + predicted)]
    after = ScheduledBatch()
    seq_after = seq(69, 9, rid=3)
    seq_after.num_computed = 69
    after.add(seq_after, 1)  # the predicted step: a decode over 69 tokens
    assert drafter.propose_ns(after, 1) == 70 + 71 + 72
    assert len(backend.calls) == 1


def test_without_a_drafter_model_proposals_cost_host_time_per_proposer() -> None:
    ngram = SpeculativeConfig(method="ngram", num_speculative_tokens=3, acceptance_rate=0.7, propose_ns_per_seq=500)
    assert Drafter(ngram).propose_ns(batch(), 0) == 2 * 500


def test_a_forecast_keeps_the_forwards_of_each_step_it_predicts() -> None:
    """Predicted from the first step, every later step's forwards are what the drafter makes of
    the batch the scheduler then forms (no work arrives in between)."""
    s = scheduler(blocks=60, block_size=4, batching="chunked", max_num_seqs=3, max_num_batched_tokens=16)
    s.speculation = Speculation(DRAFT, np.random.default_rng(5))
    for rid, (prompt, output) in enumerate([(5, 9), (7, 3), (12, 20)]):  # none waits after the first step
        s.add(seq(prompt, output, rid=rid))
    drafter = Drafter(DRAFT)
    in_flight = s.schedule()
    forecast = Forecast(s, in_flight, drafter.forwards)
    predicted = forecast.after(0, 100, in_flight)
    assert predicted is not None and len(predicted) == 10 and forecast.ended  # to the last step
    actual = []
    for _ in predicted:
        s.update(in_flight)
        in_flight = s.schedule()
        actual.append(drafter.forwards(in_flight))
    assert forecast.drafts(0, len(predicted)) == [forward for forwards in actual for forward in forwards]
    assert forecast.drafts(3, 2) == actual[3] + actual[4]
    assert Forecast(s, in_flight).drafts(0, 5) == []  # made without a drafter
