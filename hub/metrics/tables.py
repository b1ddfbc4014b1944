"""requests.csv and clients.csv writers.

- requests.csv: one row per request, sorted by id. Times are exact decimal
  seconds from integer nanoseconds; values that do not exist (an unfinished
  request's E2E) are empty. Per stage kind present in the run there are
  ``<kind>_client, <kind>_queue_s, <kind>_start_s, <kind>_end_s, <kind>_transfer_s``;
  when a request has several stages of one kind (reasoning branches, a
  re-run), clients are joined with ``;``, queue and transfer times summed,
  start is the earliest and end the latest. Where requests name LoRA adapters, a ``lora``
  column (empty: the base model) follows ``preemptions``, and where the workload has request
  classes, a ``class`` column after it.
- clients.csv: one row per client step. A client with more than
  ``max_rows_per_client`` steps is downsampled into that many buckets of
  consecutive steps: start/end span the bucket, ``num_seqs`` is the mean,
  token columns are sums, ``kv_blocks_used`` and ``num_waiting`` are maxima, and
  ``steps`` says how many steps a row stands for.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TextIO

import numpy as np

from ..records import ClientTimeline, RequestRecord, StageRecord
from .request_table import STAGE_ORDER, RequestTable, ordered_kinds  # noqa: F401 - STAGE_ORDER re-exported
from .stats import float_text, ns_to_s_text

REQUEST_COLUMNS = ("id", "model", "arrival_s", "input_tokens", "output_tokens", "generated_tokens",
                   "cached_tokens", "ttft_s", "tpot_s", "e2e_s", "tbt_max_s", "queue_s", "preemptions")
STAGE_COLUMNS = ("client", "queue_s", "start_s", "end_s", "transfer_s")
CLIENT_COLUMNS = ("client", "start_s", "end_s", "steps", "num_seqs", "prefill_tokens", "decode_tokens",
                  "kv_blocks_used", "num_waiting")
DEFAULT_MAX_ROWS_PER_CLIENT = 20_000


def stage_kinds(requests: Sequence[RequestRecord]) -> list[str]:
    """Stage kinds present in the run, in pipeline order."""
    return ordered_kinds(s.kind for r in requests for s in r.stages)


def _stage_cells(stages: list[StageRecord]) -> list[str]:
    """The five per-kind cells for the stages of one kind of one request."""
    if not stages:
        return [""] * len(STAGE_COLUMNS)
    clients = list(dict.fromkeys(s.client for s in stages))
    started = [s for s in stages if s.start_ns >= 0]
    ends = [s.end_ns for s in stages if s.end_ns >= 0]
    queue = ns_to_s_text(sum(s.start_ns - s.enqueue_ns for s in started)) if started else ""
    start = ns_to_s_text(min(s.start_ns for s in started)) if started else ""
    end = ns_to_s_text(max(ends)) if len(ends) == len(stages) else ""
    return [";".join(clients), queue, start, end, ns_to_s_text(sum(s.transfer_ns for s in stages))]


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
    kinds = table.kinds
    metrics = table.metrics()
    with_lora = table.has_lora  # the column only where requests name adapters
    with_class = bool(table.classes)  # the column only where the workload has request classes
    header = list(REQUEST_COLUMNS) + ["lora"] * with_lora + ["class"] * with_class + \
        [f"{k}_{c}" for k in kinds for c in STAGE_COLUMNS]
    with path.open("w", newline="", encoding="utf-8") if isinstance(path, Path) else nullcontext(path) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        for i, r in enumerate(requests):
            row = [str(r.id), r.model, ns_to_s_text(r.arrival_ns), str(r.input_tokens),
                   str(r.output_tokens), str(r.generated_tokens), str(r.cached_tokens),
                   float_text(metrics.ttft_s[i]), float_text(metrics.tpot_s[i]),
                   float_text(metrics.e2e_s[i]), float_text(metrics.tbt_max_s[i]),
                   float_text(metrics.queue_s[i]), str(r.preemptions)]
            if with_lora:
                row.append(r.lora or "")
            if with_class:
                row.append(r.cls or "")
            for kind in kinds:
                row += _stage_cells([s for s in r.stages if s.kind == kind])
            writer.writerow(row)


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
