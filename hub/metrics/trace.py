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

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from cosim_core import RequestSpans, step_events

from ..sim.records import ClientTimeline, RequestRecord
from .autoscaling import replica_trace_events
from .request_table import RequestTable

DEFAULT_MAX_EVENTS = 250_000  # about 25 MB of JSON; Perfetto opens it in seconds
STEP_EVENTS = 3  # one slice and two counter samples per step
CHUNK_STEPS = 4096  # steps formatted a call
CHUNK_REQUESTS = 2048  # requests formatted a call

Event = dict[str, Any]
# How an event is written: keys sorted, no spaces (one encoder for all: json.dumps with options builds one a call).
ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _step_events(pid: int, timeline: ClientTimeline, cutoff_ns: int | None) -> Iterator[str]:
    """Slice and counter events of one client's steps that start before the cutoff, as the JSON text
    :data:`ENCODE` would write for them, formatted by the core (:func:`cosim_core.step_events`), a
    chunk of steps at a time (events within a chunk joined with ",\\n"; tests/unit/metrics checks the
    text against the encoder's)."""
    cols = timeline.columns()
    keep = np.flatnonzero(cols["start_ns"] < cutoff_ns) if cutoff_ns is not None else slice(None)
    kept = [np.ascontiguousarray(cols[name][keep], dtype=np.int64) for name in ClientTimeline.COLUMNS]
    for lo in range(0, len(kept[0]), CHUNK_STEPS):
        yield step_events(pid, *(column[lo:lo + CHUNK_STEPS] for column in kept))


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
    indices = None if cutoff is None else np.flatnonzero(arrivals < cutoff).tolist()
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
            indices: Iterable[int] | None, cutoff: int | None) -> Iterator[str]:
    """Every event of the trace as JSON text, in file order: each client's steps, then each
    request's spans (:class:`cosim_core.RequestSpans`: per request with events, its thread's name and
    sort index, then its spans), a chunk of events at a time (joined with ",\\n"); ``indices``: the
    requests that may have events (None: all)."""
    for pid, name in enumerate(present, start=1):
        yield from map(ENCODE, _metadata(pid, None, "process", f"client {name}", pid))
        yield from map(ENCODE, _metadata(pid, 1, "thread", "steps", 0))
        yield from _step_events(pid, timelines[name], cutoff)
    req_pid = len(present) + 1
    yield from map(ENCODE, _metadata(req_pid, None, "process", "requests", req_pid))
    spans = RequestSpans(req_pid, cutoff, ENCODE)
    batch = iter(requests) if indices is None else (requests[index] for index in indices)
    while chunk := list(itertools.islice(batch, CHUNK_REQUESTS)):
        text = spans.events(chunk)
        if text:
            yield text
