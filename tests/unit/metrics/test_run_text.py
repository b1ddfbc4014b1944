"""The run folder's text formatted by the core (core/src/text.rs, core/src/run_files.rs) is Python's own:
numbers against Python's formatting, rows against csv.writer and json's encoder on records built here."""

from __future__ import annotations

import csv
import io
import json
import random
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cosim_core import RequestSpans, float_repr, float_text, ns_to_s_text, step_events
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cosim.hub.metrics import tables, trace
from cosim.hub.metrics.request_table import RequestTable
from cosim.hub.metrics.tables import request_columns, write_requests_csv
from cosim.hub.metrics.trace import ENCODE
from cosim.hub.sim.records import ClientTimeline, RequestRecord, StageRecord

EDGE_FLOATS = [0.0, -0.0, 1.0, 0.5, 1.25, 2.5, 0.1, 0.2, 1 / 3, 1e-4, 9.999999999999999e-05, 1.5e-5, 1e16, 1e15,
               9999999999999998.0, 1e22, 1e-7, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 123456789.0,
               1234567890.0, 999999999.5, 999999999.4999999, 0.000123456789012, 12345.6789, 1e9, 1e-5,
               float("inf"), float("-inf"), float("nan"), 0.30000000000000004, 100.0, 1e-300]


def bits_to_float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


any_float = st.one_of(st.floats(), st.integers(0, 2**64 - 1).map(bits_to_float),
                      st.integers(-10**12, 10**12).map(lambda n: n / 1000), st.sampled_from(EDGE_FLOATS))


@settings(max_examples=3000)
@given(any_float)
@example(562949953421312.25)  # two shortest strings equally near: Python takes the even one
@example(2.0**-24)  # a power of two: the nearer 16-digit string does not read back
def test_float_repr_is_pythons(x: float) -> None:
    assert float_repr(x) == repr(x)


@settings(max_examples=3000)
@given(any_float)
@example(0.5e-4)
@example(1.0000000005)  # a tie at the ninth digit in decimal, not in binary
def test_float_text_is_percent_9g(x: float) -> None:
    assert float_text(x) == ("" if x != x else f"{x:.9g}")


def seconds_reference(ns: int) -> str:
    text = str(Decimal(ns).scaleb(-9))
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.rstrip('0') or '0'}" if "E" not in text else "0.0"


@settings(max_examples=2000)
@given(st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-10**10, 10**10)))
@example(0)
@example(-1)
@example(-2**63)
def test_ns_to_s_text_is_exact_decimal_seconds(ns: int) -> None:
    whole, frac = divmod(abs(ns), 10**9)
    expected = ("-" if ns < 0 else "") + f"{whole}." + (f"{frac:09d}".rstrip("0") or "0")
    assert ns_to_s_text(ns) == expected
    assert Decimal(ns_to_s_text(ns)) == Decimal(ns) / 10**9


NAMES = ["p0", "d0", "a,b", 'quo"te', "new\nline", "cr\rx", "ünï", "😀x", " sp", "", "tab\tx", "back\\slash"]
KINDS = ["prefill", "decode", "rag", "zeta"]


