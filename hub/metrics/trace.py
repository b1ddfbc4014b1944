"""trace.json in Chrome trace event format (opens in Perfetto and chrome://tracing).

Layout: one process per client (pid 1..N, in config order) with a ``steps``
thread of complete ("X") events, one per step, named prefill, decode or mixed
by the tokens in it, with the batch in ``args``; and counter ("C") tracks
``kv_blocks_used`` and ``num_waiting``. One more process, ``requests``, has a
thread per request (tid = request id) with its stages in order: ``transfer``
(input moving in), ``queue`` (waiting at the client) and the stage itself
(named by its kind). A stage or queue still open when a partial run stopped is
a begin ("B") event with no end. A run with autoscaled pools has a last process,
``autoscaling``, with each pool's replica count as a counter
(:mod:`.autoscaling`). Timestamps are microseconds of simulated time.

Size is bounded: above ``max_events`` the trace keeps the earliest events (a
time window from the start), so what it shows is complete up to ``cutoff_s``;
``otherData`` says how many events were dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..sim.records import ClientTimeline, RequestRecord
from .autoscaling import replica_trace_events
from .request_table import RequestTable

DEFAULT_MAX_EVENTS = 250_000  # about 25 MB of JSON; Perfetto opens it in seconds
STEP_EVENTS = 3  # one slice and two counter samples per step

Event = dict[str, Any]
# How an event is written: keys sorted, no spaces (one encoder for all: json.dumps with options builds one a call).
ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _us(ns: int) -> float:
    return ns / 1000


def _step_name(prefill_tokens: int, decode_tokens: int) -> str:
    if prefill_tokens and decode_tokens:
        return "mixed"
    return "prefill" if prefill_tokens else ("decode" if decode_tokens else "step")


def _step_events(pid: int, timeline: ClientTimeline, cutoff_ns: int | None) -> Iterator[str]:
    """Slice and counter events of one client's steps that start before the cutoff, as the JSON text
    :data:`ENCODE` writes for them (keys sorted, no spaces; a number as its ``repr``), filled into
    templates: a run has three of them per step, hundreds of thousands (tests/unit/metrics checks
    the text against the encoder's)."""
    cols = timeline.columns()
    keep = np.flatnonzero(cols["start_ns"] < cutoff_ns) if cutoff_ns is not None else slice(None)
    rows = zip(*(cols[name][keep].tolist() for name in ClientTimeline.COLUMNS))
    for start, end, num_seqs, prefill, decode, kv, waiting in rows:
        ts = repr(_us(start))
        yield (f'{{"args":{{"decode_tokens":{decode},"kv_blocks_used":{kv},"num_seqs":{num_seqs},'
               f'"num_waiting":{waiting},"prefill_tokens":{prefill}}},"cat":"step","dur":{_us(end - start)!r},'
               f'"name":"{_step_name(prefill, decode)}","ph":"X","pid":{pid},"tid":1,"ts":{ts}}}')
        yield f'{{"args":{{"blocks":{kv}}},"name":"kv_blocks_used","ph":"C","pid":{pid},"ts":{ts}}}'
        yield f'{{"args":{{"requests":{waiting}}},"name":"num_waiting","ph":"C","pid":{pid},"ts":{ts}}}'


def _request_spans(record: RequestRecord) -> Iterator[tuple[int, int, str, str, dict[str, Any]]]:
    """(start_ns, end_ns or -1, name, category, args) of each span of a request."""
    for stage in record.stages:
        args = {"client": stage.client, "request": record.id}
        if stage.transfer_ns > 0:
            yield stage.enqueue_ns - stage.transfer_ns, stage.enqueue_ns, "transfer", "transfer", args
        yield stage.enqueue_ns, stage.start_ns, "queue", "queue", args
        if stage.start_ns >= 0:
            yield stage.start_ns, stage.end_ns, stage.kind, "stage", {
                **args, "input_tokens": record.input_tokens, "output_tokens": record.output_tokens}


def _request_events(pid: int, record: RequestRecord, cutoff_ns: int | None) -> Iterator[Event]:
    for start, end, name, cat, args in _request_spans(record):
        if cutoff_ns is not None and start >= cutoff_ns:
            continue
        event: Event = {"cat": cat, "name": name, "pid": pid, "tid": record.id, "ts": _us(start), "args": args}
        if end >= 0:
            event.update(ph="X", dur=_us(end - start))
        else:
            event["ph"] = "B"
        yield event


def _smallest(values: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` smallest values (any order), or all of them."""
    return np.partition(values, k - 1)[:k] if values.size > k else values


def _cutoff_ns(timelines: Sequence[ClientTimeline], span_starts: np.ndarray,
               max_events: int) -> tuple[int | None, int, int]:
    """(earliest start time to drop so that at most ``max_events`` remain, or None to keep all;
    events in all; events kept). Each part keeps only its ``max_events + 1`` earliest starts: the
    cutoff is among them, and so is every start before it."""
    parts, total = [], span_starts.size
    for timeline in timelines:
        starts = timeline.columns()["start_ns"]
        total += starts.size * STEP_EVENTS
        parts.append(np.repeat(_smallest(starts, max_events + 1), STEP_EVENTS))
    parts.append(_smallest(span_starts, max_events + 1))
    every = np.concatenate(parts)
    if total <= max_events:
        return None, total, total
    cutoff = int(np.partition(every, max_events)[max_events])
    return cutoff, total, int(np.count_nonzero(every < cutoff))


def _metadata(pid: int, tid: int | None, kind: str, name: str, sort_index: int) -> list[Event]:
    scope = {"pid": pid} if tid is None else {"pid": pid, "tid": tid}
    return [{"ph": "M", "name": f"{kind}_name", **scope, "args": {"name": name}},
            {"ph": "M", "name": f"{kind}_sort_index", **scope, "args": {"sort_index": sort_index}}]


def write_trace(path: Path, names: Sequence[str], timelines: Mapping[str, ClientTimeline],
                requests: Sequence[RequestRecord], max_events: int = DEFAULT_MAX_EVENTS,
                table: RequestTable | None = None, autoscaling: Mapping[str, Any] | None = None) -> int:
    """Writes trace.json, one event per line, as it goes; returns the number of events dropped.

    Args:
        path: the file.
        names: clients in config order.
        timelines: their steps.
        requests: every request, in any order; with ``table``, sorted by id (a run's records may come
            back one at a time from a file; only those with events are read).
        max_events: the size limit (see the module docstring).
        table: the requests' numbers (:class:`RequestTable`), where the caller has them.
        autoscaling: summary.json's ``autoscaling`` block, where the run has pools (their replica
            counts, a few events per scaling decision, are kept whatever ``max_events``).
    """
    if table is None:
        requests = sorted(requests, key=lambda r: r.id)
        table = RequestTable.of(requests)
    present = [n for n in names if n in timelines]
    cutoff, total, kept = _cutoff_ns([timelines[n] for n in present], table.span_starts, max_events)
    # Every span of a request starts at or after its arrival: later arrivals have no event to keep.
    arrivals = table.columns["arrival_ns"]
    indices = range(len(requests)) if cutoff is None else np.flatnonzero(arrivals < cutoff).tolist()
    dropped = total - kept
    other = {"generator": "cosim", "truncated": cutoff is not None, "events_dropped": dropped,
             "cutoff_s": None if cutoff is None else cutoff / 1e9}
    with path.open("w", encoding="utf-8") as f:
        f.write('{"displayTimeUnit":"ms","otherData":' + json.dumps(other, sort_keys=True))
        f.write(',"traceEvents":[\n')
        separator = ""
        for text in _events(present, timelines, requests, indices, cutoff):
            f.write(separator + text)
            separator = ",\n"
        for event in replica_trace_events(len(present) + 2, autoscaling) if autoscaling else ():
            f.write(separator + ENCODE(event))
        f.write("\n]}\n")
    return dropped


def _events(present: Sequence[str], timelines: Mapping[str, ClientTimeline], requests: Sequence[RequestRecord],
            indices: Iterable[int], cutoff: int | None) -> Iterator[str]:
    """Every event of the trace as JSON text, in file order: each client's steps, then each
    request's spans."""
    for pid, name in enumerate(present, start=1):
        yield from map(ENCODE, _metadata(pid, None, "process", f"client {name}", pid))
        yield from map(ENCODE, _metadata(pid, 1, "thread", "steps", 0))
        yield from _step_events(pid, timelines[name], cutoff)
    req_pid = len(present) + 1
    yield from map(ENCODE, _metadata(req_pid, None, "process", "requests", req_pid))
    for index in indices:
        record = requests[index]
        mine = list(_request_events(req_pid, record, cutoff))
        if mine:
            yield from map(ENCODE, _metadata(req_pid, record.id, "thread", f"request {record.id}", record.id))
            yield from map(ENCODE, mine)
