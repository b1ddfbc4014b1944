"""Fixed-width rows that spill to an anonymous temporary file, so a long run's memory stays flat.

:class:`SpillRows` keeps the rows a run appends (one per client step, one per finished request) in a
small in-memory buffer and writes each full buffer to a temporary file (unnamed: the system removes it
when it is closed or the process ends). A run closes its tables when it ends (``Simulation.close``); a
table dropped unclosed has its file closed when it is collected or the process exits, without a
``ResourceWarning``. :meth:`SpillRows.columns` reads every row back as numpy
columns; only that read costs memory in proportion to the rows.

Main names: :class:`SpillRows`, :data:`INT64`, :data:`INT32`, :data:`INT8`.
"""

from __future__ import annotations

import tempfile
import weakref
from collections.abc import Callable, Sequence
from typing import IO, Any

import numpy as np
from cosim_core import RowBuffer

# Field types (numpy codes): signed integers, stored little-endian and unpadded.
INT64 = "i8"
INT32 = "i4"
INT8 = "i1"

DEFAULT_BUFFER_BYTES = 256 * 1024  # per table: a fleet of a hundred clients buffers 25 MB at most


class _SpillFile:
    """A table's anonymous temporary file, made at its first write (the system removes it when it is
    closed or the process ends); closed when collected at the latest, without a ``ResourceWarning``."""

    def __init__(self) -> None:
        self.file: IO[bytes] | None = None

    def write(self, data: bytes) -> None:
        """Appends ``data``."""
        if self.file is None:
            # open until close(): the file is the table's storage; closed with the table at the latest
            self.file = tempfile.TemporaryFile(prefix="cosim-spill-")  # noqa: SIM115
            weakref.finalize(self, self.file.close)
        self.file.seek(0, 2)
        self.file.write(data)

    def read(self) -> bytes:
        """Everything written."""
        if self.file is None:
            return b""
        self.file.seek(0)
        return self.file.read()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class SpillRows:
    """An append-only table of integer rows, buffered in memory and spilled to a temporary file.

    The rows in memory are packed in the compiled core (:class:`cosim_core.RowBuffer`), which hands
    each full buffer to the table's file.

    Args:
        fields: (name, type) per column, types from :data:`INT64`, :data:`INT32`, :data:`INT8`.
        buffer_bytes: how much of the table stays in memory before it is written out (default
            :data:`DEFAULT_BUFFER_BYTES`, read when the table is made).
    """

    append: Callable[..., None]
    """Adds one row (values in column order): the buffer's own method, called without a Python frame."""

    def __init__(self, fields: Sequence[tuple[str, str]], *, buffer_bytes: int | None = None) -> None:
        self.names = tuple(name for name, _ in fields)
        self.dtype = np.dtype([(name, "<" + kind) for name, kind in fields])
        self._buffer_bytes = max(buffer_bytes or DEFAULT_BUFFER_BYTES, self.dtype.itemsize)
        self._start()

    def _start(self, held: bytes = b"") -> None:
        """A fresh file and buffer (holding ``held``, whole rows)."""
        self._file = _SpillFile()
        widths = [self.dtype[name].itemsize for name in self.names]
        self._buffer = RowBuffer(widths, self._buffer_bytes, self._file.write, held)
        self.append = self._buffer.append

    @property
    def buffer(self) -> RowBuffer:
        """The rows in memory: what the compiled core appends rows to directly."""
        return self._buffer

    def __len__(self) -> int:
        return len(self._buffer)

    def _raw(self) -> bytes:
        """Every row's bytes, spilled ones first."""
        return self._file.read() + self._buffer.held()

    def rows(self) -> np.ndarray:
        """Every row as one structured array, in append order."""
        return np.frombuffer(self._raw(), dtype=self.dtype)

    def columns(self) -> dict[str, np.ndarray]:
        """Every row as int64 columns by name, in append order (empty arrays for no rows)."""
        rows = self.rows()
        return {name: rows[name].astype(np.int64) for name in self.names}

    def close(self) -> None:
        """Drops the rows and removes the temporary file."""
        self._file.close()
        self._buffer.clear()

    # A table crosses processes (pickle) with its rows, not its file (nor its buffer's bound method).
    def __getstate__(self) -> dict[str, Any]:
        return {"raw": self._raw(), "dtype": self.dtype.descr, "buffer_bytes": self._buffer_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.dtype = np.dtype(state["dtype"])
        self.names = tuple(self.dtype.names or ())
        self._buffer_bytes = state["buffer_bytes"]
        self._start(state["raw"])
