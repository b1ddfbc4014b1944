"""Requests before they arrive: drawn templates, and the columns each record is made from."""

from __future__ import annotations

import numpy as np

from cosim.hub.config.templates import TemplateConfig, resolve_templates
from cosim.hub.sim.arrivals import PendingRequests
from cosim.hub.sim.pipelines import Pipeline, assign_pipelines
from cosim.hub.sim.records import RequestRecord
from cosim.hub.sim.workload import RequestSpec, RequestSpecs

CHAT = Pipeline(template="chat", stages=("prefill", "decode"), model="m")
REASON = Pipeline(template="think", stages=("prefill", "reason"), model="n", branches=2)


def test_a_record_carries_its_specs_fields_and_its_pipelines() -> None:
    specs = [RequestSpec(id=0, arrival_ns=5, input_tokens=100, output_tokens=7),
             RequestSpec(id=1, arrival_ns=2**40, input_tokens=3, output_tokens=8, prefix_id="p", prefix_tokens=2,
                         prompt_token_ids=np.arange(3), lora="ad", lora_rank=16, cls="gold", priority=-1,
                         deadline_ns=9)]
    pending = PendingRequests(RequestSpecs.of(specs), [CHAT, REASON])
    first, second = pending.pop(), pending.pop()
    assert len(pending) == 0 and pending.pop() is None
    assert (first.id, first.arrival_ns, first.input_tokens, first.output_tokens, first.model, first.template,
            first.pipeline, first.branches) == (0, 5, 100, 7, "m", "chat", ("prefill", "decode"), 1)
    assert (first.prefix_id, first.prompt_token_ids, first.lora, first.cls) == (None, None, None, None)
    assert (first.prefix_tokens, first.lora_rank, first.priority, first.deadline_ns) == (0, 0, 0, 2**62)
    assert (second.id, second.arrival_ns, second.model, second.template, second.pipeline, second.branches) == \
        (1, 2**40, "n", "think", ("prefill", "reason"), 2)
    assert (second.prefix_id, second.prefix_tokens, second.lora, second.lora_rank, second.cls, second.priority,
            second.deadline_ns) == ("p", 2, "ad", 16, "gold", -1, 9)
    assert second.prompt_token_ids.tolist() == [0, 1, 2]
    assert all(type(v) is int for v in (second.id, second.arrival_ns, second.input_tokens, second.deadline_ns))


def test_arrival_times_per_model_sorted_and_none_pending() -> None:
    specs = [RequestSpec(id=i, arrival_ns=t, input_tokens=1, output_tokens=1) for i, t in enumerate((1, 4, 6))]
    pending = PendingRequests(RequestSpecs.of(specs), [CHAT, REASON, CHAT])
    assert pending.arrival_times("m").tolist() == [1, 6] and pending.arrival_times("n").tolist() == [4]
    empty = PendingRequests(RequestSpecs.of([]), [])
    assert len(empty) == 0 and empty.arrival_times("m").tolist() == []


def test_templates_keep_a_spec_as_drawn_or_give_it_their_own_lengths() -> None:
    """A template of the workload's lengths keeps the spec as drawn; one with its own gives it new lengths,
    and its prompt's token ids go with the old length."""
    specs = [RequestSpec(id=i, arrival_ns=i, input_tokens=100 + i, output_tokens=10, prompt_token_ids=np.arange(3),
                         lora="ad") for i in range(40)]
    templates = resolve_templates({"fixed": TemplateConfig.model_validate(
        {"stages": ["prefill", "decode"], "model": "n", "input_tokens": {"dist": "fixed", "value": 7}})})
    out, pipelines = assign_pipelines(RequestSpecs.of(specs), {"chat": 1.0, "fixed": 1.0}, templates,
                                      np.random.default_rng(0), default_model="m")
    assert [s.id for s in out] == list(range(40)) and {p.template for p in pipelines} == {"chat", "fixed"}
    for spec, new, pipeline in zip(specs, out, pipelines):
        if pipeline.template == "chat":
            assert new.prompt_token_ids is not None and new.prompt_token_ids.tolist() == [0, 1, 2]
            assert (new.input_tokens, new.output_tokens, new.model, new.lora) == \
                (spec.input_tokens, 10, None, "ad") and pipeline.model == "m"
        else:
            assert (new.input_tokens, new.output_tokens, new.model, new.prompt_token_ids, new.lora) == \
                (7, 10, "n", None, "ad") and pipeline.model == "n"


def test_request_specs_hold_columns_and_make_a_spec_on_demand() -> None:
    specs = [RequestSpec(id=0, arrival_ns=5, input_tokens=100, output_tokens=7),
             RequestSpec(id=1, arrival_ns=9, input_tokens=3, output_tokens=8, lora="ad", lora_rank=16)]
    columns = RequestSpecs.of(specs)
    assert set(columns.objects) == {"lora"}  # a field no request sets has no column
    assert columns.ints["arrival_ns"].tolist() == [5, 9] and columns.ints["deadline_ns"].tolist() == [2**62] * 2
    assert list(columns) == specs and columns[-1] == specs[1] and columns[:1] == specs[:1]
    assert all(type(v) is int for v in (columns[0].id, columns[0].arrival_ns, columns[1].lora_rank))


def test_an_arriving_record_equals_one_built_by_keyword_from_the_specs_integers() -> None:
    ints = [3, 50, 100, 7, 16, 8, -2, 99]
    record = RequestRecord.arriving(ints, "m", "think", ("prefill", "reason"), 2)
    assert record == RequestRecord(**dict(zip(RequestSpecs.INTS, ints, strict=True)), model="m", template="think",
                                   pipeline=("prefill", "reason"), branches=2)
    assert record.stages == [] and record.stages is not RequestRecord.arriving(ints, "m", "t", (), 1).stages
    assert RequestRecord.arriving(ints, "m", None, None, 1) == RequestRecord(
        **dict(zip(RequestSpecs.INTS, ints, strict=True)), model="m", template=None, pipeline=None)
