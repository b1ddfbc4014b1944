"""What a run records (hub/sim/records.py): a client's timeline, whose step rows are also its token times,
and the request and stage records (the compiled core's), which behave as the dataclasses they replaced."""

from __future__ import annotations

import copy
import pickle

import pytest

from cosim.hub.sim.power import StepJoules
from cosim.hub.sim.records import ClientTimeline, RequestRecord, StageRecord


def test_token_times_are_the_ends_of_the_steps_that_gave_tokens() -> None:
    timeline = ClientTimeline()
    timeline.append(0, 10, 2, 20, 0, 3, 1)  # a prefill chunk: no token timed
    timeline.append(10, 25, 2, 0, 2, 3, 0, 2)
    timeline.append(25, 40, 3, 0, 3, 4, 0, 1)  # two paths of one request sampled: one token timed
    at_ns, tokens = timeline.token_times()
    assert at_ns.tolist() == [25, 40] and tokens.tolist() == [2, 1]
    assert timeline.columns()["num_seqs"].tolist() == [2, 2, 3] and len(timeline) == 3
    timeline.close()


def test_a_steps_energy_counts_its_joules_only_where_known() -> None:
    timeline = ClientTimeline()
    timeline.add_energy(StepJoules(2.5, 0.5, True))  # reported by the backend
    timeline.add_energy(StepJoules(1.0, 0.25))  # the power model's
    timeline.add_energy(StepJoules(None, 0.125, True))  # no power figure: only its device time
    assert (timeline.energy_j, timeline.device_s, timeline.reported_energy_steps) == (3.5, 0.875, 1)
    timeline.close()


def test_gap_counts_past_the_keys_kept_spill_and_still_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientTimeline, "MAX_GAP_KEYS", 2)  # read when a timeline is made
    timeline = ClientTimeline()
    for step, gap in enumerate([10, 20, 10, 30, 40, 10, 20]):
        timeline.count_gap(gap, step + 1)
        timeline.append(0, gap, 1, 0, 1, 0, 0, step + 1)  # a step past two distinct gaps spills them
    assert len(timeline.token_gaps) <= 2 < len(timeline.gap_counts())
    assert timeline.gap_counts() == {10: 1 + 3 + 6, 20: 2 + 7, 30: 4, 40: 5}
    timeline.close()


def test_a_request_record_has_the_dataclass_defaults_and_a_list_of_stages_of_its_own() -> None:
    first, second = RequestRecord(1, "m", 5, 10, 4), RequestRecord(id=2, model="m", arrival_ns=6, input_tokens=1,
                                                                    output_tokens=1, template="rag")
    assert (first.template, first.pipeline, first.data_at, first.deadline_ns) == ("chat", ("prefill", "decode"), "",
                                                                                   2**62)
    assert (first.first_token_ns, first.itl_ns, first.is_finished, second.template) == (-1, None, False, "rag")
    first.stages.append(StageRecord("prefill", "c", 5))
    assert second.stages == [] and first.stages[0].start_ns == -1
    first.finish_ns = 9
    assert first.is_finished
    with pytest.raises(TypeError):
        first.generated_tokens = 1.5  # type: ignore[assignment]  # an integer field


def test_records_compare_print_and_pickle_field_by_field() -> None:
    record = RequestRecord(3, "m", 0, 8, 2, prefix_id="p", stages=[StageRecord("decode", "d", 7, transfer_ns=2)])
    same = pickle.loads(pickle.dumps(record))
    assert same == record and same is not record and copy.deepcopy(record) == record
    same.stages[0].end_ns = 11
    assert same != record and record != object()
    assert repr(record.stages[0]) == "StageRecord(kind='decode', client='d', enqueue_ns=7, start_ns=-1, end_ns=-1, " \
                                     "transfer_ns=2)"
    assert repr(record).startswith("RequestRecord(id=3, model='m', arrival_ns=0, input_tokens=8, output_tokens=2, ")
    assert RequestRecord.__match_args__[:3] == ("id", "model", "arrival_ns") and len(RequestRecord.__match_args__) == 38
