"""Where a run keeps its finished requests: in memory for a small run, on disk for a large one.

A request's record is needed while it is in flight; once it finishes, the summary needs only its
numbers (:class:`cosim.hub.metrics.request_table.RequestColumns`), and its record is needed again
only to write requests.csv and the trace and for :attr:`cosim.hub.studies.runner.RunResult.requests`.
:class:`RequestLog` keeps the finished records as a list (``spill=False``: the very objects, as
before) or pickles each to an anonymous temporary file as it finishes (``spill=True``: memory stays
bounded by the requests in flight). :meth:`RequestLog.view` returns every request sorted by id,
finished or not, as a read-only sequence (:class:`RequestView`) that reads spilled records back one
at a time.

Main names: :class:`RequestLog`, :class:`RequestView`, :data:`KEEP_IN_MEMORY`.
"""

from __future__ import annotations

import pickle
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from typing import IO, Any, overload

import numpy as np

from .records import RequestRecord, StageRecord
from .spill import INT64, SpillRows

# Runs of up to this many requests keep their finished records in memory (see RequestLog).
KEEP_IN_MEMORY = 20_000

_FIELDS = tuple(name for name in RequestRecord.__match_args__ if name != "stages")
_STAGE_FIELDS = StageRecord.__match_args__


def _encode(record: RequestRecord) -> bytes:
    stages = tuple(tuple(getattr(s, f) for f in _STAGE_FIELDS) for s in record.stages)
    return pickle.dumps((tuple(getattr(record, f) for f in _FIELDS), stages), protocol=pickle.HIGHEST_PROTOCOL)


def _decode(data: bytes) -> RequestRecord:
    values, stages = pickle.loads(data)
    record = RequestRecord(**dict(zip(_FIELDS, values)))
    record.stages = [StageRecord(*stage) for stage in stages]
    return record


class RequestLog:
    """The finished requests of a run (see the module docstring).

    Args:
        spill: pickle each finished record to a temporary file instead of keeping it.
    """

    def __init__(self, *, spill: bool) -> None:
        self.is_spilled = spill
        self._records: list[RequestRecord] = []
        self._file: IO[bytes] | None = None
        self._index = SpillRows((("id", INT64), ("offset", INT64), ("size", INT64)))
        self._end = 0

    def __len__(self) -> int:
        return len(self._index) if self.is_spilled else len(self._records)

    def add(self, record: RequestRecord) -> None:
        """Keeps a finished request."""
        if not self.is_spilled:
            self._records.append(record)
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="cosim-requests-")  # noqa: SIM115 - open as long as the log
            weakref.finalize(self, self._file.close)  # a run's result reads it: closed when the log is collected
        data = _encode(record)
        self._file.seek(self._end)
        self._file.write(data)
        self._index.append(record.id, self._end, len(data))
        self._end += len(data)

    def read(self, offset: int, size: int) -> RequestRecord:
        """The spilled record at ``offset``."""
        assert self._file is not None
        self._file.seek(offset)
        return _decode(self._file.read(size))

    def view(self, others: Sequence[RequestRecord] = ()) -> RequestView:
        """Every request kept and ``others`` (those not finished), sorted by id."""
        return RequestView(self, others)

    def close(self) -> None:
        """Drops the records and removes the temporary file (views of the log stop working)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._records = []
        self._index.close()


class RequestView(Sequence[RequestRecord]):
    """Requests sorted by id: records in memory, or read back from a :class:`RequestLog`'s file on each
    access (each read gives a new record object; changing it changes nothing kept)."""

    def __init__(self, log: RequestLog, others: Sequence[RequestRecord]) -> None:
        self._log = log
        self._others = list(others)
        other_ids = np.fromiter((r.id for r in self._others), np.int64, len(self._others))
        if log.is_spilled:
            rows = log._index.rows()
            ids, self._offsets, self._sizes = rows["id"], rows["offset"], rows["size"]
        else:
            self._kept = list(log._records)
            ids = np.fromiter((r.id for r in self._kept), np.int64, len(self._kept))
        all_ids = np.concatenate([ids, other_ids])
        # Position in the log (>= 0), or -1 - position among the others.
        where = np.concatenate([np.arange(ids.size), -1 - np.arange(other_ids.size)])
        self._where = where[np.argsort(all_ids, kind="stable")]

    def __len__(self) -> int:
        return int(self._where.size)

    def _get(self, position: int) -> RequestRecord:
        where = int(self._where[position])
        if where < 0:
            return self._others[-1 - where]
        if self._log.is_spilled:
            return self._log.read(int(self._offsets[where]), int(self._sizes[where]))
        return self._kept[where]

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[RequestRecord]: ...

    def __getitem__(self, index: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"request index {index} out of range ({len(self)} requests)")
        return self._get(index)

    def __iter__(self) -> Iterator[RequestRecord]:
        if not self._log.is_spilled:  # records in memory: their positions as Python ints at once, not one call each
            kept, others = self._kept, self._others
            return (kept[where] if where >= 0 else others[-1 - where] for where in self._where.tolist())
        return (self._get(i) for i in range(len(self)))

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{len(self)} requests{' (read back from disk)' if self._log.is_spilled else ''}>"
