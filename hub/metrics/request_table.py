"""What the summary, requests.csv, the trace and the plots need of each request, without its record.

A long run cannot keep a record per request, yet its percentiles must stay exact. So
:class:`RequestColumns` takes each request as it finishes (:meth:`RequestColumns.add`) and keeps:

- one row of numbers (times, tokens, queueing, the client its latency is attributed to), spilled
  to a temporary file (:mod:`cosim.hub.sim.spill`) so that memory stays flat;
- the start time of each of its trace spans (for the trace's event budget);
- integer sums per stage kind (``stages`` and ``breakdown_s`` of summary.json), per template for
  the breakdown plot. Integer sums are exact, so the finishing order does not change them.

The compiled core takes a request's stages in one pass (:class:`cosim_core.StageSums`,
core/src/stage_sums.rs): its queueing, its span starts, its sums and the client its latency is
attributed to.

:meth:`RequestColumns.table` adds the requests not finished (in flight, or not yet arrived in a
partial run) and returns a :class:`RequestTable`: numpy columns sorted by request id, the same
numbers the records would give (:meth:`RequestTable.of` builds one from records directly).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from cosim_core import RowBuffer, StageSums

from ..sim.records import RequestRecord
from ..sim.spill import INT8, INT32, INT64, SpillRows
from .stats import NS_PER_S, RequestMetrics, latency_columns

FIELDS = (("id", INT64), ("arrival_ns", INT64), ("first_token_ns", INT64), ("finish_ns", INT64),
          ("path_tokens", INT64), ("max_tbt_ns", INT64), ("queue_ns", INT64), ("started", INT8),
          ("input_tokens", INT64), ("generated_tokens", INT64), ("preemptions", INT64),
          ("cached_tokens", INT64), ("owner", INT32), ("cls", INT32), ("session", INT64), ("turn", INT32),
          ("client_send_ns", INT64), ("client_first_ns", INT64), ("client_last_ns", INT64))
SPAN_FIELDS = (("start_ns", INT64),)  # a trace span's start
# Stage kinds in pipeline order (DESIGN.md); others follow alphabetically.
STAGE_ORDER = ("preprocess", "rag", "kv_retrieval", "prefill", "decode", "reasoning", "postprocess")


def ordered_kinds(kinds: Iterable[str]) -> list[str]:
    """Stage kinds in pipeline order, then the others alphabetically."""
    present = set(kinds)
    return [k for k in STAGE_ORDER if k in present] + sorted(present - set(STAGE_ORDER))


def _means(totals: dict[str, int], count: int) -> dict[str, float]:
    """Mean seconds per component, queue and communication first, stages in pipeline order."""
    if not count:
        return {}
    kinds = ["queue", "communication"] + ordered_kinds(k for k in totals if k not in ("queue", "communication"))
    return {kind: totals[kind] / count / NS_PER_S for kind in kinds}


class _Owners:
    """Names (of clients, of request classes) as small integer codes (0: none)."""

    def __init__(self) -> None:
        self.names = [""]
        self._codes = {"": 0}

    def code(self, name: str | None) -> int:
        name = name or ""
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code


def _take(record: RequestRecord, owners: _Owners, classes: _Owners, sums: StageSums,
          spans: RowBuffer) -> tuple[int, ...]:
    """A request's row (:data:`FIELDS`): its stages go to ``sums``, the start of each of its trace spans
    (trace.json's, :class:`cosim_core.RequestSpans`) to ``spans``."""
    queue_ns, started, owner = sums.add(record, spans)
    (id_, arrival_ns, first_token_ns, finish_ns, output_tokens, branches, max_tbt_ns, input_tokens, generated_tokens,
     preemptions, cached_tokens, session, turn, client_send_ns, client_first_ns, client_last_ns) = record.row_ints()
    return (id_, arrival_ns, first_token_ns, finish_ns, output_tokens // branches, max_tbt_ns, queue_ns, started,
            input_tokens, generated_tokens, preemptions, cached_tokens, owners.code(owner),
            classes.code(record.cls), session, turn, client_send_ns, client_first_ns, client_last_ns)


@dataclass
class RequestTable:
    """Every request's numbers, sorted by id (see the module docstring).

    Attributes:
        columns: int64 columns by :data:`FIELDS` name, ``owner`` as client names and ``cls`` as request
            class names (object; "" for none).
        span_starts: start ns of every trace span of every request (any order).
        kinds: stage kinds present, in pipeline order (requests.csv's stage columns).
        has_lora: some request names a LoRA adapter (requests.csv's ``lora`` column).
        classes: the request classes, in the order they first came (empty: none).
        itls: each request's gaps between tokens in ns, by id, at the engine and at its client
            (``output.benchmark_details``; empty where the run kept none).
    """

    columns: dict[str, np.ndarray]
    span_starts: np.ndarray
    kinds: list[str]
    has_lora: bool
    classes: list[str]
    _sums: StageSums = field(repr=False)
    itls: tuple[dict[int, list[int]], dict[int, list[int]]] = field(default_factory=lambda: ({}, {}), repr=False)

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> RequestTable:
        """The table of some records (in any order)."""
        return RequestColumns().table(records)

    def __len__(self) -> int:
        return len(self.columns["id"])

    @cached_property  # read per row of requests.csv: a scan of the column each time made writing it quadratic
    def has_sessions(self) -> bool:
        """Some request is a session's turn (requests.csv's ``session`` and ``turn`` columns)."""
        return bool(np.any(self.columns["session"] >= 0))

    @cached_property
    def has_client_side(self) -> bool:
        """Some request went through an API server (``frontend``): client-side latencies exist."""
        return bool(np.any(self.columns["client_send_ns"] >= 0))

    def client_metrics(self) -> RequestMetrics:
        """TTFT, TPOT and E2E as the requests' clients saw them (``frontend``): from sending to the first
        and last token's arrival there; queue and TBT max stay the engine's."""
        c = self.columns
        finished = c["finish_ns"] >= 0
        return latency_columns(arrival=c["client_send_ns"], first=c["client_first_ns"],
                               finish=np.where(finished, c["client_last_ns"], -1), path_tokens=c["path_tokens"],
                               max_tbt=c["max_tbt_ns"], queue=c["queue_ns"], started=c["started"].astype(bool))

    def metrics(self) -> RequestMetrics:
        """TTFT, TPOT, E2E, queue and TBT max per request (:func:`cosim.hub.metrics.stats.request_metrics`)."""
        c = self.columns
        return latency_columns(arrival=c["arrival_ns"], first=c["first_token_ns"], finish=c["finish_ns"],
                               path_tokens=c["path_tokens"], max_tbt=c["max_tbt_ns"], queue=c["queue_ns"],
                               started=c["started"].astype(bool))

    def tokens(self) -> dict[str, np.ndarray]:
        """Generated tokens, prefilled prompt tokens, preemptions and prompt tokens served from a prefix
        cache, per request (prompts count once their first token came out)."""
        c = self.columns
        has_first = c["first_token_ns"] >= 0
        return {"generated": c["generated_tokens"], "prefilled": np.where(has_first, c["input_tokens"], 0),
                "preemptions": c["preemptions"], "cached": np.where(has_first, c["cached_tokens"], 0)}

    def stage_table(self) -> dict[str, dict[str, float]]:
        """summary.json's ``stages`` (:func:`cosim.hub.metrics.breakdown.stage_table`)."""
        stages = self._sums.stages()
        return {kind: {"count": n, "queue_s": q / n / NS_PER_S, "service_s": s / n / NS_PER_S,
                       "transfer_s": t / n / NS_PER_S}
                for kind in ordered_kinds(stages) for n, q, s, t in [stages[kind]]}

    def breakdown(self, template: str | None = None) -> dict[str, float]:
        """Mean seconds per component over finished requests (of one template, or all)."""
        breakdown, finished = self._sums.breakdown(), self._sums.finished()
        templates = [template] if template is not None else list(breakdown)
        totals: dict[str, int] = {}
        for name in templates:
            for key, value in breakdown.get(name, {}).items():
                totals[key] = totals.get(key, 0) + value
        return _means(totals, sum(finished.get(name, 0) for name in templates))

    def templates(self) -> list[str]:
        """Templates with finished requests, in the order they first finished."""
        return list(self._sums.breakdown())


class RequestColumns:
    """Finished requests' numbers, gathered as they finish (see the module docstring)."""

    def __init__(self) -> None:
        self._rows = SpillRows(FIELDS)
        self._spans = SpillRows(SPAN_FIELDS)
        self._owners = _Owners()
        self._classes = _Owners()
        self._sums = StageSums()
        self._itls: tuple[dict[int, list[int]], dict[int, list[int]]] = ({}, {})

    def __len__(self) -> int:
        return len(self._rows)

    def _keep_itls(self, record: RequestRecord, itls: tuple[dict[int, list[int]], dict[int, list[int]]]) -> None:
        if record.itl_ns is not None:  # only where the run keeps them (output.benchmark_details)
            itls[0][record.id] = record.itl_ns
        if record.client_itl_ns is not None:
            itls[1][record.id] = record.client_itl_ns

    def add(self, record: RequestRecord) -> None:
        """Takes a request's numbers (a finished one: its record may be dropped after)."""
        self._rows.append(*_take(record, self._owners, self._classes, self._sums, self._spans.buffer))
        self._keep_itls(record, self._itls)

    def table(self, others: Iterable[RequestRecord] = ()) -> RequestTable:
        """The table of the requests added and ``others`` (those not finished), sorted by id."""
        extra = StageSums()
        rows: list[tuple[int, ...]] = []
        starts = SpillRows(SPAN_FIELDS)
        itls: tuple[dict[int, list[int]], dict[int, list[int]]] = (dict(self._itls[0]), dict(self._itls[1]))
        for record in others:
            rows.append(_take(record, self._owners, self._classes, extra, starts.buffer))
            self._keep_itls(record, itls)
        data = np.concatenate([self._rows.rows(), np.array(rows, dtype=self._rows.dtype)])
        data = data[np.argsort(data["id"], kind="stable")]
        columns = {name: data[name].astype(np.int64) for name in self._rows.names}
        for name, coder in (("owner", self._owners), ("cls", self._classes)):
            names = np.array(coder.names, dtype=object)
            columns[name] = names[columns[name]] if len(data) else np.array([], dtype=object)
        sums = self._sums.merged(extra)
        span_starts_all = np.concatenate([self._spans.columns()["start_ns"], starts.columns()["start_ns"]])
        starts.close()
        return RequestTable(columns=columns, span_starts=span_starts_all, kinds=ordered_kinds(sums.kinds()),
                            has_lora=sums.has_lora, classes=self._classes.names[1:], _sums=sums, itls=itls)

    def close(self) -> None:
        """Removes the temporary files."""
        self._rows.close()
        self._spans.close()