def random_records(rng: random.Random, n: int) -> list[RequestRecord]:
    records = []
    for rid in range(n):
        arrival = rng.randint(0, 10**12)
        stages = []
        t = arrival
        for _ in range(rng.choice([0, 1, 2, 2, 3, 4])):
            transfer = rng.choice([0, 0, rng.randint(1, 10**7)])
            enqueue = t + transfer
            start = rng.choice([-1, enqueue + rng.randint(0, 10**8), enqueue + rng.randint(0, 10**8)])
            end = -1 if start < 0 or rng.random() < 0.2 else start + rng.randint(0, 10**9)
            stages.append(StageRecord(rng.choice(KINDS), rng.choice(NAMES), enqueue, start, end, transfer))
            t = max(enqueue, start, end) + rng.randint(0, 1000)
        first = -1 if rng.random() < 0.2 else arrival + rng.randint(0, 10**9)
        finish = -1 if first < 0 or rng.random() < 0.2 else first + rng.randint(0, 10**10)
        records.append(RequestRecord(
            id=rid, model=rng.choice(["m", "a,b", "ü"]), arrival_ns=arrival, input_tokens=rng.randint(1, 9000),
            output_tokens=rng.randint(1, 900), generated_tokens=rng.randint(0, 900), first_token_ns=first,
            finish_ns=finish, max_tbt_ns=rng.randint(0, 10**8), preemptions=rng.randint(0, 3),
            cached_tokens=rng.randint(0, 100), stages=stages, lora=rng.choice([None, "", "ad,pt", "x"]),
            cls=rng.choice([None, "gold", "b\"x"]), session=rng.choice([-1, 3]), turn=rng.randint(0, 4)))
    return records


def stage_reference(stages: list[StageRecord]) -> list[Any]:
    """requests.csv's five cells of a request's stages of one kind, as the module docstring defines them."""
    if not stages:
        return [None] * 5
    clients = list(dict.fromkeys(s.client for s in stages))
    started = [s for s in stages if s.start_ns >= 0]
    ends = [s.end_ns for s in stages if s.end_ns >= 0]
    return [";".join(clients), sum(s.start_ns - s.enqueue_ns for s in started) if started else None,
            min(s.start_ns for s in started) if started else None, max(ends) if len(ends) == len(stages) else None,
            sum(s.transfer_ns for s in stages)]


