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
import io
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TextIO

import numpy as np
from cosim_core import RequestsCsv, client_rows, stage_cells

from ..sim.records import ClientTimeline, RequestRecord
from .request_table import STAGE_ORDER, RequestTable, ordered_kinds  # noqa: F401 - STAGE_ORDER re-exported

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
CHUNK_ROWS = 4096  # requests formatted a call (the core's text of a chunk is held, then written)


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
    """One row of raw values per request, in :func:`request_columns` order (None or NaN: no value);
    requests.parquet's rows (requests.csv's text comes from the core, :class:`cosim_core.RequestsCsv`,
    on the same per-kind sums, :func:`cosim_core.stage_cells`).

    Args:
        requests: every request sorted by id, read once; ``table`` holds their numbers.
    """
    metrics = table.metrics()
    with_lora, with_class, with_sessions = table.has_lora, bool(table.classes), table.has_sessions
    for i, r in enumerate(requests):
        row: list[Cell] = [r.id, r.model, r.arrival_ns, r.input_tokens, r.output_tokens, r.generated_tokens,
                           r.cached_tokens, float(metrics.ttft_s[i]), float(metrics.tpot_s[i]),
                           float(metrics.e2e_s[i]), float(metrics.tbt_max_s[i]), float(metrics.queue_s[i]),
                           r.preemptions]
        if with_lora:
            row.append(r.lora or None)
        if with_class:
            row.append(r.cls or None)
        if with_sessions:
            row += [r.session, r.turn]
        row += stage_cells(r, table.kinds)
        yield row


def csv_cell(value: object) -> str:
    """The text csv.writer writes for ``value`` as one cell of a row (quoted where it must be)."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow([value, ""])
    return out.getvalue()[:-2]  # less the empty last cell's separator and the line's end


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
    metrics = table.metrics()
    floats = [metrics.ttft_s, metrics.tpot_s, metrics.e2e_s, metrics.tbt_max_s, metrics.queue_s]
    rows = RequestsCsv(table.kinds, table.has_lora, bool(table.classes), table.has_sessions, csv_cell)
    records = iter(requests)
    with path.open("w", newline="", encoding="utf-8") if isinstance(path, Path) else nullcontext(path) as f:
        csv.writer(f, lineterminator="\n").writerow(name for name, _ in request_columns(table))
        for lo in range(0, len(table), CHUNK_ROWS):
            chunk = list(itertools.islice(records, CHUNK_ROWS))
            f.write(rows.rows(chunk, *(column[lo:lo + len(chunk)] for column in floats)))


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
    """Writes clients.csv for the named clients, in that order (rows formatted by the core:
    :func:`cosim_core.client_rows`)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerow(CLIENT_COLUMNS)
        for name in names:
            if name not in timelines:
                continue
            cols = downsample(timelines[name].columns(), max_rows_per_client)
            f.write(client_rows(csv_cell(name), _ints(cols["start_ns"]), _ints(cols["end_ns"]), _ints(cols["steps"]),
                                np.ascontiguousarray(cols["num_seqs"], dtype=np.float64),
                                _ints(cols["prefill_tokens"]), _ints(cols["decode_tokens"]),
                                _ints(cols["kv_blocks_used"]), _ints(cols["num_waiting"])))


def _ints(values: np.ndarray) -> np.ndarray:
    """``values`` as contiguous int64 (what the core reads)."""
    return np.ascontiguousarray(values, dtype=np.int64)
