"""Finished requests kept in memory or spilled, read back as one view sorted by id."""

from __future__ import annotations

import pytest

from cosim.hub.sim.records import RequestRecord
from cosim.hub.sim.request_log import RequestLog


def record(id_: int) -> RequestRecord:
    return RequestRecord(id=id_, model="m", arrival_ns=id_, input_tokens=1, output_tokens=1)


@pytest.mark.parametrize("spill", [False, True])
def test_a_view_iterates_finished_and_other_requests_in_id_order_as_it_indexes_them(spill: bool) -> None:
    log = RequestLog(spill=spill)
    for id_ in (3, 0, 4):
        log.add(record(id_))
    view = log.view([record(1), record(2), record(5)])
    assert [r.id for r in view] == [0, 1, 2, 3, 4, 5] == [view[i].id for i in range(len(view))]
    assert list(view) == [record(i) for i in range(6)]