def csv_reference(records: list[RequestRecord], table: RequestTable) -> str:
    """requests.csv written cell by cell with csv.writer, Python's number formatting."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = request_columns(table)
    writer.writerow(name for name, _ in columns)
    m = table.metrics()

    def seconds(ns: int | None) -> str:
        return "" if ns is None else ns_to_seconds(ns)

    for i, r in enumerate(records):
        floats = [m.ttft_s[i], m.tpot_s[i], m.e2e_s[i], m.tbt_max_s[i], m.queue_s[i]]
        row: list[Any] = [r.id, r.model, ns_to_seconds(r.arrival_ns), r.input_tokens, r.output_tokens,
                          r.generated_tokens, r.cached_tokens,
                          *("" if np.isnan(x) else f"{float(x):.9g}" for x in floats), r.preemptions]
        names = [name for name, _ in columns]
        if "lora" in names:
            row.append(r.lora or "")
        if "class" in names:
            row.append(r.cls or "")
        if "session" in names:
            row += [r.session, r.turn]
        for kind in table.kinds:
            client, queue, start, end, transfer = stage_reference([s for s in r.stages if s.kind == kind])
            row += ["" if client is None else client, seconds(queue), seconds(start), seconds(end), seconds(transfer)]
        writer.writerow(row)
    return out.getvalue()


def ns_to_seconds(ns: int) -> str:
    whole, frac = divmod(abs(ns), 10**9)
    return ("-" if ns < 0 else "") + f"{whole}." + (f"{frac:09d}".rstrip("0") or "0")


def test_requests_csv_is_csv_writers_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "CHUNK_ROWS", 64)  # several chunks, the last one short
    records = random_records(random.Random(11), 600)
    table = RequestTable.of(records)
    path = tmp_path / "requests.csv"
    write_requests_csv(path, records, table)
    assert path.read_bytes().decode("utf-8") == csv_reference(records, table)
    stream = io.StringIO()
    write_requests_csv(stream, list(reversed(records)))  # any order without a table
    assert stream.getvalue() == csv_reference(records, table)


def spans_reference(pid: int, records: list[RequestRecord], cutoff: int | None) -> list[str]:
    """trace.json's request events, as dicts through the encoder (the module docstring's layout)."""
    texts = []
    for r in records:
        events = []
        for s in r.stages:
            args = {"client": s.client, "request": r.id}
            spans = [(s.enqueue_ns - s.transfer_ns, s.enqueue_ns, "transfer", "transfer", args)] \
                if s.transfer_ns > 0 else []
            spans.append((s.enqueue_ns, s.start_ns, "queue", "queue", args))
            if s.start_ns >= 0:
                spans.append((s.start_ns, s.end_ns, s.kind, "stage",
                              {**args, "input_tokens": r.input_tokens, "output_tokens": r.output_tokens}))
            for start, end, name, cat, span_args in spans:
                if cutoff is not None and start >= cutoff:
                    continue
                event: dict[str, Any] = {"cat": cat, "name": name, "pid": pid, "tid": r.id, "ts": start / 1000,
                                         "args": span_args, "ph": "X" if end >= 0 else "B"}
                if end >= 0:
                    event["dur"] = (end - start) / 1000
                events.append(event)
        if events:
            texts += [ENCODE({"ph": "M", "name": "thread_name", "pid": pid, "tid": r.id,
                              "args": {"name": f"request {r.id}"}}),
                      ENCODE({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": r.id,
                              "args": {"sort_index": r.id}})]
            texts += map(ENCODE, events)
    return texts


def test_request_spans_are_the_encoders_text() -> None:
    records = random_records(random.Random(5), 400)
    starts = sorted(r.arrival_ns for r in records)
    for cutoff in (None, starts[200], starts[0]):
        text = RequestSpans(4, cutoff, ENCODE).events(records)
        expected = spans_reference(4, records, cutoff)
        assert text == ",\n".join(expected)
        for line in expected:
            json.loads(line)


times_ns = st.one_of(st.integers(-10**16, 10**16), st.integers(-2**61, 2**61), st.integers(-10**6, 10**6),
                     st.sampled_from([0, 1, -1, 10**15 - 1, 10**15, -10**15, 2**53, 2**53 + 1, 10**18 + 7]))


@settings(max_examples=2000)
@given(times_ns, times_ns)
def test_step_times_are_the_repr_of_microseconds(start: int, end: int) -> None:
    """ts and dur are ``repr(ns / 1000)`` (the exact decimal below 10^15 ns, a float's repr above)."""
    columns = [np.array([value], dtype=np.int64) for value in (start, end, 3, 0, 1, 7, 2)]
    text = step_events(2, *columns)
    first = text.split(",\n")[0]
    expected = ENCODE({"ph": "X", "cat": "step", "name": "decode", "pid": 2, "tid": 1, "ts": start / 1000,
                       "dur": (end - start) / 1000, "args": {"num_seqs": 3, "prefill_tokens": 0, "decode_tokens": 1,
                                                            "kv_blocks_used": 7, "num_waiting": 2}})
    assert first == expected


def test_trace_chunks_join_into_the_same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events formatted a chunk at a time (steps, requests) make the file that one chunk makes, with a
    cutoff too."""
    rng = random.Random(2)
    records = random_records(rng, 300)
    timeline = ClientTimeline()
    for i in range(500):
        timeline.append(i * 10**9, i * 10**9 + rng.randint(1, 10**9), 3, rng.choice([0, 9]), 1, i, 2)
    texts = []
    for chunk_steps, chunk_requests, max_events in ((4096, 2048, 10**6), (7, 5, 10**6), (4096, 2048, 700),
                                                    (7, 5, 700)):
        monkeypatch.setattr(trace, "CHUNK_STEPS", chunk_steps)
        monkeypatch.setattr(trace, "CHUNK_REQUESTS", chunk_requests)
        path = tmp_path / f"{chunk_steps}-{max_events}.json"
        trace.write_trace(path, ["c,1"], {"c,1": timeline}, records, max_events=max_events)
        texts.append(path.read_text())
        json.loads(texts[-1])
    assert texts[0] == texts[1] and texts[2] == texts[3] and texts[0] != texts[2]
