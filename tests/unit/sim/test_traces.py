"""Trace columns: token counts read in bulk where they are plain, row by row where they are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosim.hub.config.lengths import TraceSource
from cosim.hub.errors import ScenarioError
from cosim.hub.sim.workload import TraceTable, load_trace


def table(tmp_path: Path, name: str, text: str, fmt: str = "csv") -> TraceTable:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return load_trace(TraceSource(path=name, format=fmt), tmp_path)


def test_token_counts_read_in_bulk_or_row_by_row_are_the_same_numbers(tmp_path: Path) -> None:
    trace = table(tmp_path, "t.csv", "plain,floats,huge,padded\n12,7.0,9007199254740993, 5\n0,3e2,1,6 \n")
    assert trace.tokens("plain").tolist() == [12, 0]
    assert trace.tokens("floats").tolist() == [7, 300]
    # past 2**53 a count is read as a float, as one in any other form is
    assert trace.tokens("huge").tolist() == [9007199254740992, 1]
    assert trace.tokens("padded").tolist() == [5, 6]
    jsonl = table(tmp_path, "t.jsonl", '{"n": 4}\n{"n": 5.0}\n', fmt="jsonl")
    assert jsonl.tokens("n").tolist() == [4, 5]


@pytest.mark.parametrize(("value", "why"), [("", "is empty"), ("-3", "must be >= 0"), ("2.5", "is not an integer"),
                                            ("x", "is not a number")])
def test_a_bad_token_count_is_named_at_its_line(tmp_path: Path, value: str, why: str) -> None:
    trace = table(tmp_path, "t.csv", f"n,m\n1,1\n{value},2\n")
    with pytest.raises(ScenarioError) as caught:
        trace.tokens("n")
    assert caught.value.where.endswith("t.csv:3") and caught.value.message.endswith(why)
