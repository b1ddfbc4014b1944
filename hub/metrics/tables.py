"""requests.csv and clients.csv writers.

- requests.csv: one row per request, sorted by id. Times are exact decimal
  seconds from integer nanoseconds; values that do not exist (an unfinished
  request's E2E) are empty. Per stage kind present in the run there are
  ``<kind>_client, <kind>_queue_s, <kind>_start_s, <kind>_end_s, <kind>_transfer_s``;
  when a request has several stages of one kind (reasoning branches, a
  re-run), clients are joined with ``;``, queue and transfer times summed,
  start is the earliest and end the latest. Where requests name LoRA adapters, a ``lora``
  column (empty: the base model) follows ``preemptions``, and where the workload has request
  classes, a ``class`` column after it, and where it has sessions, ``session`` and ``turn``.
- clients.csv: one row per client step. A client with more than
  ``max_rows_per_client`` steps is downsampled into that many buckets of
  consecutive steps: start/end span the bucket, ``num_seqs`` is the mean,
  token columns are sums, ``kv_blocks_used`` and ``num_waiting`` are maxima, and
  ``steps`` says how many steps a row stands for.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TextIO

import numpy as np

from ..sim.records import ClientTimeline, RequestRecord, StageRecord
from .request_table import STAGE_ORDER, RequestTable, ordered_kinds  # noqa: F401 - STAGE_ORDER re-exported
from .stats import float_text, ns_to_s_text

REQUEST_COLUMNS = ("id", "model", "arrival_s", "input_tokens", "output_tokens", "generated_tokens",
                   "cached_tokens", "ttft_s", "tpot_s", "e2e_s", "tbt_max_s", "queue_s", "preemptions")
STAGE_COLUMNS = ("client", "queue_s", "start_s", "end_s", "transfer_s")
CLIENT_COLUMNS = ("client", "start_s", "end_s", "steps", "num_seqs", "prefill_tokens", "decode_tokens",
                  "kv_blocks_used", "num_waiting")
DEFAULT_MAX_ROWS_PER_CLIENT = 20_000


# How each requests.csv column is written: "ns" integer nanoseconds as exact decimal seconds, "s" float
# seconds, "int", "str" (requests.parquet types them: float seconds, int64, string; empty cells are nulls).
_REQUEST_KINDS = dict(zip(REQUEST_COLUMNS, ("int", "str", "ns", "int", "int", "int", "int", "s", "s", "s", "s",
                                            "s", "int")))
_STAGE_KINDS = dict(zip(STAGE_COLUMNS, ("str", "ns", "ns", "ns", "ns")))
Cell = int | float | str | None


def _stage_cells(stages: list[StageRecord]) -> list[Cell]:
    """The five per-kind cells for the stages of one kind of one request (None: no value)."""
    if not stages:
        return [None] * len(STAGE_COLUMNS)
    clients = list(dict.fromkeys(s.client for s in stages))
    started = [s for s in stages if s.start_ns >= 0]
    ends = [s.end_ns for s in stages if s.end_ns >= 0]
    queue = sum(s.start_ns - s.enqueue_ns for s in started) if started else None
    start = min(s.start_ns for s in started) if started else None
    end = max(ends) if len(ends) == len(stages) else None
    return [";".join(clients), queue, start, end, sum(s.transfer_ns for s in stages)]


def request_columns(table: RequestTable) -> list[tuple[str, str]]:
    """requests.csv's columns for a run's requests: (name, kind), kinds as in ``_REQUEST_KINDS``."""
    columns = list(_REQUEST_KINDS.items())
    if table.has_lora:  # only where requests name adapters
        columns.append(("lora", "str"))
    if table.classes:  # only where the workload has request classes
        columns.append(("class", "str"))
    if table.has_sessions:  # only where the workload has sessions
        columns += [("session", "int"), ("turn", "int")]
    return columns + [(f"{k}_{c}", kind) for k in table.kinds for c, kind in _STAGE_KINDS.items()]


def request_rows(requests: Iterable[RequestRecord], table: RequestTable) -> Iterator[list[Cell]]:
    """One row of raw values per request, in :func:`request_columns` order (None or NaN: no value).

    Args:
        requests: every request sorted by id, read once; ``table`` holds their numbers.
    """
    metrics = table.metrics()
    with_lora, with_class = table.has_lora, bool(table.classes)
    for i, r in enumerate(requests):
        row: list[Cell] = [r.id, r.model, r.arrival_ns, r.input_tokens, r.output_tokens, r.generated_tokens,
                           r.cached_tokens, float(metrics.ttft_s[i]), float(metrics.tpot_s[i]),
                           float(metrics.e2e_s[i]), float(metrics.tbt_max_s[i]), float(metrics.queue_s[i]),
                           r.preemptions]
        if with_lora:
            row.append(r.lora or None)
        if with_class:
            row.append(r.cls or None)
        if table.has_sessions:
            row += [r.session, r.turn]
        for kind in table.kinds:
            row += _stage_cells([s for s in r.stages if s.kind == kind])
        yield row


def _text(kind: str, value: Cell) -> str:
    if value is None:
        return ""
    if kind == "ns":
        return ns_to_s_text(int(value))
    if kind == "s":
        return float_text(float(value))
    return str(value)


def write_requests_csv(path: Path | TextIO, requests: Iterable[RequestRecord],
                       table: RequestTable | None = None) -> None:
    """Writes requests.csv (see the module docstring) to a file, or to an open text stream.

    Args:
        path: the file or stream.
        requests: every request, in any order; with ``table``, sorted by id and read once (a run's
            records may come back one at a time from a file).
        table: the requests' numbers (:class:`RequestTable`), where the caller has them.
    """
    if table is None:
        ordered = sorted(requests, key=lambda r: r.id)
        requests, table = ordered, RequestTable.of(ordered)
    columns = request_columns(table)
    kinds = [kind for _, kind in columns]
    with path.open("w", newline="", encoding="utf-8") if isinstance(path, Path) else nullcontext(path) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(name for name, _ in columns)
        for row in request_rows(requests, table):
            writer.writerow([_text(kind, value) for kind, value in zip(kinds, row)])


def downsample(columns: Mapping[str, np.ndarray], max_rows: int) -> dict[str, np.ndarray]:
    """Merges consecutive steps into at most ``max_rows`` buckets.

    Returns the columns of the module docstring plus ``steps``; below the limit
    every bucket holds one step and values are unchanged (num_seqs as float).
    """
    n = len(columns["start_ns"])
    if n == 0:
        return {**{k: np.asarray(v) for k, v in columns.items()}, "steps": np.zeros(0, np.int64)}
    bounds = np.linspace(0, n, min(n, max_rows) + 1).astype(np.int64)
    lo, hi = bounds[:-1], bounds[1:]
    return {
        "start_ns": columns["start_ns"][lo],
        "end_ns": columns["end_ns"][hi - 1],
        "steps": hi - lo,
        "num_seqs": np.add.reduceat(columns["num_seqs"], lo) / (hi - lo),
        "prefill_tokens": np.add.reduceat(columns["prefill_tokens"], lo),
        "decode_tokens": np.add.reduceat(columns["decode_tokens"], lo),
        "kv_blocks_used": np.maximum.reduceat(columns["kv_blocks_used"], lo),
        "num_waiting": np.maximum.reduceat(columns["num_waiting"], lo),
    }


def write_clients_csv(path: Path, names: Sequence[str], timelines: Mapping[str, ClientTimeline],
                      max_rows_per_client: int = DEFAULT_MAX_ROWS_PER_CLIENT) -> None:
    """Writes clients.csv for the named clients, in that order."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(CLIENT_COLUMNS)
        for name in names:
            if name not in timelines:
                continue
            cols = downsample(timelines[name].columns(), max_rows_per_client)
            for i in range(len(cols["start_ns"])):
                writer.writerow([
                    name, ns_to_s_text(cols["start_ns"][i]), ns_to_s_text(cols["end_ns"][i]),
                    int(cols["steps"][i]), float_text(float(cols["num_seqs"][i])),
                    int(cols["prefill_tokens"][i]), int(cols["decode_tokens"][i]),
                    int(cols["kv_blocks_used"][i]), int(cols["num_waiting"][i])])
