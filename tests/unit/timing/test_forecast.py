"""A kept forecast answers for a later step in flight exactly as a fresh copy made then would,
with a backlog's stop at a departure re-judged from that step; and it refuses a step it did not
predict."""

from __future__ import annotations

import pytest
from cosim_core import Forecast, predict

from cosim.hub.config.choices import BATCHING
from cosim.hub.sim.scheduling import ScheduledBatch, Scheduler
from tests.unit.sim.test_scheduler import scheduler, seq


def loaded(batching: str) -> Scheduler:
    s = scheduler(blocks=12, block_size=4, batching=batching, max_num_seqs=3, chunk_size=8,
                  max_num_batched_tokens=16)
    for rid, (prompt, output) in enumerate([(5, 9), (7, 3), (12, 6), (3, 12), (9, 2)]):
        s.add(seq(prompt, output, rid=rid))
    return s


@pytest.mark.parametrize("depth", [1, 3, 40])
@pytest.mark.parametrize("batching", list(BATCHING))
def test_a_kept_forecast_answers_every_later_step_as_a_fresh_copy(batching: str, depth: int) -> None:
    s = loaded(batching)
    in_flight = s.schedule()
    forecast = Forecast(s, in_flight)
    answers = 0
    for step in range(60):
        fresh = predict(s, in_flight, depth)
        kept = forecast.after(step, depth, in_flight)
        if kept is None:  # only where it ran out of steps: nothing could run on the copy
            assert forecast.ended
            break
        assert kept == fresh, f"step {step}"
        answers += 1
        s.update(in_flight)
        if not s.has_work:
            break
        in_flight = s.schedule()
    assert answers >= 10


def test_the_backlog_stop_is_judged_from_the_step_in_flight() -> None:
    """From the first step five prompts wait, so a prediction stops at the first departure once
    they are gone; from a step after the queue emptied there is no backlog, and it goes on."""
    s = loaded("continuous")
    in_flight = s.schedule()
    forecast = Forecast(s, in_flight)
    first = forecast.after(0, 40, in_flight)
    assert first is not None and len(first) < 40
    for _ in range(len(first)):
        s.update(in_flight)
        in_flight = s.schedule()
    later = forecast.after(len(first), 40, in_flight)
    assert later == predict(s, in_flight, 40) and later  # goes past where the first call stopped


def test_a_step_the_forecast_did_not_predict_is_refused() -> None:
    s = loaded("continuous")
    in_flight = s.schedule()
    forecast = Forecast(s, in_flight)
    assert forecast.after(0, 4, in_flight)
    s.update(in_flight)
    other = ScheduledBatch()
    other.add(s.running[0], 2)  # not what the policy forms next
    assert forecast.after(1, 4, other) is None
