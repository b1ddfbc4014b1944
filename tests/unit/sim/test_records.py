"""A client's timeline (hub/sim/records.py): its step rows are also its token times."""

from __future__ import annotations

from cosim.hub.sim.records import ClientTimeline


def test_token_times_are_the_ends_of_the_steps_that_gave_tokens() -> None:
    timeline = ClientTimeline()
    timeline.append(0, 10, 2, 20, 0, 3, 1)  # a prefill chunk: no token timed
    timeline.append(10, 25, 2, 0, 2, 3, 0, 2)
    timeline.append(25, 40, 3, 0, 3, 4, 0, 1)  # two paths of one request sampled: one token timed
    at_ns, tokens = timeline.token_times()
    assert at_ns.tolist() == [25, 40] and tokens.tolist() == [2, 1]
    assert timeline.columns()["num_seqs"].tolist() == [2, 2, 3] and len(timeline) == 3
    timeline.close()
