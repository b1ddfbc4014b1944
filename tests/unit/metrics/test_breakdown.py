"""Where a request's time goes: queue, communication and service per stage kind, sub-stages counted once."""

from __future__ import annotations

import pickle

from cosim_core import StageSums, attributed_client

from cosim.hub.metrics.breakdown import stage_breakdown, stage_table
from cosim.hub.metrics.request_table import RequestTable
from cosim.hub.sim.records import RequestRecord, StageRecord


def request(id_: int, stages: list[StageRecord], finish_ns: int = 100) -> RequestRecord:
    record = RequestRecord(id=id_, model="m", arrival_ns=0, input_tokens=10, output_tokens=2, stages=stages)
    record.finish_ns = finish_ns
    return record


def requests() -> list[RequestRecord]:
    rag = [StageRecord("rag", "r", 0, 2, 10), StageRecord("rag:embedding", "r", 2, 2, 4),
           StageRecord("rag:retrieval", "r", 4, 5, 10)]
    return [request(0, [*rag, StageRecord("prefill", "p", 15, 20, 30, transfer_ns=5),
                        StageRecord("decode", "d", 40, 41, 60, transfer_ns=10)]),
            request(1, [StageRecord("prefill", "p", 0, 1, 3), StageRecord("decode", "d", 3, 4, -1)], finish_ns=-1)]


def test_the_breakdown_counts_a_split_stage_through_its_sub_stages_and_finished_requests_only() -> None:
    totals_ns = {"queue": 8, "communication": 15, "rag:embedding": 2, "rag:retrieval": 5, "prefill": 10, "decode": 19}
    assert stage_breakdown(requests()) == {kind: ns / 1e9 for kind, ns in totals_ns.items()}


def test_the_stage_table_counts_ended_top_level_stages_of_every_request() -> None:
    table = stage_table(requests())
    assert {kind: row["count"] for kind, row in table.items()} == {"rag": 1, "prefill": 2, "decode": 1}
    assert table["prefill"]["queue_s"] == 3e-9 and table["prefill"]["service_s"] == 6e-9
    assert table["prefill"]["transfer_s"] == 2.5e-9


def test_a_request_table_sums_as_the_records_do() -> None:
    table = RequestTable.of(requests())
    assert table.stage_table() == stage_table(requests())
    assert table.breakdown() == stage_breakdown(requests())
    assert sorted(table.span_starts.tolist()) == [0, 0, 1, 2, 2, 2, 3, 4, 4, 5, 10, 15, 20, 30, 40, 41]
    assert table.columns["queue_ns"].tolist() == [2 + 0 + 1 + 5 + 1, 1 + 1]


def test_the_breakdown_keeps_components_in_the_order_they_first_came_across_templates() -> None:
    first, second, third = (request(i, [StageRecord(kind, "c", 0, 1, 2)]) for i, kind in enumerate("xyz"))
    second.template = "other"  # a plot's legend follows this order: not grouped by template
    assert list(stage_breakdown([first, second, third])) == ["queue", "communication", "x", "y", "z"]


def test_stage_sums_merge_and_cross_processes_with_their_order() -> None:
    sums, other = StageSums(), StageSums()
    assert sums.add(requests()[0]) == (2 + 0 + 1 + 5 + 1, 1, "d")
    assert other.add(requests()[1]) == (1 + 1, 1, "d")
    merged = sums.merged(other)
    assert merged.stages() == {"rag": [1, 2, 8, 0], "prefill": [2, 6, 12, 5], "decode": [1, 1, 19, 10]}
    assert merged.finished() == {"chat": 1} and merged.kinds() == {"rag", "rag:embedding", "rag:retrieval",
                                                                   "prefill", "decode"}
    copy = pickle.loads(pickle.dumps(merged))
    assert (copy.stages(), copy.breakdown(), copy.finished(), copy.kinds(), copy.has_lora) == \
        (merged.stages(), merged.breakdown(), merged.finished(), merged.kinds(), merged.has_lora)


def test_the_latency_is_attributed_to_the_last_decode_stage_else_the_last() -> None:
    assert attributed_client(request(0, [StageRecord("decode", "d1", 0), StageRecord("decode", "d2", 0),
                                         StageRecord("postprocess", "s", 0)])) == "d2"
    assert attributed_client(request(0, [StageRecord("prefill", "p", 0), StageRecord("rag", "r", 0)])) == "r"
    assert attributed_client(request(0, [])) is None
